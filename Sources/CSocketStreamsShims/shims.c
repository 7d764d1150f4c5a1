#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <netdb.h>
#include <limits.h>
#include <linux/futex.h>
#include "CSocketStreamsShims.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CSSH_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CSSH_TSAN 1
#endif

#ifdef CSSH_TSAN
// The sanitizer's mutex annotations (compiler-rt's tsan_interface.h): between a pre_ and a post_ call
// it ignores the lock's own memory accesses and records the acquisition or release instead.
void __tsan_mutex_create(void *addr, unsigned flags);
void __tsan_mutex_destroy(void *addr, unsigned flags);
void __tsan_mutex_pre_lock(void *addr, unsigned flags);
int __tsan_mutex_post_lock(void *addr, unsigned flags, int recursion);
int __tsan_mutex_pre_unlock(void *addr, unsigned flags);
void __tsan_mutex_post_unlock(void *addr, unsigned flags);
#define CSSH_TSAN_CALL(call) call
#else
#define CSSH_TSAN_CALL(call) ((void)0)
#endif

int cssh_pin_to_cpu(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

int cssh_accept4(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int cssh_accept4_from(int fd, struct sockaddr *address, socklen_t *length) {
    return accept4(fd, address, length, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int cssh_count_input(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_TCP, TCP_INQ, &on, sizeof on) == 0 ? 0 : errno;
}

long cssh_recv_counting(int fd, void *buffer, unsigned long length, int *left) {
    union {
        char bytes[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec vector = {.iov_base = buffer, .iov_len = length};
    struct msghdr message = {
        .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof control.bytes};
    *left = -1;
    ssize_t received = recvmsg(fd, &message, 0);
    if (received < 0) return received;
    for (struct cmsghdr *item = CMSG_FIRSTHDR(&message); item != NULL; item = CMSG_NXTHDR(&message, item)) {
        if (item->cmsg_level == SOL_TCP && item->cmsg_type == TCP_CM_INQ && item->cmsg_len >= CMSG_LEN(sizeof(int))) {
            memcpy(left, CMSG_DATA(item), sizeof(int));
        }
    }
    return received;
}

int cssh_eai_nodata(void) {
    return EAI_NODATA;
}

int cssh_name_current_thread(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = '\0';
    return pthread_setname_np(pthread_self(), truncated);
}

int cssh_gettid(void) { return (int)syscall(SYS_gettid); }

// The Swift runtime's (HeapObject.h): an atomic increment of the strong count that fails once the
// object is deiniting, returning the object, or NULL when it failed. Every Swift program links the runtime.
extern void *swift_tryRetain(void *object);

_Bool cssh_try_retain(void *object) { return swift_tryRetain(object) != NULL; }


// The lock is Drepper's three-state futex mutex ("Futexes Are Tricky", mutex 2); the condition is a
// sequence number a waiter reads under the lock and sleeps on, so a broadcast between its release of the
// lock and its sleep changes the number and the sleep returns at once.

// The calling thread, as the holder: its thread pointer (one instruction, where `pthread_self` is a call).
static inline unsigned long cssh_self(void) { return (unsigned long)__builtin_thread_pointer(); }

static long cssh_futex(unsigned int *word, int op, unsigned int value) {
    return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, value, NULL, NULL, 0);
}

void cssh_lock_init(cssh_lock_t *lock) {
    memset(lock, 0, sizeof *lock);
    CSSH_TSAN_CALL(__tsan_mutex_create(lock, 0));
}

void cssh_lock_destroy(cssh_lock_t *lock) {
    CSSH_TSAN_CALL(__tsan_mutex_destroy(lock, 0));
    (void)lock;
}

static void cssh_lock_take(cssh_lock_t *lock) {
    unsigned int expected = 0;
    if (!__atomic_compare_exchange_n(&lock->state, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        // Held: mark it contended and sleep until the holder's release finds the mark and wakes one.
        if (expected != 2) expected = __atomic_exchange_n(&lock->state, 2, __ATOMIC_ACQUIRE);
        while (expected != 0) {
            cssh_futex(&lock->state, FUTEX_WAIT, 2);
            expected = __atomic_exchange_n(&lock->state, 2, __ATOMIC_ACQUIRE);
        }
    }
    __atomic_store_n(&lock->holder, cssh_self(), __ATOMIC_RELAXED);
}

static void cssh_lock_give(cssh_lock_t *lock) {
    __atomic_store_n(&lock->holder, 0, __ATOMIC_RELAXED);
    if (__atomic_exchange_n(&lock->state, 0, __ATOMIC_RELEASE) == 2) cssh_futex(&lock->state, FUTEX_WAKE, 1);
}

void cssh_lock_acquire(cssh_lock_t *lock) {
    CSSH_TSAN_CALL(__tsan_mutex_pre_lock(lock, 0));
    cssh_lock_take(lock);
    CSSH_TSAN_CALL(__tsan_mutex_post_lock(lock, 0, 0));
}

void cssh_lock_release(cssh_lock_t *lock) {
    CSSH_TSAN_CALL(__tsan_mutex_pre_unlock(lock, 0));
    cssh_lock_give(lock);
    CSSH_TSAN_CALL(__tsan_mutex_post_unlock(lock, 0));
}

int cssh_lock_held(cssh_lock_t *lock) {
    return __atomic_load_n(&lock->holder, __ATOMIC_RELAXED) == cssh_self();
}

void cssh_lock_wait(cssh_lock_t *lock) {
    unsigned int sequence = __atomic_load_n(&lock->sequence, __ATOMIC_RELAXED);
    lock->waiters += 1;
    cssh_lock_release(lock);
    cssh_futex(&lock->sequence, FUTEX_WAIT, sequence);
    cssh_lock_acquire(lock);
    lock->waiters -= 1;
}

void cssh_lock_broadcast(cssh_lock_t *lock) {
    if (lock->waiters == 0) return;
    __atomic_fetch_add(&lock->sequence, 1, __ATOMIC_RELAXED);
    cssh_futex(&lock->sequence, FUTEX_WAKE, INT_MAX);
}

/// Points `messages[i]` at `slots[i]`'s bytes (`capacity` to receive into, `length` to send) and address
/// (all of `sockaddr_storage` to receive into; `address_length` to send, none if 0).
static void cssh_prepare_messages(
    struct mmsghdr *messages, struct iovec *vectors, cssh_datagram *slots, unsigned int count, int receiving) {
    for (unsigned int index = 0; index < count; index++) {
        vectors[index].iov_base = slots[index].bytes;
        vectors[index].iov_len = receiving ? slots[index].capacity : slots[index].length;
        memset(&messages[index], 0, sizeof messages[index]);
        if (receiving || slots[index].address_length > 0) {
            messages[index].msg_hdr.msg_name = &slots[index].address;
            messages[index].msg_hdr.msg_namelen = receiving ? sizeof slots[index].address : slots[index].address_length;
        }
        messages[index].msg_hdr.msg_iov = &vectors[index];
        messages[index].msg_hdr.msg_iovlen = 1;
    }
}

int cssh_recv_batch(int fd, cssh_datagram *slots, unsigned int count) {
    struct mmsghdr messages[CSSH_DATAGRAM_BATCH];
    struct iovec vectors[CSSH_DATAGRAM_BATCH];
    if (count > CSSH_DATAGRAM_BATCH) count = CSSH_DATAGRAM_BATCH;
    cssh_prepare_messages(messages, vectors, slots, count, 1);
    int received = recvmmsg(fd, messages, count, MSG_DONTWAIT, NULL);
    for (int index = 0; index < received; index++) {
        slots[index].length = messages[index].msg_len;
        slots[index].address_length = messages[index].msg_hdr.msg_namelen;
        slots[index].truncated = (messages[index].msg_hdr.msg_flags & MSG_TRUNC) != 0;
    }
    return received;
}

int cssh_send_batch(int fd, const cssh_datagram *slots, unsigned int count) {
    struct mmsghdr messages[CSSH_DATAGRAM_BATCH];
    struct iovec vectors[CSSH_DATAGRAM_BATCH];
    if (count > CSSH_DATAGRAM_BATCH) count = CSSH_DATAGRAM_BATCH;
    // The slots are only read: the cast lets one preparation serve both directions.
    cssh_prepare_messages(messages, vectors, (cssh_datagram *)slots, count, 0);
    return sendmmsg(fd, messages, count, MSG_DONTWAIT | MSG_NOSIGNAL);
}
