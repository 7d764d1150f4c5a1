/// One header (or trailer) field of an HTTP message, as received.
///
/// The name keeps the case the server used; compare names with `hasName(_:)`, which ignores ASCII case.
public struct HTTPHeaderField: Sendable, Equatable, CustomStringConvertible {
    /// The field name (a token, e.g. `Content-Length`).
    public var name: String
    /// The field value with leading and trailing whitespace removed (obs-folds replaced by one space).
    public var value: String

    /// Creates a field from a name and a value.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Whether this field's name equals `other`, ignoring ASCII case.
    public func hasName(_ other: String) -> Bool {
        name.lowercased() == other.lowercased()
    }

    /// `Name: value`, as the field would be written on the wire (without the line ending).
    public var description: String { "\(name): \(value)" }
}

/// An HTTP version as sent in a status line, e.g. `HTTP/1.1`.
public struct HTTPVersion: Sendable, Equatable, CustomStringConvertible {
    /// The major version (always 1 for a response this parser accepts).
    public var major: Int
    /// The minor version (0 or 1 in practice).
    public var minor: Int

    /// Creates a version from its two digits.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// `HTTP/<major>.<minor>`.
    public var description: String { "HTTP/\(major).\(minor)" }
}

/// The status line and header section of one response (final or informational).
public struct HTTPResponseHead: Sendable, Equatable {
    /// The protocol version from the status line.
    public var version: HTTPVersion
    /// The three-digit status code.
    public var statusCode: Int
    /// The reason phrase (may be empty).
    public var reasonPhrase: String
    /// The header fields in the order received.
    public var headers: [HTTPHeaderField]
    /// The head exactly as received: status line, field lines and the terminating empty line, with their line endings.
    public var rawBytes: [UInt8]

    /// Creates a head from its parts.
    public init(
        version: HTTPVersion, statusCode: Int, reasonPhrase: String,
        headers: [HTTPHeaderField], rawBytes: [UInt8]
    ) {
        self.version = version
        self.statusCode = statusCode
        self.reasonPhrase = reasonPhrase
        self.headers = headers
        self.rawBytes = rawBytes
    }

    /// The status line without its line ending, e.g. `HTTP/1.1 200 OK`.
    public var statusLine: String {
        reasonPhrase.isEmpty
            ? "\(version) \(statusCode)"
            : "\(version) \(statusCode) \(reasonPhrase)"
    }

    /// Whether this is a 1xx (informational) response.
    public var isInformational: Bool { (100..<200).contains(statusCode) }

    /// All values of the fields named `name` (ASCII case-insensitive), in order.
    public func values(forName name: String) -> [String] {
        headers.filter { $0.hasName(name) }.map(\.value)
    }

    /// The values of the fields named `name` joined with `, ` (RFC 9110 §5.3), or nil when there is none.
    public func value(forName name: String) -> String? {
        let all = values(forName: name)
        return all.isEmpty ? nil : all.joined(separator: ", ")
    }
}

/// How the length of a response body is determined (RFC 9112 §6.3).
public enum HTTPBodyFraming: Sendable, Equatable, CustomStringConvertible {
    /// No body at all (204, 304, a 2xx response to CONNECT).
    case empty
    /// Exactly this many bytes follow the head.
    case contentLength(Int)
    /// `Transfer-Encoding: chunked`.
    case chunked
    /// The body ends when the server closes the connection.
    case closeDelimited

    /// A short human-readable description, used by the `-v` trace.
    public var description: String {
        switch self {
        case .empty: return "no body"
        case .contentLength(let length): return "Content-Length \(length)"
        case .chunked: return "chunked"
        case .closeDelimited: return "close-delimited"
        }
    }
}

/// Something the parser recognised in the bytes fed to it.
public enum HTTPResponseEvent: Sendable, Equatable {
    /// A complete 1xx response head other than 101; it is skipped and parsing continues with the next response.
    case informational(HTTPResponseHead)
    /// The head of the final response.
    case head(HTTPResponseHead)
    /// Decoded body bytes (chunk framing removed). A body may arrive in any number of these events.
    case body([UInt8])
    /// The trailer fields after the last chunk of a chunked body (only sent when there are some).
    case trailers([HTTPHeaderField])
    /// The response is complete; no further events follow.
    case end
}

/// Why a response could not be parsed. Once the parser has thrown, it throws the same error again on every call.
public enum HTTPResponseParserError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The connection closed before any byte of a response arrived.
    case emptyResponse
    /// The status line is not `HTTP/x.y SP 3DIGIT SP reason`.
    case malformedStatusLine(String)
    /// The status line names an HTTP version other than 1.x.
    case unsupportedVersion(String)
    /// A header or trailer line is not `name: value` (or is an obs-fold with nothing to continue).
    case malformedHeaderField(String)
    /// A carriage return that is not part of a CRLF line ending.
    case bareCarriageReturn
    /// The head (or the trailer section) is larger than the parser's limit.
    case headTooLarge(limit: Int)
    /// A `Content-Length` value that is not a decimal number, overflows, or disagrees with another one.
    case invalidContentLength(String)
    /// A `Transfer-Encoding` whose `chunked` is repeated or not the last coding, or that is empty.
    case invalidTransferEncoding(String)
    /// A `101 Switching Protocols` response, which a plain GET never asked for.
    case unexpectedSwitchingProtocols
    /// A chunk-size line that does not start with a hexadecimal number, or whose number overflows.
    case malformedChunkSize(String)
    /// Chunk extensions after the chunk size that are not `;name[=token|quoted-string]`.
    case malformedChunkExtension(String)
    /// Chunk data that is not followed by CRLF.
    case missingChunkDataTerminator
    /// The connection closed in the middle of the head.
    case truncatedHead
    /// The connection closed before `Content-Length` bytes arrived.
    case truncatedBody(expected: Int, received: Int)
    /// The connection closed before the last chunk and the trailer section of a chunked body.
    case truncatedChunkedBody(received: Int)

    /// A one-line explanation suitable for an error message.
    public var description: String {
        switch self {
        case .emptyResponse:
            return "the server closed the connection without sending a response"
        case .malformedStatusLine(let line):
            return "malformed status line \(quoted(line))"
        case .unsupportedVersion(let version):
            return "unsupported HTTP version \(quoted(version))"
        case .malformedHeaderField(let line):
            return "malformed header field \(quoted(line))"
        case .bareCarriageReturn:
            return "carriage return without line feed in the response head"
        case .headTooLarge(let limit):
            return "response head larger than \(limit) bytes"
        case .invalidContentLength(let value):
            return "invalid Content-Length \(quoted(value))"
        case .invalidTransferEncoding(let value):
            return "invalid Transfer-Encoding \(quoted(value))"
        case .unexpectedSwitchingProtocols:
            return "unexpected 101 Switching Protocols response"
        case .malformedChunkSize(let line):
            return "malformed chunk size line \(quoted(line))"
        case .malformedChunkExtension(let line):
            return "malformed chunk extension in \(quoted(line))"
        case .missingChunkDataTerminator:
            return "chunk data not followed by CRLF"
        case .truncatedHead:
            return "the connection closed in the middle of the response head"
        case .truncatedBody(let expected, let received):
            return "body truncated: received \(received) of \(expected) bytes (Content-Length)"
        case .truncatedChunkedBody(let received):
            return "chunked body truncated after \(received) bytes: the connection closed before the last chunk"
        }
    }
}

/// Quotes a protocol fragment for an error message, shortening it to 80 characters.
private func quoted(_ text: String) -> String {
    let shown = text.count > 80 ? String(text.prefix(80)) + "…" : text
    return "\""
        + shown.unicodeScalars.map {
            $0.isASCII && $0.value >= 0x20 && $0.value != 0x7F
                ? String($0) : "\\u{\(String($0.value, radix: 16))}"
        }.joined() + "\""
}

/// An incremental HTTP/1.1 response parser.
///
/// Feed it the bytes read from the connection in pieces of any size with `feed(_:)`; each call returns the events those
/// bytes completed. When the connection reaches its end, call `finish()`: it completes a close-delimited body or
/// throws when the response is incomplete. The parser handles `Content-Length`, `chunked` (chunk extensions are
/// validated and ignored, trailers are reported) and close-delimited bodies, skips 1xx responses, and never buffers
/// body bytes: each `.body` event holds the body bytes of the piece just fed. Bare LF line endings are accepted
/// (RFC 9112 §2.2); obs-folded field lines are unfolded (§5.2). HEAD responses are not supported.
///
/// For the response to a `CONNECT` (`request: .connect`), a 2xx head ends the response: what follows is the tunnel
/// (RFC 9110 §9.3.6), and those bytes are not parsed but counted in `bytesAfterEnd`, so the caller can hand them on.
public struct HTTPResponseParser: Sendable {
    /// The request the response answers, where that changes how it is framed.
    public enum Request: Sendable, Equatable {
        /// A GET (or any request whose response has a body framed as RFC 9112 §6.3 says).
        case get
        /// A CONNECT: a 2xx response has no body; the connection becomes a tunnel after its head.
        case connect
    }

    /// The default limit for the head and for the trailer section.
    public static let defaultMaxHeadSize = 64 * 1024
    /// The longest chunk-size line (including extensions) accepted.
    public static let maxChunkSizeLineLength = 4096

    /// Where the parser is in the response.
    private enum State: Sendable, Equatable {
        /// Reading a status line.
        case statusLine
        /// Reading header field lines up to the empty line.
        case headerFields
        /// Reading a body of which this many bytes are still due.
        case fixedBody(remaining: Int)
        /// Reading a body that ends with the connection.
        case closeDelimitedBody
        /// Reading a chunk-size line.
        case chunkSize
        /// Reading chunk data of which this many bytes are still due.
        case chunkData(remaining: Int)
        /// Expecting the CRLF after chunk data; `sawCR` once its CR arrived.
        case chunkDataEnd(sawCR: Bool)
        /// Reading trailer field lines up to the empty line.
        case trailerFields
        /// The response is complete.
        case complete
    }

    /// The limit applied to the head and to the trailer section.
    public let maxHeadSize: Int
    /// The request the response answers.
    public let request: Request
    /// How the final response's body is framed; nil until its head is complete.
    public private(set) var bodyFraming: HTTPBodyFraming?
    /// Decoded body bytes delivered so far.
    public private(set) var bodyBytesReceived = 0
    /// Bytes fed after the response was complete; they are not parsed (for a CONNECT, the tunnel's first bytes: the
    /// last `bytesAfterEnd` bytes of the piece whose events held `.end`).
    public private(set) var bytesAfterEnd = 0

    /// The current state.
    private var state: State = .statusLine
    /// The error thrown once; rethrown on later calls.
    private var failure: HTTPResponseParserError?
    /// The line being accumulated (without its LF).
    private var line: [UInt8] = []
    /// The raw bytes of the head being read.
    private var rawHead: [UInt8] = []
    /// Bytes of the current head or trailer section so far.
    private var sectionSize = 0
    /// The parsed status line of the head being read.
    private var status: (version: HTTPVersion, code: Int, reason: String)?
    /// The fields of the head or trailer section being read.
    private var fields: [HTTPHeaderField] = []
    /// Every byte fed so far (to tell an empty response from a truncated one).
    private var totalBytesFed = 0

    /// Creates a parser for one response.
    /// - Parameters:
    ///   - maxHeadSize: the largest head (status line, fields and line endings) and trailer section accepted.
    ///   - request: the request the response answers (`.connect`: a 2xx head ends it).
    public init(maxHeadSize: Int = HTTPResponseParser.defaultMaxHeadSize, request: Request = .get) {
        self.maxHeadSize = maxHeadSize
        self.request = request
    }

    /// Whether the final response, including its body, has been completely parsed.
    public var isComplete: Bool { state == .complete }

    /// Parses the next bytes of the response and returns the events they completed, in order.
    /// - Throws: `HTTPResponseParserError` for a malformed response; the parser is then unusable.
    public mutating func feed(_ bytes: [UInt8]) throws(HTTPResponseParserError) -> [HTTPResponseEvent] {
        if let failure { throw failure }
        do {
            return try parse(bytes)
        } catch {
            failure = error
            throw error
        }
    }

    /// Tells the parser that the connection ended, and returns the final events.
    ///
    /// Completes a close-delimited body with `.end`; returns nothing when the response was already complete.
    /// - Throws: `HTTPResponseParserError` when the response is incomplete (empty, head or body truncated).
    public mutating func finish() throws(HTTPResponseParserError) -> [HTTPResponseEvent] {
        if let failure { throw failure }
        let error: HTTPResponseParserError
        switch state {
        case .complete:
            return []
        case .closeDelimitedBody:
            state = .complete
            return [.end]
        case .statusLine where totalBytesFed == 0:
            error = .emptyResponse
        case .statusLine, .headerFields:
            error = .truncatedHead
        case .fixedBody(let remaining):
            error = .truncatedBody(expected: bodyBytesReceived + remaining, received: bodyBytesReceived)
        case .chunkSize, .chunkData, .chunkDataEnd, .trailerFields:
            error = .truncatedChunkedBody(received: bodyBytesReceived)
        }
        failure = error
        throw error
    }

    // MARK: - Parsing

    /// The byte values the parser looks for.
    private enum ASCII {
        static let cr: UInt8 = 0x0D
        static let lf: UInt8 = 0x0A
        static let space: UInt8 = 0x20
        static let tab: UInt8 = 0x09
        static let colon: UInt8 = 0x3A
        static let semicolon: UInt8 = 0x3B
        static let equals: UInt8 = 0x3D
        static let quote: UInt8 = 0x22
        static let backslash: UInt8 = 0x5C
    }

    /// The body of `feed(_:)` without the failure bookkeeping.
    private mutating func parse(_ bytes: [UInt8]) throws(HTTPResponseParserError) -> [HTTPResponseEvent] {
        totalBytesFed += bytes.count
        var events: [HTTPResponseEvent] = []
        var index = 0
        while index < bytes.count {
            switch state {
            case .statusLine, .headerFields, .trailerFields, .chunkSize:
                guard let completeLine = try takeLine(from: bytes, at: &index) else { continue }
                try handle(line: completeLine, events: &events)
            case .fixedBody(let remaining):
                let count = min(remaining, bytes.count - index)
                emitBody(bytes[index..<(index + count)], into: &events)
                index += count
                if count == remaining {
                    state = .complete
                    events.append(.end)
                } else {
                    state = .fixedBody(remaining: remaining - count)
                }
            case .closeDelimitedBody:
                emitBody(bytes[index...], into: &events)
                index = bytes.count
            case .chunkData(let remaining):
                let count = min(remaining, bytes.count - index)
                emitBody(bytes[index..<(index + count)], into: &events)
                index += count
                state = count == remaining ? .chunkDataEnd(sawCR: false) : .chunkData(remaining: remaining - count)
            case .chunkDataEnd(let sawCR):
                let byte = bytes[index]
                index += 1
                if byte == ASCII.lf {
                    state = .chunkSize
                } else if byte == ASCII.cr && !sawCR {
                    state = .chunkDataEnd(sawCR: true)
                } else {
                    throw .missingChunkDataTerminator
                }
            case .complete:
                bytesAfterEnd += bytes.count - index
                index = bytes.count
            }
        }
        return events
    }

    /// Appends a `.body` event for a non-empty slice and counts it.
    private mutating func emitBody(_ slice: ArraySlice<UInt8>, into events: inout [HTTPResponseEvent]) {
        guard !slice.isEmpty else { return }
        bodyBytesReceived += slice.count
        events.append(.body(Array(slice)))
    }

    /// Accumulates bytes up to and including the next LF; returns the line without its CRLF/LF once it is complete.
    /// Enforces the head/trailer size limit and the chunk-size line limit, and rejects bare CRs.
    private mutating func takeLine(from bytes: [UInt8], at index: inout Int) throws(HTTPResponseParserError) -> [UInt8]? {
        let isHeadSection = state != .chunkSize
        let limit = isHeadSection ? maxHeadSize - sectionSize : HTTPResponseParser.maxChunkSizeLineLength
        let end = bytes[index...].firstIndex(of: ASCII.lf)
        let stop = end.map { $0 + 1 } ?? bytes.count
        let piece = bytes[index..<stop]
        index = stop
        if line.count + piece.count > limit {
            if isHeadSection { throw .headTooLarge(limit: maxHeadSize) }
            throw .malformedChunkSize(String(decoding: line + piece.prefix(80), as: UTF8.self))
        }
        if isHeadSection {
            sectionSize += piece.count
            if state != .trailerFields { rawHead.append(contentsOf: piece) }
        }
        line.append(contentsOf: piece)
        guard end != nil else { return nil }
        var complete = line
        line.removeAll(keepingCapacity: true)
        complete.removeLast()  // LF
        if complete.last == ASCII.cr { complete.removeLast() }
        if complete.contains(ASCII.cr) { throw .bareCarriageReturn }
        return complete
    }

    /// Handles one complete line in the line-oriented states.
    private mutating func handle(line: [UInt8], events: inout [HTTPResponseEvent]) throws(HTTPResponseParserError) {
        switch state {
        case .statusLine:
            status = try Self.parseStatusLine(line)
            state = .headerFields
        case .headerFields:
            if line.isEmpty {
                try finishHead(events: &events)
            } else {
                try addFieldLine(line)
            }
        case .trailerFields:
            if line.isEmpty {
                if !fields.isEmpty { events.append(.trailers(fields)) }
                fields = []
                state = .complete
                events.append(.end)
            } else {
                try addFieldLine(line)
            }
        case .chunkSize:
            let size = try Self.parseChunkSizeLine(line)
            if size == 0 {
                state = .trailerFields
                sectionSize = 0
                fields = []
            } else {
                state = .chunkData(remaining: size)
            }
        default:
            preconditionFailure("line in state \(state)")
        }
    }

    /// Adds a field line (or an obs-fold continuing the previous field) to `fields`.
    private mutating func addFieldLine(_ line: [UInt8]) throws(HTTPResponseParserError) {
        if line[0] == ASCII.space || line[0] == ASCII.tab {
            // obs-fold: a user agent replaces it with a space (RFC 9112 §5.2).
            guard !fields.isEmpty else { throw .malformedHeaderField(String(decoding: line, as: UTF8.self)) }
            let continuation = Self.trimmingWhitespace(line[...])
            if !continuation.isEmpty {
                let previous = fields[fields.count - 1].value
                fields[fields.count - 1].value =
                    previous.isEmpty ? Self.text(continuation) : previous + " " + Self.text(continuation)
            }
            return
        }
        guard let colon = line.firstIndex(of: ASCII.colon), colon > 0,
            line[..<colon].allSatisfy(Self.isTokenCharacter)
        else { throw .malformedHeaderField(String(decoding: line, as: UTF8.self)) }
        let name = String(decoding: line[..<colon], as: UTF8.self)
        let value = Self.text(Self.trimmingWhitespace(line[(colon + 1)...]))
        fields.append(HTTPHeaderField(name: name, value: value))
    }

    /// Completes a head at its empty line: skips informational responses, or determines the body framing.
    private mutating func finishHead(events: inout [HTTPResponseEvent]) throws(HTTPResponseParserError) {
        guard let status else { preconditionFailure("head without status line") }
        let head = HTTPResponseHead(
            version: status.version, statusCode: status.code, reasonPhrase: status.reason,
            headers: fields, rawBytes: rawHead)
        self.status = nil
        fields = []
        rawHead = []
        sectionSize = 0
        if head.isInformational {
            if head.statusCode == 101 { throw .unexpectedSwitchingProtocols }
            events.append(.informational(head))
            state = .statusLine
            return
        }
        let tunnel = request == .connect && (200..<300).contains(head.statusCode)
        let framing = tunnel ? HTTPBodyFraming.empty : try Self.framing(of: head)
        bodyFraming = framing
        events.append(.head(head))
        switch framing {
        case .empty, .contentLength(0):
            state = .complete
            events.append(.end)
        case .contentLength(let length):
            state = .fixedBody(remaining: length)
        case .chunked:
            state = .chunkSize
        case .closeDelimited:
            state = .closeDelimitedBody
        }
    }

    /// Determines how the body of a final response is framed (RFC 9112 §6.3, for a response to GET).
    static func framing(of head: HTTPResponseHead) throws(HTTPResponseParserError) -> HTTPBodyFraming {
        if head.statusCode == 204 || head.statusCode == 304 { return .empty }
        let transferEncodings = head.values(forName: "Transfer-Encoding")
        if !transferEncodings.isEmpty {
            let joined = transferEncodings.joined(separator: ", ")
            let codings = joined.split(separator: ",")
                .map { $0.split(separator: ";", maxSplits: 1).first.map(String.init) ?? "" }
                .map { $0.trimmingASCIIWhitespace().lowercased() }
                .filter { !$0.isEmpty }
            guard !codings.isEmpty else { throw .invalidTransferEncoding(joined) }
            let chunkedCount = codings.filter { $0 == "chunked" }.count
            if chunkedCount == 0 { return .closeDelimited }  // §6.3 item 4: read until the connection closes
            guard chunkedCount == 1, codings.last == "chunked" else { throw .invalidTransferEncoding(joined) }
            return .chunked  // Transfer-Encoding overrides any Content-Length
        }
        let lengths = head.values(forName: "Content-Length")
        if lengths.isEmpty { return .closeDelimited }
        var length: Int?
        for element in lengths.joined(separator: ",").split(separator: ",", omittingEmptySubsequences: false) {
            let text = String(element).trimmingASCIIWhitespace()
            guard let value = parseDecimal(text) else {
                throw .invalidContentLength(lengths.joined(separator: ", "))
            }
            if let length, length != value { throw .invalidContentLength(lengths.joined(separator: ", ")) }
            length = value
        }
        return .contentLength(length ?? 0)
    }

    /// Parses `HTTP/1.x SP 3DIGIT [SP reason-phrase]` (the space before an empty reason phrase may be missing).
    static func parseStatusLine(
        _ line: [UInt8]
    ) throws(HTTPResponseParserError) -> (version: HTTPVersion, code: Int, reason: String) {
        let text = String(decoding: line, as: UTF8.self)
        let prefix: [UInt8] = Array("HTTP/".utf8)
        guard line.starts(with: prefix) else { throw .malformedStatusLine(text) }
        let versionEnd = line.firstIndex(of: ASCII.space) ?? line.count
        let versionNumber = line[prefix.count..<versionEnd]
        let version: HTTPVersion
        if versionNumber.count == 3, let major = digitValue(versionNumber[prefix.count]),
            versionNumber[prefix.count + 1] == UInt8(ascii: "."),
            let minor = digitValue(versionNumber[prefix.count + 2])
        {
            version = HTTPVersion(major: major, minor: minor)
        } else if Self.looksLikeVersionNumber(versionNumber) {
            throw .unsupportedVersion(String(decoding: line[..<versionEnd], as: UTF8.self))  // e.g. HTTP/2
        } else {
            throw .malformedStatusLine(text)
        }
        guard version.major == 1 else { throw .unsupportedVersion(version.description) }
        let codeStart = versionEnd + 1
        guard line.count >= codeStart + 3,
            let d1 = digitValue(line[codeStart]), let d2 = digitValue(line[codeStart + 1]),
            let d3 = digitValue(line[codeStart + 2]), d1 >= 1
        else { throw .malformedStatusLine(text) }
        let afterCode = codeStart + 3
        if line.count > afterCode && line[afterCode] != ASCII.space { throw .malformedStatusLine(text) }
        let reasonBytes = line.count > afterCode ? line[(afterCode + 1)...] : []
        guard reasonBytes.allSatisfy({ $0 == ASCII.tab || ($0 >= 0x20 && $0 != 0x7F) }) else {
            throw .malformedStatusLine(text)
        }
        return (version, d1 * 100 + d2 * 10 + d3, Self.text(reasonBytes))
    }

    /// Whether `number` is `1*2DIGIT [ "." DIGIT ]`: a plausible HTTP version other than the `DIGIT "." DIGIT` form.
    static func looksLikeVersionNumber(_ number: ArraySlice<UInt8>) -> Bool {
        let parts = number.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        guard let major = parts.first, (1...2).contains(major.count), major.allSatisfy({ digitValue($0) != nil })
        else { return false }
        guard parts.count == 2 else { return true }
        return parts[1].count == 1 && digitValue(parts[1].first!) != nil
    }

    /// Parses a chunk-size line: `1*HEXDIG *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )`.
    static func parseChunkSizeLine(_ line: [UInt8]) throws(HTTPResponseParserError) -> Int {
        let text = String(decoding: line, as: UTF8.self)
        var index = 0
        var size = 0
        while index < line.count, let digit = hexDigitValue(line[index]) {
            guard size <= (Int.max - digit) / 16 else { throw .malformedChunkSize(text) }
            size = size * 16 + digit
            index += 1
        }
        guard index > 0 else { throw .malformedChunkSize(text) }
        func skipWhitespace() {
            while index < line.count, line[index] == ASCII.space || line[index] == ASCII.tab { index += 1 }
        }
        func takeToken() -> Bool {
            let start = index
            while index < line.count, isTokenCharacter(line[index]) { index += 1 }
            return index > start
        }
        skipWhitespace()
        if index < line.count && line[index] != ASCII.semicolon { throw .malformedChunkSize(text) }
        while index < line.count {
            guard line[index] == ASCII.semicolon else { throw .malformedChunkExtension(text) }
            index += 1
            skipWhitespace()
            guard takeToken() else { throw .malformedChunkExtension(text) }
            skipWhitespace()
            if index < line.count, line[index] == ASCII.equals {
                index += 1
                skipWhitespace()
                if index < line.count, line[index] == ASCII.quote {
                    index += 1
                    var closed = false
                    while index < line.count {
                        let byte = line[index]
                        index += 1
                        if byte == ASCII.quote {
                            closed = true
                            break
                        }
                        if byte == ASCII.backslash {
                            guard index < line.count else { break }
                            index += 1
                        }
                    }
                    guard closed else { throw .malformedChunkExtension(text) }
                } else {
                    guard takeToken() else { throw .malformedChunkExtension(text) }
                }
                skipWhitespace()
            }
        }
        return size
    }

    /// Parses `1*DIGIT` into an Int; nil for anything else or on overflow.
    static func parseDecimal(_ text: String) -> Int? {
        guard !text.isEmpty else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard let digit = digitValue(byte) else { return nil }
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times10.addingReportingOverflow(digit)
            if overflow1 || overflow2 { return nil }
            value = sum
        }
        return value
    }

    /// The value of an ASCII decimal digit.
    static func digitValue(_ byte: UInt8) -> Int? {
        (0x30...0x39).contains(byte) ? Int(byte - 0x30) : nil
    }

    /// The value of an ASCII hexadecimal digit (either case).
    static func hexDigitValue(_ byte: UInt8) -> Int? {
        switch byte {
        case 0x30...0x39: return Int(byte - 0x30)
        case 0x41...0x46: return Int(byte - 0x41 + 10)
        case 0x61...0x66: return Int(byte - 0x61 + 10)
        default: return nil
        }
    }

    /// Whether `byte` is a `tchar` (RFC 9110 §5.6.2).
    static func isTokenCharacter(_ byte: UInt8) -> Bool { HTTPSyntax.isTokenCharacter(byte) }

    /// The slice without leading and trailing spaces and tabs.
    static func trimmingWhitespace(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, first == ASCII.space || first == ASCII.tab { slice.removeFirst() }
        while let last = slice.last, last == ASCII.space || last == ASCII.tab { slice.removeLast() }
        return slice
    }

    /// Field and reason text: UTF-8 where valid, otherwise each byte as its Latin-1 character (obs-text).
    static func text(_ bytes: ArraySlice<UInt8>) -> String {
        if let utf8 = String(validating: bytes, as: UTF8.self) { return utf8 }
        return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
    }
}

extension String {
    /// The string without leading and trailing ASCII spaces and tabs.
    func trimmingASCIIWhitespace() -> String {
        var scalars = Substring(self)
        while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars.removeLast() }
        return String(scalars)
    }
}

/// Pieces of HTTP's grammar that requests are checked against too (by the library's CONNECT proxy
/// stage and by `stream-get`).
public enum HTTPSyntax {
    /// Whether `byte` is a `tchar` (RFC 9110 §5.6.2).
    public static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
        default: return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// Whether `text` is a token: one or more `tchar`s (a header field name).
    public static func isToken(_ text: some StringProtocol) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(isTokenCharacter)
    }

    /// Whether `text` is a plain DNS host name as a request may carry it: letters, digits, `-`, `.`
    /// and `_` (no space, control character, `:`, `/` or anything that could end a request line).
    public static func isHostName(_ text: some StringProtocol) -> Bool {
        !text.isEmpty
            && text.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
                    return true
                default:
                    return false
                }
            }
    }
}
