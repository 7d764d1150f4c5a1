import CoreFoundation
import Foundation
import HTTPParsing
import SocketStreams

/// How a fetch ended.
public enum FetchOutcome: Sendable, Equatable {
    /// A complete response arrived, with this final status code.
    case completed(statusCode: Int)
    /// The fetch failed; the message explains why (a stream error's `localizedDescription` or a parser error).
    case failed(String)
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
public final class HTTPFetch: NSObject, StreamDelegate {
    /// The URL fetched.
    public let url: HTTPURL
    /// Whether to write the response head to `out` (`-i`).
    public let includeHeaders: Bool
    /// Whether to trace events on `err` (`-v`).
    public let verbose: Bool
    /// Where the body (and with `-i` the head) goes.
    private let out: OutputSink
    /// Where the status line, the trace and nothing else goes.
    private let err: OutputSink
    /// The request bytes.
    private let request: [UInt8]
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

    /// Prepares a fetch; nothing touches the network until `run(timeout:)`.
    /// - Parameters:
    ///   - proxy: the proxy the pair goes through.
    ///   - connectHost: what the pair (and so the proxy) is asked to connect to instead of the URL's host;
    ///     TLS still verifies the URL's host.
    ///   - connectPort: the port the pair connects to instead of the URL's (`--connect-to`).
    public init(
        url: HTTPURL, includeHeaders: Bool, verbose: Bool, out: OutputSink, err: OutputSink, tls: TLSSettings? = nil,
        proxy: ProxyConfiguration? = nil, connectHost: String? = nil, connectPort: Int? = nil
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
        request = HTTPRequest.get(url)
    }

    /// Connects, sends the request and reads the response, running the current run loop in the default mode until
    /// the fetch is over or `timeout` seconds (if given) have passed. Closes the streams before returning.
    public func run(timeout: Double?) -> FetchOutcome {
        let host = connectHost ?? url.host
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
                    + (proxy.kind == .socks4 && host.contains(":") ? " (SOCKS4 has no IPv6; use --socks5)" : ""))
        }
        trace("* connecting to \(host) port \(port)\(proxy.map { " via \($0)" } ?? "")\(tls == nil ? "" : " (TLS)")")
        let runLoop = RunLoop.current
        for stream in [pair.input, pair.output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
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
                outcome = .failed("the streams could not be scheduled\(error.map { ": \($0.localizedDescription)" } ?? "")")
            }
        }
        for stream in [pair.input, pair.output] as [Stream] {
            stream.delegate = nil
            stream.close()
            stream.remove(from: runLoop, forMode: .default)
        }
        streams = nil
        return outcome ?? .timedOut
    }

    /// Handles the events of both streams.
    public func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard let streams, outcome == nil else { return }
        let isInput = aStream === streams.input
        let name = isInput ? "input" : "output"
        trace("* \(name): \(Self.name(of: eventCode))")
        switch eventCode {
        case .hasSpaceAvailable where !isInput:
            traceTLS(streams.output)
            writeRequest(to: streams.output)
        case .hasBytesAvailable where isInput:
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
            outcome = .failed(message)
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
            outcome = .failed(Self.describe(output.streamError))
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
            outcome = .failed(Self.describe(input.streamError))
            return
        }
        if count == 0 {
            // The stream is now at its end and posts `endEncountered`, which completes the response.
            trace("* input: read 0 bytes (end of stream)")
            return
        }
        trace("* input: read \(count) bytes")
        do {
            handle(try parser.feed(Array(buffer[0..<count])))
        } catch {
            outcome = .failed("malformed response: \(error)")
        }
    }

    /// The connection ended: completes a close-delimited body or reports a truncated response.
    private func endOfResponse() {
        guard outcome == nil else { return }
        do {
            handle(try parser.finish())
        } catch {
            outcome = .failed(error.description)
        }
    }

    /// Acts on parser events: writes the head, the body and the trailers, and ends the fetch at `.end`.
    private func handle(_ events: [HTTPResponseEvent]) {
        for event in events {
            switch event {
            case .informational(let head):
                traceHead(head)
                trace("* skipped informational response \(head.statusCode)")
                if includeHeaders { out.write(head.rawBytes) }
            case .head(let head):
                statusCode = head.statusCode
                traceHead(head)
                if let framing = parser.bodyFraming { trace("* body: \(framing)") }
                if includeHeaders {
                    out.write(head.rawBytes)
                } else if !verbose {
                    err.write(head.statusLine + "\n")
                }
            case .body(let bytes):
                out.write(bytes)
            case .trailers(let fields):
                for field in fields { trace("< \(field)") }
                if includeHeaders { out.write(fields.map { "\($0)\r\n" }.joined() + "\r\n") }
            case .end:
                trace("* response complete (\(parser.bodyBytesReceived) body bytes)")
                if parser.bytesAfterEnd > 0 { trace("* ignoring \(parser.bytesAfterEnd) bytes after the response") }
                outcome = .completed(statusCode: statusCode ?? 0)
            }
        }
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
