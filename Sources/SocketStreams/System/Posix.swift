// The only file that calls socket syscalls and reads errno.
//
// Every wrapper retries on EINTR, turns EAGAIN/EWOULDBLOCK into `.wouldBlock`, and reports any other
// failure as a `SystemError` carrying errno and the C function's name. EBADF and EFAULT are programming
// errors (a closed or foreign fd, a bad pointer) and trap. Nothing between the call and the errno read
// can allocate, so errno cannot be clobbered.

import CSocketStreamsShims
import Glibc

/// The outcome of a non-blocking I/O call: it moved something, or it would have had to wait.
enum IOResult<T> {
    case processed(T)
    case wouldBlock
}

/// A failed system call: `errno` plus the name of the C function that set it.
struct SystemError: Error, CustomStringConvertible {
    /// The `errno` value.
    var code: Int32
    /// The C function that failed, e.g. `"connect"`.
    var function: String

    var description: String { "\(function): \(Posix.errorString(code)) (errno \(code))" }
}

/// Thin wrappers over the POSIX socket API. Each names the C call it makes.
enum Posix {
    /// `strerror(3)`.
    static func errorString(_ code: Int32) -> String {
        String(cString: strerror(code))
    }

    @inline(__always)
    private static func check(_ function: StaticString, _ code: Int32) {
        precondition(code != EBADF && code != EFAULT, "unacceptable errno \(code) from \(function)")
    }

    /// Runs `body` until it does not fail with EINTR. Returns `.wouldBlock` for EAGAIN.
    @inline(__always)
    private static func retrying<T: BinaryInteger>(
        _ function: StaticString, _ body: () -> T
    ) throws(SystemError) -> IOResult<T> {
        while true {
            let result = body()
            if result >= 0 { return .processed(result) }
            let code = cssh_errno()
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default:
                check(function, code)
                throw SystemError(code: code, function: "\(function)")
            }
        }
    }

    /// `socket(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC`.
    static func socket(family: Int32) throws(SystemError) -> Int32 {
        let fd = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw SystemError(code: cssh_errno(), function: "socket") }
        return fd
    }

    /// `connect(2)` on a non-blocking socket: `.processed` when connected at once, `.wouldBlock` while in
    /// progress. Not retried on EINTR: the connect then goes on asynchronously (a second call would
    /// fail with EALREADY), so it is in progress like EINPROGRESS.
    static func connect(_ fd: Int32, to address: SocketAddress) throws(SystemError) -> IOResult<Void> {
        let rc = address.withSockAddr { Glibc.connect(fd, $0, $1) }
        if rc == 0 { return .processed(()) }
        let code = cssh_errno()
        switch code {
        case EINTR, EINPROGRESS, EAGAIN: return .wouldBlock
        default:
            check("connect", code)
            throw SystemError(code: code, function: "connect")
        }
    }

    /// `recv(2)`; `.processed(0)` is end of stream.
    @inline(__always)
    static func recv(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) throws(SystemError) -> IOResult<Int> {
        try retrying("recv") { Glibc.recv(fd, buffer, count, 0) }
    }

    /// `send(2)` with `MSG_NOSIGNAL`, so a closed peer gives EPIPE instead of SIGPIPE.
    @inline(__always)
    static func send(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) throws(SystemError) -> IOResult<Int> {
        try retrying("send") { Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL)) }
    }

    /// `accept4(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC`.
    static func accept(_ fd: Int32) throws(SystemError) -> IOResult<Int32> {
        try retrying("accept4") { cssh_accept4(fd) }
    }

    /// `close(2)`. Never retried: on Linux the fd is gone even when close reports EINTR.
    static func close(_ fd: Int32) {
        let rc = Glibc.close(fd)
        if rc != 0 { precondition(cssh_errno() != EBADF, "close: fd \(fd) was not open") }
    }

    /// `poll(2)` on one fd. Returns the `revents`, 0 on timeout. `timeout` is in milliseconds, -1 waits forever.
    static func poll(_ fd: Int32, events: Int16, timeout: Int32) throws(SystemError) -> Int16 {
        var pfd = pollfd(fd: fd, events: events, revents: 0)
        while true {
            let rc = Glibc.poll(&pfd, 1, timeout)
            if rc >= 0 { return rc == 0 ? 0 : pfd.revents }
            let code = cssh_errno()
            if code == EINTR { continue }
            throw SystemError(code: code, function: "poll")
        }
    }

    /// `ioctl(FIONREAD)`: bytes waiting in the receive buffer (0 on failure).
    static func bytesAvailable(_ fd: Int32) -> Int {
        var count: Int32 = 0
        return Glibc.ioctl(fd, UInt(FIONREAD), &count) == 0 ? Int(count) : 0
    }

    /// `fcntl(F_SETFL, O_NONBLOCK)` (and `F_GETFL` first).
    static func setNonBlocking(_ fd: Int32) throws(SystemError) {
        let flags = fcntl(fd, F_GETFL)
        if flags < 0 { throw SystemError(code: cssh_errno(), function: "fcntl") }
        if flags & O_NONBLOCK == 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 {
            throw SystemError(code: cssh_errno(), function: "fcntl")
        }
    }

    /// `setsockopt(2)` with an `Int32` value.
    static func setOption(_ fd: Int32, level: Int32, name: Int32, value: Int32) throws(SystemError) {
        var v = value
        if setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size)) != 0 {
            throw SystemError(code: cssh_errno(), function: "setsockopt")
        }
    }

    /// `getsockopt(SOL_SOCKET, SO_ERROR)`: the pending error of a socket, 0 if none.
    static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) != 0 { return cssh_errno() }
        return value
    }

    /// `bind(2)`.
    static func bind(_ fd: Int32, to address: SocketAddress) throws(SystemError) {
        if address.withSockAddr({ Glibc.bind(fd, $0, $1) }) != 0 {
            throw SystemError(code: cssh_errno(), function: "bind")
        }
    }

    /// `listen(2)`.
    static func listen(_ fd: Int32, backlog: Int32) throws(SystemError) {
        if Glibc.listen(fd, backlog) != 0 { throw SystemError(code: cssh_errno(), function: "listen") }
    }

    /// `getsockname(2)`.
    static func localAddress(_ fd: Int32) throws(SystemError) -> SocketAddress {
        var address = SocketAddress()
        let rc = address.withMutableSockAddr { pointer, length in getsockname(fd, pointer, length) }
        if rc != 0 { throw SystemError(code: cssh_errno(), function: "getsockname") }
        return address
    }

    /// `getpeername(2)`.
    static func peerAddress(_ fd: Int32) throws(SystemError) -> SocketAddress {
        var address = SocketAddress()
        let rc = address.withMutableSockAddr { pointer, length in getpeername(fd, pointer, length) }
        if rc != 0 { throw SystemError(code: cssh_errno(), function: "getpeername") }
        return address
    }

    // MARK: epoll, eventfd, timerfd

    /// `epoll_create1(EPOLL_CLOEXEC)`.
    static func epollCreate() throws(SystemError) -> Int32 {
        let fd = epoll_create1(Int32(EPOLL_CLOEXEC))
        if fd < 0 { throw SystemError(code: cssh_errno(), function: "epoll_create1") }
        return fd
    }

    /// `epoll_ctl(2)`; `events == nil` deletes. ENOENT on delete and EEXIST on add are not errors here.
    static func epollControl(_ epfd: Int32, _ op: Int32, _ fd: Int32, events: UInt32, token: UInt64) throws(SystemError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        if epoll_ctl(epfd, op, fd, &event) != 0 {
            let code = cssh_errno()
            if op == EPOLL_CTL_DEL && code == ENOENT { return }
            throw SystemError(code: code, function: "epoll_ctl")
        }
    }

    /// `epoll_wait(2)` without waiting (the run loop already waited on the epoll fd).
    static func epollPoll(_ epfd: Int32, _ events: UnsafeMutablePointer<epoll_event>, _ capacity: Int32) -> Int {
        while true {
            let n = epoll_wait(epfd, events, capacity, 0)
            if n >= 0 { return Int(n) }
            let code = cssh_errno()
            if code == EINTR { continue }
            check("epoll_wait", code)
            return 0
        }
    }

    /// `eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)`.
    static func eventFD() throws(SystemError) -> Int32 {
        let fd = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        if fd < 0 { throw SystemError(code: cssh_errno(), function: "eventfd") }
        return fd
    }

    /// Adds one to an eventfd counter (`write(2)` of a `UInt64`).
    static func eventFDSignal(_ fd: Int32) {
        var one: UInt64 = 1
        while Glibc.write(fd, &one, 8) < 0 && cssh_errno() == EINTR {}
    }

    /// Resets an eventfd or timerfd counter (`read(2)` of a `UInt64`).
    static func drainCounter(_ fd: Int32) {
        var value: UInt64 = 0
        while Glibc.read(fd, &value, 8) < 0 && cssh_errno() == EINTR {}
    }

    /// `timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)`.
    static func timerFD() throws(SystemError) -> Int32 {
        let fd = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK) | Int32(TFD_CLOEXEC))
        if fd < 0 { throw SystemError(code: cssh_errno(), function: "timerfd_create") }
        return fd
    }

    /// `timerfd_settime(2)` to an absolute `CLOCK_MONOTONIC` time in nanoseconds (0 disarms).
    static func timerFDArm(_ fd: Int32, deadlineNanoseconds: UInt64) {
        var spec = itimerspec()
        if deadlineNanoseconds > 0 {
            spec.it_value.tv_sec = Int(deadlineNanoseconds / 1_000_000_000)
            spec.it_value.tv_nsec = Int(deadlineNanoseconds % 1_000_000_000)
        }
        _ = timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &spec, nil)
    }

    /// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}
