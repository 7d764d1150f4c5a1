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

/// Turns on `TCP_INQ` for a TCP socket (Linux 4.18): from then on each `cssh_recv_counting` also says
/// how many bytes the kernel still holds. Returns 0 or an error number (not a TCP socket: ENOPROTOOPT
/// or EOPNOTSUPP).
int cssh_count_input(int fd);

/// `recvmsg(2)` into one buffer, without flags, on a socket `cssh_count_input` set up: returns what
/// `recv(2)` would (errno set on -1), and in `left` the bytes the kernel still holds after it (the
/// `TCP_CM_INQ` control message; after the peer's FIN at least 1, so that a reader reads on to the
/// end), or -1 when the message did not come.
long cssh_recv_counting(int fd, void *buffer, unsigned long length, int *left);

/// The calling thread's kernel id (`gettid(2)`), which `/proc/self/task/` lists.
int cssh_gettid(void);

/// Takes a strong reference to a Swift object unless its deinitialisation has begun (the Swift
/// runtime's `swift_tryRetain`, the check a weak reference's load makes). `object` must be allocated:
/// the caller guarantees it by a rule of its own (a lock the object's deinit must take first). Returns
/// whether the reference was taken.
_Bool cssh_try_retain(void *object);

/// A lock and the condition its holders wait on, in 24 bytes: a futex word (0 free, 1 held, 2 held with
/// waiters), a futex sequence for the condition, the number of threads in `cssh_lock_wait`, and the
/// holder (its thread pointer, for the "lock held" checks). The connection's and the reactor's lock and
/// `Guarded`'s: an uncontended lock and unlock is one compare-and-swap and one exchange each, where
/// glibc's `pthread_mutex_lock`/`unlock` cost more (Benchmarks/results/syscalls.md).
/// Under Thread Sanitizer each function tells the sanitizer what it does (`__tsan_mutex_*`), so it sees
/// a mutex, as with pthreads. Zero-filled memory is an unlocked lock; `cssh_lock_init` also registers
/// it with the sanitizer.
typedef struct {
    unsigned int state;
    unsigned int sequence;
    unsigned int waiters;
    unsigned long holder;
} cssh_lock_t;

void cssh_lock_init(cssh_lock_t *lock);
void cssh_lock_destroy(cssh_lock_t *lock);
void cssh_lock_acquire(cssh_lock_t *lock);
void cssh_lock_release(cssh_lock_t *lock);
/// Whether the calling thread holds the lock.
int cssh_lock_held(cssh_lock_t *lock);
/// Releases the lock, sleeps until `cssh_lock_broadcast` (or spuriously), and takes the lock again;
/// called with the lock held, as `pthread_cond_wait`.
void cssh_lock_wait(cssh_lock_t *lock);
/// Wakes every thread in `cssh_lock_wait`; called with the lock held.
void cssh_lock_broadcast(cssh_lock_t *lock);

/// One datagram of a batch for `cssh_recv_batch` and `cssh_send_batch`: its bytes, its peer's address
/// (the sender of one received, the destination of one to send; `address_length` 0 sends to the
/// connected peer), and for one received, `truncated` when the kernel cut it to `capacity`.
typedef struct {
    void *bytes;
    unsigned long capacity;
    unsigned long length;
    struct sockaddr_storage address;
    socklen_t address_length;
    int truncated;
} cssh_datagram;

/// The most datagrams one batch call moves.
#define CSSH_DATAGRAM_BATCH 64

/// `recvmmsg(2)` (a GNU extension Swift cannot see), non-blocking, into `count` (at most
/// `CSSH_DATAGRAM_BATCH`) slots whose `bytes` and `capacity` are set: returns how many arrived, each
/// with its `length`, `address` and `truncated` filled in, or -1 with errno set.
int cssh_recv_batch(int fd, cssh_datagram *slots, unsigned int count);

/// `sendmmsg(2)` (a GNU extension Swift cannot see) of `count` (at most `CSSH_DATAGRAM_BATCH`) slots,
/// each `length` bytes: returns how many the kernel took, in order, or -1 with errno set when it took
/// none (the first one's error).
int cssh_send_batch(int fd, const cssh_datagram *slots, unsigned int count);

#endif
