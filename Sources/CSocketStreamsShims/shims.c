#define _GNU_SOURCE
#include <sched.h>
#include <sys/socket.h>
#include <netdb.h>
#include "CSocketStreamsShims.h"

int cssh_pin_to_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

int cssh_accept4(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int cssh_eai_nodata(void) {
    return EAI_NODATA;
}
