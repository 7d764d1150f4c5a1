// C declarations that Swift's Glibc module does not export, and errno access.
#ifndef C_SOCKET_STREAMS_SHIMS_H
#define C_SOCKET_STREAMS_SHIMS_H

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <poll.h>

/// Reads the calling thread's `errno`.
static inline int cssh_errno(void) { return errno; }

/// `EPOLLIN`, `EPOLLOUT`, … as plain integers (Swift imports the enum oddly).
static inline unsigned int cssh_epollin(void) { return EPOLLIN; }
static inline unsigned int cssh_epollout(void) { return EPOLLOUT; }
static inline unsigned int cssh_epollerr(void) { return EPOLLERR; }
static inline unsigned int cssh_epollhup(void) { return EPOLLHUP; }
static inline unsigned int cssh_epollrdhup(void) { return EPOLLRDHUP; }
static inline unsigned int cssh_epolloneshot(void) { return EPOLLONESHOT; }

/// Pins the calling thread to one CPU (`sched_setaffinity`); returns 0 or -1.
int cssh_pin_to_cpu(int cpu);

/// `accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)` (a GNU extension Swift cannot see).
int cssh_accept4(int fd);

/// `accept4(fd, address, length, SOCK_NONBLOCK | SOCK_CLOEXEC)`: as `cssh_accept4`, with the peer's address.
int cssh_accept4_from(int fd, struct sockaddr *address, socklen_t *length);

/// glibc's `EAI_NODATA` (a GNU extension Swift cannot see).
int cssh_eai_nodata(void);

/// `pthread_setname_np(pthread_self(), name)` (a GNU extension Swift cannot see); the kernel keeps
/// at most 15 bytes. Returns 0 or an error number.
int cssh_name_current_thread(const char *name);

/// The calling thread's kernel id (`gettid(2)`), as glibc records it in a mutex it holds.
int cssh_gettid(void);

#endif
