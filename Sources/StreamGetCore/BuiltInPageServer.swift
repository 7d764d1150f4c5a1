import Foundation
import SocketStreams

/// Serves `BuiltInPage` on 127.0.0.1 with a `StreamListener` whose connections run on `RunLoop.socketStreams`.
///
/// Each accepted pair is driven in the delegate style: the request is read on `hasBytesAvailable` until its empty
/// line, the response is written on `hasSpaceAvailable`, then both streams are closed (one request per connection).
public final class BuiltInPageServer: @unchecked Sendable {
    /// The listening socket.
    private let listener: StreamListener
    /// The run loop (and its mode) the listener and the connections are scheduled on.
    private let runLoop: RunLoop
    /// TLS for every accepted connection (a server identity), or nil for plain HTTP.
    private let tls: TLSSettings?
    /// Guards `connections`.
    private let lock = NSLock()
    /// Connections being served, kept alive here because streams do not retain their delegates.
    private var connections: [ObjectIdentifier: PageConnection] = [:]

    /// Binds a listener to 127.0.0.1 on a free port; call `start()` to accept connections. With `tls`
    /// (server settings with an identity), every connection is served over TLS.
    /// - Throws: the listener's error when the socket cannot be created or bound.
    public init(runLoop: RunLoop = .socketStreams, tls: TLSSettings? = nil) throws {
        listener = try StreamListener(host: "127.0.0.1", port: 0)
        self.runLoop = runLoop
        var tls = tls
        if tls?.alpnProtocols.isEmpty == true { tls?.alpnProtocols = ["http/1.1"] }  // the one protocol it speaks
        self.tls = tls
    }

    /// The bound port.
    public var port: Int { listener.port }

    /// The URL that fetches the page, `http://127.0.0.1:<port>/` (or `https://` with TLS).
    public var url: HTTPURL { HTTPURL(host: "127.0.0.1", port: port, path: "/", secure: tls != nil) }

    /// The number of connections accepted and not yet finished.
    public var activeConnectionCount: Int { lock.withLock { connections.count } }

    /// Starts accepting connections on the server's run loop in the default mode.
    public func start() {
        listener.start(in: runLoop, forMode: .default) { [self] input, output in
            // The handler runs on the listener's run loop: schedule the pair there too.
            if let tls { _ = input.setProperty(tls, forKey: .tlsSettingsKey) }
            let connection = PageConnection(input: input, output: output) { [self] finished in
                _ = lock.withLock { connections.removeValue(forKey: ObjectIdentifier(finished)) }
            }
            lock.withLock { connections[ObjectIdentifier(connection)] = connection }
            connection.start(in: .current, forMode: .default)
        }
    }

    /// Stops accepting connections. Connections already accepted finish on their own.
    public func stop() {
        listener.close()
    }
}

/// One accepted connection of the built-in server: reads a request head, writes the response, closes.
final class PageConnection: NSObject, StreamDelegate {
    /// The accepted input stream.
    private let input: InputStream
    /// The accepted output stream.
    private let output: OutputStream
    /// Called once when the connection is finished, so the server can drop it.
    private let onFinish: (PageConnection) -> Void
    /// The request bytes read so far.
    private var request: [UInt8] = []
    /// The response, once the request head is complete.
    private var response: [UInt8]?
    /// How much of `response` has been written.
    private var written = 0
    /// Whether a `hasSpaceAvailable` arrived that was not answered with a write (it is not re-posted until one).
    private var canWrite = false
    /// Whether the streams have been closed.
    private var finished = false
    /// The run loop and mode the streams are scheduled on (set by `start`).
    private var schedule: (runLoop: RunLoop, mode: RunLoop.Mode)?

    /// Wraps an accepted, unopened pair.
    init(input: InputStream, output: OutputStream, onFinish: @escaping (PageConnection) -> Void) {
        self.input = input
        self.output = output
        self.onFinish = onFinish
    }

    /// Sets the delegates, schedules both streams and opens them.
    func start(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        schedule = (runLoop, mode)
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: mode)
            stream.open()
        }
    }

    /// Handles the events of both streams.
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard !finished else { return }
        switch eventCode {
        case .hasBytesAvailable:
            readRequest()
        case .hasSpaceAvailable:
            canWrite = true
            writeResponse()
        case .endEncountered:
            // The client stopped sending; without a complete request head there is nothing to answer.
            if response == nil { finish() }
        case .errorOccurred:
            finish()
        default:
            break
        }
    }

    /// Reads what is available; once the request head is complete, prepares the response and tries to send it.
    private func readRequest() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = input.read(&buffer, maxLength: buffer.count)
        if count < 0 {
            finish()
            return
        }
        if count == 0 {
            if response == nil { finish() }
            return
        }
        guard response == nil else { return }  // anything after the head is ignored
        request.append(contentsOf: buffer[0..<count])
        if let end = BuiltInPage.endOfRequestHead(in: request) {
            response = BuiltInPage.response(forRequestHead: Array(request[0..<end]))
        } else if request.count > BuiltInPage.maxRequestHeadSize {
            response = BuiltInPage.response(
                status: 431, reason: "Request Header Fields Too Large", body: "431 Request Header Fields Too Large\n")
        }
        writeResponse()
    }

    /// Writes as much of the response as the socket takes when the output has space; closes when all is written.
    private func writeResponse() {
        guard canWrite, let response else { return }
        canWrite = false
        let count = response.withUnsafeBufferPointer { buffer in
            output.write(buffer.baseAddress! + written, maxLength: buffer.count - written)
        }
        if count < 0 {
            finish()
            return
        }
        written += count
        if written == response.count { finish() }
    }

    /// Closes and unschedules both streams and tells the server.
    private func finish() {
        guard !finished else { return }
        finished = true
        for stream in [input, output] as [Stream] {
            stream.delegate = nil
            stream.close()
            if let schedule { stream.remove(from: schedule.runLoop, forMode: schedule.mode) }
        }
        onFinish(self)
    }
}
