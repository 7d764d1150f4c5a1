import Foundation
import XCTest

@testable import SocketStreamsNetwork

/// permessage-deflate (RFC 7692) as plain values: the extension header parsed, every parameter offered
/// and answered both ways, bad ones refused; messages compressed and inflated with and without context
/// takeover at every window size, empty and 1 MiB messages, fragments, RSV1's rules in the parser, and
/// the bound on what a small compressed message may inflate to.
final class WebSocketDeflateTests: XCTestCase {
    typealias Parameters = WebSocketDeflate.Parameters
    typealias Event = WebSocketFrameParser.Event

    func testTheExtensionHeaderParses() throws {
        let items = try XCTUnwrap(WebSocketDeflate.extensions(#"permessage-deflate; client_max_window_bits="10"; x, foo"#))
        XCTAssertEqual(items.map(\.name), ["permessage-deflate", "foo"])
        XCTAssertEqual(items[0].parameters.map(\.name), ["client_max_window_bits", "x"])
        XCTAssertEqual(items[0].parameters.map(\.value), ["10", nil])
        for bad in ["", "a;", "a; =1", "a b", "a; b=\"c d\"", ", a"] { XCTAssertNil(WebSocketDeflate.extensions(bad), bad) }
    }

    func testEveryParameterOfAnOffer() throws {
        func offer(_ text: String) -> Parameters? { WebSocketDeflate.offers(in: text).first }
        XCTAssertEqual(offer("permessage-deflate"), Parameters())
        XCTAssertEqual(offer("permessage-deflate; server_no_context_takeover"), Parameters(serverNoContextTakeover: true))
        XCTAssertEqual(offer("permessage-deflate; client_no_context_takeover"), Parameters(clientNoContextTakeover: true))
        XCTAssertEqual(offer("permessage-deflate; client_max_window_bits"), Parameters(clientMaxWindowBits: 0))
        for bits in 8...15 {
            XCTAssertEqual(offer("permessage-deflate; server_max_window_bits=\(bits)"), Parameters(serverMaxWindowBits: bits))
            XCTAssertEqual(offer("permessage-deflate; client_max_window_bits=\"\(bits)\""), Parameters(clientMaxWindowBits: bits))
        }
        // Unknown, repeated, valueless server_max_window_bits, values out of range or not digits.
        for bad in [
            "x=1", "server_no_context_takeover; server_no_context_takeover", "server_no_context_takeover=1", "server_max_window_bits",
            "server_max_window_bits=7", "server_max_window_bits=16", "client_max_window_bits=09", "client_max_window_bits=a",
            "client_no_context_takeover=x",
        ] {
            XCTAssertNil(offer("permessage-deflate; \(bad)"), bad)
        }
        // A bad offer is left out; the next one counts.
        XCTAssertEqual(
            WebSocketDeflate.offers(in: "permessage-deflate; x, foo, permessage-deflate; client_no_context_takeover"),
            [Parameters(clientNoContextTakeover: true)])
        let headers = [(name: "Sec-WebSocket-Extensions", value: "permessage-deflate; client_max_window_bits")]
        XCTAssertEqual(WebSocketDeflate.clientOffer(in: headers), [Parameters(clientMaxWindowBits: 0)])
        XCTAssertEqual(WebSocketDeflate.clientOffer(in: [(name: "X-Other", value: "permessage-deflate")]), [])
    }

    func testAServerAnswersTheFirstOfferItCanHonour() {
        XCTAssertNil(WebSocketDeflate.accept([]))
        XCTAssertEqual(WebSocketDeflate.accept([Parameters(clientMaxWindowBits: 0)]), Parameters())
        let everything = Parameters(
            serverNoContextTakeover: true, clientNoContextTakeover: true, serverMaxWindowBits: 10, clientMaxWindowBits: 12)
        XCTAssertEqual(WebSocketDeflate.accept([everything]), everything)
        XCTAssertEqual(
            everything.headerValue,
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12"
        )
        // server_max_window_bits=8: zlib's raw deflate cannot; that offer is declined.
        XCTAssertNil(WebSocketDeflate.accept([Parameters(serverMaxWindowBits: 8)]))
        XCTAssertEqual(WebSocketDeflate.accept([Parameters(serverMaxWindowBits: 8), Parameters()]), Parameters())
    }

    func testAClientChecksTheResponseAgainstItsOffer() {
        /// The parameters agreed to (`.some(nil)`: none), or nil when the response fails the handshake.
        func check(_ response: String?, _ offers: [Parameters]) -> Parameters?? {
            switch WebSocketDeflate.check(response: response, offers: offers) {
            case .success(let parameters): .some(parameters)
            case .failure: nil
            }
        }
        let offer = [Parameters(clientMaxWindowBits: 0)]
        XCTAssertEqual(check(nil, offer), .some(nil), "declined")
        XCTAssertEqual(check(nil, []), .some(nil))
        XCTAssertEqual(check("permessage-deflate", offer), Parameters())
        for bits in 9...15 {
            XCTAssertEqual(check("permessage-deflate; client_max_window_bits=\(bits)", offer), Parameters(clientMaxWindowBits: bits))
            XCTAssertEqual(check("permessage-deflate; server_max_window_bits=\(bits)", offer), Parameters(serverMaxWindowBits: bits))
        }
        XCTAssertEqual(
            check("permessage-deflate; server_no_context_takeover; client_no_context_takeover", offer),
            Parameters(serverNoContextTakeover: true, clientNoContextTakeover: true))
        // Failures: not offered, another extension, two, bad parameters, client_max_window_bits not offered
        // or over the offer or 8, a server window over the one asked for, no server_no_context_takeover asked for.
        let refused: [(String, [Parameters])] = [
            ("permessage-deflate", []), ("x-other", offer), ("permessage-deflate, permessage-deflate", offer),
            ("permessage-deflate; client_max_window_bits", offer), ("permessage-deflate; x", offer),
            ("permessage-deflate; client_max_window_bits=10", [Parameters()]),
            ("permessage-deflate; client_max_window_bits=12", [Parameters(clientMaxWindowBits: 11)]),
            ("permessage-deflate; client_max_window_bits=8", offer),
            ("permessage-deflate; server_max_window_bits=12", [Parameters(serverMaxWindowBits: 11)]),
            ("permessage-deflate", [Parameters(serverMaxWindowBits: 11)]),
            ("permessage-deflate", [Parameters(serverNoContextTakeover: true)]),
        ]
        for (response, offers) in refused { XCTAssertTrue(check(response, offers) == nil, response) }
    }

    func testTheHandshakeCarriesTheNegotiation() throws {
        let key = WebSocketHandshake.randomKey()
        let offered = "permessage-deflate; client_max_window_bits"
        let request = WebSocketHandshake.request(
            host: "h", path: "/", key: key, subprotocols: [], additionalHeaders: [("Sec-WebSocket-Extensions", offered)])
        let requested = try XCTUnwrap(WebSocketHandshake.check(request: try XCTUnwrap(WebSocketHandshake.parseHead(request))))
        XCTAssertEqual(requested.extensions, offered)
        let answer = WebSocketDeflate.accept(WebSocketDeflate.offers(in: requested.extensions))
        let response = WebSocketHandshake.response(key: key, subprotocol: nil, extensions: answer?.headerValue, additionalHeaders: [])
        let head = try XCTUnwrap(WebSocketHandshake.parseHead(response))
        let accepted = WebSocketHandshake.check(response: head, key: key, offered: [], deflateOffers: WebSocketDeflate.offers(in: offered))
        XCTAssertEqual(accepted?.deflate, Parameters())
        XCTAssertNil(WebSocketHandshake.check(response: head, key: key, offered: []), "an extension the client did not offer")
    }

    // MARK: compression

    /// Compresses `messages` (each in `parts` parts) and inflates them back, as two peers do.
    private func roundTrip(_ messages: [Data], windowBits: Int, noContextTakeover: Bool, parts: Int = 1) throws -> [Data] {
        let deflater = try XCTUnwrap(WebSocketDeflater(windowBits: windowBits, noContextTakeover: noContextTakeover))
        let inflater = try XCTUnwrap(WebSocketInflater(noContextTakeover: noContextTakeover))
        return messages.map { message in
            var result = Data()
            let size = max(1, message.count / parts)
            var pieces = stride(from: 0, to: message.count, by: size).map { message[$0..<min($0 + size, message.count)] }
            if pieces.isEmpty { pieces = [Data()] }
            for (index, piece) in pieces.enumerated() {
                let isFinal = index == pieces.count - 1
                let compressed = deflater.compress(Data(piece), isFinal: isFinal, isWhole: pieces.count == 1)
                if message.isEmpty { XCTAssertEqual(compressed, Data([0x00]), "an empty message is one 0x00 byte") }
                XCTAssertTrue(
                    inflater.decompress(compressed, isFinal: isFinal) {
                        result.append($0)
                        return true
                    })
            }
            return result
        }
    }

    func testMessagesRoundTripAtEveryWindowSizeWithAndWithoutContextTakeover() throws {
        let text = Data(String(repeating: "the quick brown fox jumps over the lazy dog ", count: 200).utf8)
        let random = Data((0..<5000).map { _ in UInt8.random(in: 0...255) })
        let messages = [text, Data(), random, text, Data("x".utf8), text]
        for bits in 9...15 {
            for noContextTakeover in [false, true] {
                XCTAssertEqual(try roundTrip(messages, windowBits: bits, noContextTakeover: noContextTakeover), messages, "\(bits)")
                XCTAssertEqual(
                    try roundTrip(messages, windowBits: bits, noContextTakeover: noContextTakeover, parts: 7), messages,
                    "\(bits), fragments")
            }
        }
        XCTAssertNil(WebSocketDeflater(windowBits: 8, noContextTakeover: false), "zlib's raw deflate has no 8-bit window")
    }

    func testContextTakeoverShrinksARepeatedMessage() throws {
        let message = Data((0..<2000).map { _ in UInt8.random(in: 0...255) })
        for noContextTakeover in [false, true] {
            let deflater = try XCTUnwrap(WebSocketDeflater(noContextTakeover: noContextTakeover))
            let first = deflater.compress(message, isFinal: true)
            let second = deflater.compress(message, isFinal: true)
            XCTAssertGreaterThan(first.count, 1900)
            if noContextTakeover { XCTAssertEqual(second, first) } else { XCTAssertLessThan(second.count, 100) }
        }
    }

    func testAMebibyteRoundTrips() throws {
        let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 31) ^ ($0 >> 9)) })
        XCTAssertEqual(try roundTrip([big, big], windowBits: 15, noContextTakeover: false, parts: 3), [big, big])
    }

    func testInvalidDeflateDataIsRefused() throws {
        let inflater = try XCTUnwrap(WebSocketInflater(noContextTakeover: false))
        XCTAssertFalse(inflater.decompress([0xFF, 0xFF, 0xFF, 0xFF], isFinal: true) { _ in true })
    }

    // MARK: in the parser

    private func parse(_ bytes: Data, maximum: Int = 0, chunk: Int = 65_536, negotiated: Bool = true) -> [Event] {
        var parser = WebSocketFrameParser(peerIsClient: false, maximumMessageSize: maximum)
        if negotiated { parser.inflater = WebSocketInflater(noContextTakeover: false, chunk: chunk) }
        var events: [Event] = []
        var buffered = bytes
        while !buffered.isEmpty {
            let (consumed, found) = buffered.withUnsafeBytes { parser.parse($0) }
            events += found
            buffered.removeFirst(consumed)
            if consumed == 0 { break }
        }
        return WebSocketFrameTests.joined(events)
    }

    private func compressed(_ message: Data, parts: Int = 1, opcode: UInt8 = WebSocketFrame.binary) throws -> Data {
        let deflater = try XCTUnwrap(WebSocketDeflater(noContextTakeover: false))
        var stream = Data()
        let size = max(1, (message.count + parts - 1) / parts)
        for index in 0..<parts {
            let piece = message[min(index * size, message.count)..<min((index + 1) * size, message.count)]
            let isFinal = index == parts - 1
            stream.append(
                WebSocketFrame.encode(
                    opcode: index == 0 ? opcode : WebSocketFrame.continuation, fin: isFinal, rsv1: index == 0,
                    payload: deflater.compress(Data(piece), isFinal: isFinal, isWhole: parts == 1)))
        }
        return stream
    }

    func testTheParserInflatesCompressedMessages() throws {
        let text = Data(String(repeating: "héllo ", count: 1000).utf8)
        XCTAssertEqual(parse(try compressed(text, opcode: WebSocketFrame.text)), [.data(text, opcode: 1, isComplete: true)])
        XCTAssertEqual(parse(try compressed(text, parts: 4)), [.data(text, opcode: 2, isComplete: true)])
        XCTAssertEqual(parse(try compressed(Data())), [.data(Data(), opcode: 2, isComplete: true)])
        // An uncompressed message (no RSV1) is delivered as it is, with the extension negotiated.
        XCTAssertEqual(parse(WebSocketFrame.encode(opcode: 2, payload: [1, 2, 3])), [.data(Data([1, 2, 3]), opcode: 2, isComplete: true)])
    }

    func testRSV1IsAProtocolErrorWhereItMayNotBe() throws {
        let message = try compressed(Data("abc".utf8))
        XCTAssertEqual(parse(message, negotiated: false), [.failure(1002)], "without the extension")
        XCTAssertEqual(parse(Data([0xC9, 0])), [.failure(1002)], "on a ping")
        XCTAssertEqual(parse(Data([0x02, 1, 0x41, 0xC0, 0])), [.data(Data("A".utf8), opcode: 2, isComplete: false), .failure(1002)])
        XCTAssertEqual(parse(Data([0xA2, 0])), [.failure(1002)], "RSV2")
    }

    func testInvalidDataAndInvalidUTF8AreInconsistentData() throws {
        XCTAssertEqual(parse(Data([0xC2, 4, 0xFF, 0xFF, 0xFF, 0xFF])), [.failure(1007)])
        XCTAssertEqual(parse(try compressed(Data([0xFF, 0xFE]), opcode: WebSocketFrame.text)), [.failure(1007)])
    }

    func testAZipBombStopsAtTheMaximumSize() throws {
        // 16 MiB of zeros compress to about 16 KiB; with a 1 MiB maximum, inflating stops one chunk past it.
        let deflater = try XCTUnwrap(WebSocketDeflater(noContextTakeover: false))
        let zeros = Data(count: 1 << 20)
        var payload = Data()
        for index in 0..<16 { payload.append(deflater.compress(zeros, isFinal: index == 15)) }
        XCTAssertLessThan(payload.count, 30_000)
        let bomb = WebSocketFrame.encode(opcode: WebSocketFrame.binary, rsv1: true, payload: payload)
        var parser = WebSocketFrameParser(peerIsClient: false, maximumMessageSize: 1 << 20)
        let inflater = try XCTUnwrap(WebSocketInflater(noContextTakeover: false, chunk: 16_384))
        parser.inflater = inflater
        var produced = 0
        var events: [Event] = []
        var buffered = bomb
        while !buffered.isEmpty, !parser.failed {
            let (consumed, found) = buffered.withUnsafeBytes { parser.parse($0) }
            events += found
            buffered.removeFirst(consumed)
            if consumed == 0 { break }
        }
        for case .data(let bytes, _, _) in events { produced += bytes.count }
        XCTAssertEqual(events.last, .failure(1009))
        XCTAssertLessThanOrEqual(produced, 1 << 20)
        // The whole message fits with no maximum.
        XCTAssertEqual(parse(bomb), [.data(Data(count: 16 << 20), opcode: 2, isComplete: true)])
    }
}
