// Framing: TCP delivers a stream of bytes, not messages. A read returns whatever has arrived, so one
// message may take several reads and one read may hold the end of one message and the start of the
// next. Each frame here is a 4-byte big-endian length followed by that many payload bytes; the
// decoder collects bytes until a whole frame is there. No I/O: bytes in, frames out.

/// What a `FrameDecoder` refuses.
public enum FrameError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A header announced a payload longer than the decoder accepts. The rest of the stream cannot be
    /// trusted (the peer speaks another protocol, or the bytes are out of step), so the decoder stays failed.
    case frameTooLong(length: Int, limit: Int)

    /// The error in words, for logs.
    public var description: String {
        switch self {
        case .frameTooLong(let length, let limit): return "a frame of \(length) bytes (the limit is \(limit))"
        }
    }
}

/// Reassembles length-prefixed frames from bytes as they arrive, in pieces of any size.
///
/// Append what each `read` returned, then take frames until `nextFrame()` returns nil:
/// ```
/// decoder.append(buffer[..<n])
/// while let frame = try decoder.nextFrame() { handle(frame) }
/// ```
public struct FrameDecoder: Sendable {
    /// The header's size: a 4-byte big-endian payload length.
    public static let headerLength = 4
    /// The default bound on a payload's length: 1 MiB.
    public static let defaultMaxFrameLength = 1 << 20

    /// The longest payload accepted. Checked as soon as a header is complete, so a bad length
    /// fails at once instead of making the decoder wait for (and buffer) gigabytes.
    public let maxFrameLength: Int
    private var buffer: [UInt8] = []
    private var start = 0  // where the next frame begins in `buffer`
    private var failure: FrameError?

    /// A decoder that accepts payloads of at most `maxFrameLength` bytes.
    public init(maxFrameLength: Int = FrameDecoder.defaultMaxFrameLength) {
        self.maxFrameLength = maxFrameLength
    }

    /// The bytes held that do not make a whole frame yet.
    public var bufferedByteCount: Int { buffer.count - start }

    /// Adds bytes, as they came from the stream.
    public mutating func append(_ bytes: some Sequence<UInt8>) {
        if start > 0 && start >= buffer.count / 2 {  // drop what was taken, now and then rather than per frame
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next whole frame's payload, or nil until more bytes come.
    /// - Throws: `FrameError.frameTooLong` for a header over the limit, and again on every later call.
    public mutating func nextFrame() throws(FrameError) -> [UInt8]? {
        if let failure { throw failure }
        guard buffer.count - start >= Self.headerLength else { return nil }
        let length = buffer[start..<start + Self.headerLength].reduce(0) { $0 << 8 | Int($1) }
        guard length <= maxFrameLength else {
            let error = FrameError.frameTooLong(length: length, limit: maxFrameLength)
            failure = error
            buffer = []
            start = 0
            throw error
        }
        let payloadStart = start + Self.headerLength
        guard buffer.count - payloadStart >= length else { return nil }
        start = payloadStart + length
        return Array(buffer[payloadStart..<start])
    }
}

/// The frame for `payload`: its length as 4 big-endian bytes, then the payload.
public func encodeFrame(_ payload: [UInt8]) -> [UInt8] {
    precondition(payload.count <= Int(UInt32.max), "a frame's length must fit in 32 bits")
    let length = UInt32(payload.count)
    return [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + payload
}

/// What a frame carries on the channel: a kind, a sequence number and a body.
///
/// Layout of the payload: 1 byte kind, 4 bytes big-endian sequence number, then the body. A reply
/// carries its request's sequence number; that is how replies find their requests, in any order.
public struct Message: Equatable, Sendable {
    /// What the message is for.
    public enum Kind: UInt8, Sendable {
        /// Asks for a reply with the same sequence number.
        case request = 1
        /// Answers the request with the same sequence number.
        case reply = 2
        /// A heartbeat: asks the peer for a `pong`.
        case ping = 3
        /// Answers a heartbeat.
        case pong = 4
    }

    /// What the message is for.
    public var kind: Kind
    /// The request's number (for a reply, the number of the request it answers).
    public var sequence: UInt32
    /// The application's bytes (empty for heartbeats).
    public var body: [UInt8]

    /// A message to send.
    public init(_ kind: Kind, sequence: UInt32, body: [UInt8] = []) {
        self.kind = kind
        self.sequence = sequence
        self.body = body
    }

    /// Decodes a frame's payload; nil if it is too short or of an unknown kind.
    public init?(payload: [UInt8]) {
        guard payload.count >= 5, let kind = Kind(rawValue: payload[0]) else { return nil }
        self.kind = kind
        sequence = payload[1..<5].reduce(0) { $0 << 8 | UInt32($1) }
        body = Array(payload[5...])
    }

    /// The frame payload for this message.
    public var payload: [UInt8] {
        [kind.rawValue, UInt8(sequence >> 24), UInt8(sequence >> 16 & 0xFF), UInt8(sequence >> 8 & 0xFF), UInt8(sequence & 0xFF)] + body
    }
}
