import Foundation
import XCTest

@testable import SocketStreamsNetwork

/// WebSocket's frames and handshake as plain values: a frame stream split at every byte boundary and at
/// random ones, masking, the length encodings at their edges, UTF-8 validation across fragments, and
/// every violation's close code; the handshake's accept value, request and response checks.
final class WebSocketFrameTests: XCTestCase {
    typealias Event = WebSocketFrameParser.Event

    /// Feeds `stream` to a parser in parts ending at `cuts`, keeping what it did not consume as the
    /// connection's input does; returns the events with consecutive data of one message joined.
    private func parse(_ stream: Data, cuts: [Int], peerIsClient: Bool, maximum: Int = 0) -> [Event] {
        var parser = WebSocketFrameParser(peerIsClient: peerIsClient, maximumMessageSize: maximum)
        var buffered = Data()
        var events: [Event] = []
        var start = 0
        for end in (cuts + [stream.count]).map({ min($0, stream.count) }) where end >= start {
            buffered.append(stream[start..<end])
            start = end
            while !buffered.isEmpty, buffered.count >= parser.needed {
                let (consumed, found) = buffered.withUnsafeBytes { parser.parse($0) }
                events += found
                buffered.removeFirst(consumed)
                if consumed == 0 { break }
            }
        }
        return Self.joined(events)
    }

    /// Data events of one message joined into one (how they are split depends on the reads).
    static func joined(_ events: [Event]) -> [Event] {
        var result: [Event] = []
        var pending: (Data, UInt8)?
        for event in events {
            if case .data(let bytes, let opcode, let isComplete) = event {
                var data = pending?.0 ?? Data()
                data.append(bytes)
                if isComplete {
                    result.append(.data(data, opcode: opcode, isComplete: true))
                    pending = nil
                } else {
                    pending = (data, opcode)
                }
            } else {
                if case .failure = event, let (data, opcode) = pending {
                    result.append(.data(data, opcode: opcode, isComplete: false))
                    pending = nil
                }
                result.append(event)
            }
        }
        if let pending { result.append(.data(pending.0, opcode: pending.1, isComplete: false)) }
        return result
    }

    private let mask: [UInt8] = [0x37, 0xFA, 0x21, 0x3D]

    /// A stream of a fragmented text message with a ping between its fragments, a binary message, an
    /// empty one, and a close.
    private func stream(masked: Bool) -> (Data, [Event]) {
        let mask = masked ? self.mask : nil
        var stream = Data()
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.text, fin: false, payload: Array("Hel".utf8), mask: mask)
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.ping, payload: Array("p".utf8), mask: mask)
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.continuation, fin: false, payload: Array("lo, wö".utf8), mask: mask)
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.continuation, payload: Array("rld".utf8), mask: mask)
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.binary, payload: [UInt8](0..<200), mask: mask)
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.binary, payload: [UInt8](), mask: mask)
        stream += WebSocketFrame.encode(opcode: WebSocketFrame.close, payload: [0x03, 0xE8] + Array("bye".utf8), mask: mask)
        let events: [Event] = [
            .control(opcode: WebSocketFrame.ping, payload: Data("p".utf8)),
            .data(Data("Hello, wörld".utf8), opcode: WebSocketFrame.text, isComplete: true),
            .data(Data(0..<200), opcode: WebSocketFrame.binary, isComplete: true),
            .data(Data(), opcode: WebSocketFrame.binary, isComplete: true),
            .control(opcode: WebSocketFrame.close, payload: Data([0x03, 0xE8] + Array("bye".utf8))),
        ]
        return (stream, events)
    }

    func testAStreamSplitAtEveryPairOfByteBoundariesParsesTheSame() {
        for masked in [false, true] {
            let (stream, expected) = self.stream(masked: masked)
            for first in 0...stream.count {
                for second in stride(from: first, through: stream.count, by: 3) {
                    let events = parse(stream, cuts: [first, second], peerIsClient: masked)
                    XCTAssertEqual(events, expected, "masked \(masked), cuts \(first), \(second)")
                }
            }
        }
    }

    func testAStreamFedOneByteAtATimeAndInRandomPartsParsesTheSame() {
        var generator = SystemRandomNumberGenerator()
        for masked in [false, true] {
            let (stream, expected) = self.stream(masked: masked)
            XCTAssertEqual(parse(stream, cuts: Array(0...stream.count), peerIsClient: masked), expected)
            for _ in 0..<500 {
                let cuts = (0..<Int.random(in: 1...12, using: &generator)).map { _ in Int.random(in: 0...stream.count, using: &generator) }
                    .sorted()
                XCTAssertEqual(parse(stream, cuts: cuts, peerIsClient: masked), expected, "cuts \(cuts)")
            }
        }
    }

    func testLengthsAtTheEdgesOfEachEncoding() {
        for length in [0, 1, 125, 126, 127, 65_535, 65_536, 70_000] {
            let payload = [UInt8]((0..<length).map { UInt8(truncatingIfNeeded: $0 * 7) })
            for mask in [nil, self.mask] {
                let frame = WebSocketFrame.encode(opcode: WebSocketFrame.binary, payload: payload, mask: mask)
                let lengthBytes = length <= 125 ? 0 : length <= 65_535 ? 2 : 8
                XCTAssertEqual(frame.count, 2 + lengthBytes + (mask == nil ? 0 : 4) + length, "length \(length)")
                XCTAssertEqual(frame[1] & 0x7F, UInt8(length <= 125 ? length : length <= 65_535 ? 126 : 127))
                XCTAssertEqual(frame[1] & 0x80 != 0, mask != nil)
                let events = parse(frame, cuts: [1, 3, 9, 2 + lengthBytes + 4 + length / 2], peerIsClient: mask != nil)
                XCTAssertEqual(events, [.data(Data(payload), opcode: WebSocketFrame.binary, isComplete: true)], "length \(length)")
            }
        }
    }

    func testMaskingFollowsRFC6455sExample() {
        // RFC 6455 5.7: a masked "Hello" from a client.
        let frame = WebSocketFrame.encode(opcode: WebSocketFrame.text, payload: Array("Hello".utf8), mask: mask)
        XCTAssertEqual([UInt8](frame), [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58])
        XCTAssertEqual(
            [UInt8](WebSocketFrame.encode(opcode: WebSocketFrame.text, payload: Array("Hello".utf8))), [0x81, 0x05] + Array("Hello".utf8))
    }

    private func failure(_ bytes: [UInt8], peerIsClient: Bool = false, maximum: Int = 0) -> [Event] {
        parse(Data(bytes), cuts: [], peerIsClient: peerIsClient, maximum: maximum)
    }

    func testViolationsCarryTheirCloseCodes() {
        let text = WebSocketFrame.encode(opcode: WebSocketFrame.text, payload: Array("x".utf8))
        // Reserved bits, unknown opcodes (data 3-7, control 0xB-0xF).
        for rsv: UInt8 in [0x40, 0x20, 0x10] { XCTAssertEqual(failure([text[0] | rsv] + text.dropFirst()), [.failure(1002)]) }
        for opcode: UInt8 in [3, 4, 5, 6, 7, 0xB, 0xC, 0xF] { XCTAssertEqual(failure([0x80 | opcode, 0]), [.failure(1002)], "\(opcode)") }
        // Masking on the wrong side.
        XCTAssertEqual(failure([0x81, 0x81] + mask + [0]), [.failure(1002)], "a masked server frame")
        XCTAssertEqual(failure([UInt8](text), peerIsClient: true), [.failure(1002)], "an unmasked client frame")
        // Control frames: fragmented, or over 125 bytes.
        XCTAssertEqual(failure([0x09, 0]), [.failure(1002)])
        XCTAssertEqual(failure([0x89, 126, 0, 126] + [UInt8](repeating: 0, count: 126)), [.failure(1002)])
        // A continuation with no message, a new message inside one.
        XCTAssertEqual(failure([0x80, 0]), [.failure(1002)])
        XCTAssertEqual(failure([0x01, 1, 0x41, 0x81, 1, 0x41]), [.data(Data("A".utf8), opcode: 1, isComplete: false), .failure(1002)])
        // Lengths not in their shortest form, a 64-bit length with its top bit set.
        XCTAssertEqual(failure([0x82, 126, 0, 125] + [UInt8](repeating: 0, count: 125)), [.failure(1002)])
        XCTAssertEqual(failure([0x82, 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]), [.failure(1002)])
        XCTAssertEqual(failure([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0]), [.failure(1002)])
        // A close with a one-byte body, a code that may not be sent, a reason that is not UTF-8.
        XCTAssertEqual(failure([0x88, 1, 3]), [.failure(1002)])
        XCTAssertEqual(failure([0x88, 2, 0x03, 0xED]), [.failure(1002)], "1005")
        XCTAssertEqual(failure([0x88, 3, 0x03, 0xE8, 0xFF]), [.failure(1002)])
        // Over the maximum message size, across fragments too.
        XCTAssertEqual(failure([0x82, 5, 1, 2, 3, 4, 5], maximum: 4), [.failure(1009)])
        XCTAssertEqual(
            failure([0x02, 3, 1, 2, 3, 0x80, 2, 4, 5], maximum: 4), [.data(Data([1, 2, 3]), opcode: 2, isComplete: false), .failure(1009)])
        XCTAssertEqual(failure([0x82, 4, 1, 2, 3, 4], maximum: 4), [.data(Data([1, 2, 3, 4]), opcode: 2, isComplete: true)])
    }

    func testTextMustBeUTF8AcrossFragments() {
        // "é" split between fragments is valid; a lone continuation byte, an overlong, a surrogate, a
        // truncated sequence at the message's end are not.
        XCTAssertEqual(failure([0x01, 1, 0xC3, 0x80, 1, 0xA9]), [.data(Data([0xC3, 0xA9]), opcode: 1, isComplete: true)])
        for bad: [UInt8] in [[0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82], [0xFF]] {
            let events = failure([0x81, UInt8(bad.count)] + bad)
            XCTAssertEqual(events.last, .failure(1007), "\(bad)")
        }
        // Binary is not checked.
        XCTAssertEqual(failure([0x82, 1, 0xFF]), [.data(Data([0xFF]), opcode: 2, isComplete: true)])
        var validator = UTF8Validator()
        XCTAssertTrue(validator.validate(Data("añ€𝄞".utf8)))
        XCTAssertTrue(validator.isComplete)
    }

    func testNothingIsParsedAfterAViolation() {
        var parser = WebSocketFrameParser(peerIsClient: false)
        let bytes = Data([0x83, 0]) + WebSocketFrame.encode(opcode: WebSocketFrame.text, payload: Array("x".utf8))
        let (consumed, events) = bytes.withUnsafeBytes { parser.parse($0) }
        XCTAssertEqual(events, [.failure(1002)])
        XCTAssertEqual(consumed, 0)
        XCTAssertTrue(parser.failed)
    }

    func testCloseCodesMapToApplesCases() {
        XCTAssertEqual(NWProtocolWebSocket.CloseCode(rawValue: 1000), .protocolCode(.normalClosure))
        XCTAssertEqual(NWProtocolWebSocket.CloseCode(rawValue: 1009), .protocolCode(.messageTooBig))
        XCTAssertEqual(NWProtocolWebSocket.CloseCode(rawValue: 3001), .applicationCode(3001))
        XCTAssertEqual(NWProtocolWebSocket.CloseCode(rawValue: 4999), .privateCode(4999))
        XCTAssertNil(NWProtocolWebSocket.CloseCode(rawValue: 999))
        XCTAssertEqual(NWProtocolWebSocket.CloseCode.privateCode(4000).rawValue, 4000)
        XCTAssertEqual(WebSocketFrame.closePayload(code: 1005, reason: Data("x".utf8)), Data())
        XCTAssertEqual(WebSocketFrame.closePayload(code: 4000, reason: Data("x".utf8)), Data([0x0F, 0xA0, 0x78]))
    }

    // MARK: the handshake

    func testTheAcceptValueOfRFC6455sExample() {
        XCTAssertEqual(WebSocketHandshake.accept(forKey: "dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        let key = WebSocketHandshake.randomKey()
        XCTAssertEqual(Data(base64Encoded: key)?.count, 16)
        XCTAssertNotEqual(key, WebSocketHandshake.randomKey())
    }

    private func head(_ data: Data) throws -> WebSocketHandshake.Head {
        let length = try XCTUnwrap(data.withUnsafeBytes { WebSocketHandshake.headLength(in: $0) })
        XCTAssertEqual(length, data.count)
        return try XCTUnwrap(WebSocketHandshake.parseHead(data))
    }

    func testARequestAndItsResponseCheckOut() throws {
        let key = WebSocketHandshake.randomKey()
        let request = WebSocketHandshake.request(
            host: "example.com:8080", path: "/chat?room=1", key: key, subprotocols: ["chat", "superchat"],
            additionalHeaders: [("Authorization", "Bearer x")])
        let requested = try XCTUnwrap(WebSocketHandshake.check(request: try head(request)))
        XCTAssertEqual(requested.key, key)
        XCTAssertEqual(requested.target, "/chat?room=1")
        XCTAssertEqual(requested.subprotocols, ["chat", "superchat"])
        XCTAssertEqual(requested.additionalHeaders.map(\.name), ["Authorization"])
        let response = WebSocketHandshake.response(key: key, subprotocol: "chat", additionalHeaders: [("X-Server", "1")])
        let accepted = try XCTUnwrap(WebSocketHandshake.check(response: try head(response), key: key, offered: ["chat", "superchat"]))
        XCTAssertEqual(accepted.subprotocol, "chat")
        XCTAssertEqual(accepted.additionalHeaders.map(\.name), ["X-Server"])
        // The wrong key's accept, a subprotocol not offered, a status other than 101.
        XCTAssertNil(WebSocketHandshake.check(response: try head(response), key: WebSocketHandshake.randomKey(), offered: ["chat"]))
        XCTAssertNil(WebSocketHandshake.check(response: try head(response), key: key, offered: ["other"]))
        XCTAssertNil(WebSocketHandshake.check(response: try head(WebSocketHandshake.rejection()), key: key, offered: []))
        // A request without the version or with a short key.
        let old = String(decoding: request, as: UTF8.self).replacingOccurrences(
            of: "Sec-WebSocket-Version: 13", with: "Sec-WebSocket-Version: 8")
        XCTAssertNil(WebSocketHandshake.check(request: try head(Data(old.utf8))))
        let short = String(decoding: request, as: UTF8.self).replacingOccurrences(of: key, with: "c2hvcnQ=")
        XCTAssertNil(WebSocketHandshake.check(request: try head(Data(short.utf8))))
    }

    func testTheHostAndTargetOfAnEndpoint() throws {
        let url = try XCTUnwrap(URL(string: "ws://example.com:8080/a/b?c=d"))
        XCTAssertEqual(WebSocketFramer.hostAndTarget(.url(url)).host, "example.com:8080")
        XCTAssertEqual(WebSocketFramer.hostAndTarget(.url(url)).target, "/a/b?c=d")
        let secure = try XCTUnwrap(URL(string: "wss://example.com"))
        XCTAssertEqual(WebSocketFramer.hostAndTarget(.url(secure)).host, "example.com")
        XCTAssertEqual(WebSocketFramer.hostAndTarget(.url(secure)).target, "/")
        XCTAssertEqual(WebSocketFramer.hostAndTarget(.hostPort(host: "::1", port: 9)).host, "[::1]:9")
    }
}
