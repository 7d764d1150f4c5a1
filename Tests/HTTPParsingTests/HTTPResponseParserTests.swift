import HTTPParsing
import XCTest

/// Unit tests of `HTTPResponseParser`: framing, splitting at every byte boundary, malformed input and truncation.
final class HTTPResponseParserTests: XCTestCase {

    // MARK: - Helpers

    /// Everything a parser reported for one response, with body pieces joined.
    struct Parsed: Equatable {
        /// The skipped 1xx heads.
        var informational: [HTTPResponseHead] = []
        /// The final head.
        var head: HTTPResponseHead?
        /// The body bytes, concatenated.
        var body: [UInt8] = []
        /// The trailer fields (nil when no trailers event came).
        var trailers: [HTTPHeaderField]?
        /// Whether `.end` came.
        var ended = false
    }

    /// Folds events into `parsed`, failing the test when they come in an impossible order.
    func collect(
        _ events: [HTTPResponseEvent], into parsed: inout Parsed, file: StaticString = #filePath, line: UInt = #line
    ) {
        for event in events {
            XCTAssertFalse(parsed.ended, "event \(event) after .end", file: file, line: line)
            switch event {
            case .informational(let head):
                XCTAssertNil(parsed.head, "informational head after the final head", file: file, line: line)
                parsed.informational.append(head)
            case .head(let head):
                XCTAssertNil(parsed.head, "second final head", file: file, line: line)
                parsed.head = head
            case .body(let bytes):
                XCTAssertNotNil(parsed.head, "body before head", file: file, line: line)
                XCTAssertFalse(bytes.isEmpty, "empty body event", file: file, line: line)
                XCTAssertNil(parsed.trailers, "body after trailers", file: file, line: line)
                parsed.body += bytes
            case .trailers(let fields):
                XCTAssertNotNil(parsed.head, "trailers before head", file: file, line: line)
                XCTAssertNil(parsed.trailers, "second trailers event", file: file, line: line)
                XCTAssertFalse(fields.isEmpty, "empty trailers event", file: file, line: line)
                parsed.trailers = fields
            case .end:
                parsed.ended = true
            }
        }
    }

    /// Feeds `pieces` in order (then calls `finish()` when `finish` is true) and returns what was parsed.
    func parse(
        _ pieces: [[UInt8]], finish: Bool = false, maxHeadSize: Int = HTTPResponseParser.defaultMaxHeadSize,
        file: StaticString = #filePath, line: UInt = #line
    ) throws(HTTPResponseParserError) -> Parsed {
        var parser = HTTPResponseParser(maxHeadSize: maxHeadSize)
        var parsed = Parsed()
        for piece in pieces {
            collect(try parser.feed(piece), into: &parsed, file: file, line: line)
        }
        if finish {
            collect(try parser.finish(), into: &parsed, file: file, line: line)
            XCTAssertTrue(parser.isComplete, file: file, line: line)
        }
        XCTAssertEqual(parser.isComplete, parsed.ended, file: file, line: line)
        return parsed
    }

    /// The error thrown while feeding `bytes` in one piece (and finishing when `finish` is true); fails when none is.
    func parseError(
        _ bytes: [UInt8], finish: Bool = false, maxHeadSize: Int = HTTPResponseParser.defaultMaxHeadSize,
        file: StaticString = #filePath, line: UInt = #line
    ) -> HTTPResponseParserError? {
        do {
            let parsed = try parse([bytes], finish: finish, maxHeadSize: maxHeadSize, file: file, line: line)
            XCTFail("expected an error, got \(parsed)", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    /// `text` as bytes.
    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Checks that feeding `message` split at every single boundary, and one byte at a time, gives the same result
    /// as feeding it whole.
    func assertSplitInvariant(
        _ message: [UInt8], finish: Bool, expected: Parsed, file: StaticString = #filePath, line: UInt = #line
    ) throws {
        XCTAssertEqual(try parse([message], finish: finish, file: file, line: line), expected, file: file, line: line)
        for split in 0...message.count {
            let pieces = [Array(message[..<split]), Array(message[split...])]
            XCTAssertEqual(
                try parse(pieces, finish: finish, file: file, line: line), expected, "split at \(split)",
                file: file, line: line)
        }
        let single = message.map { [$0] }
        XCTAssertEqual(try parse(single, finish: finish, file: file, line: line), expected, file: file, line: line)
    }

    /// A chunked response with chunk extensions (token and quoted values) and two trailer fields.
    let chunkedMessage = """
        HTTP/1.1 200 OK\r
        Transfer-Encoding: chunked\r
        Content-Type: text/plain\r
        \r
        5;name=value\r
        Hello\r
        1 ; quoted="a \\"q\\" ;x" ; flag\r
        ,\r
        00006\r
         world\r
        0;last\r
        X-Checksum: abc\r
        X-Count: 3\r
        \r

        """

    // MARK: - Content-Length

    /// A Content-Length response gives head, body and end events, with the status line and fields parsed.
    func testContentLengthResponse() throws {
        let message = bytes("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello")
        var parser = HTTPResponseParser()
        let events = try parser.feed(message)
        XCTAssertEqual(events.count, 3)
        guard case .head(let head) = events.first else { return XCTFail("no head: \(events)") }
        XCTAssertEqual(head.version, HTTPVersion(major: 1, minor: 1))
        XCTAssertEqual(head.statusCode, 200)
        XCTAssertEqual(head.reasonPhrase, "OK")
        XCTAssertEqual(head.statusLine, "HTTP/1.1 200 OK")
        XCTAssertEqual(
            head.headers,
            [HTTPHeaderField(name: "Content-Type", value: "text/plain"), HTTPHeaderField(name: "Content-Length", value: "5")])
        XCTAssertEqual(events[1], .body(bytes("hello")))
        XCTAssertEqual(events[2], .end)
        XCTAssertEqual(parser.bodyFraming, .contentLength(5))
        XCTAssertTrue(parser.isComplete)
        XCTAssertEqual(parser.bodyBytesReceived, 5)
        XCTAssertEqual(try parser.finish(), [], "finish after a complete response adds nothing")
    }

    /// The head's raw bytes are exactly what was received, mixed line endings included.
    func testRawHeadIsKeptExactly() throws {
        let head = "HTTP/1.0 404 Not Found\r\nServer:  spaced  \nContent-Length: 0\r\n\r\n"
        let parsed = try parse([bytes(head)])
        XCTAssertEqual(parsed.head?.rawBytes, bytes(head))
        XCTAssertEqual(parsed.head?.version, HTTPVersion(major: 1, minor: 0))
        XCTAssertEqual(parsed.head?.value(forName: "server"), "spaced")
        XCTAssertTrue(parsed.ended)
        XCTAssertEqual(parsed.body, [])
    }

    /// Field lookup ignores case and joins repeated fields with ", ".
    func testHeaderLookupIsCaseInsensitiveAndJoinsRepeatedFields() throws {
        let parsed = try parse([bytes("HTTP/1.1 200 OK\r\nVary: a\r\nVARY: b\r\ncontent-length: 0\r\n\r\n")])
        let head = try XCTUnwrap(parsed.head)
        XCTAssertEqual(head.values(forName: "vary"), ["a", "b"])
        XCTAssertEqual(head.value(forName: "Vary"), "a, b")
        XCTAssertNil(head.value(forName: "X-Missing"))
        XCTAssertTrue(head.headers[0].hasName("VARY"))
        XCTAssertEqual(head.headers[1].name, "VARY", "names keep their case")
    }

    /// Values lose surrounding whitespace; obs-fold continuation lines are joined with a space.
    func testFieldValueWhitespaceIsTrimmedAndObsFoldIsUnfolded() throws {
        let parsed = try parse([
            bytes("HTTP/1.1 200 OK\r\nX-A: \t one two \t\r\nX-Fold: first\r\n   second\r\n\tthird\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n")
        ])
        let head = try XCTUnwrap(parsed.head)
        XCTAssertEqual(head.value(forName: "X-A"), "one two")
        XCTAssertEqual(head.value(forName: "X-Fold"), "first second third")
        XCTAssertEqual(head.value(forName: "X-Empty"), "")
    }

    /// Lines ending in a bare LF are accepted (RFC 9112 §2.2).
    func testBareLFLineEndingsAreAccepted() throws {
        let parsed = try parse([bytes("HTTP/1.1 200 OK\nContent-Length: 2\n\nok")])
        XCTAssertEqual(parsed.head?.statusCode, 200)
        XCTAssertEqual(parsed.body, bytes("ok"))
        XCTAssertTrue(parsed.ended)
    }

    /// An empty or missing reason phrase is accepted; reason phrases keep inner whitespace.
    func testStatusLineWithoutReasonPhrase() throws {
        for line in ["HTTP/1.1 200", "HTTP/1.1 200 "] {
            let parsed = try parse([bytes("\(line)\r\nContent-Length: 0\r\n\r\n")])
            XCTAssertEqual(parsed.head?.statusCode, 200, line)
            XCTAssertEqual(parsed.head?.reasonPhrase, "", line)
            XCTAssertEqual(parsed.head?.statusLine, "HTTP/1.1 200", line)
        }
        let parsed = try parse([bytes("HTTP/1.1 599 Custom  reason\twith tab\r\nContent-Length: 0\r\n\r\n")])
        XCTAssertEqual(parsed.head?.reasonPhrase, "Custom  reason\twith tab")
    }

    /// A field value that is not UTF-8 is decoded byte by byte (obs-text as Latin-1).
    func testNonUTF8FieldValueIsKeptAsLatin1() throws {
        let parsed = try parse([bytes("HTTP/1.1 200 OK\r\nX-Name: caf") + [0xE9] + bytes("\r\nContent-Length: 0\r\n\r\n")])
        XCTAssertEqual(parsed.head?.value(forName: "X-Name"), "café")
    }

    /// Content-Length: 0 completes the response with the head.
    func testContentLengthZeroCompletesAtTheHead() throws {
        var parser = HTTPResponseParser()
        XCTAssertEqual(try parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")).last, .end)
        XCTAssertTrue(parser.isComplete)
        XCTAssertEqual(parser.bodyFraming, .contentLength(0))
    }

    /// Repeated Content-Length values that agree are accepted.
    func testIdenticalRepeatedContentLengthsAreAccepted() throws {
        let parsed = try parse([bytes("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\nabc")])
        XCTAssertEqual(parsed.body, bytes("abc"))
        XCTAssertTrue(parsed.ended)
    }

    /// 204 and 304 responses have no body even with a Content-Length.
    func testNoBodyFor204And304EvenWithContentLength() throws {
        for status in ["204 No Content", "304 Not Modified"] {
            var parser = HTTPResponseParser()
            let events = try parser.feed(bytes("HTTP/1.1 \(status)\r\nContent-Length: 10\r\n\r\n"))
            XCTAssertEqual(events.count, 2, status)
            XCTAssertEqual(events.last, .end, status)
            XCTAssertEqual(parser.bodyFraming, .empty, status)
            XCTAssertEqual(try parser.feed(bytes("extra")), [], status)
            XCTAssertEqual(parser.bytesAfterEnd, 5, status)
        }
    }

    /// Bytes after a complete response are ignored and counted.
    func testBytesAfterTheEndAreIgnoredAndCounted() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(try parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n")), into: &parsed)
        collect(try parser.feed(bytes("more")), into: &parsed)
        XCTAssertEqual(parsed.body, bytes("ok"))
        XCTAssertTrue(parsed.ended)
        XCTAssertEqual(parser.bytesAfterEnd, 17 + 4)
        XCTAssertEqual(try parser.finish(), [])
    }

    /// Each fed piece of a large body comes straight back as one body event.
    func testLargeBodiesAreStreamedNotBuffered() throws {
        let body = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(try parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n")), into: &parsed)
        for start in stride(from: 0, to: body.count, by: 65536) {
            let piece = Array(body[start..<min(start + 65536, body.count)])
            let events = try parser.feed(piece)
            XCTAssertEqual(events.first, .body(piece), "each piece comes straight back as one body event")
            collect(events, into: &parsed)
        }
        XCTAssertEqual(parsed.body, body)
        XCTAssertTrue(parsed.ended)
        XCTAssertEqual(parser.bodyBytesReceived, body.count)
    }

    // MARK: - Splitting at every byte boundary

    /// A Content-Length response split at every byte boundary parses the same.
    func testContentLengthAtEveryByteBoundary() throws {
        let body = bytes("<html>\r\n\r\n0\r\n\r\nnot chunked</html>")
        let message = bytes("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\nX-Fold: a\r\n b\r\n\r\n") + body
        var expected = Parsed()
        expected.head = try parse([message]).head
        XCTAssertEqual(expected.head?.value(forName: "X-Fold"), "a b")
        expected.body = body
        expected.ended = true
        try assertSplitInvariant(message, finish: false, expected: expected)
    }

    /// A chunked response with extensions and trailers split at every byte boundary parses the same.
    func testChunkedAtEveryByteBoundary() throws {
        let message = bytes(chunkedMessage)
        var expected = Parsed()
        expected.head = try parse([message]).head
        expected.body = bytes("Hello, world")
        expected.trailers = [HTTPHeaderField(name: "X-Checksum", value: "abc"), HTTPHeaderField(name: "X-Count", value: "3")]
        expected.ended = true
        try assertSplitInvariant(message, finish: false, expected: expected)
    }

    /// A chunked response split into three pieces at every pair of boundaries parses the same.
    func testChunkedAtEveryPairOfByteBoundaries() throws {
        let message = bytes(chunkedMessage)
        let expected = try parse([message])
        XCTAssertTrue(expected.ended)
        for first in 0...message.count {
            for second in first...message.count {
                let pieces = [Array(message[..<first]), Array(message[first..<second]), Array(message[second...])]
                let parsed = try parse(pieces)
                if parsed != expected {
                    return XCTFail("split at \(first) and \(second): \(parsed)")
                }
            }
        }
    }

    /// A close-delimited response split at every byte boundary parses the same.
    func testCloseDelimitedAtEveryByteBoundary() throws {
        let message = bytes("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil\r\n\r\nthe end")
        var expected = Parsed()
        expected.head = try parse([message]).head
        expected.body = bytes("until\r\n\r\nthe end")
        expected.ended = true
        try assertSplitInvariant(message, finish: true, expected: expected)
    }

    /// 1xx responses followed by a chunked final response, split at every boundary, parse the same.
    func testInformationalThenFinalAtEveryByteBoundary() throws {
        let message = bytes(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
                + "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        let whole = try parse([message])
        XCTAssertEqual(whole.informational.map(\.statusCode), [100, 103])
        XCTAssertEqual(whole.informational.last?.value(forName: "link"), "</style.css>; rel=preload")
        XCTAssertEqual(whole.head?.statusCode, 200)
        XCTAssertEqual(whole.head?.rawBytes, bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"))
        XCTAssertEqual(whole.body, bytes("abc"))
        XCTAssertNil(whole.trailers, "no trailers event without trailer fields")
        XCTAssertTrue(whole.ended)
        try assertSplitInvariant(message, finish: false, expected: whole)
    }

    // MARK: - Chunked

    /// Chunk extensions are skipped and trailer fields are reported after the body.
    func testChunkedWithExtensionsAndTrailers() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(try parser.feed(bytes(chunkedMessage)), into: &parsed)
        XCTAssertEqual(parser.bodyFraming, .chunked)
        XCTAssertEqual(parsed.body, bytes("Hello, world"))
        XCTAssertEqual(parsed.trailers?.map(\.description), ["X-Checksum: abc", "X-Count: 3"])
        XCTAssertTrue(parsed.ended)
        XCTAssertEqual(parser.bodyBytesReceived, 12)
        XCTAssertEqual(parsed.head?.value(forName: "content-type"), "text/plain", "trailers do not change the head")
    }

    /// Chunk sizes are hexadecimal in either case, with leading zeros allowed.
    func testChunkSizesInEitherCaseAndWithLeadingZeros() throws {
        let data = [UInt8](repeating: 0x78, count: 0x1aF)
        let message =
            bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0001aF\r\n") + data
            + bytes("\r\nA\r\n0123456789\r\n000\r\n\r\n")
        let parsed = try parse([message])
        XCTAssertEqual(parsed.body, data + bytes("0123456789"))
        XCTAssertTrue(parsed.ended)
    }

    /// Chunked framing accepts bare LF line endings.
    func testChunkedWithBareLFLineEndings() throws {
        let parsed = try parse([bytes("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nok\n0\nX-T: 1\n\n")])
        XCTAssertEqual(parsed.body, bytes("ok"))
        XCTAssertEqual(parsed.trailers, [HTTPHeaderField(name: "X-T", value: "1")])
        XCTAssertTrue(parsed.ended)
    }

    /// Transfer-Encoding: chunked wins over Content-Length.
    func testTransferEncodingOverridesContentLength() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(
            try parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: Chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")),
            into: &parsed)
        XCTAssertEqual(parser.bodyFraming, .chunked)
        XCTAssertEqual(parsed.body, bytes("x"))
        XCTAssertTrue(parsed.ended)
    }

    /// "gzip, chunked" is dechunked and the other coding passed through.
    func testChunkedAfterAnotherCodingIsDechunked() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(
            try parser.feed(
                bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n\u{1f}x\r\n0\r\n\r\n")),
            into: &parsed)
        XCTAssertEqual(parser.bodyFraming, .chunked)
        XCTAssertEqual(parsed.body, [0x1F, 0x78], "the other coding is passed through undecoded")
    }

    /// A Transfer-Encoding without chunked makes the body close-delimited.
    func testTransferEncodingWithoutChunkedIsCloseDelimited() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(try parser.feed(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nabcdef")), into: &parsed)
        XCTAssertEqual(parser.bodyFraming, .closeDelimited)
        XCTAssertFalse(parsed.ended, "Content-Length is ignored when Transfer-Encoding is present")
        collect(try parser.finish(), into: &parsed)
        XCTAssertEqual(parsed.body, bytes("abcdef"))
        XCTAssertTrue(parsed.ended)
    }

    // MARK: - Close-delimited

    /// A close-delimited body ends only when finish() reports the connection's end.
    func testCloseDelimitedBodyEndsOnlyAtFinish() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(try parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsome")), into: &parsed)
        collect(try parser.feed(bytes(" more")), into: &parsed)
        XCTAssertEqual(parser.bodyFraming, .closeDelimited)
        XCTAssertFalse(parsed.ended)
        XCTAssertFalse(parser.isComplete)
        XCTAssertEqual(try parser.finish(), [.end])
        XCTAssertTrue(parser.isComplete)
        XCTAssertEqual(parsed.body, bytes("some more"))
        XCTAssertEqual(try parser.finish(), [], "a second finish adds nothing")
    }

    /// A close-delimited response may have an empty body.
    func testCloseDelimitedEmptyBody() throws {
        let parsed = try parse([bytes("HTTP/1.0 200 OK\r\n\r\n")], finish: true)
        XCTAssertEqual(parsed.head?.statusCode, 200)
        XCTAssertEqual(parsed.body, [])
        XCTAssertTrue(parsed.ended)
    }

    // MARK: - 1xx

    /// 1xx responses are reported as informational and parsing continues with the final response.
    func testInformationalResponsesAreSkipped() throws {
        var parser = HTTPResponseParser()
        var parsed = Parsed()
        collect(try parser.feed(bytes("HTTP/1.1 100 Continue\r\n\r\n")), into: &parsed)
        XCTAssertEqual(parsed.informational.map(\.statusCode), [100])
        XCTAssertTrue(parsed.informational[0].isInformational)
        XCTAssertNil(parsed.head)
        XCTAssertNil(parser.bodyFraming, "a 1xx response has no body framing")
        XCTAssertFalse(parser.isComplete)
        collect(try parser.feed(bytes("HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\n!")), into: &parsed)
        XCTAssertEqual(parsed.informational.map(\.statusCode), [100, 102])
        XCTAssertEqual(parsed.head?.statusCode, 201)
        XCTAssertEqual(parsed.body, bytes("!"))
        XCTAssertTrue(parsed.ended)
    }

    /// An unrequested 101 Switching Protocols is an error.
    func testSwitchingProtocolsIsAnError() {
        XCTAssertEqual(
            parseError(bytes("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")),
            .unexpectedSwitchingProtocols)
    }

    /// The connection ending after only a 1xx response is a truncated head.
    func testEndAfterOnlyInformationalResponseIsTruncatedHead() {
        XCTAssertEqual(parseError(bytes("HTTP/1.1 100 Continue\r\n\r\n"), finish: true), .truncatedHead)
    }

    // MARK: - Malformed input

    /// Malformed status lines are rejected.
    func testMalformedStatusLinesAreErrors() {
        let lines = [
            "", "garbage", "HTTP/1.1", "HTTP/1.1 ", "HTTP/1.1 20 OK", "HTTP/1.1 2000 OK", "HTTP/1.1 abc OK",
            "HTTP/1.1 -20 OK", "HTTP/1.1 099 Low", "HTTP/1.1200 OK", "HTTP/1.1  200 OK", "http/1.1 200 OK",
            "HTTP/1.x 200 OK", "HTTP/ 200 OK", "HTTP/1. 200 OK", "ICY 200 OK", " HTTP/1.1 200 OK",
            "HTTP/1.1 200OK", "HTTP/1.1 200 bad\u{7f}reason",
        ]
        for line in lines {
            let error = parseError(bytes(line + "\r\nContent-Length: 0\r\n\r\n"))
            XCTAssertEqual(error, .malformedStatusLine(line), "status line \"\(line)\"")
        }
    }

    /// Well-formed versions other than HTTP/1.x are reported as unsupported.
    func testOtherHTTPVersionsAreRejected() {
        XCTAssertEqual(parseError(bytes("HTTP/2 200\r\n\r\n")), .unsupportedVersion("HTTP/2"))
        XCTAssertEqual(parseError(bytes("HTTP/2.0 200 OK\r\n\r\n")), .unsupportedVersion("HTTP/2.0"))
        XCTAssertEqual(parseError(bytes("HTTP/0.9 200 OK\r\n\r\n")), .unsupportedVersion("HTTP/0.9"))
        XCTAssertEqual(parseError(bytes("HTTP/10.1 200 OK\r\n\r\n")), .unsupportedVersion("HTTP/10.1"))
    }

    /// Malformed field lines are rejected.
    func testMalformedHeaderFieldsAreErrors() {
        let lines = ["No colon here", ": no name", "Bad Name: x", "Space-Before-Colon : x", "Bad\u{1}Char: x", "(x): y"]
        for line in lines {
            let error = parseError(bytes("HTTP/1.1 200 OK\r\n\(line)\r\nContent-Length: 0\r\n\r\n"))
            XCTAssertEqual(error, .malformedHeaderField(line), "field line \"\(line)\"")
        }
        XCTAssertEqual(
            parseError(bytes("HTTP/1.1 200 OK\r\n folded-first: x\r\n\r\n")), .malformedHeaderField(" folded-first: x"),
            "an obs-fold with no field before it")
    }

    /// A CR that does not end a line is rejected.
    func testBareCarriageReturnIsAnError() {
        XCTAssertEqual(parseError(bytes("HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n")), .bareCarriageReturn)
        XCTAssertEqual(parseError(bytes("HTTP/1.1 200\rOK\r\n\r\n")), .bareCarriageReturn)
        XCTAssertEqual(parseError(bytes("HTTP/1.1 200 OK\r\n\r\r\n")), .bareCarriageReturn)
    }

    /// Non-numeric, overflowing and conflicting Content-Length values are rejected.
    func testInvalidContentLengthsAreErrors() {
        let values = ["abc", "-1", "+5", "1.5", "0x10", "5 6", "", "1,", "99999999999999999999999", "5, 6", " 5 ,7"]
        for value in values {
            let error = parseError(bytes("HTTP/1.1 200 OK\r\nContent-Length: \(value)\r\n\r\n"))
            guard case .invalidContentLength = error else {
                XCTFail("Content-Length \"\(value)\": \(String(describing: error))")
                continue
            }
        }
        XCTAssertEqual(
            parseError(bytes("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")),
            .invalidContentLength("5, 6"), "two fields that disagree")
    }

    /// Repeated or non-final chunked and empty Transfer-Encoding values are rejected.
    func testInvalidTransferEncodingsAreErrors() {
        for value in ["chunked, chunked", "chunked, gzip", "", " , "] {
            let error = parseError(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: \(value)\r\n\r\n0\r\n\r\n"))
            guard case .invalidTransferEncoding = error else {
                XCTFail("Transfer-Encoding \"\(value)\": \(String(describing: error))")
                continue
            }
        }
    }

    /// Malformed, overflowing and overlong chunk-size lines are rejected.
    func testMalformedChunkSizesAreErrors() {
        let lines = ["", "xyz", "-1", "+1", "0x5", "5 garbage", "g", " 5", "1_0", "FFFFFFFFFFFFFFFFF", "10000000000000000"]
        for line in lines {
            let error = parseError(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\(line)\r\n"))
            XCTAssertEqual(error, .malformedChunkSize(line), "chunk size line \"\(line)\"")
        }
        let tooLong = "5;" + String(repeating: "a", count: HTTPResponseParser.maxChunkSizeLineLength)
        guard case .malformedChunkSize = parseError(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\(tooLong)"))
        else { return XCTFail("an overlong chunk size line (still without its LF) is not rejected") }
    }

    /// The largest representable chunk size is accepted.
    func testLargestChunkSizeStillParses() throws {
        var parser = HTTPResponseParser()
        _ = try parser.feed(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7FFFFFFFFFFFFFFF\r\nabc"))
        XCTAssertFalse(parser.isComplete)
        XCTAssertEqual(try? parser.finish(), nil)
    }

    /// Malformed chunk extensions are rejected.
    func testMalformedChunkExtensionsAreErrors() {
        let lines = ["5;", "5; ", "5;=v", "5;n=", "5;n=\"open", "5;n=\"esc\\", "5;n=a b", "5;n=v;", "5;;n", "5;n=\"q\"x", "5;n@=v"]
        for line in lines {
            let error = parseError(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\(line)\r\nhello\r\n0\r\n\r\n"))
            XCTAssertEqual(error, .malformedChunkExtension(line), "chunk size line \"\(line)\"")
        }
    }

    /// Token and quoted-string chunk extensions with optional whitespace are accepted.
    func testValidChunkExtensionsAreAccepted() throws {
        for line in ["5;a", "5 ;a", "5; a = b", "5;a=\"\"", "5;a=\"x;y=z\\\"\";b", "5\t;\ta\t=\t\"t\""] {
            let parsed = try parse([bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\(line)\r\nhello\r\n0\r\n\r\n")])
            XCTAssertEqual(parsed.body, bytes("hello"), line)
            XCTAssertTrue(parsed.ended, line)
        }
    }

    /// Chunk data longer than its size, or not followed by CRLF, is rejected.
    func testChunkDataWithoutCRLFIsAnError() {
        for tail in ["Hello!\r\n0\r\n\r\n", "HelloX", "Hello\rX", "Hello\r\r\n"] {
            XCTAssertEqual(
                parseError(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n\(tail)")),
                .missingChunkDataTerminator, "chunk data \"\(tail)\"")
        }
    }

    /// A malformed trailer field is rejected.
    func testMalformedTrailerIsAnError() {
        XCTAssertEqual(
            parseError(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n")),
            .malformedHeaderField("bad trailer"))
    }

    /// Heads and trailer sections beyond the size limit are rejected, even without a line end.
    func testHeadAndTrailersLargerThanTheLimitAreErrors() throws {
        let field = "X-Pad: " + String(repeating: "p", count: 200) + "\r\n"
        let head = "HTTP/1.1 200 OK\r\n" + String(repeating: field, count: 10) + "Content-Length: 0\r\n\r\n"
        XCTAssertEqual(parseError(bytes(head), maxHeadSize: 1024), .headTooLarge(limit: 1024))
        XCTAssertTrue(try parse([bytes(head)], maxHeadSize: head.utf8.count).ended, "a head of exactly the limit is fine")
        XCTAssertEqual(
            parseError(bytes(head), maxHeadSize: head.utf8.count - 1), .headTooLarge(limit: head.utf8.count - 1))
        // A line that never ends is stopped at the limit, not buffered forever.
        XCTAssertEqual(
            parseError(bytes("HTTP/1.1 200 OK\r\nX-Endless: " + String(repeating: "e", count: 2000)), maxHeadSize: 1024),
            .headTooLarge(limit: 1024))
        let trailers = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + String(repeating: field, count: 10) + "\r\n"
        XCTAssertEqual(parseError(bytes(trailers), maxHeadSize: 1024), .headTooLarge(limit: 1024))
    }

    /// After an error, every later call throws the same error.
    func testErrorsAreSticky() {
        var parser = HTTPResponseParser()
        XCTAssertThrowsError(try parser.feed(bytes("nonsense\r\n"))) { error in
            XCTAssertEqual(error as? HTTPResponseParserError, .malformedStatusLine("nonsense"))
        }
        XCTAssertThrowsError(try parser.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))) { error in
            XCTAssertEqual(error as? HTTPResponseParserError, .malformedStatusLine("nonsense"))
        }
        XCTAssertThrowsError(try parser.finish()) { error in
            XCTAssertEqual(error as? HTTPResponseParserError, .malformedStatusLine("nonsense"))
        }
        XCTAssertFalse(parser.isComplete)
    }

    // MARK: - Truncation

    /// An empty response and a truncated head are told apart.
    func testEmptyResponseAndTruncatedHead() {
        XCTAssertEqual(parseError([], finish: true), .emptyResponse)
        XCTAssertEqual(parseError(bytes("HTTP/1.1 200 O"), finish: true), .truncatedHead)
        XCTAssertEqual(parseError(bytes("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"), finish: true), .truncatedHead)
    }

    /// A body shorter than its Content-Length is reported with expected and received counts.
    func testTruncatedContentLengthBodyIsDetected() {
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
        for received in 0..<10 {
            let message = bytes(head + String(repeating: "b", count: received))
            XCTAssertEqual(
                parseError(message, finish: true), .truncatedBody(expected: 10, received: received),
                "\(received) of 10 bytes")
        }
        XCTAssertEqual(
            HTTPResponseParserError.truncatedBody(expected: 10, received: 3).description,
            "body truncated: received 3 of 10 bytes (Content-Length)")
    }

    /// Every strict prefix of a length-delimited or chunked response is reported as truncated.
    func testEveryTruncationOfALengthDelimitedResponseIsDetected() throws {
        let samples = [
            bytes("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ncomplete"),
            bytes(chunkedMessage),
            bytes("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n"),
        ]
        for sample in samples {
            XCTAssertTrue(try parse([sample], finish: true).ended)
            for length in 0..<sample.count {
                let error = parseError(Array(sample[..<length]), finish: true)
                switch error {
                case .emptyResponse: XCTAssertEqual(length, 0)
                case .truncatedHead, .truncatedBody, .truncatedChunkedBody: break
                default: XCTFail("prefix of \(length) bytes: \(String(describing: error))")
                }
            }
        }
    }

    /// A chunked body cut anywhere before the end of its trailer section is reported as truncated.
    func testTruncatedChunkedBodyIsDetected() {
        let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        let cases: [(String, Int)] = [
            ("", 0), ("5", 0), ("5\r\n", 0), ("5\r\nHel", 3), ("5\r\nHello", 5), ("5\r\nHello\r", 5),
            ("5\r\nHello\r\n", 5), ("5\r\nHello\r\n0\r\n", 5), ("5\r\nHello\r\n0\r\nX-T: 1\r\n", 5),
        ]
        for (tail, received) in cases {
            XCTAssertEqual(
                parseError(bytes(head + tail), finish: true), .truncatedChunkedBody(received: received),
                "chunked body \"\(tail)\"")
        }
    }

    /// Error descriptions are readable and escape control characters.
    func testErrorDescriptionsAreReadable() {
        XCTAssertEqual(
            HTTPResponseParserError.malformedStatusLine("bad\u{1}").description, "malformed status line \"bad\\u{1}\"")
        XCTAssertTrue(HTTPResponseParserError.emptyResponse.description.contains("without sending a response"))
        XCTAssertTrue(HTTPResponseParserError.truncatedChunkedBody(received: 4).description.contains("last chunk"))
    }
}
