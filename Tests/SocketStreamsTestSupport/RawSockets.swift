// Plain BSD-socket helpers (Glibc) used to build real loopback peers and to inspect
// file descriptors. Nothing here goes through the library under test.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation

/// The two loopback address families the suite uses.
package enum IPFamily: String, CaseIterable, Sendable {
    case v4, v6

    /// The loopback literal for this family ("127.0.0.1" or "::1").
    package var loopback: String { self == .v4 ? "127.0.0.1" : "::1" }
    package var domain: Int32 { self == .v4 ? AF_INET : AF_INET6 }
}

/// A failed system call.
package struct SystemCallError: Error, CustomStringConvertible {
    package let call: String
    package let code: Int32
    package var description: String { "\(call) failed: errno \(code) (\(String(cString: strerror(code))))" }
}

/// Identity of an open file (device + inode). Used to tell "the fd is still ours" from
/// "the number was closed and reused by something else".
package struct FileIdentity: Equatable, Sendable {
    package let device: UInt64
    package let inode: UInt64
}

package enum RawSocket {
    package static let streamType = Int32(SOCK_STREAM.rawValue)

    // MARK: creating sockets

    /// A bound, listening TCP socket on the family's loopback address.
    /// - Parameters:
    ///   - port: 0 picks an ephemeral port.
    ///   - backlog: passed to listen(2) unchanged.
    package static func listener(family: IPFamily, port: Int = 0, backlog: Int32 = 128) throws -> Int32 {
        let fd = socket(family.domain, streamType, 0)
        guard fd >= 0 else { throw SystemCallError(call: "socket", code: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if family == .v6 {
            // Keep the v6 socket from claiming the v4 port space (Happy Eyeballs set-ups bind the
            // same port number in both families).
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        return try bindAndListen(fd, backlog: backlog) { withSocketAddress(family: family, port: port) { bind(fd, $0, $1) } }
    }

    /// Binds `fd` with `bind` (returning bind(2)'s result) and listens; closes it on failure.
    private static func bindAndListen(_ fd: Int32, backlog: Int32, _ bind: () -> Int32) throws -> Int32 {
        guard bind() == 0 else {
            let code = errno
            close(fd)
            throw SystemCallError(call: "bind", code: code)
        }
        guard listen(fd, backlog) == 0 else {
            let code = errno
            close(fd)
            throw SystemCallError(call: "listen", code: code)
        }
        return fd
    }

    /// A blocking TCP connection to the family's loopback address.
    package static func connectTo(family: IPFamily, port: Int) throws -> Int32 {
        let fd = socket(family.domain, streamType, 0)
        guard fd >= 0 else { throw SystemCallError(call: "socket", code: errno) }
        let result = withSocketAddress(family: family, port: port) { connect(fd, $0, $1) }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw SystemCallError(call: "connect", code: code)
        }
        return fd
    }

    /// A bound, listening Unix-domain socket at `path` (closing it leaves the socket file behind,
    /// as a listener that dies without unlinking does).
    package static func unixListener(path: String, backlog: Int32 = 1) throws -> Int32 {
        let fd = socket(AF_UNIX, streamType, 0)
        guard fd >= 0 else { throw SystemCallError(call: "socket", code: errno) }
        return try bindAndListen(fd, backlog: backlog) { withUnixAddress(path) { bind(fd, $0, $1) } }
    }

    /// A blocking connection to the Unix-domain socket at `path`.
    package static func connectTo(unixPath path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, streamType, 0)
        guard fd >= 0 else { throw SystemCallError(call: "socket", code: errno) }
        guard withUnixAddress(path, { connect(fd, $0, $1) }) == 0 else {
            let code = errno
            close(fd)
            throw SystemCallError(call: "connect", code: code)
        }
        return fd
    }

    /// accept(2) that waits at most `timeout` seconds. Returns nil on timeout.
    package static func accept(_ listener: Int32, timeout: TimeInterval) throws -> Int32? {
        guard try waitReadable(listener, timeout: timeout) else { return nil }
        let fd = Glibc.accept(listener, nil, nil)
        guard fd >= 0 else { throw SystemCallError(call: "accept", code: errno) }
        return fd
    }

    /// An AF_UNIX stream socketpair.
    package static func socketPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, streamType, 0, &fds) == 0 else {
            throw SystemCallError(call: "socketpair", code: errno)
        }
        return (fds[0], fds[1])
    }

    /// Two ends of an established loopback TCP connection (the temporary listener is closed).
    package static func connectedTCPPair(family: IPFamily = .v4) throws -> (client: Int32, server: Int32) {
        let listenFD = try listener(family: family, backlog: 1)
        defer { close(listenFD) }
        let client = try connectTo(family: family, port: boundPort(listenFD))
        guard let server = try accept(listenFD, timeout: 5) else {
            close(client)
            throw SystemCallError(call: "accept (timed out)", code: ETIMEDOUT)
        }
        return (client, server)
    }

    /// A port on which nothing listens right now (bound, read back, released).
    /// Connecting to it is refused unless another process grabs it in between, which the
    /// ephemeral range makes very unlikely within one test.
    package static func unusedPort(family: IPFamily = .v4) throws -> Int {
        let fd = socket(family.domain, streamType, 0)
        guard fd >= 0 else { throw SystemCallError(call: "socket", code: errno) }
        defer { close(fd) }
        let bound = withSocketAddress(family: family, port: 0) { bind(fd, $0, $1) }
        guard bound == 0 else { throw SystemCallError(call: "bind", code: errno) }
        return boundPort(fd)
    }

    // MARK: addresses

    /// Calls `body` with a sockaddr for the family's loopback address and `port`.
    package static func withSocketAddress<R>(
        family: IPFamily, port: Int,
        _ body: (UnsafePointer<sockaddr>, socklen_t) -> R
    ) -> R {
        switch family {
        case .v4:
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            addr.sin_addr.s_addr = in_addr_t(UInt32(0x7F00_0001).bigEndian)
            return withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    body($0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        case .v6:
            var addr = sockaddr_in6()
            addr.sin6_family = sa_family_t(AF_INET6)
            addr.sin6_port = in_port_t(UInt16(port).bigEndian)
            addr.sin6_addr = in6addr_loopback
            return withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    body($0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        }
    }

    /// Calls `body` with a `sockaddr_un` for `path`.
    package static func withUnixAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        precondition(bytes.count < MemoryLayout.size(ofValue: addr.sun_path), "path too long: \(path)")
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: bytes + [0]) }
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    /// The local port of a bound socket (getsockname).
    package static func boundPort(_ fd: Int32) -> Int {
        portOf(fd, peer: false)
    }

    /// The remote port of a connected socket (getpeername), 0 if unknown.
    package static func peerPort(_ fd: Int32) -> Int {
        portOf(fd, peer: true)
    }

    /// The numeric address and port of a socket's peer (getpeername) or its own (getsockname).
    package static func address(_ fd: Int32, peer: Bool) -> (host: String, port: Int) {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
            }
        }
        guard result == 0 else { return ("?", 0) }
        var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let named = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getnameinfo($0, length, &text, socklen_t(text.count), nil, 0, NI_NUMERICHOST)
            }
        }
        guard named == 0 else { return ("?", 0) }
        return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), portOf(fd, peer: peer))
    }

    private static func portOf(_ fd: Int32, peer: Bool) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
            }
        }
        guard result == 0 else { return 0 }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            }
        case AF_INET6:
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
        default:
            return 0
        }
    }

    // MARK: I/O

    /// poll(2) for readability (or hang-up / error) for at most `timeout` seconds.
    package static func waitReadable(_ fd: Int32, timeout: TimeInterval) throws -> Bool {
        try waitFor(fd, events: Int16(POLLIN), timeout: timeout)
    }

    package static func waitWritable(_ fd: Int32, timeout: TimeInterval) throws -> Bool {
        try waitFor(fd, events: Int16(POLLOUT), timeout: timeout)
    }

    private static func waitFor(_ fd: Int32, events: Int16, timeout: TimeInterval) throws -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let remaining = max(0, deadline.timeIntervalSinceNow)
            let result = poll(&pfd, 1, Int32(remaining * 1000))
            if result > 0 { return true }
            if result == 0 { return false }
            if errno != EINTR { throw SystemCallError(call: "poll", code: errno) }
        }
    }

    /// Writes all of `data` (blocking socket). Throws on error.
    package static func writeAll(_ fd: Int32, _ data: Data) throws {
        var offset = 0
        while offset < data.count {
            let written = data.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + offset, data.count - offset, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw SystemCallError(call: "send", code: errno)
            }
            offset += written
        }
    }

    /// One recv(2) of at most `max` bytes, waiting at most `timeout` for data.
    /// Returns nil on timeout, empty Data at EOF. Throws on error.
    package static func readSome(_ fd: Int32, max: Int = 65536, timeout: TimeInterval) throws -> Data? {
        guard try waitReadable(fd, timeout: timeout) else { return nil }
        var buffer = [UInt8](repeating: 0, count: max)
        while true {
            let count = recv(fd, &buffer, max, 0)
            if count < 0 {
                if errno == EINTR { continue }
                throw SystemCallError(call: "recv", code: errno)
            }
            return Data(buffer[0..<count])
        }
    }

    /// Reads until `count` bytes arrived, EOF, or the deadline. Returns what was read.
    package static func readExactly(_ fd: Int32, count: Int, timeout: TimeInterval) throws -> Data {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var result = Data()
        while result.count < count {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0,
                let chunk = try readSome(fd, max: count - result.count, timeout: remaining),
                !chunk.isEmpty
            else { break }
            result.append(chunk)
        }
        return result
    }

    /// Reads until EOF or the deadline. `sawEOF` tells which one ended it.
    package static func readToEOF(_ fd: Int32, timeout: TimeInterval) throws -> (data: Data, sawEOF: Bool) {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var result = Data()
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0, let chunk = try readSome(fd, timeout: remaining) else {
                return (result, false)
            }
            if chunk.isEmpty { return (result, true) }
            result.append(chunk)
        }
    }

    /// SO_LINGER {1, 0}: the next close(2) sends RST instead of FIN.
    package static func setResetOnClose(_ fd: Int32) throws {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        guard setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size)) == 0 else {
            throw SystemCallError(call: "setsockopt(SO_LINGER)", code: errno)
        }
    }

    package static func intOption(_ fd: Int32, level: Int32, name: Int32) -> Int32? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, level, name, &value, &length) == 0 else { return nil }
        return value
    }

    // MARK: file descriptors

    /// Device and inode of an open fd, nil if the fd is not open.
    package static func identity(of fd: Int32) -> FileIdentity? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// True if `fd` is open and still refers to the same file as `identity`.
    package static func isOpen(_ fd: Int32, sameAs identity: FileIdentity) -> Bool {
        self.identity(of: fd) == identity
    }

    /// Number of entries in /proc/self/fd (includes the directory handle used to list it,
    /// which is the same on every call, so differences are exact).
    ///
    /// The first call makes libdispatch's main-queue port for CoreFoundation (an eventfd it opens
    /// once, the first time the main run loop runs in a common mode), so that a count taken before a
    /// test first runs the main run loop and one taken after agree. Without it such a test saw one fd
    /// more after, depending on whether setting up had already run the run loop (FaultTests'
    /// slow-resolver test, about 3 runs in 10 on a loaded machine).
    package static func openDescriptorCount() -> Int {
        _ = mainQueuePortMade
        return (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    }

    /// The process's open sockets (the descriptors `/proc/self/fd` shows as `socket:`): what a test
    /// that checks connections give back their descriptors counts, leaving out the reactors' epoll and
    /// event descriptors, which the registry's cache of idle reactors opens and closes on its own time.
    package static func openSocketCount() -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.filter {
            ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "").hasPrefix("socket:")
        }
        .count
    }

    private static let mainQueuePortMade: Bool = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_dispatch_get_main_queue_port_4CF") else { return false }
        typealias GetPort = @convention(c) () -> Int32
        _ = unsafeBitCast(symbol, to: GetPort.self)()
        return true
    }()

    /// Raises the soft RLIMIT_NOFILE to at least `wanted` (capped at the hard limit).
    /// Returns the soft limit now in force.
    @discardableResult
    package static func raiseOpenFileLimit(to wanted: UInt64) -> UInt64 {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if UInt64(limit.rlim_cur) < wanted {
            limit.rlim_cur = rlim_t(min(wanted, UInt64(limit.rlim_max)))
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return UInt64(limit.rlim_cur)
    }

    /// The current glibc getaddrinfo result code for `host` (0 on success).
    package static func getaddrinfoCode(host: String) -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = streamType
        var result: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host, "80", &hints, &result)
        if let result { freeaddrinfo(result) }
        return code
    }
}

/// A listener with backlog 0 that never accepts, whose single queue slot is already taken by
/// one connection. Every further connect attempt to it hangs in SYN-SENT (the kernel drops the
/// SYN), which is how the suite produces connect timeouts and unreachable addresses without
/// a firewall.
package final class BacklogFullListener {
    package let family: IPFamily
    package let port: Int
    private let listenFD: Int32
    private let fillerFD: Int32

    package init(family: IPFamily, port: Int = 0) throws {
        self.family = family
        listenFD = try RawSocket.listener(family: family, port: port, backlog: 0)
        self.port = RawSocket.boundPort(listenFD)
        do {
            fillerFD = try RawSocket.connectTo(family: family, port: self.port)
        } catch {
            close(listenFD)
            throw error
        }
    }

    deinit {
        close(fillerFD)
        close(listenFD)
    }
}

/// Lowers RLIMIT_NOFILE so that no new fd fits (the soft limit becomes the lowest free fd number),
/// for tests of running out of descriptors. Returns the function that restores the old limit.
package func tightenDescriptorLimit() -> () -> Void {
    var saved = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &saved) == 0 else { return {} }
    let lowest = open("/dev/null", O_RDONLY)
    guard lowest >= 0 else { return {} }
    close(lowest)
    var tight = saved
    tight.rlim_cur = rlim_t(lowest)
    _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &tight)
    return {
        var limit = saved
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
