// The UDP system calls of the benchmark's own code (the server's peers and the raw baselines), beside
// Posix.swift's TCP ones: errno read right after the call, EINTR retried here, EAGAIN (and a receive
// timeout) a nil instead of an error. The batch calls are the engine's C shim (`cssh_recv_batch`,
// `cssh_send_batch`: recvmmsg and sendmmsg of up to 64 datagrams, MSG_DONTWAIT).

import CSocketStreamsShims
import Glibc

extension Posix {
    /// A UDP socket on 127.0.0.1 with an ephemeral port: `socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC
    /// [| SOCK_NONBLOCK])` and `bind`.
    static func boundUDPSocket(nonBlocking: Bool) throws -> (fd: Int32, port: UInt16) {
        var type = Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        let fd = socket(AF_INET, type, 0)
        if fd < 0 { throw BenchError.syscall("socket(SOCK_DGRAM)", errno: cssh_errno()) }
        var address = loopbackAddress(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named =
            bound == 0
            ? withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            } : -1
        if named != 0 {
            let code = cssh_errno()
            close(fd)
            throw BenchError.syscall(bound == 0 ? "getsockname" : "bind(127.0.0.1, UDP)", errno: code)
        }
        return (fd, UInt16(bigEndian: address.sin_port))
    }

    /// `SO_RCVTIMEO`: a blocking receive fails with EAGAIN after `seconds` without a datagram (the
    /// baselines' stall check).
    static func setReceiveTimeout(_ fd: Int32, seconds: Int) throws {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        if setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) != 0 {
            throw BenchError.syscall("setsockopt(SO_RCVTIMEO)", errno: cssh_errno())
        }
    }

    /// Makes the receive buffer `bytes` large: `SO_RCVBUFFORCE` (root, beyond `net.core.rmem_max`), else
    /// `SO_RCVBUF` (capped at rmem_max). Returns the size the kernel reports (twice what was asked, its
    /// bookkeeping included).
    @discardableResult
    static func enlargeReceiveBuffer(_ fd: Int32, bytes: Int32) -> Int32 {
        var size = bytes
        let length = socklen_t(MemoryLayout<Int32>.size)
        if setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, length) != 0 {
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, length)
        }
        var actual: Int32 = 0
        var actualLength = length
        _ = getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &actual, &actualLength)
        return actual
    }

    /// Runs `body` with 127.0.0.1:`port` as a `sockaddr` and its length.
    static func withLoopbackSockaddr<R>(port: UInt16, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) rethrows -> R {
        var address = loopbackAddress(port: port)
        return try withUnsafePointer(to: &address) {
            try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Writes 127.0.0.1:`port` into a batch slot's destination.
    static func setLoopbackDestination(_ slot: UnsafeMutablePointer<cssh_datagram>, port: UInt16) {
        withUnsafeMutableBytes(of: &slot.pointee.address) { $0.storeBytes(of: loopbackAddress(port: port), as: sockaddr_in.self) }
        slot.pointee.address_length = socklen_t(MemoryLayout<sockaddr_in>.size)
    }

    /// `sendto(2)` of one datagram; false when the socket would block (EAGAIN, or ENOBUFS when the
    /// device queue is full: try again later, as for EAGAIN).
    static func sendTo(_ fd: Int32, _ bytes: UnsafeRawPointer, count: Int, to address: UnsafePointer<sockaddr>, length: socklen_t)
        throws -> Bool
    {
        while true {
            let n = Glibc.sendto(fd, bytes, count, Int32(MSG_NOSIGNAL), address, length)
            if n == count { return true }
            if n >= 0 { throw BenchError("sendto sent \(n) of a \(count)-byte datagram") }
            let code = cssh_errno()
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK || code == ENOBUFS { return false }
            throw BenchError.syscall("sendto", errno: code)
        }
    }

    /// `recvfrom(2)` of one datagram into `buffer` (the sender's address into `address`, its length into
    /// `addressLength`); nil when none came (EAGAIN: non-blocking, or the receive timeout passed).
    static func receiveFrom(
        _ fd: Int32, into buffer: UnsafeMutableRawPointer, capacity: Int, address: UnsafeMutablePointer<sockaddr_storage>,
        addressLength: UnsafeMutablePointer<socklen_t>? = nil
    ) throws -> Int? {
        while true {
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let n = address.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.recvfrom(fd, buffer, capacity, 0, $0, &length) }
            addressLength?.pointee = length
            if n >= 0 { return n }
            let code = cssh_errno()
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return nil }
            throw BenchError.syscall("recvfrom", errno: code)
        }
    }

    /// `cssh_send_batch` (sendmmsg): how many of `count` slots the kernel took, at least one; nil when
    /// it would block (EAGAIN, ENOBUFS).
    static func sendBatch(_ fd: Int32, _ slots: UnsafePointer<cssh_datagram>, count: Int) throws -> Int? {
        while true {
            let n = cssh_send_batch(fd, slots, UInt32(count))
            if n > 0 { return Int(n) }
            let code = cssh_errno()
            if n == 0 || code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK || code == ENOBUFS { return nil }
            throw BenchError.syscall("sendmmsg", errno: code)
        }
    }

    /// Sends every one of `count` slots, waiting for room (`poll`) whenever the kernel is full.
    static func sendAllBatch(_ fd: Int32, _ slots: UnsafePointer<cssh_datagram>, count: Int) throws {
        var sent = 0
        while sent < count {
            if let n = try sendBatch(fd, slots + sent, count: count - sent) {
                sent += n
            } else if !(try waitFor(fd, events: Int16(POLLOUT), milliseconds: 10_000)) {
                throw BenchError("sendmmsg: no room in the socket for 10 s")
            }
        }
    }

    /// `cssh_recv_batch` (recvmmsg, non-blocking) into up to `count` slots; nil when none is there.
    static func receiveBatch(_ fd: Int32, _ slots: UnsafeMutablePointer<cssh_datagram>, count: Int) throws -> Int? {
        while true {
            let n = cssh_recv_batch(fd, slots, UInt32(count))
            if n >= 0 { return Int(n) }
            let code = cssh_errno()
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return nil }
            throw BenchError.syscall("recvmmsg", errno: code)
        }
    }

    /// `poll(2)` on one fd; false when `milliseconds` passed first.
    static func waitFor(_ fd: Int32, events: Int16, milliseconds: Int32) throws -> Bool {
        var entry = pollfd(fd: fd, events: events, revents: 0)
        while true {
            let n = poll(&entry, 1, milliseconds)
            if n > 0 { return true }
            if n == 0 { return false }
            let code = cssh_errno()
            if code == EINTR { continue }
            throw BenchError.syscall("poll", errno: code)
        }
    }
}

/// `count` batch slots, each with `capacity` bytes of its own (16-byte aligned), in one allocation
/// that the benchmark's UDP code reuses for every batch.
final class DatagramSlots {
    let count: Int
    let capacity: Int
    let slots: UnsafeMutablePointer<cssh_datagram>
    private let storage: UnsafeMutableRawPointer

    init(count: Int = Int(CSSH_DATAGRAM_BATCH), capacity: Int) {
        self.count = count
        self.capacity = capacity
        let stride = (capacity + 15) & ~15
        slots = .allocate(capacity: count)
        slots.initialize(repeating: cssh_datagram(), count: count)
        storage = .allocate(byteCount: max(1, stride * count), alignment: 16)
        for index in 0..<count {
            slots[index].bytes = storage + index * stride
            slots[index].capacity = UInt(capacity)
        }
    }

    deinit {
        slots.deallocate()
        storage.deallocate()
    }

    /// Slot `index`'s bytes.
    func bytes(_ index: Int) -> UnsafeMutableRawPointer { slots[index].bytes! }

    /// Every slot `size` bytes of the pattern, sent to 127.0.0.1:`port` (a sender's slots).
    func prepareToSend(size: Int, port: UInt16) {
        for index in 0..<count {
            DatagramPayload.fill(UnsafeMutableRawBufferPointer(start: bytes(index), count: size))
            slots[index].length = UInt(size)
            Posix.setLoopbackDestination(slots + index, port: port)
        }
    }
}

extension Posix {
    /// The kernel's count of UDP datagrams dropped because a socket's receive buffer was full, on the
    /// whole machine (`RcvbufErrors` of the `Udp:` lines in /proc/net/snmp); nil where it is not reported.
    static func udpReceiveBufferErrors() -> Int? {
        guard let file = fopen("/proc/net/snmp", "r") else { return nil }
        defer { fclose(file) }
        var lines: [[Substring]] = []
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let text = String(cString: line)
            if text.hasPrefix("Udp:") { lines.append(text.split(whereSeparator: { $0 == " " || $0 == "\n" })) }
        }
        // The first `Udp:` line names the fields, the second holds their values.
        guard lines.count >= 2, let column = lines[0].firstIndex(of: "RcvbufErrors"), column < lines[1].count else { return nil }
        return Int(lines[1][column])
    }
}
