// The only file that calls socket syscalls and reads errno.
//
// Every wrapper goes through one helper, `syscall`: it retries on EINTR, turns EAGAIN/EWOULDBLOCK into
// `.wouldBlock` for non-blocking I/O, and reports any other failure as a `SystemError` carrying errno
// and the C function's name. EBADF and EFAULT are programming errors (a closed or foreign fd, a bad
// pointer) and trap, except EBADF on an fd a client lent us (a native socket it may have closed under
// the pair), which is its mistake to be told about. Nothing between the call and the errno read can
// allocate, so errno cannot be clobbered. A few queries (`option`, `sendMemory`) answer nil on any
// failure instead, for callers that take a failure as "not known".

import CSocketStreamsShims
import Glibc
import Synchronization

/// The outcome of a non-blocking I/O call: it moved something, or it would have had to wait.
enum IOResult<T> {
    case processed(T)
    case wouldBlock

    @inline(__always)
    func map<U>(_ transform: (T) -> U) -> IOResult<U> {
        switch self {
        case .processed(let value): .processed(transform(value))
        case .wouldBlock: .wouldBlock
        }
    }
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
package enum Posix {
    /// `strerror(3)`.
    static func errorString(_ code: Int32) -> String {
        String(cString: strerror(code))
    }

    @inline(__always)
    private static func check(_ function: StaticString, _ code: Int32, fd: Int32? = nil) {
        if code == EBADF && isLent(fd) { return }
        precondition(code != EBADF && code != EFAULT, "unacceptable errno \(code) from \(function)")
    }

    /// Native sockets clients lent to pairs (`createStreamPair(nativeSocket:)`), by number. Consulted
    /// only when a call fails with EBADF, so the I/O path never takes its lock.
    private static let lent = Guarded<[Int32: Int]>([:])

    /// Marks `fd` as the client's while a pair uses it: EBADF on it is reported, not trapped on.
    static func lend(_ fd: Int32) {
        lent.withLock { $0[fd, default: 0] += 1 }
    }

    /// Ends one `lend(fd)`.
    static func unlend(_ fd: Int32) {
        lent.withLock { table in
            if let count = table[fd], count > 1 { table[fd] = count - 1 } else { table[fd] = nil }
        }
    }

    private static func isLent(_ fd: Int32?) -> Bool {
        guard let fd else { return false }
        return lent.withLock { $0[fd] != nil }
    }

    /// The one place a failed call becomes an error: retries EINTR, traps on EBADF/EFAULT (a closed or
    /// foreign fd, a bad pointer: our bug, never the peer's), turns EAGAIN into `.wouldBlock` when
    /// `nonBlocking`, and anything else into a `SystemError` naming `function`. Every wrapper below
    /// goes through it, except `connect` and `close`, whose EINTR means something else.
    /// `fd`: the descriptor the call is about, so that EBADF on one a client lent (`lend`) is
    /// reported instead of trapped on; nil when the fd can only be our own.
    @inline(__always)
    private static func syscall<T: BinaryInteger>(
        _ function: StaticString, nonBlocking: Bool = false, fd: Int32? = nil, _ body: () -> T
    ) throws(SystemError) -> IOResult<T> {
        while true {
            let result = body()
            if result >= 0 { return .processed(result) }
            let code = cssh_errno()
            if code == EINTR { continue }
            if nonBlocking && (code == EAGAIN || code == EWOULDBLOCK) { return .wouldBlock }
            check(function, code, fd: fd)
            throw SystemError(code: code, function: "\(function)")
        }
    }

    /// `syscall` for calls that cannot would-block: the result, or the error.
    @inline(__always)
    private static func call<T: BinaryInteger>(
        _ function: StaticString, fd: Int32? = nil, _ body: () -> T
    ) throws(SystemError) -> T {
        guard case .processed(let result) = try syscall(function, fd: fd, body) else {
            preconditionFailure("\(function) would block")
        }
        return result
    }

    /// `socket(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC`.
    static func socket(family: Int32) throws(SystemError) -> Int32 {
        try call("socket") {
            Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
    }

    /// `socket(2)` for UDP (`SOCK_DGRAM`) with `SOCK_NONBLOCK | SOCK_CLOEXEC`.
    static func datagramSocket(family: Int32) throws(SystemError) -> Int32 {
        try call("socket") {
            Glibc.socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
    }

    /// A netlink socket (`socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol)`, then
    /// `bind(2)` to a `sockaddr_nl` with the kernel choosing the port id and `groups` the multicast groups
    /// to join), its receive buffer asked to be `receiveBuffer` bytes (`SO_RCVBUF`, capped by the kernel at
    /// `net.core.rmem_max`). Returns the fd and the port id the kernel gave it (`getsockname(2)`), which
    /// the kernel's answers to this socket's requests carry. Glibc's module has no `sockaddr_nl`, so the
    /// address is laid out here: `nl_family` (16 bits), `nl_pad`, `nl_pid` and `nl_groups` (32 bits each).
    static func netlinkSocket(protocol: Int32, groups: UInt32, receiveBuffer: Int32) throws(SystemError) -> (fd: Int32, port: UInt32) {
        let fd = try call("socket") {
            Glibc.socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), `protocol`)
        }
        do {
            try? setOption(fd, level: SOL_SOCKET, name: SO_RCVBUF, value: receiveBuffer)
            var address = sockaddr_storage()
            withUnsafeMutableBytes(of: &address) { bytes in
                bytes.storeBytes(of: UInt16(AF_NETLINK), toByteOffset: 0, as: UInt16.self)
                bytes.storeBytes(of: groups, toByteOffset: 8, as: UInt32.self)
            }
            _ = try call("bind", fd: fd) {
                withUnsafePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, 12) }
                }
            }
            let local = try localAddress(fd)
            let port = local.withSockAddr { pointer, _ in UnsafeRawPointer(pointer).loadUnaligned(fromByteOffset: 4, as: UInt32.self) }
            return (fd, port)
        } catch {
            close(fd)
            throw error
        }
    }

    /// `recvmmsg(2)` into `count` slots (`cssh_recv_batch`): how many datagrams arrived, `.wouldBlock`
    /// when none was waiting. A pending error (an ICMP error on a connected socket: ECONNREFUSED) is the
    /// error.
    @inline(__always)
    static func receiveBatch(_ fd: Int32, _ slots: UnsafeMutablePointer<cssh_datagram>, count: Int) throws(SystemError) -> IOResult<Int> {
        defer { countIO() }
        return try syscall("recvmmsg", nonBlocking: true, fd: fd) { cssh_recv_batch(fd, slots, UInt32(count)) }.map(Int.init)
    }

    /// `sendmmsg(2)` of `count` slots (`cssh_send_batch`): how many the kernel took, in order;
    /// `.wouldBlock` when it took none for want of buffer space; the first datagram's own error when it
    /// took none for another reason (EMSGSIZE, EACCES, ENETUNREACH, ECONNREFUSED, …).
    @inline(__always)
    static func sendBatch(_ fd: Int32, _ slots: UnsafePointer<cssh_datagram>, count: Int) throws(SystemError) -> IOResult<Int> {
        defer { countIO() }
        return try syscall("sendmmsg", nonBlocking: true, fd: fd) { cssh_send_batch(fd, slots, UInt32(count)) }.map(Int.init)
    }

    /// `setsockopt(2)` with a C structure as its value (`ip_mreq`, `ipv6_mreq`, `in_addr`).
    static func setOption<Value>(_ fd: Int32, level: Int32, name: Int32, structure value: Value) throws(SystemError) {
        _ = try call("setsockopt", fd: fd) {
            withUnsafeBytes(of: value) { setsockopt(fd, level, name, $0.baseAddress, socklen_t($0.count)) }
        }
    }

    /// One address of a network interface (`getifaddrs(3)`): its name, its index and the address
    /// (IPv4 or IPv6 only; link-layer entries and entries without an address are left out).
    package struct InterfaceAddress: Sendable {
        package let name: String
        package let index: UInt32
        package let address: SocketAddress
    }

    /// `getifaddrs(3)`: the IPv4 and IPv6 addresses of every interface, in the kernel's order; empty if
    /// the call fails.
    package static func interfaceAddresses() -> [InterfaceAddress] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var found: [InterfaceAddress] = []
        var cursor = list
        while let entry = cursor {
            cursor = entry.pointee.ifa_next
            guard let address = entry.pointee.ifa_addr, let name = entry.pointee.ifa_name else { continue }
            let family = Int32(address.pointee.sa_family)
            let length: Int
            switch family {
            case AF_INET: length = MemoryLayout<sockaddr_in>.size
            case AF_INET6: length = MemoryLayout<sockaddr_in6>.size
            default: continue
            }
            found.append(
                InterfaceAddress(
                    name: String(cString: name), index: if_nametoindex(name), address: SocketAddress(address, length: socklen_t(length))))
        }
        return found
    }

    /// `if_nametoindex(3)`: the interface's index, or nil when there is none of that name.
    package static func interfaceIndex(_ name: String) -> UInt32? {
        let index = if_nametoindex(name)
        return index == 0 ? nil : index
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
        defer { countIO() }
        return try syscall("recv", nonBlocking: true, fd: fd) { Glibc.recv(fd, buffer, count, 0) }
    }

    /// `recv(2)` on a socket that counts its input (`countInput`), as `recvmsg(2)`: also sets `left` to
    /// the bytes the kernel still holds after it (at least 1 after the peer's FIN; -1 if not told).
    @inline(__always)
    static func recv(
        _ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, left: inout Int32
    ) throws(SystemError) -> IOResult<Int> {
        defer { countIO() }
        return try syscall("recvmsg", nonBlocking: true, fd: fd) { cssh_recv_counting(fd, buffer, UInt(count), &left) }
    }

    /// `setsockopt(TCP_INQ)`: each later `recv(_:_:_:left:)` says what the kernel still holds. False
    /// where the socket cannot (not TCP).
    static func countInput(_ fd: Int32) -> Bool {
        cssh_count_input(fd) == 0
    }

    /// `send(2)` with `MSG_NOSIGNAL`, so a closed peer gives EPIPE instead of SIGPIPE.
    @inline(__always)
    static func send(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) throws(SystemError) -> IOResult<Int> {
        defer { countIO() }
        return try syscall("send", nonBlocking: true, fd: fd) { Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL)) }
    }

    /// `accept4(2)` with `SOCK_NONBLOCK | SOCK_CLOEXEC`, storing the peer's address in `peer`.
    static func accept(_ fd: Int32, peer: inout SocketAddress) throws(SystemError) -> IOResult<Int32> {
        defer { countIO() }
        return try syscall("accept4", nonBlocking: true) { peer.withMutableSockAddr { cssh_accept4_from(fd, $0, $1) } }
    }

    /// `shutdown(2)` with `how` (`SHUT_WR`: a FIN after the bytes already sent; reads go on).
    static func shutdown(_ fd: Int32, _ how: Int32) throws(SystemError) {
        _ = try call("shutdown", fd: fd) { Glibc.shutdown(fd, how) }
    }

    /// `close(2)`. Never retried: on Linux the fd is gone even when close reports EINTR.
    static func close(_ fd: Int32) {
        let rc = Glibc.close(fd)
        if rc != 0 && cssh_errno() == EBADF { check("close", EBADF, fd: fd) }
    }

    /// `poll(2)` on one fd. Returns the `revents`, 0 on timeout. `timeout` is in milliseconds, -1 waits forever.
    static func poll(_ fd: Int32, events: Int16, timeout: Int32) throws(SystemError) -> Int16 {
        var pfd = pollfd(fd: fd, events: events, revents: 0)
        let ready = try call("poll", fd: fd) { Glibc.poll(&pfd, 1, timeout) }
        return ready == 0 ? 0 : pfd.revents
    }

    /// `ioctl(FIONREAD)`: bytes waiting in the receive buffer (0 on failure).
    static func bytesAvailable(_ fd: Int32) -> Int {
        var count: Int32 = 0
        return (try? call("ioctl", fd: fd) { Glibc.ioctl(fd, UInt(FIONREAD), &count) }) != nil ? Int(count) : 0
    }

    /// `fcntl(F_SETFL, O_NONBLOCK)` (and `F_GETFL` first), on a client's native socket: a bad fd is
    /// reported (EBADF), not trapped on.
    static func setNonBlocking(_ fd: Int32) throws(SystemError) {
        let flags = try call("fcntl", fd: fd) { fcntl(fd, F_GETFL) }
        if flags & O_NONBLOCK == 0 { _ = try call("fcntl", fd: fd) { fcntl(fd, F_SETFL, flags | O_NONBLOCK) } }
    }

    /// `TCP_FASTOPEN_CONNECT` (Linux 4.11) on a TCP socket not yet connected: with a cookie for the
    /// peer cached, `connect(2)` returns at once and the first write goes out in the SYN; without one
    /// it connects as ever and asks for a cookie. False where the kernel lacks it (the connect is then
    /// an ordinary one).
    static func setFastOpenConnect(_ fd: Int32) -> Bool {
        var on: Int32 = 1
        return setsockopt(fd, Int32(IPPROTO_TCP), TCP_FASTOPEN_CONNECT, &on, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    /// `TCP_FASTOPEN` on a listening socket: up to `queueLength` connections whose SYN carried data
    /// may wait to be accepted, the data already theirs. Takes effect where the system lets servers
    /// use fast open (`net.ipv4.tcp_fastopen` has bit 2); false where the kernel refuses the option.
    static func setFastOpenQueue(_ fd: Int32, length: Int32) -> Bool {
        var value = length
        return setsockopt(fd, Int32(IPPROTO_TCP), TCP_FASTOPEN, &value, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    /// `setsockopt(2)` with an `Int32` value.
    static func setOption(_ fd: Int32, level: Int32, name: Int32, value: Int32) throws(SystemError) {
        var v = value
        _ = try call("setsockopt", fd: fd) { setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size)) }
    }

    /// `getsockopt(SOL_SOCKET, SO_ERROR)`: the pending error of a socket, 0 if none.
    static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        do {
            _ = try call("getsockopt", fd: fd) { getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) }
        } catch {
            return error.code
        }
        return value
    }

    /// A query whose caller takes any failure as "not known" (an option this socket or kernel does not
    /// have, an fd that is not a socket or is gone): retried on EINTR, never a trap or an error.
    @inline(__always)
    private static func query(_ body: () -> Int32) -> Bool {
        while true {
            if body() == 0 { return true }
            if cssh_errno() != EINTR { return false }
        }
    }

    /// `getsockopt(2)` of an `Int32` option: its value, or nil if the call fails (`query`).
    static func option(_ fd: Int32, level: Int32, name: Int32) -> Int32? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard query({ getsockopt(fd, level, name, &value, &length) }) else { return nil }
        return value
    }

    /// `getsockopt(SOL_SOCKET, SO_MEMINFO)`: the socket's send buffer (`sk_sndbuf`) and what its
    /// queue holds (the larger of `sk_wmem_queued` and `sk_wmem_alloc`), in bytes; nil if the call
    /// fails (`query`) or the kernel's answer is too short.
    @inline(__always)
    static func sendMemory(_ fd: Int32) -> (buffer: Int, queued: Int)? {
        // `SK_MEMINFO_*` (linux/sock_diag.h): WMEM_ALLOC 2, SNDBUF 3, WMEM_QUEUED 5, of 9.
        var info: (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32) = (0, 0, 0, 0, 0, 0, 0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: info))
        guard query({ getsockopt(fd, SOL_SOCKET, SO_MEMINFO, &info, &length) }), length >= 6 * 4 else { return nil }
        return (Int(info.3), max(Int(info.5), Int(info.2)))
    }

    /// `getaddrinfo(3)`: the list (free it with `freeaddrinfo`), or the `EAI_*` code and, for
    /// `EAI_SYSTEM`, the errno.
    static func addressInfo(
        _ host: String, _ service: String, _ hints: inout addrinfo
    ) -> Result<UnsafeMutablePointer<addrinfo>?, AddressInfoError> {
        var list: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host, service, &hints, &list)
        guard code == 0 else { return .failure(AddressInfoError(code: code, systemErrno: code == EAI_SYSTEM ? cssh_errno() : 0)) }
        return .success(list)
    }

    /// A failed `getaddrinfo`: its `EAI_*` code, and errno for `EAI_SYSTEM` (else 0).
    struct AddressInfoError: Error {
        let code: Int32
        let systemErrno: Int32
    }

    /// `bind(2)`.
    static func bind(_ fd: Int32, to address: SocketAddress) throws(SystemError) {
        _ = try call("bind") { address.withSockAddr { Glibc.bind(fd, $0, $1) } }
    }

    /// `listen(2)`.
    static func listen(_ fd: Int32, backlog: Int32) throws(SystemError) {
        _ = try call("listen") { Glibc.listen(fd, backlog) }
    }

    /// `getsockname(2)`.
    static func localAddress(_ fd: Int32) throws(SystemError) -> SocketAddress {
        var address = SocketAddress()
        _ = try call("getsockname", fd: fd) { address.withMutableSockAddr { pointer, length in getsockname(fd, pointer, length) } }
        return address
    }

    /// `getpeername(2)`.
    static func peerAddress(_ fd: Int32) throws(SystemError) -> SocketAddress {
        var address = SocketAddress()
        _ = try call("getpeername", fd: fd) { address.withMutableSockAddr { pointer, length in getpeername(fd, pointer, length) } }
        return address
    }

    /// `getsockname(2)` for the package's other modules: nil when it fails.
    package static func boundAddress(of fd: Int32) -> SocketAddress? { try? localAddress(fd) }

    /// `getpeername(2)` for the package's other modules: nil when it fails (not connected).
    package static func connectedAddress(of fd: Int32) -> SocketAddress? { try? peerAddress(fd) }

    // MARK: files

    /// Which file a path names (`st_dev`, `st_ino`), and whether it is a socket.
    struct FileIdentity: Equatable {
        var device: UInt64
        var inode: UInt64
        var isSocket: Bool
    }

    /// `lstat(2)`: the file at `path` (a symbolic link itself, not its target); nil when there is none
    /// (ENOENT, ENOTDIR).
    static func fileIdentity(atPath path: String) throws(SystemError) -> FileIdentity? {
        var info = stat()
        do {
            _ = try call("lstat") { lstat(path, &info) }
        } catch {
            if error.code == ENOENT || error.code == ENOTDIR { return nil }
            throw error
        }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), isSocket: info.st_mode & S_IFMT == S_IFSOCK)
    }

    /// `unlink(2)` of `path` if it still names the file `identity` (an `lstat` right before): a file
    /// someone else has put there since stays. Failures are ignored.
    static func unlink(_ path: String, ifStill identity: FileIdentity) {
        guard (try? fileIdentity(atPath: path)) == identity else { return }
        _ = try? call("unlink") { Glibc.unlink(path) }
    }

    // MARK: epoll, eventfd, timerfd

    /// Socket reads, writes and accepts and epoll set changes made so far in the process (wrapping),
    /// each counted once its call returns. A dispatch queue's thread (`QueueThreadDriver.run`) compares it
    /// before and after the queue ran other work, to know whether the events its wait fetched still hold.
    static let ioCount = Atomic<UInt>(0)

    @inline(__always)
    static func countIO() {
        ioCount.wrappingAdd(1, ordering: .relaxed)
    }

    /// `epoll_create1(EPOLL_CLOEXEC)`.
    static func epollCreate() throws(SystemError) -> Int32 {
        try call("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
    }

    /// `epoll_ctl(2)`. ENOENT on `EPOLL_CTL_DEL` (the fd was not in the set) is not an error here.
    static func epollControl(_ epfd: Int32, _ op: Int32, _ fd: Int32, events: UInt32, token: UInt64) throws(SystemError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        defer { countIO() }
        do {
            _ = try call("epoll_ctl", fd: fd) { epoll_ctl(epfd, op, fd, &event) }
        } catch  where op == EPOLL_CTL_DEL && error.code == ENOENT {
        }
    }

    /// `epoll_wait(2)` without waiting (the run loop already waited on the epoll fd). 0 on failure.
    static func epollPoll(_ epfd: Int32, _ events: UnsafeMutablePointer<epoll_event>, _ capacity: Int32) -> Int {
        Int((try? call("epoll_wait") { epoll_wait(epfd, events, capacity, 0) }) ?? 0)
    }

    /// `epoll_wait(2)` that waits up to `timeout` milliseconds (-1: until an event). 0 on failure.
    static func epollWait(_ epfd: Int32, _ events: UnsafeMutablePointer<epoll_event>, _ capacity: Int32, timeout: Int32) -> Int {
        Int((try? call("epoll_wait") { epoll_wait(epfd, events, capacity, timeout) }) ?? 0)
    }

    /// `eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)`.
    static func eventFD() throws(SystemError) -> Int32 {
        try call("eventfd") { eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC)) }
    }

    /// Adds one to an eventfd counter (`write(2)` of a `UInt64`). A full counter (EAGAIN) is already signalled.
    static func eventFDSignal(_ fd: Int32) {
        var one: UInt64 = 1
        _ = try? syscall("write", nonBlocking: true) { Glibc.write(fd, &one, 8) }
    }

    /// Resets an eventfd or timerfd counter (`read(2)` of a `UInt64`). EAGAIN: it was already zero.
    static func drainCounter(_ fd: Int32) {
        var value: UInt64 = 0
        _ = try? syscall("read", nonBlocking: true) { Glibc.read(fd, &value, 8) }
    }

    /// `timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)`.
    static func timerFD() throws(SystemError) -> Int32 {
        try call("timerfd_create") { timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK) | Int32(TFD_CLOEXEC)) }
    }

    /// `timerfd_settime(2)` to an absolute `CLOCK_MONOTONIC` time in nanoseconds (0 disarms).
    static func timerFDArm(_ fd: Int32, deadlineNanoseconds: UInt64) {
        var spec = itimerspec()
        if deadlineNanoseconds > 0 {
            spec.it_value.tv_sec = Int(deadlineNanoseconds / 1_000_000_000)
            spec.it_value.tv_nsec = Int(deadlineNanoseconds % 1_000_000_000)
        }
        _ = try? call("timerfd_settime") { timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME), &spec, nil) }
    }

    /// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
    static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// `pthread_setname_np(pthread_self(), name)`: the calling thread's kernel name (`comm`, at
    /// most 15 bytes), which `ps -L`, `top -H`, gdb and `/proc/self/task/*/comm` show. Foundation's
    /// `Thread.name` does not set it on Linux.
    static func nameCurrentThread(_ name: String) {
        _ = cssh_name_current_thread(name)
    }

    /// Starts a detached thread that runs `body` (`pthread_create`), or throws why none could be made
    /// (EAGAIN: the process or system is out of threads, or of address space for a stack). Foundation's
    /// `Thread.start()` ignores that failure: the thread simply never runs, and whoever waits for it
    /// waits for good. `body` is released on the new thread once it returns. The thread runs at the
    /// process's priority, not its starter's (`takeProcessPriority`).
    static func startThread(_ body: @escaping @Sendable () -> Void) throws(SystemError) {
        let context = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(
            &thread, nil,
            { context in
                Posix.takeProcessPriority()
                Unmanaged<ThreadBody>.fromOpaque(context!).takeRetainedValue().body()
                return nil
            }, context)
        guard result == 0 else {
            Unmanaged<ThreadBody>.fromOpaque(context).release()
            throw SystemError(code: result, function: "pthread_create")
        }
        pthread_detach(thread)
    }
}

extension Posix {
    /// Gives the calling thread the process's nice value, that of its main thread (`getpriority` of the
    /// process id; on Linux each thread has its own, and `PRIO_PROCESS` with 0 names the calling thread).
    /// A Linux thread starts with the nice value of the thread that made it, and libdispatch runs its
    /// workers at nice values by QoS (background 10, utility 2, user-initiated −2 where the process may
    /// lower it; Benchmarks/results/syscalls.md), so the package's threads would otherwise run at
    /// whatever priority the first code to need them had: the stream thread, which serves every
    /// connection scheduled on it, at nice 10 for good if a background task opened the first connection.
    /// Raising a thread's nice value is always allowed; lowering it needs `CAP_SYS_NICE` or
    /// `RLIMIT_NICE`, without which a thread started from a lower-priority one stays there (start the
    /// stream thread early, `RunLoop.startSocketStreams()`, to choose).
    static func takeProcessPriority() {
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        errno = 0
        let process = getpriority(which, id_t(getpid()))
        guard errno == 0 else { return }
        errno = 0
        let own = getpriority(which, 0)
        guard errno == 0, own != process else { return }
        _ = setpriority(which, 0, process)
    }
}

/// What `Posix.startThread` hands its new thread.
private final class ThreadBody: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}
