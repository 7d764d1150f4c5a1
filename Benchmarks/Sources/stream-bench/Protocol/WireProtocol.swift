// The benchmark's wire protocol. After connecting, the client sends one header: an opcode byte
// followed by big-endian fields. The server always closes first (shutdown(SHUT_WR) once its part
// is done), so TIME_WAIT piles up on the server side and not on the client's ephemeral ports.
//
//   'D' u64 n            download: server sends n bytes in 64 KiB writes, then FIN
//   'U' u64 n            upload: client sends n bytes; server answers u64 received, then FIN
//   'E' u64 n            echo: server echoes exactly n bytes, then FIN (ping-pong)
//   'C'                  connect: server answers one byte 'c', then FIN
//   'G' u64 id u32 k u64 n   group echo ("many"): server answers '+' at once; when k connections
//                        of group id have arrived it sends 'G' to each, then echoes n bytes, then FIN
//   'I' u64 id           idle: server answers '+' and holds the connection
//   'R' u64 id           release: server sends FIN on every idle connection of group id, answers '+'
//   'H' u64 id           held echo (scale): server echoes whatever arrives, for as long as the client likes,
//                        until an 'R id' sends FIN on it (after anything still being echoed)
//   'X' u64 n            reset: server sends n bytes, waits for one byte from the client (so everything
//                        sent has been read), then closes with SO_LINGER {1, 0}: a RST, not a FIN (soak)
//
// The UDP workloads use a connection to the plain port as their control channel; the datagrams go
// between a UDP socket of the client and one the server opens for the session, both on 127.0.0.1.
// Every datagram starts with its u64 sequence number (big-endian); the rest is a fixed pattern.
//
//   'S' u64 n u32 size   sink: server answers the u16 port of a new UDP socket that counts the
//                        datagrams arriving there and checks their sequence numbers; the client's 'F'
//                        (once it has sent its n) makes it read what is left and answer
//                        u64 received, u64 lost, u64 out of order, u64 of the wrong size; then FIN
//   'P' u32 size         echo: server answers the u16 port of a new UDP socket that sends every datagram
//                        back to its sender; 'F' ends it with the same four counts (received = echoed)
//   'B' u64 n u32 size u16 port   blast: server sends n datagrams of size bytes, sequence 0 … n-1, as
//                        fast as it can (sendmmsg, 64 a call) to 127.0.0.1:port, then the end marker
//                        (sequence 2^64-1) once a millisecond until the client's 'F'; answers u64 n and
//                        u64 the nanoseconds its n took to send (the offered rate), then FIN
//   'N' u16 k u64 n u32 size u16 port   fan-in: server opens k UDP sockets (the peers) and answers their
//                        k u16 ports; the client's 'G' starts it: every peer sends n datagrams of size
//                        bytes, sequence 0 … n-1 of its own, to 127.0.0.1:port, one peer after another
//                        (a datagram each per round), then every peer its end marker, again and again,
//                        until the client's 'F'; answers u64 k·n, u64 the nanoseconds the k·n took to
//                        send, u64 the end markers sent, then FIN

import Foundation
import Glibc

/// One request header.
enum Request: Equatable {
    case download(bytes: UInt64)
    case upload(bytes: UInt64)
    case echo(bytes: UInt64)
    case connect
    case groupEcho(group: UInt64, size: UInt32, bytes: UInt64)
    case idle(group: UInt64)
    case release(group: UInt64)
    case heldEcho(group: UInt64)
    case reset(bytes: UInt64)
    case sink(count: UInt64, size: UInt32)
    case datagramEcho(size: UInt32)
    case blast(count: UInt64, size: UInt32, port: UInt16)
    case fanIn(peers: UInt16, count: UInt64, size: UInt32, port: UInt16)

    static let downloadOpcode = UInt8(ascii: "D")
    static let uploadOpcode = UInt8(ascii: "U")
    static let echoOpcode = UInt8(ascii: "E")
    static let connectOpcode = UInt8(ascii: "C")
    static let groupEchoOpcode = UInt8(ascii: "G")
    static let idleOpcode = UInt8(ascii: "I")
    static let releaseOpcode = UInt8(ascii: "R")
    static let resetOpcode = UInt8(ascii: "X")
    static let heldEchoOpcode = UInt8(ascii: "H")
    static let sinkOpcode = UInt8(ascii: "S")
    static let datagramEchoOpcode = UInt8(ascii: "P")
    static let blastOpcode = UInt8(ascii: "B")
    static let fanInOpcode = UInt8(ascii: "N")
    /// The client's byte that starts a fan-in once it knows the peers' ports.
    static let fanInStart = UInt8(ascii: "G")
    /// The length of the server's answer to a fan-in's 'F': three u64 counts.
    static let fanInReportLength = 24
    /// The client's byte that ends a UDP session ('S', 'P', 'B', 'N').
    static let datagramFinish = UInt8(ascii: "F")
    /// The length of the server's answer to 'F' in a sink or echo session: four u64 counts.
    static let datagramReportLength = 32

    /// The server's one-byte answer to `.connect`.
    static let connectReply = UInt8(ascii: "c")
    /// The server's one-byte acknowledgement of `.groupEcho`, `.idle` and `.release`.
    static let ackReply = UInt8(ascii: "+")
    /// Sent to every member of a group once the group is complete.
    static let goReply = UInt8(ascii: "G")

    /// The header as sent on the wire.
    var encoded: [UInt8] {
        var bytes: [UInt8] = []
        switch self {
        case .download(let n):
            bytes.append(Self.downloadOpcode)
            bytes.appendBigEndian(n)
        case .upload(let n):
            bytes.append(Self.uploadOpcode)
            bytes.appendBigEndian(n)
        case .echo(let n):
            bytes.append(Self.echoOpcode)
            bytes.appendBigEndian(n)
        case .connect: bytes.append(Self.connectOpcode)
        case .groupEcho(let group, let size, let n):
            bytes.append(Self.groupEchoOpcode)
            bytes.appendBigEndian(group)
            bytes.appendBigEndian(size)
            bytes.appendBigEndian(n)
        case .idle(let group):
            bytes.append(Self.idleOpcode)
            bytes.appendBigEndian(group)
        case .release(let group):
            bytes.append(Self.releaseOpcode)
            bytes.appendBigEndian(group)
        case .heldEcho(let group):
            bytes.append(Self.heldEchoOpcode)
            bytes.appendBigEndian(group)
        case .reset(let n):
            bytes.append(Self.resetOpcode)
            bytes.appendBigEndian(n)
        case .sink(let n, let size):
            bytes.append(Self.sinkOpcode)
            bytes.appendBigEndian(n)
            bytes.appendBigEndian(size)
        case .datagramEcho(let size):
            bytes.append(Self.datagramEchoOpcode)
            bytes.appendBigEndian(size)
        case .blast(let n, let size, let port):
            bytes.append(Self.blastOpcode)
            bytes.appendBigEndian(n)
            bytes.appendBigEndian(size)
            bytes.appendBigEndian(port)
        case .fanIn(let peers, let n, let size, let port):
            bytes.append(Self.fanInOpcode)
            bytes.appendBigEndian(peers)
            bytes.appendBigEndian(n)
            bytes.appendBigEndian(size)
            bytes.appendBigEndian(port)
        }
        return bytes
    }

    /// The full header length for an opcode, or nil for an unknown opcode.
    static func headerLength(opcode: UInt8) -> Int? {
        switch opcode {
        case downloadOpcode, uploadOpcode, echoOpcode, idleOpcode, releaseOpcode, resetOpcode, heldEchoOpcode: return 9
        case connectOpcode: return 1
        case groupEchoOpcode: return 21
        case sinkOpcode: return 13
        case datagramEchoOpcode: return 5
        case blastOpcode: return 15
        case fanInOpcode: return 17
        default: return nil
        }
    }

    /// Decodes a complete header (exactly `headerLength(opcode:)` bytes).
    static func decode(_ header: ArraySlice<UInt8>) -> Request? {
        guard let opcode = header.first, headerLength(opcode: opcode) == header.count else { return nil }
        var reader = BigEndianReader(header.dropFirst())
        switch opcode {
        case downloadOpcode: return .download(bytes: reader.u64())
        case uploadOpcode: return .upload(bytes: reader.u64())
        case echoOpcode: return .echo(bytes: reader.u64())
        case connectOpcode: return .connect
        case groupEchoOpcode:
            let group = reader.u64()
            let size = reader.u32()
            return .groupEcho(group: group, size: size, bytes: reader.u64())
        case idleOpcode: return .idle(group: reader.u64())
        case releaseOpcode: return .release(group: reader.u64())
        case resetOpcode: return .reset(bytes: reader.u64())
        case heldEchoOpcode: return .heldEcho(group: reader.u64())
        case sinkOpcode:
            let count = reader.u64()
            return .sink(count: count, size: reader.u32())
        case datagramEchoOpcode: return .datagramEcho(size: reader.u32())
        case blastOpcode:
            let count = reader.u64()
            let size = reader.u32()
            return .blast(count: count, size: size, port: reader.u16())
        case fanInOpcode:
            let peers = reader.u16()
            let count = reader.u64()
            let size = reader.u32()
            return .fanIn(peers: peers, count: count, size: size, port: reader.u16())
        default: return nil
        }
    }
}

/// Payload conventions shared by every client, so the server and the checks agree.
enum Payload {
    /// Size of one read or write buffer for bulk transfers.
    static let chunkSize = 64 * 1024
    /// Size of one ping-pong / many message.
    static let messageSize = 64

    /// The message for round trip `index`: distinct per round trip so a stale or misordered echo is caught.
    static func message(roundTrip index: Int, size: Int = messageSize) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: index &* 31 &+ $0) }
    }

    /// Whether an echo is the message sent, compared with `memcmp`, as the C client would: `Array`'s `==`
    /// compares element by element (about 460 instructions for 64 bytes), which every client paid once a
    /// round trip, raw client included, and callgrind then counted as the round trip's cost.
    /// Whether an echo received as `Data` (Network.framework's clients) is the message sent.
    static func same(_ echo: Data, _ message: [UInt8]) -> Bool {
        guard echo.count == message.count else { return false }
        return echo.withUnsafeBytes { a in
            message.withUnsafeBytes { b in a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
    }

    static func same(_ echo: [UInt8], _ message: [UInt8]) -> Bool {
        guard echo.count == message.count else { return false }
        return echo.withUnsafeBytes { a in
            message.withUnsafeBytes { b in a.count == 0 || memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
    }

    /// Fills a bulk-transfer chunk with a recognisable pattern.
    static func fillChunk(_ buffer: UnsafeMutableRawBufferPointer) {
        for i in 0..<buffer.count { buffer[i] = UInt8(truncatingIfNeeded: i) }
    }

    /// Decodes the upload reply.
    static func decodeCount(_ bytes: some Collection<UInt8>) -> UInt64 {
        var reader = BigEndianReader(ArraySlice(bytes))
        return reader.u64()
    }
}

extension Array where Element == UInt8 {
    mutating func appendBigEndian(_ value: UInt64) {
        for shift in stride(from: 56, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    mutating func appendBigEndian(_ value: UInt32) {
        for shift in stride(from: 24, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }

    mutating func appendBigEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }
}

struct BigEndianReader {
    private var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    mutating func u64() -> UInt64 {
        var value: UInt64 = 0
        for _ in 0..<8 { value = value << 8 | UInt64(bytes.popFirst() ?? 0) }
        return value
    }

    mutating func u32() -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 { value = value << 8 | UInt32(bytes.popFirst() ?? 0) }
        return value
    }

    mutating func u16() -> UInt16 {
        var value: UInt16 = 0
        for _ in 0..<2 { value = value << 8 | UInt16(bytes.popFirst() ?? 0) }
        return value
    }
}

/// The UDP workloads' datagrams: a u64 sequence number (big-endian) and then a fixed pattern.
enum DatagramPayload {
    /// The smallest datagram that holds a sequence number.
    static let minimumSize = 8
    /// The largest UDP payload over IPv4.
    static let maximumSize = 65_507
    /// The blast's end marker: the sequence number after the last datagram, which is no datagram's.
    static let endMarker = UInt64.max
    /// The default datagram size of every UDP workload.
    static let defaultSize = 64

    /// Fills `buffer` with the pattern (the sequence number's 8 bytes are written per datagram).
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) {
        for i in 0..<buffer.count { buffer[i] = UInt8(truncatingIfNeeded: i &* 7) }
    }

    /// Writes the sequence number into a datagram's first 8 bytes.
    @inline(__always)
    static func setSequence(_ sequence: UInt64, at bytes: UnsafeMutableRawPointer) {
        bytes.storeBytes(of: sequence.bigEndian, as: UInt64.self)
    }

    /// A datagram's sequence number.
    @inline(__always)
    static func sequence(at bytes: UnsafeRawPointer) -> UInt64 {
        UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self))
    }

    /// A whole datagram, for the clients that send `Data` or arrays.
    static func message(sequence: UInt64, size: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { buffer in
            fill(buffer)
            setSequence(sequence, at: buffer.baseAddress!)
        }
        return bytes
    }
}

/// Where a stream of sequence numbers 0 … count-1 got to: how many arrived, how many came after a later
/// one (reordered or duplicated), and, from that, how many were lost (the gaps that were never filled).
struct SequenceTracker: Codable, Equatable {
    let count: UInt64
    /// The next sequence number in order.
    private(set) var next: UInt64 = 0
    /// Datagrams with a sequence number below `count`.
    private(set) var received = 0
    /// Datagrams whose sequence number was below one seen before them.
    private(set) var outOfOrder = 0
    /// Datagrams with a sequence number of `count` or more (none of the session's).
    private(set) var foreign = 0

    init(count: UInt64) {
        self.count = count
    }

    @inline(__always)
    mutating func record(_ sequence: UInt64) {
        guard sequence < count else {
            foreign += 1
            return
        }
        received += 1
        if sequence >= next {
            next = sequence &+ 1
        } else {
            outOfOrder += 1
        }
    }

    /// Datagrams that never came (UDP on loopback does not duplicate, so received ones are distinct).
    var lost: Int { max(0, Int(count) - received) }
}
