// RFC 6455's frames as plain values, tested at every byte boundary (`WebSocketFrameTests`):
//
// - `WebSocketFrame.encode`: one frame's bytes (FIN, opcode, 7/16/64-bit length, the mask and the
//   masked payload when a client sends).
// - `WebSocketFrameParser`: bytes in, events out. Data frames' payloads come out as they arrive (a
//   16 MiB message is not buffered here), unmasked, with the message's opcode and whether it ends;
//   control frames (at most 125 bytes, never fragmented) come out whole, between fragments of a data
//   message if the peer puts them there. Every violation is an event with the close code RFC 6455
//   gives it (1002 protocol error, 1007 invalid UTF-8 in a text message, 1009 a message over the
//   maximum size), after which the parser consumes nothing more. With permessage-deflate negotiated
//   (`inflater` set), a message whose first frame has RSV1 is inflated in bounded steps, its size and
//   UTF-8 checked on the inflated bytes (invalid deflate data: 1007).
// - `UTF8Validator`: incremental UTF-8 validation across fragments and reads.
//
// The parser is owned by one connection's WebSocket framer, on its owner (the connection's queue).

import Foundation

/// RFC 6455's opcodes and frame layout.
enum WebSocketFrame {
    static let continuation: UInt8 = 0x0
    static let text: UInt8 = 0x1
    static let binary: UInt8 = 0x2
    static let close: UInt8 = 0x8
    static let ping: UInt8 = 0x9
    static let pong: UInt8 = 0xA

    /// The largest payload of a control frame.
    static let maximumControlPayload = 125

    /// One frame: FIN if `fin`, RSV1 if `rsv1` (a compressed message's first frame), `opcode`, `payload`;
    /// masked with `mask` (a client's 4 random bytes) if given.
    static func encode(opcode: UInt8, fin: Bool = true, rsv1: Bool = false, payload: some Collection<UInt8>, mask: [UInt8]? = nil) -> Data {
        var frame = header(opcode: opcode, fin: fin, rsv1: rsv1, length: payload.count, mask: mask)
        let start = frame.count
        if let data = payload as? Data { frame.append(data) } else { frame.append(contentsOf: Array(payload)) }
        if let mask {
            frame.withUnsafeMutableBytes { bytes in
                applyMask(mask, to: UnsafeMutableRawBufferPointer(rebasing: bytes[start...]), offset: 0)
            }
        }
        return frame
    }

    /// XORs `bytes` with the mask, starting at the mask's byte `offset` (0-3), eight bytes at a time.
    static func applyMask(_ mask: [UInt8], to bytes: UnsafeMutableRawBufferPointer, offset: Int) {
        let rotated = (0..<4).map { mask[($0 + offset) & 3] }
        var word: UInt64 = 0
        withUnsafeMutableBytes(of: &word) { wordBytes in
            for index in 0..<8 { wordBytes[index] = rotated[index & 3] }
        }
        var index = 0
        while index + 8 <= bytes.count {
            let value = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self) ^ word
            bytes.storeBytes(of: value, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            bytes[index] ^= rotated[index & 3]
            index += 1
        }
    }

    /// A frame's header: FIN, opcode, the length in its shortest form, and the mask if any.
    static func header(opcode: UInt8, fin: Bool, rsv1: Bool = false, length: Int, mask: [UInt8]?) -> Data {
        var header = Data([(fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | (opcode & 0x0F)])
        let bit: UInt8 = mask == nil ? 0 : 0x80
        if length <= 125 {
            header.append(bit | UInt8(length))
        } else if length <= 0xFFFF {
            header.append(contentsOf: [bit | 126, UInt8(length >> 8), UInt8(length & 0xFF)])
        } else {
            header.append(bit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { header.append(UInt8((UInt64(length) >> UInt64(shift)) & 0xFF)) }
        }
        if let mask { header.append(contentsOf: mask) }
        return header
    }

    /// A close frame's payload: the code (none for 1005, "no status") and the reason.
    static func closePayload(code: UInt16?, reason: Data) -> Data {
        guard let code, code != 1005 else { return Data() }
        var payload = Data([UInt8(code >> 8), UInt8(code & 0xFF)])
        payload.append(reason.prefix(maximumControlPayload - 2))
        return payload
    }

    /// Whether a close code may be sent in a close frame (RFC 6455 7.4: not 1005, 1006, 1015, nor the
    /// unassigned codes below 3000).
    static func isValidWireCloseCode(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1011: true
        case 3000...4999: true
        default: false
        }
    }
}

/// Incremental UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
struct UTF8Validator: Equatable {
    /// Continuation bytes still expected for the sequence begun.
    private var remaining = 0
    /// The range the next byte must be in (narrower than 0x80...0xBF right after some lead bytes).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    /// Validates the next bytes; false at the first invalid one.
    mutating func validate(_ bytes: UnsafeRawBufferPointer) -> Bool {
        for byte in bytes {
            if remaining == 0 {
                switch byte {
                case 0x00...0x7F: continue
                case 0xC2...0xDF: remaining = 1
                case 0xE0: (remaining, lower) = (2, 0xA0)
                case 0xE1...0xEC, 0xEE...0xEF: remaining = 2
                case 0xED: (remaining, upper) = (2, 0x9F)
                case 0xF0: (remaining, lower) = (3, 0x90)
                case 0xF1...0xF3: remaining = 3
                case 0xF4: (remaining, upper) = (3, 0x8F)
                default: return false
                }
            } else {
                guard byte >= lower, byte <= upper else { return false }
                (lower, upper) = (0x80, 0xBF)
                remaining -= 1
            }
        }
        return true
    }

    mutating func validate(_ data: Data) -> Bool {
        data.withUnsafeBytes { validate($0) }
    }

    /// No sequence is left unfinished.
    var isComplete: Bool { remaining == 0 }
}

/// Bytes in, WebSocket events out (see the file's header).
struct WebSocketFrameParser {
    enum Event: Equatable {
        /// Payload bytes of a data message (`opcode` is its first frame's, text or binary), unmasked;
        /// `isComplete` on the last bytes of its last frame (possibly no bytes).
        case data(Data, opcode: UInt8, isComplete: Bool)
        /// A whole control frame (close, ping, pong), unmasked.
        case control(opcode: UInt8, payload: Data)
        /// The peer broke the protocol: close with this code (1002, 1007, 1009).
        case failure(UInt16)
    }

    /// Frames from a client are masked, from a server not: this parser reads the peer's.
    let peerIsClient: Bool
    /// The largest message accepted (0: no limit).
    let maximumMessageSize: Int

    private struct Payload {
        var remaining: UInt64
        var mask: [UInt8]?
        var maskOffset = 0
        var fin: Bool
    }

    /// The data frame whose payload is being read.
    private var payload: Payload?
    /// The data message in progress (its opcode), its size so far (inflated), its UTF-8 state, and
    /// whether it is compressed (RSV1 on its first frame).
    private var message: (opcode: UInt8, size: Int, utf8: UTF8Validator, compressed: Bool)?
    /// permessage-deflate's inflater once the extension was negotiated (RSV1 allowed on a data
    /// message's first frame); nil: RSV1 is a protocol error.
    var inflater: WebSocketInflater?
    /// A violation was reported: nothing more is parsed.
    private(set) var failed = false

    init(peerIsClient: Bool, maximumMessageSize: Int = 0) {
        self.peerIsClient = peerIsClient
        self.maximumMessageSize = maximumMessageSize
    }

    /// The contiguous bytes the next call needs to make progress: a frame's whole header (a control
    /// frame's with its payload), or any byte of a data payload.
    private(set) var needed = 2

    /// Parses what it can of `bytes` (the unconsumed input, from its start); returns how many bytes
    /// it consumed and what they held.
    mutating func parse(_ bytes: UnsafeRawBufferPointer) -> (consumed: Int, events: [Event]) {
        var offset = 0
        var events: [Event] = []
        while !failed, offset < bytes.count {
            if payload != nil {
                offset += payloadStep(UnsafeRawBufferPointer(rebasing: bytes[offset...]), into: &events)
                continue
            }
            let used = headerStep(UnsafeRawBufferPointer(rebasing: bytes[offset...]), into: &events)
            if used == 0 { break }
            offset += used
        }
        if failed { needed = .max } else if payload != nil { needed = 1 }
        return (offset, events)
    }

    /// Reads a frame's header (and a control frame's payload) if all of it is there; 0 if not.
    private mutating func headerStep(_ bytes: UnsafeRawBufferPointer, into events: inout [Event]) -> Int {
        needed = 2
        guard bytes.count >= 2 else { return 0 }
        let first = bytes[0]
        let second = bytes[1]
        let fin = first & 0x80 != 0
        let opcode = first & 0x0F
        let masked = second & 0x80 != 0
        let shortLength = Int(second & 0x7F)
        let extra = shortLength == 126 ? 2 : shortLength == 127 ? 8 : 0
        let headerLength = 2 + extra + (masked ? 4 : 0)
        // What can be told from the first two bytes is told before waiting for more.
        // RSV2-3 always, RSV1 without permessage-deflate, or on a continuation or a control frame.
        if first & 0x30 != 0 { return fail(1002, &events) }
        let rsv1 = first & 0x40 != 0
        if rsv1, inflater == nil || !(opcode == WebSocketFrame.text || opcode == WebSocketFrame.binary) { return fail(1002, &events) }
        if masked != peerIsClient { return fail(1002, &events) }
        let isControl = opcode & 0x08 != 0
        switch opcode {
        case WebSocketFrame.continuation, WebSocketFrame.text, WebSocketFrame.binary,
            WebSocketFrame.close, WebSocketFrame.ping, WebSocketFrame.pong:
            break
        default:
            return fail(1002, &events)
        }
        if isControl, !fin || shortLength > WebSocketFrame.maximumControlPayload { return fail(1002, &events) }
        if opcode == WebSocketFrame.continuation, message == nil { return fail(1002, &events) }
        if opcode == WebSocketFrame.text || opcode == WebSocketFrame.binary, message != nil { return fail(1002, &events) }
        needed = headerLength + (isControl ? shortLength : 0)
        guard bytes.count >= needed else { return 0 }
        var length = UInt64(shortLength)
        if extra > 0 {
            length = (2..<(2 + extra)).reduce(0) { $0 << 8 | UInt64(bytes[$1]) }
            // The minimal encoding, and the most significant bit of a 64-bit length clear (RFC 6455 5.2).
            if extra == 2, length < 126 { return fail(1002, &events) }
            if extra == 8, length <= 0xFFFF || length >> 63 != 0 { return fail(1002, &events) }
        }
        let mask = masked ? Array(bytes[(2 + extra)..<headerLength]) : nil
        if isControl {
            var body = Data(bytes[headerLength..<(headerLength + shortLength)])
            if let mask { Self.unmask(&body, mask, offset: 0) }
            if opcode == WebSocketFrame.close, !Self.isValidClosePayload(body) { return fail(1002, &events) }
            events.append(.control(opcode: opcode, payload: body))
            needed = 2
            return headerLength + shortLength
        }
        if message == nil { message = (opcode, 0, UTF8Validator(), rsv1) }
        if let current = message, !current.compressed {
            let total = UInt64(current.size) + length
            if maximumMessageSize > 0, total > UInt64(maximumMessageSize) { return fail(1009, &events) }
            if total > UInt64(Int.max) { return fail(1009, &events) }
        }
        payload = Payload(remaining: length, mask: mask, fin: fin)
        if length == 0 {
            if message?.compressed == true {
                if !inflateStep(Data(), into: &events) { return fail(failureCode, &events) + headerLength }
            } else {
                finishPayload(Data(), into: &events)
            }
        }
        return headerLength
    }

    /// Reads what has arrived of a data frame's payload.
    private mutating func payloadStep(_ bytes: UnsafeRawBufferPointer, into events: inout [Event]) -> Int {
        guard var current = payload, var inMessage = message else { return 0 }
        let count = Int(min(UInt64(bytes.count), current.remaining))
        var chunk = count == 0 ? Data() : Data(bytes: bytes.baseAddress!, count: count)
        if let mask = current.mask {
            Self.unmask(&chunk, mask, offset: current.maskOffset)
            current.maskOffset = (current.maskOffset + count) & 3
        }
        current.remaining -= UInt64(count)
        if inMessage.compressed {
            payload = current
            return inflateStep(chunk, into: &events) ? count : fail(failureCode, &events) + count
        }
        inMessage.size += count
        if inMessage.opcode == WebSocketFrame.text, !inMessage.utf8.validate(chunk) { return fail(1007, &events) + count }
        message = inMessage
        payload = current
        finishPayload(chunk, into: &events)
        return count
    }

    /// Emits payload bytes; at a frame's end, the message's end if the frame had FIN.
    private mutating func finishPayload(_ chunk: Data, into events: inout [Event]) {
        guard let current = payload, let inMessage = message else { return }
        let frameEnds = current.remaining == 0
        let messageEnds = frameEnds && current.fin
        if messageEnds, inMessage.opcode == WebSocketFrame.text, !inMessage.utf8.isComplete {
            _ = fail(1007, &events)
            return
        }
        if !chunk.isEmpty || messageEnds { events.append(.data(chunk, opcode: inMessage.opcode, isComplete: messageEnds)) }
        if frameEnds {
            payload = nil
            needed = 2
        }
        if messageEnds { message = nil }
    }

    /// The code of the failure an inflate step found.
    private var failureCode: UInt16 = 1002

    /// Inflates a compressed message's next payload bytes (with the tail at its end), in bounded
    /// steps: false, with `failureCode` set, if it is invalid (1007), too big (1009) or not UTF-8 (1007).
    private mutating func inflateStep(_ chunk: Data, into events: inout [Event]) -> Bool {
        guard let current = payload, var inMessage = message, let inflater else { return false }
        let messageEnds = current.remaining == 0 && current.fin
        var failure: UInt16?
        var pieces: [Data] = []
        let limit = maximumMessageSize > 0 ? maximumMessageSize : Int.max
        let valid = inflater.decompress(chunk, isFinal: messageEnds) { piece in
            if piece.count > limit - inMessage.size {
                failure = 1009
                return false
            }
            inMessage.size += piece.count
            if inMessage.opcode == WebSocketFrame.text, !inMessage.utf8.validate(piece) {
                failure = 1007
                return false
            }
            pieces.append(piece)
            return true
        }
        if !valid { failure = failure ?? 1007 }
        if let failure {
            failureCode = failure
            return false
        }
        if messageEnds, inMessage.opcode == WebSocketFrame.text, !inMessage.utf8.isComplete {
            failureCode = 1007
            return false
        }
        for (index, piece) in pieces.enumerated() {
            events.append(.data(piece, opcode: inMessage.opcode, isComplete: messageEnds && index == pieces.count - 1))
        }
        if messageEnds, pieces.isEmpty { events.append(.data(Data(), opcode: inMessage.opcode, isComplete: true)) }
        if current.remaining == 0 {
            payload = nil
            needed = 2
        }
        message = messageEnds ? nil : inMessage
        return true
    }

    private mutating func fail(_ code: UInt16, _ events: inout [Event]) -> Int {
        failed = true
        needed = .max
        events.append(.failure(code))
        return 0
    }

    /// A close payload is empty, or a valid code and a UTF-8 reason (RFC 6455 5.5.1, 7.4).
    static func isValidClosePayload(_ body: Data) -> Bool {
        if body.isEmpty { return true }
        guard body.count >= 2 else { return false }
        let code = UInt16(body[body.startIndex]) << 8 | UInt16(body[body.startIndex + 1])
        guard WebSocketFrame.isValidWireCloseCode(code) else { return false }
        var utf8 = UTF8Validator()
        return utf8.validate(body.dropFirst(2)) && utf8.isComplete
    }

    static func unmask(_ data: inout Data, _ mask: [UInt8], offset: Int) {
        data.withUnsafeMutableBytes { WebSocketFrame.applyMask(mask, to: $0, offset: offset) }
    }
}
