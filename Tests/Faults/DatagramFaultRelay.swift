// A UDP relay on loopback for the datagram column of the fault matrix: the client sends to the relay,
// the relay passes each datagram on to a real peer (an echo) unchanged, and does its fault to what
// comes back: drops, duplicates, reorders or truncates datagrams, each fault a value. Plain sockets
// and one thread (nothing of the library under test); readiness: the socket is bound when `init`
// returns.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport

final class DatagramFaultRelay: @unchecked Sendable {
    // @unchecked: `port`, `fault`, `clientFD` and `upstreamFD` are immutable; `stopping`, `running` and
    // `counters` only under `condition`; the rest only on the relay's thread.

    /// What the relay does to the datagrams coming back from the peer (the n-th from 0).
    enum Fault: Sendable, Equatable, CustomStringConvertible {
        case none
        /// Drops every datagram whose index is `every` - 1 modulo `every`.
        case drop(every: Int)
        /// Sends every datagram twice.
        case duplicate
        /// Swaps every two consecutive datagrams (the even one held until the odd one has gone).
        case reorder
        /// Sends only the first `bytes` bytes of each datagram.
        case truncate(bytes: Int)

        var description: String {
            switch self {
            case .none: return "none"
            case .drop(let every): return "drop(every \(every))"
            case .duplicate: return "duplicate"
            case .reorder: return "reorder"
            case .truncate(let bytes): return "truncate(to \(bytes) B)"
            }
        }

        /// What a client receives when the peer sends back `sent`, in order.
        func outcome(of sent: [Data]) -> [Data] {
            switch self {
            case .none: return sent
            case .drop(let every): return sent.enumerated().filter { $0.offset % every != every - 1 }.map(\.element)
            case .duplicate: return sent.flatMap { [$0, $0] }
            case .reorder:
                var swapped: [Data] = []
                var index = 0
                while index + 1 < sent.count {  // the last odd one stays held
                    swapped.append(sent[index + 1])
                    swapped.append(sent[index])
                    index += 2
                }
                return swapped
            case .truncate(let bytes): return sent.map { $0.prefix(bytes) }
            }
        }
    }

    let port: Int
    let fault: Fault
    private let clientFD: Int32
    private let upstreamFD: Int32
    private let condition = NSCondition()
    private var stopping = false
    private var running = true
    private var sentDownstream = 0
    private var client = sockaddr_storage()
    private var clientLength = socklen_t(0)
    private var index = 0
    private var held: [UInt8]?

    /// Binds 127.0.0.1 (ephemeral port) and relays to 127.0.0.1:`upstreamPort` (a connected socket).
    init(upstreamPort: Int, fault: Fault) throws {
        self.fault = fault
        let client = try Self.udpSocket(bindPort: 0)
        let upstream = try Self.udpSocket(bindPort: 0)
        var peer = Self.loopback(port: upstreamPort)
        _ = withUnsafePointer(to: &peer) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(client, $0, &length) }
        }
        clientFD = client
        upstreamFD = upstream
        port = Int(UInt16(bigEndian: bound.sin_port))
        let thread = Thread { [self] in serve() }
        thread.name = "DatagramFaultRelay"
        thread.start()
    }

    deinit { stop() }

    /// Datagrams sent back to the client so far.
    var sent: Int {
        condition.lock()
        defer { condition.unlock() }
        return sentDownstream
    }

    /// Waits until `count` datagrams have been sent back to the client, at most `timeout` seconds.
    func waitUntilSent(_ count: Int, timeout: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while sentDownstream < count {
            if !condition.wait(until: deadline) { return sentDownstream >= count }
        }
        return true
    }

    func stop() {
        condition.lock()
        let first = !stopping
        stopping = true
        while running { _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1)) }
        condition.unlock()
        if first {
            Glibc.close(clientFD)
            Glibc.close(upstreamFD)
        }
    }

    private var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port)).bigEndian
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        return address
    }

    private static func udpSocket(bindPort: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw ResolverSetupError(call: "socket", code: errno) }
        var address = loopback(port: bindPort)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw ResolverSetupError(call: "bind", code: code)
        }
        return fd
    }

    private func serve() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var descriptors = [
            pollfd(fd: clientFD, events: Int16(POLLIN), revents: 0), pollfd(fd: upstreamFD, events: Int16(POLLIN), revents: 0),
        ]
        while !isStopping {
            guard poll(&descriptors, 2, 50) > 0 else { continue }
            if descriptors[0].revents != 0 {
                // From the client: remember its address, pass the datagram on unchanged.
                clientLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
                let count = withUnsafeMutablePointer(to: &client) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(clientFD, &buffer, buffer.count, 0, $0, &clientLength) }
                }
                if count >= 0 { _ = send(upstreamFD, buffer, count, 0) }
            }
            if descriptors[1].revents != 0 {
                let count = recv(upstreamFD, &buffer, buffer.count, 0)
                if count >= 0 { backToClient(Array(buffer[0..<count])) }
            }
        }
        condition.lock()
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// The fault, on one datagram from the peer.
    private func backToClient(_ datagram: [UInt8]) {
        defer { index += 1 }
        switch fault {
        case .none: toClient(datagram)
        case .drop(let every): if index % every != every - 1 { toClient(datagram) }
        case .duplicate:
            toClient(datagram)
            toClient(datagram)
        case .reorder:
            if let first = held {
                toClient(datagram)
                toClient(first)
                held = nil
            } else {
                held = datagram
            }
        case .truncate(let bytes): toClient(Array(datagram.prefix(bytes)))
        }
    }

    private func toClient(_ datagram: [UInt8]) {
        _ = withUnsafePointer(to: &client) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(clientFD, datagram, datagram.count, 0, $0, clientLength) }
        }
        condition.lock()
        sentDownstream += 1
        condition.broadcast()
        condition.unlock()
    }
}
