import CoreFoundation
import Foundation
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import HTTPParsing
import SocketStreams

/// How a fetch ended.
public enum FetchOutcome: Sendable, Equatable {
    /// A complete response arrived, with this final status code.
    case completed(statusCode: Int)
    /// The fetch failed; the message explains why (a stream error's `localizedDescription` or a parser error), and
    /// `exitCode` is curl's exit code for that failure (`CurlExitCode`).
    case failed(String, exitCode: Int32)
    /// The `--timeout` limit passed first.
    case timedOut

    /// Whether the fetch got a complete response.
    public var isSuccess: Bool {
        if case .completed = self { return true }
        return false
    }
}

/// One HTTP/1.1 GET over a `createStreamPair(host:port:)` pair, driven by `StreamDelegate` events on the current
/// thread's run loop in the default mode (the Apple guide's style).
///
/// The request is written on `hasSpaceAvailable` (resuming after short writes), the response is read on
/// `hasBytesAvailable` and fed to an `HTTPResponseParser` until the body is complete or `endEncountered`.
/// The body goes to `out` as it arrives; the status line (or, with `includeHeaders`, the whole head on `out`) and
/// the `-v` trace go to `err`.
///
/// After a complete response the connection can carry the next request (`prepare(url:request:isHead:out:)`, then
/// `run(timeout:)` again) when `keepsConnection` is set and the response allows it (`isReusable`): HTTP/1.1
/// keep-alive. `timings` holds when each stream event of the exchange came (curl's `-w` timing variables).
public final class HTTPFetch: NSObject, StreamDelegate {
    /// What to do with a response's body, decided when its head arrives.
    public enum BodyAction: Sendable {
        /// Write it to `out` (and report progress).
        case write
        /// Read it and throw it away (a redirect's body: the connection stays usable).
        case discard
        /// End the exchange at the head, leaving the body unread; the connection is not reused (curl's `-f`).
        case stop
    }

    /// The URL fetched.
    public private(set) var url: HTTPURL
    /// Whether to write the response head to `out` (`-i`).
    public let includeHeaders: Bool
    /// Whether to trace events on `err` (`-v`).
    public let verbose: Bool
    /// Where the body (and with `-i` the head) goes.
    private var out: OutputSink
    /// Where the status line, the trace and nothing else goes.
    private let err: OutputSink
    /// The request bytes.
    private var request: [UInt8]
    /// Whether the request is a HEAD (`-I`): the response has no body, whatever its head says.
    private var isHead = false
    /// How many request bytes have been written.
    private var written = 0
    /// The response parser.
    private var parser = HTTPResponseParser()
    /// The final status code, once the head arrived.
    private var statusCode: Int?
    /// Set when the fetch is over; setting it stops the run loop's current `run(mode:before:)`.
    private var outcome: FetchOutcome? {
        didSet {
            // `run(mode:before:)` returns after a *source* fired, not after timers or performed blocks; whatever
            // mechanism delivered this event, make the loop in `run(timeout:)` look at `outcome` now.
            if outcome != nil { CFRunLoopStop(CFRunLoopGetCurrent()) }
        }
    }
    /// The stream pair while the fetch runs.
    private var streams: (input: InputStream, output: OutputStream)?
    /// The read buffer.
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    /// TLS settings for an https:// URL.
    private let tls: TLSSettings?
    /// Whether the TLS session has been traced.
    private var tracedTLS = false
    /// The proxy to go through, if any.
    private let proxy: ProxyConfiguration?
    /// The host the pair is created for when it is not the URL's (an address resolved here for the proxy).
    private let connectHost: String?
    /// The port the pair is created for when it is not the URL's (`--connect-to`).
    private let connectPort: Int?
    /// Whether the pair is kept open after a response that allows it, for the next request.
    public var keepsConnection = false
    /// Whether `run(timeout:)` resolves the name the pair will resolve first, to time the lookup
    /// (`timings.nameResolved`): the pair reports no event for it.
    public var timesNameLookup = false
    /// Decides, from the final response head, what happens to the body (`.write` when nil).
    public var bodyAction: ((HTTPResponseHead) -> BodyAction)?
    /// Called after each body piece written to `out`, with the body bytes so far and the length when known.
    public var progress: ((_ received: Int, _ expected: Int?) -> Void)?
    /// The final response's head, once it arrived.
    public private(set) var responseHead: HTTPResponseHead?
    /// Body bytes written to `out` in this exchange (curl's `size_download`).
    public private(set) var bodyBytesWritten = 0
    /// Whether this exchange went over a connection an earlier one opened.
    public private(set) var reusedConnection = false
    /// Response bytes read in this exchange (none on a reused connection the server had closed: then the
    /// request can be retried on a new connection, as curl does).
    public private(set) var responseBytesRead = 0
    /// Whether the connection can carry another request: the response was complete and HTTP/1.1 keep-alive
    /// (no `Connection: close`, a length- or chunk-delimited body, nothing after it).
    public private(set) var isReusable = false
    /// Connections opened so far (curl's `num_connects`).
    public private(set) var connectionsOpened = 0
    /// When the events of this exchange came.
    public private(set) var timings = FetchTimings()
    /// The address and port the pair is connected to (the proxy's, through a proxy), read after `openCompleted`.
    public private(set) var remoteEndpoint: (address: String, port: Int)?
    /// The stream error the exchange failed with, if it failed that way.
    public private(set) var streamError: NSError?
    /// curl's `ssl_verify_result`: OpenSSL's verify result for a certificate the handshake refused, 0 once a
    /// handshake is done (the library reports no result when `-k` turned verification off), nil without TLS.
    public var verifyResult: Int? {
        if let code = streamError?.userInfo["OpenSSLVerifyResult"] as? Int { return code }
        return tls != nil && timings.handshakesDone != nil ? 0 : nil
    }
    /// Bytes of response heads (1xx ones included) parsed in this exchange.
    private var headBytes = 0

    /// Prepares a fetch; nothing touches the network until `run(timeout:)`.
    /// - Parameters:
    ///   - proxy: the proxy the pair goes through.
    ///   - connectHost: what the pair (and so the proxy) is asked to connect to instead of the URL's host;
    ///     TLS still verifies the URL's host.
    ///   - request: the request bytes (default: `HTTPRequest.get(url)`); `isHead` when it is a HEAD.
    ///   - connectPort: the port the pair connects to instead of the URL's (`--connect-to`).
    public init(
        url: HTTPURL, includeHeaders: Bool, verbose: Bool, out: OutputSink, err: OutputSink, tls: TLSSettings? = nil,
        proxy: ProxyConfiguration? = nil, connectHost: String? = nil, request: [UInt8]? = nil, isHead: Bool = false,
        connectPort: Int? = nil
    ) {
        self.url = url
        self.proxy = proxy
        self.connectHost = connectHost
        self.connectPort = connectPort
        if var settings = tls, connectHost != nil, case .pairHost = settings.peerName {
            settings.peerName = .name(url.host)
            self.tls = settings
        } else {
            self.tls = tls
        }
        self.includeHeaders = includeHeaders
        self.verbose = verbose
        self.out = out
        self.err = err
        self.request = request ?? HTTPRequest.get(url)
        self.isHead = isHead
    }

    /// Sets up the next exchange on this fetch's connection (same host, port, TLS and proxy): the next
    /// `run(timeout:)` writes `request` on the open pair, or on a new one when it was closed.
    public func prepare(url: HTTPURL, request: [UInt8], isHead: Bool, out: OutputSink) {
        self.url = url
        self.request = request
        self.isHead = isHead
        self.out = out
        written = 0
        parser = HTTPResponseParser()
        statusCode = nil
        outcome = nil
        responseHead = nil
        bodyBytesWritten = 0
        responseBytesRead = 0
        headBytes = 0
        isReusable = false
        streamError = nil
    }

    /// Whether the pair is open (kept after a reusable response).
    public var isConnected: Bool { streams != nil }

    /// Closes the pair kept open for another request.
    public func close() {
        guard let streams else { return }
        for stream in [streams.input, streams.output] as [Stream] {
            stream.delegate = nil
            stream.close()
            stream.remove(from: RunLoop.current, forMode: .default)
        }
        self.streams = nil
    }

    /// Connects (or reuses the open pair), sends the request and reads the response, running the current run loop
    /// in the default mode until the fetch is over or `timeout` seconds (if given) have passed. Closes the streams
    /// before returning, unless `keepsConnection` is set and the response left the connection reusable.
    public func run(timeout: Double?) -> FetchOutcome {
        let runLoop = RunLoop.current
        timings = FetchTimings(start: FetchTimings.now(), usesTLS: tls != nil)
        reusedConnection = streams != nil
        if let streams {
            trace("* reusing the connection to \(connectHost ?? url.host) port \(url.port)")
            let now = FetchTimings.now()
            (timings.nameResolved, timings.connected, timings.handshakesDone) = (now, now, now)
            if streams.output.hasSpaceAvailable { writeRequest(to: streams.output) }
        } else if let failure = open(in: runLoop) {
            return failure
        }
        let pair = streams!
        // The streams' event source keeps the mode non-empty while they are scheduled, so `run` waits.
        // (No keep-alive Timer: a block-based Foundation Timer on Linux is never freed.) `false` means
        // nothing is left to wait on: the streams could not be scheduled (out of fds) and no event
        // will come.
        let deadline = timeout.map { Date(timeIntervalSinceNow: $0) } ?? .distantFuture
        while outcome == nil {
            if Date() >= deadline {
                trace("* timeout reached")
                outcome = .timedOut
                break
            }
            if !runLoop.run(mode: .default, before: deadline) {
                let error = pair.input.streamError ?? pair.output.streamError
                outcome = .failed(
                    "the streams could not be scheduled\(error.map { ": \($0.localizedDescription)" } ?? "")",
                    exitCode: CurlExitCode.couldNotConnect)
            }
        }
        timings.end = FetchTimings.now()
        if let outcome, case .completed = outcome, keepsConnection, isReusable {
            trace("* keeping the connection open")
            return outcome
        }
        close()
        return outcome ?? .timedOut
    }

    /// Makes the pair, sets TLS and the proxy, schedules both streams on `runLoop` and opens them; returns the
    /// failure when the proxy cannot be used.
    private func open(in runLoop: RunLoop) -> FetchOutcome? {
        let host = connectHost ?? url.host
        if timesNameLookup {
            StreamGetProxyRoute.timeLookup(of: proxy?.host ?? host)
            timings.nameResolved = FetchTimings.now()
        }
        let port = connectPort ?? url.port
        let pair = createStreamPair(host: host, port: port)
        streams = (pair.input, pair.output)
        if let tls { _ = pair.input.setProperty(tls, forKey: .tlsSettingsKey) }
        if let proxy, !pair.input.setProperty(proxy, forKey: .proxyConfigurationKey) {
            pair.input.close()
            pair.output.close()
            streams = nil
            return .failed(
                "\(proxy) cannot be asked for \(host) port \(port)"
                    + (proxy.kind == .socks4 && host.contains(":") ? " (SOCKS4 has no IPv6; use --socks5)" : ""),
                exitCode: CurlExitCode.proxyHandshake)
        }
        trace("* connecting to \(host) port \(port)\(proxy.map { " via \($0)" } ?? "")\(tls == nil ? "" : " (TLS)")")
        for stream in [pair.input, pair.output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
        connectionsOpened += 1
        return nil
    }

    /// Handles the events of both streams.
    public func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard let streams, outcome == nil else { return }
        let isInput = aStream === streams.input
        let name = isInput ? "input" : "output"
        trace("* \(name): \(Self.name(of: eventCode))")
        switch eventCode {
        case .openCompleted:
            // TCP is up (to the proxy, through one); handshakes follow.
            if timings.connected == nil {
                timings.connected = FetchTimings.now()
                remoteEndpoint = Self.peer(of: aStream)
            }
        case .hasSpaceAvailable where !isInput:
            // The first has-space comes once every handshake (proxy, TLS) is done.
            if timings.handshakesDone == nil { timings.handshakesDone = FetchTimings.now() }
            traceTLS(streams.output)
            writeRequest(to: streams.output)
        case .hasBytesAvailable where isInput:
            if timings.firstByte == nil, written == request.count { timings.firstByte = FetchTimings.now() }
            readResponse(from: streams.input)
        case .endEncountered where isInput:
            endOfResponse()
        case .errorOccurred:
            let message = Self.describe(aStream.streamError)
            trace("* \(name): error: \(Self.details(of: aStream.streamError))")
            if !isInput && written == request.count && streams.input.streamStatus != .error {
                // The request is out; bytes that arrived before the error are still readable from the input
                // stream, which reports the error (or the end) itself.
                trace("* output error after the request was sent; reading what the input stream has")
                return
            }
            streamError = aStream.streamError as NSError?
            outcome = .failed(
                message,
                exitCode: CurlExitCode.code(for: aStream.streamError, writing: !isInput, viaProxy: proxy != nil))
        default:
            break
        }
    }

    /// Writes the rest of the request.
    private func writeRequest(to output: OutputStream) {
        guard written < request.count else { return }
        let count = request.withUnsafeBufferPointer { bytes in
            output.write(bytes.baseAddress! + written, maxLength: bytes.count - written)
        }
        if count < 0 {
            trace("* output: write failed: \(Self.details(of: output.streamError))")
            outcome = .failed(Self.describe(output.streamError), exitCode: CurlExitCode.sendError)
            return
        }
        written += count
        trace("* output: wrote \(count) bytes (\(written) of \(request.count))")
        if written == request.count, verbose {
            let head = String(decoding: request, as: UTF8.self)
            for line in head.split(separator: "\r\n", omittingEmptySubsequences: true) {
                trace("> \(line)")
            }
            trace(">")
        }
    }

    /// Reads what is available and feeds it to the parser.
    private func readResponse(from input: InputStream) {
        let count = input.read(&buffer, maxLength: buffer.count)
        if count < 0 {
            trace("* input: read failed: \(Self.details(of: input.streamError))")
            outcome = .failed(
                Self.describe(input.streamError),
                exitCode: CurlExitCode.code(for: input.streamError, writing: false, viaProxy: proxy != nil))
            return
        }
        if count == 0 {
            // The stream is now at its end and posts `endEncountered`, which completes the response.
            trace("* input: read 0 bytes (end of stream)")
            return
        }
        trace("* input: read \(count) bytes")
        responseBytesRead += count
        do {
            handle(try parser.feed(Array(buffer[0..<count])))
        } catch {
            outcome = .failed("malformed response: \(error)", exitCode: CurlExitCode.code(for: error))
        }
    }

    /// The connection ended: completes a close-delimited body or reports a truncated response.
    private func endOfResponse() {
        guard outcome == nil else { return }
        do {
            handle(try parser.finish())
        } catch {
            outcome = .failed(error.description, exitCode: CurlExitCode.code(for: error))
        }
    }

    /// Acts on parser events: writes the head, the body and the trailers, and ends the fetch at `.end`.
    private func handle(_ events: [HTTPResponseEvent]) {
        for event in events where outcome == nil {
            switch event {
            case .informational(let head):
                headBytes += head.rawBytes.count
                traceHead(head)
                trace("* skipped informational response \(head.statusCode)")
                if includeHeaders { out.write(head.rawBytes) }
            case .head(let head):
                headBytes += head.rawBytes.count
                statusCode = head.statusCode
                responseHead = head
                traceHead(head)
                if let framing = parser.bodyFraming, !isHead { trace("* body: \(framing)") }
                if includeHeaders || isHead {
                    out.write(head.rawBytes)
                } else if !verbose {
                    err.write(head.statusLine + "\n")
                }
                if isHead {
                    // A HEAD response ends with its head; the connection is reusable if nothing followed it.
                    trace("* response complete (HEAD: no body)")
                    isReusable = Self.allowsKeepAlive(head) && responseBytesRead == headBytes
                    outcome = .completed(statusCode: head.statusCode)
                } else if case .stop = bodyAction?(head) ?? .write {
                    trace("* not reading the body")
                    outcome = .completed(statusCode: head.statusCode)
                }
            case .body(let bytes):
                if case .write = responseHead.flatMap({ bodyAction?($0) }) ?? .write {
                    out.write(bytes)
                    bodyBytesWritten += bytes.count
                    if case .contentLength(let length) = parser.bodyFraming {
                        progress?(bodyBytesWritten, length)
                    } else {
                        progress?(bodyBytesWritten, nil)
                    }
                }
            case .trailers(let fields):
                for field in fields { trace("< \(field)") }
                if includeHeaders { out.write(fields.map { "\($0)\r\n" }.joined() + "\r\n") }
            case .end:
                trace("* response complete (\(parser.bodyBytesReceived) body bytes)")
                if parser.bytesAfterEnd > 0 { trace("* ignoring \(parser.bytesAfterEnd) bytes after the response") }
                isReusable =
                    responseHead.map(Self.allowsKeepAlive) ?? false && parser.bodyFraming != .closeDelimited
                    && parser.bytesAfterEnd == 0 && streams?.input.streamStatus == .open
                outcome = .completed(statusCode: statusCode ?? 0)
            }
        }
    }

    /// Whether a response head lets the connection carry another request: HTTP/1.1 without `Connection: close`,
    /// or HTTP/1.0 with `Connection: keep-alive` (RFC 9112 §9.3).
    static func allowsKeepAlive(_ head: HTTPResponseHead) -> Bool {
        let tokens = head.values(forName: "Connection").flatMap { $0.split(separator: ",") }.map {
            String($0).trimmingSpaces.lowercased()
        }
        if tokens.contains("close") { return false }
        return head.version.major == 1 && (head.version.minor >= 1 || tokens.contains("keep-alive"))
    }

    /// Traces a response head as `< ` lines.
    private func traceHead(_ head: HTTPResponseHead) {
        guard verbose else { return }
        trace("< \(head.statusLine)")
        for field in head.headers { trace("< \(field)") }
        trace("<")
    }

    /// Traces the TLS session once, at the first `hasSpaceAvailable` (the handshake is done by then).
    private func traceTLS(_ stream: Stream) {
        guard verbose, !tracedTLS, tls != nil, let info = stream.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo else {
            return
        }
        tracedTLS = true
        trace("* TLS: \(info.protocolVersion), cipher \(info.cipherSuite)\(info.resumedSession ? ", session resumed" : "")")
        trace("* ALPN: \(info.alpnProtocol.map { "server accepted \($0)" } ?? "none negotiated")")
        if let leaf = info.peerCertificates.first.flatMap(TLSCertificate.init(der:)) {
            let format = ISO8601DateFormatter()
            trace("* server certificate:")
            trace("*   subject: \(leaf.subject)")
            trace("*   issuer: \(leaf.issuer)")
            trace("*   start date: \(format.string(from: leaf.notBefore))")
            trace("*   expire date: \(format.string(from: leaf.notAfter))")
        }
    }

    /// Writes a line to `err` when verbose.
    private func trace(_ line: @autoclosure () -> String) {
        if verbose { err.write(line() + "\n") }
    }

    /// The numeric address and port the stream's socket is connected to (`getpeername` on its native handle).
    static func peer(of stream: Stream) -> (address: String, port: Int)? {
        guard let handle = stream.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketNativeHandle as String)) as? Data,
            handle.count == MemoryLayout<Int32>.size
        else { return nil }
        let fd = handle.withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var service = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        let found = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                getpeername(fd, address, &length) == 0
                    && getnameinfo(
                        address, length, &host, socklen_t(host.count), &service, socklen_t(service.count),
                        NI_NUMERICHOST | NI_NUMERICSERV) == 0
            }
        }
        guard found else { return nil }
        let text = { (chars: [CChar]) in String(decoding: chars.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        return (text(host), Int(text(service)) ?? 0)
    }

    /// The `Stream.Event` constant's name, e.g. `hasBytesAvailable`.
    static func name(of event: Stream.Event) -> String {
        switch event {
        case .openCompleted: return "openCompleted"
        case .hasBytesAvailable: return "hasBytesAvailable"
        case .hasSpaceAvailable: return "hasSpaceAvailable"
        case .errorOccurred: return "errorOccurred"
        case .endEncountered: return "endEncountered"
        default: return "event \(event.rawValue)"
        }
    }

    /// A stream error's `localizedDescription`.
    static func describe(_ error: Error?) -> String {
        guard let error else { return "unknown stream error" }
        return (error as NSError).localizedDescription
    }

    /// Domain and code of a stream error, for the trace.
    static func details(of error: Error?) -> String {
        guard let error else { return "no error object" }
        let nsError = error as NSError
        return "domain=\(nsError.domain) code=\(nsError.code): \(nsError.localizedDescription)"
    }
}
