// A DNS server of the tests' own (UDP, loopback), answering each name as its table says: NXDOMAIN,
// SERVFAIL, nothing at all, A records only, AAAA records only, or both. The resolver tests point the
// system resolver at it through a resolv.conf bind-mounted in a mount namespace of their own.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport

/// A failed system call of the resolver's.
struct ResolverSetupError: Error, CustomStringConvertible {
    let call: String
    let code: Int32
    var description: String { "\(call) failed: errno \(code)" }
}

final class TestResolver: @unchecked Sendable {
    // @unchecked: `fd`, `answers` and `address` are immutable; `stopping` and `queries` only under
    // `condition`.

    /// How a name is answered.
    enum Answer: Sendable {
        case nxdomain
        case servfail
        /// No reply at all: the resolver times out.
        case silent
        /// These addresses (IPv4 and IPv6 literals); a query for a type with none gets an empty
        /// NOERROR answer.
        case addresses([String])
        /// These addresses, the AAAA answer sent `aaaaDelay` seconds after the A answer (held until
        /// the A query has been answered, however the two queries arrive): a slow AAAA (RFC 8305 §3).
        case slowAAAA([String], aaaaDelay: TimeInterval)
    }

    /// A reply held back: where to send it, and when (FaultRelay.now's clock).
    private struct Held {
        let reply: [UInt8]
        let peer: sockaddr_storage
        let length: socklen_t
        let name: String
        /// nil: until the name's A query has been answered, then `aaaaDelay` after that.
        var due: Double?
        let delay: TimeInterval
    }

    let address: String
    private let fd: Int32
    private let answers: [String: Answer]
    private let condition = NSCondition()
    private var stopping = false
    private var running = true
    private var queries: [String] = []
    /// Held replies, and the A answers (when they went out, by name) that no AAAA query has been
    /// paired with yet, touched by the serving thread only. A lookup's A and AAAA queries arrive in
    /// either order (two getaddrinfo calls), so each AAAA is paired with one A answer, in order.
    private var held: [Held] = []
    private var unpairedA: [String: [Double]] = [:]

    /// Listens on `address`:53 (UDP) and answers from `answers` (lowercased names without the final
    /// dot); other names get NXDOMAIN.
    init(address: String = "127.0.0.53", answers: [String: Answer]) throws {
        self.address = address
        self.answers = answers
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw ResolverSetupError(call: "socket", code: errno) }
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = in_port_t(53).bigEndian
        inet_pton(AF_INET, address, &sin.sin_addr)
        let bound = withUnsafePointer(to: &sin) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            close(fd)
            throw ResolverSetupError(call: "bind", code: code)
        }
        let thread = Thread { [self] in serve() }
        thread.name = "TestResolver"
        thread.start()
    }

    deinit { stop() }

    /// The names asked for so far, with their types ("v4only.test A").
    var asked: [String] {
        condition.lock()
        defer { condition.unlock() }
        return queries
    }

    func stop() {
        condition.lock()
        stopping = true
        while running { _ = condition.wait(until: Date(timeIntervalSinceNow: 0.1)) }
        condition.unlock()
        close(fd)
    }

    private var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    private func serve() {
        var buffer = [UInt8](repeating: 0, count: 1500)
        while !isStopping {
            sendDueReplies()
            // Until a query arrives, or the next held reply is due (at most 50 ms, to see stop()).
            let now = FaultRelay.now
            let next = held.compactMap(\.due).min().map { max(0, $0 - now) } ?? 0.05
            guard (try? RawSocket.waitReadable(fd, timeout: min(0.05, next))) == true else { continue }
            var peer = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let count = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, &buffer, buffer.count, 0, $0, &length) }
            }
            guard count > 0, let (reply, name, type) = reply(to: Array(buffer[0..<count])) else { continue }
            print()
            guard case .slowAAAA(_, let delay)? = answers[name], type == 1 || type == 28 else {
                send(reply, to: peer, length)
                continue
            }
            if type == 28 {
                let answered = unpairedA[name]?.isEmpty == false ? unpairedA[name]?.removeFirst() : nil
                held.append(Held(reply: reply, peer: peer, length: length, name: name, due: answered.map { $0 + delay }, delay: delay))
                continue
            }
            send(reply, to: peer, length)
            let sent = FaultRelay.now
            if let index = held.firstIndex(where: { $0.name == name && $0.due == nil }) {
                held[index].due = sent + held[index].delay
            } else {
                unpairedA[name, default: []].append(sent)
            }
        }
        condition.lock()
        running = false
        condition.broadcast()
        condition.unlock()
    }

    private func sendDueReplies() {
        let now = FaultRelay.now
        for reply in held where reply.due.map({ $0 <= now }) ?? false {
            send(reply.reply, to: reply.peer, reply.length)
        }
        held.removeAll { $0.due.map { $0 <= now } ?? false }
    }

    private func send(_ reply: [UInt8], to peer: sockaddr_storage, _ length: socklen_t) {
        var peer = peer
        _ = withUnsafePointer(to: &peer) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, reply, reply.count, 0, $0, length) }
        }
    }

    /// The reply to one query, with the question's name and type (nil: none, or not a query this
    /// server reads).
    private func reply(to query: [UInt8]) -> (reply: [UInt8], name: String, type: Int)? {
        guard query.count >= 12, query[2] & 0x80 == 0, query[4] == 0, query[5] == 1 else { return nil }
        // The question: labels, then type and class.
        var index = 12
        var labels: [String] = []
        while index < query.count, query[index] != 0 {
            let length = Int(query[index])
            guard length < 64, index + 1 + length <= query.count else { return nil }
            labels.append(String(decoding: query[index + 1..<index + 1 + length], as: UTF8.self))
            index += 1 + length
        }
        guard index + 5 <= query.count else { return nil }
        let questionEnd = index + 5
        let type = Int(query[index + 1]) << 8 | Int(query[index + 2])
        let name = labels.joined(separator: ".").lowercased()
        condition.lock()
        queries.append("\(name) \(type == 1 ? "A" : type == 28 ? "AAAA" : "\(type)")")
        condition.unlock()

        var rcode: UInt8 = 0
        var records: [[UInt8]] = []
        switch answers[name] ?? .nxdomain {
        case .silent: return nil
        case .nxdomain: rcode = 3
        case .servfail: rcode = 2
        case .addresses(let addresses), .slowAAAA(let addresses, _):
            for address in addresses {
                if type == 1, let bytes = Self.bytes(address, family: AF_INET, count: 4) {
                    records.append(Self.record(type: 1, data: bytes))
                } else if type == 28, let bytes = Self.bytes(address, family: AF_INET6, count: 16) {
                    records.append(Self.record(type: 28, data: bytes))
                }
            }
        }
        var reply = Array(query[0..<2])
        reply += [0x80 | (query[2] & 0x01), 0x80 | rcode]  // QR, RD copied; RA, RCODE
        reply += [0, 1, UInt8(records.count >> 8), UInt8(records.count & 0xff), 0, 0, 0, 0]
        reply += query[12..<questionEnd]
        for record in records { reply += record }
        return (reply, name, type)
    }

    private static func bytes(_ address: String, family: Int32, count: Int) -> [UInt8]? {
        var storage = [UInt8](repeating: 0, count: 16)
        guard inet_pton(family, address, &storage) == 1 else { return nil }
        return Array(storage[0..<count])
    }

    /// An answer record for the question's name (a pointer to offset 12), class IN, TTL 60.
    private static func record(type: UInt16, data: [UInt8]) -> [UInt8] {
        [0xc0, 0x0c, UInt8(type >> 8), UInt8(type & 0xff), 0, 1, 0, 0, 0, 60, UInt8(data.count >> 8), UInt8(data.count & 0xff)] + data
    }
}
