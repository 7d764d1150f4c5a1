// Every raw syscall the harness makes goes through this file, so errno is read right after the call,
// EINTR is retried in one place, and EAGAIN becomes `.wouldBlock` instead of a magic number.
// Sends always use MSG_NOSIGNAL: a peer that went away gives EPIPE, never SIGPIPE.

import CSocketStreamsShims
import Glibc

/// An error that ends a measurement (or the whole run) with a human-readable message.
struct BenchError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }

    /// A failed syscall: names the C function and the errno.
    static func syscall(_ function: String, errno code: Int32) -> BenchError {
        BenchError("\(function) failed: \(String(cString: strerror(code))) (errno \(code))")
    }
}

/// The outcome of one non-blocking read or write.
enum IOResult: Equatable {
    /// This many bytes moved (always > 0).
    case processed(Int)
    /// The socket is not ready (EAGAIN); only for non-blocking descriptors.
    case wouldBlock
    /// The peer closed its side (read returned 0).
    case endOfFile
}

enum Posix {
    /// `read(2)`, retrying on EINTR. The corresponding C function is `read`.
    static func read(_ fd: Int32, into buffer: UnsafeMutableRawPointer, count: Int) throws -> IOResult {
        while true {
            let n = Glibc.read(fd, buffer, count)
            if n > 0 { return .processed(n) }
            if n == 0 { return .endOfFile }
            let code = cssh_errno()
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            throw BenchError.syscall("read", errno: code)
        }
    }

    /// `send(2)` with MSG_NOSIGNAL, retrying on EINTR. Never returns `.endOfFile`.
    static func send(_ fd: Int32, _ buffer: UnsafeRawPointer, count: Int) throws -> IOResult {
        while true {
            let n = Glibc.send(fd, buffer, count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .processed(n) }
            let code = cssh_errno()
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            throw BenchError.syscall("send", errno: code)
        }
    }

    /// Writes every byte to a blocking socket.
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            switch try send(fd, bytes.baseAddress! + offset, count: bytes.count - offset) {
            case .processed(let n): offset += n
            case .wouldBlock, .endOfFile: throw BenchError("send on a blocking socket would block")
            }
        }
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try sendAll(fd, $0) }
    }

    /// Fills `buffer` from a blocking socket; a peer close before that is a short read and throws.
    static func readExactly(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws {
        var offset = 0
        while offset < buffer.count {
            switch try read(fd, into: buffer.baseAddress! + offset, count: buffer.count - offset) {
            case .processed(let n): offset += n
            case .endOfFile: throw BenchError("short read: got \(offset) of \(buffer.count) bytes before end of stream")
            case .wouldBlock: throw BenchError("read on a blocking socket would block")
            }
        }
    }

    /// `close(2)`. Not retried on EINTR (Linux has already released the descriptor).
    static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    /// `shutdown(fd, SHUT_WR)`: sends FIN, keeps reading possible.
    static func shutdownWrite(_ fd: Int32) throws {
        if Glibc.shutdown(fd, Int32(SHUT_WR)) != 0 {
            let code = cssh_errno()
            if code != ENOTCONN { throw BenchError.syscall("shutdown", errno: code) }
        }
    }

    /// `setsockopt(SOL_SOCKET, SO_LINGER, {1, 0})`: the next `close` sends RST instead of FIN and drops
    /// anything unsent. Best effort: a socket the peer has already reset needs no help.
    static func setResetOnClose(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }

    /// The number of open file descriptors of this process: the entries of /proc/self/fd, less the
    /// one the listing itself uses. nil when /proc is not there.
    static func openDescriptorCount() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let isDot = withUnsafeBytes(of: entry.pointee.d_name) { $0[0] == UInt8(ascii: ".") }
            if !isDot { count += 1 }
        }
        return count - 1
    }

    /// The open file descriptors of this process by what they are: "socket", "eventpoll",
    /// "eventfd", "timerfd", "pipe", "file" (from the /proc/self/fd links; the listing's own
    /// descriptor is left out).
    static func openDescriptorKinds() -> [String: Int] {
        guard let directory = opendir("/proc/self/fd") else { return [:] }
        defer { closedir(directory) }
        let own = dirfd(directory)
        var kinds: [String: Int] = [:]
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let fd = Int32(name), fd != own else { continue }
            let n = readlink("/proc/self/fd/\(name)", &target, target.count - 1)
            guard n > 0 else { continue }
            let link = String(decoding: target[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let kind: String
            if link.hasPrefix("anon_inode:[") {
                kind = String(link.dropFirst("anon_inode:[".count).dropLast())  // eventpoll, eventfd, timerfd
            } else if let colon = link.firstIndex(of: ":"), link[colon...].hasPrefix(":[") {
                kind = String(link[..<colon])  // socket:[inode], pipe:[inode]
            } else {
                kind = link.hasPrefix("/") ? "file" : link
            }
            kinds[kind, default: 0] += 1
        }
        return kinds
    }

    static func setNonBlocking(_ fd: Int32) throws {
        let flags = fcntl(fd, F_GETFL)
        if flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 {
            throw BenchError.syscall("fcntl(O_NONBLOCK)", errno: cssh_errno())
        }
    }

    /// `setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)`.
    static func setNoDelay(_ fd: Int32) throws {
        var one: Int32 = 1
        if setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) != 0 {
            throw BenchError.syscall("setsockopt(TCP_NODELAY)", errno: cssh_errno())
        }
    }

    /// `socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC [| SOCK_NONBLOCK])`.
    static func makeTCPSocket(nonBlocking: Bool = false) throws -> Int32 {
        var type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        let fd = socket(AF_INET, type, 0)
        if fd < 0 { throw BenchError.syscall("socket", errno: cssh_errno()) }
        return fd
    }

    /// 127.0.0.1:`port`.
    static func loopbackAddress(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }

    /// A blocking TCP connection to 127.0.0.1:`port` with TCP_NODELAY set, from `source` (a numeric
    /// IPv4 address, bound with port 0 before the connect, as `LocalBinding` binds) when one is given.
    static func connectToLoopback(port: UInt16, from source: String? = nil) throws -> Int32 {
        let fd = try makeTCPSocket()
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            guard inet_pton(AF_INET, source, &local.sin_addr) == 1 else {
                close(fd)
                throw BenchError("not a numeric IPv4 address: \(source)")
            }
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if bound != 0 {
                let code = cssh_errno()
                close(fd)
                throw BenchError.syscall("bind(\(source))", errno: code)
            }
        }
        var address = loopbackAddress(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                // EINTR on a blocking connect leaves the connection in progress; the caller would
                // have to poll for it. A benchmark client never installs signal handlers, so we
                // treat it as an error like any other.
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 {
            let code = cssh_errno()
            close(fd)
            throw BenchError.syscall("connect(127.0.0.1:\(port))", errno: code)
        }
        do {
            try setNoDelay(fd)
        } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// A non-blocking listening socket on 127.0.0.1 with an ephemeral port.
    static func listenOnLoopback(backlog: Int32) throws -> (fd: Int32, port: UInt16) {
        let fd = try makeTCPSocket(nonBlocking: true)
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = loopbackAddress(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if bound != 0 {
            let code = cssh_errno()
            close(fd)
            throw BenchError.syscall("bind", errno: code)
        }
        if listen(fd, backlog) != 0 {
            let code = cssh_errno()
            close(fd)
            throw BenchError.syscall("listen", errno: code)
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        if named != 0 {
            let code = cssh_errno()
            close(fd)
            throw BenchError.syscall("getsockname", errno: code)
        }
        return (fd, UInt16(bigEndian: actual.sin_port))
    }

    /// A TCP socket bound to an ephemeral port of 127.0.0.1 (or ::1) that never listens: while it is
    /// open, nothing else can take the port, and every connect to it is refused (ECONNREFUSED).
    static func reserveUnlistenedPort(ipv6: Bool) throws -> (fd: Int32, port: UInt16) {
        let family = ipv6 ? AF_INET6 : AF_INET
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw BenchError.syscall("socket", errno: cssh_errno()) }
        var storage = sockaddr_storage()
        let length: socklen_t
        if ipv6 {
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutableBytes(of: &storage) { raw in
                var address = sockaddr_in6()
                address.sin6_family = sa_family_t(AF_INET6)
                _ = inet_pton(AF_INET6, "::1", &address.sin6_addr)
                raw.storeBytes(of: address, as: sockaddr_in6.self)
            }
        } else {
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: loopbackAddress(port: 0), as: sockaddr_in.self) }
        }
        let bound = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        var actualLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named =
            bound == 0
            ? withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &actualLength) }
            } : -1
        if named != 0 {
            let code = cssh_errno()
            close(fd)
            throw BenchError.syscall(bound == 0 ? "getsockname" : "bind(\(ipv6 ? "::1" : "127.0.0.1"))", errno: code)
        }
        // sin_port and sin6_port are at the same offset.
        let port = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in.self).sin_port }
        return (fd, UInt16(bigEndian: port))
    }

    /// `accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)`; nil when no connection is pending.
    static func accept(_ listenFD: Int32) throws -> Int32? {
        while true {
            let fd = cssh_accept4(listenFD)
            if fd >= 0 { return fd }
            let code = cssh_errno()
            switch code {
            case EINTR, ECONNABORTED: continue
            case EAGAIN, EWOULDBLOCK: return nil
            default: throw BenchError.syscall("accept4", errno: code)
            }
        }
    }

    /// Raises the soft RLIMIT_NOFILE to the hard limit and returns the new soft limit.
    @discardableResult
    static func raiseFileDescriptorLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            _ = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        return limit.rlim_cur > rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// Pins the calling thread (and every thread it creates afterwards) to `cpu`.
    static func pinToCPU(_ cpu: Int) throws {
        if cssh_pin_to_cpu(Int32(cpu)) != 0 {
            throw BenchError.syscall("sched_setaffinity(cpu \(cpu))", errno: cssh_errno())
        }
    }

    /// CLOCK_MONOTONIC in nanoseconds.
    static func monotonicNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// Writes a whole string to fd 2 (Swift 6 forbids touching the C `stderr` global).
    static func printError(_ message: String) {
        var text = message
        if !text.hasSuffix("\n") { text += "\n" }
        text.utf8CString.withUnsafeBufferPointer { buffer in
            var offset = 0
            let count = buffer.count - 1  // without the NUL
            while offset < count {
                let n = Glibc.write(2, buffer.baseAddress! + offset, count - offset)
                if n < 0 && cssh_errno() == EINTR { continue }
                if n <= 0 { return }
                offset += n
            }
        }
    }
}

/// Elapsed time measured with CLOCK_MONOTONIC.
struct Stopwatch {
    private let start = Posix.monotonicNanoseconds()

    var elapsedSeconds: Double {
        Double(Posix.monotonicNanoseconds() - start) / 1e9
    }

    static func seconds(from start: UInt64, to end: UInt64) -> Double {
        Double(end &- start) / 1e9
    }
}
