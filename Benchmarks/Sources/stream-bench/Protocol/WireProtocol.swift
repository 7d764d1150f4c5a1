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

    static let downloadOpcode = UInt8(ascii: "D")
    static let uploadOpcode = UInt8(ascii: "U")
    static let echoOpcode = UInt8(ascii: "E")
    static let connectOpcode = UInt8(ascii: "C")
    static let groupEchoOpcode = UInt8(ascii: "G")
    static let idleOpcode = UInt8(ascii: "I")
    static let releaseOpcode = UInt8(ascii: "R")
    static let resetOpcode = UInt8(ascii: "X")
    static let heldEchoOpcode = UInt8(ascii: "H")

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
        }
        return bytes
    }

    /// The full header length for an opcode, or nil for an unknown opcode.
    static func headerLength(opcode: UInt8) -> Int? {
        switch opcode {
        case downloadOpcode, uploadOpcode, echoOpcode, idleOpcode, releaseOpcode, resetOpcode, heldEchoOpcode: return 9
        case connectOpcode: return 1
        case groupEchoOpcode: return 21
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
}
