// The SocketStreams faces' drivers: a polling pair (no run loop: statuses and reads from the test's
// thread), a pair scheduled on the stream thread's run loop through AsyncConnection, and QueuedSocket.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreams
import SocketStreamsTestSupport

private func tlsSettings(_ settings: FaceSettings) -> TLSSettings {
    var tls = TLSSettings()
    tls.trustRoots = [.pemFile(settings.caCertificate)]
    tls.requiresCloseNotify = settings.requiresCloseNotify
    return tls
}

/// Sets the test's settings on an unopened pair: the connect timeout, TLS (unless the face starts it
/// its own way), the proxy at 127.0.0.1:`proxyPort` when the connection goes through one.
private func configure(_ input: InputStream, _ settings: FaceSettings, proxyPort: Int, tls: Bool = true) {
    input.setProperty(settings.connectTimeout, forKey: .connectTimeoutKey)
    if tls, settings.transport == .tls {
        input.setProperty(tlsSettings(settings), forKey: .tlsSettingsKey)
    }
    switch settings.proxy {
    case .socks5?: input.setProperty(ProxyConfiguration.socks5(host: "127.0.0.1", port: proxyPort), forKey: .proxyConfigurationKey)
    case .httpConnect?:
        input.setProperty(ProxyConfiguration.httpConnect(host: "127.0.0.1", port: proxyPort), forKey: .proxyConfigurationKey)
    case nil: break
    }
}

/// A pair to the settings' host and `port`, or to the proxy's target through the proxy at `port`.
private func makePair(_ settings: FaceSettings, port: Int) -> (input: InputStream, output: OutputStream) {
    let pair = createStreamPair(host: settings.host, port: settings.proxyTarget ?? port)
    configure(pair.input, settings, proxyPort: port)
    return (pair.input, pair.output)
}

/// A pair the test polls: `streamStatus`, `hasBytesAvailable`, `read` and `write` from its own thread,
/// nothing scheduled. The face has no read timeout.
final class PollingPairDriver: FaceDriver {
    private let settings: FaceSettings
    private var pair: (input: InputStream, output: OutputStream)?
    private var received = Data()
    private var ending: End?
    private(set) var endsReported = 0

    init(_ settings: FaceSettings) { self.settings = settings }

    private func end(_ stream: Stream) -> End? {
        switch stream.streamStatus {
        case .atEnd: return .endOfStream
        case .error: return stream.streamError.map(End.init) ?? .error(domain: "none", code: 0)
        default: return nil
        }
    }

    private func record(_ end: End) {
        if ending == nil {
            ending = end
            endsReported += 1
        }
    }

    func connect(port: Int) -> End? {
        let pair = makePair(settings, port: port)
        self.pair = pair
        pair.input.open()
        pair.output.open()
        let deadline = Date(timeIntervalSinceNow: settings.connectTimeout + 2)
        while pair.input.streamStatus == .opening || pair.output.streamStatus == .opening {
            if Date() > deadline { return .waiting }
            sched_yield()
        }
        if let end = end(pair.output) ?? end(pair.input) {
            record(end)
            return end
        }
        return nil
    }

    func send(_ data: Data) {
        guard let output = pair?.output else { return }
        var offset = 0
        let deadline = Date(timeIntervalSinceNow: 5)
        while offset < data.count && Date() < deadline {
            if end(output) != nil { return }
            guard output.hasSpaceAvailable else {
                sched_yield()
                continue
            }
            let written = data.withUnsafeBytes { raw in
                output.write(raw.bindMemory(to: UInt8.self).baseAddress! + offset, maxLength: data.count - offset)
            }
            if written < 0 { return }
            offset += written
        }
    }

    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        guard let input = pair?.input else { return (received, .waiting) }
        let deadline = Date(timeIntervalSinceNow: within)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while received.count < count && ending == nil {
            if input.hasBytesAvailable {
                let read = input.read(&buffer, maxLength: buffer.count)
                if read > 0 {
                    received.append(contentsOf: buffer[0..<read])
                    continue
                }
                record(read == 0 ? .endOfStream : end(input) ?? .error(domain: "none", code: 0))
                break
            }
            if let end = end(input) {
                record(end)
                break
            }
            if Date() > deadline { return (received, .waiting) }
            // Until the socket has something (or a millisecond, for what the library holds already).
            if let fd = nativeHandle(of: input) {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, 1)
            } else {
                sched_yield()
            }
        }
        return (received, ending)
    }

    func close() {
        pair?.input.close()
        pair?.output.close()
        pair = nil
    }
}

/// AsyncConnection: the pair on the stream thread, `open`, `write` and a reader task that reads until
/// the end. The face has no read timeout; cancelling or closing ends a wait.
final class AsyncConnectionDriver: FaceDriver {
    private let settings: FaceSettings
    private var connection: AsyncConnection?
    private let inbox = Inbox()

    init(_ settings: FaceSettings) { self.settings = settings }

    var endsReported: Int { inbox.endsReported }

    func connect(port: Int) -> End? {
        let pair = makePair(settings, port: port)
        let connection = AsyncConnection(input: pair.input, output: pair.output)
        self.connection = connection
        let opened = Signal()
        let failure = Locked<End?>(nil)
        Task {
            do {
                try await connection.open()
            } catch {
                failure.value = End(error)
            }
            opened.raise()
        }
        guard opened.wait(timeout: settings.connectTimeout + 2) else { return .waiting }
        if let end = failure.value {
            inbox.end(end)
            return end
        }
        let inbox = self.inbox
        Task {
            do {
                while let chunk = try await connection.read() {
                    inbox.append(Data(chunk))
                }
                inbox.end(.endOfStream)
            } catch {
                inbox.end(End(error))
            }
        }
        return nil
    }

    func send(_ data: Data) {
        guard let connection else { return }
        Task { try? await connection.write(data) }
    }

    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        inbox.wait(count: count, within: within)
    }

    func close() {
        inbox.markClosing()
        connection?.close()
        connection = nil
    }
}

/// QueuedSocket with a delegate queue: reads with the read timeout, each read issued after the last.
final class QueuedSocketDriver: FaceDriver, QueuedSocketDelegate, @unchecked Sendable {
    // @unchecked: `socket` is set before the connect and cleared by close() on the test's thread,
    // after which the delegate no longer uses it; the rest is the Inbox's and the Signals'.
    private let settings: FaceSettings
    private var socket: QueuedSocket?
    private let inbox = Inbox()
    private let queue = DriverQueues.queuedSocket
    /// Raised when connected (plain) or secured (TLS), or when disconnected.
    private let settled = Signal()

    init(_ settings: FaceSettings) { self.settings = settings }

    var endsReported: Int { inbox.endsReported }

    func connect(port: Int) -> End? {
        let socket = QueuedSocket(delegate: self, delegateQueue: queue)
        self.socket = socket
        do {
            try socket.connect(toHost: settings.host, onPort: settings.proxyTarget ?? port, withTimeout: settings.connectTimeout) {
                // TLS comes from startTLS below, as QueuedSocket code starts it.
                [settings] input, _ in configure(input, settings, proxyPort: port, tls: false)
            }
        } catch {
            return End(error)
        }
        if settings.transport == .tls { socket.startTLS(tlsSettings(settings)) }
        guard settled.wait(timeout: settings.connectTimeout + 2) else { return .waiting }
        if let end = inbox.wait(count: Int.max, within: 0).end, end != .waiting { return end }
        socket.readAvailable(timeout: settings.readTimeout, tag: 1)
        return nil
    }

    func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: Int) {
        if settings.transport != .tls { settled.raise() }
    }

    func socketDidSecure(_ socket: QueuedSocket) { settled.raise() }

    func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int) {
        inbox.append(data)
        socket.readAvailable(timeout: settings.readTimeout, tag: 1)
    }

    func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
        inbox.end(error.map(End.init) ?? .endOfStream)
        settled.raise()
    }

    func send(_ data: Data) { socket?.write(data, timeout: settings.writeTimeout, tag: 2) }

    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        inbox.wait(count: count, within: within)
    }

    func close() {
        inbox.markClosing()
        socket?.disconnect()
        socket = nil
    }
}

/// A pair with a `StreamDelegate`, Apple-guide style, on a run loop (a thread of the test's running
/// one) or on a dispatch queue (`CFReadStreamSetDispatchQueue`): it writes on `hasSpaceAvailable`,
/// reads once per `hasBytesAvailable`, and ends on the input's `endEncountered` or `errorOccurred`.
/// The face has no read timeout.
final class DelegatePairDriver: NSObject, FaceDriver, StreamDelegate, @unchecked Sendable {
    // @unchecked: the streams and `pending` are touched only on the owner (the run-loop thread or
    // the queue, one at a time); the rest is the Inbox's and the Signal's.
    enum Owner {
        case runLoop(RunLoopThread)
        case queue(DispatchQueue)
    }

    /// One run-loop thread and one queue for every delegate pair of the run (see ``DriverQueues``).
    static let sharedThread = RunLoopThread(name: "FaultMatrix.runLoop")
    static let sharedQueue = DispatchQueue(label: "FaultMatrix.pairQueue")

    private let settings: FaceSettings
    private let owner: Owner
    private var pair: (input: InputStream, output: OutputStream)?
    private var pending = Data()
    private let inbox = Inbox()
    private let settled = Signal()

    init(_ settings: FaceSettings, owner: Owner) {
        self.settings = settings
        self.owner = owner
    }

    var endsReported: Int { inbox.endsReported }

    /// Runs `body` on the owner and waits for it.
    private func onOwner(_ body: @escaping @Sendable () -> Void) {
        switch owner {
        case .runLoop(let thread): thread.sync(body)
        case .queue(let queue): queue.sync(execute: body)
        }
    }

    func connect(port: Int) -> End? {
        let pair = makePair(settings, port: port)
        self.pair = pair
        pair.input.delegate = self
        pair.output.delegate = self
        switch owner {
        case .runLoop(let thread):
            thread.sync { [self] in
                guard let pair = self.pair else { return }
                pair.input.schedule(in: .current, forMode: .default)
                pair.output.schedule(in: .current, forMode: .default)
                pair.input.open()
                pair.output.open()
            }
        case .queue(let queue):
            CFReadStreamSetDispatchQueue(pair.input, queue)
            CFWriteStreamSetDispatchQueue(pair.output, queue)
            pair.input.open()
            pair.output.open()
        }
        guard settled.wait(timeout: settings.connectTimeout + 2) else { return .waiting }
        if let end = inbox.wait(count: Int.max, within: 0).end, end != .waiting { return end }
        return nil
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        guard let pair else { return }
        switch event {
        case .hasSpaceAvailable:
            settled.raise()
            flush()
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let count = pair.input.read(&buffer, maxLength: buffer.count)
            if count > 0 { inbox.append(Data(buffer[0..<count])) }
        case .endEncountered:
            if stream === pair.input { inbox.end(.endOfStream) }
            settled.raise()
        case .errorOccurred:
            if stream === pair.input { inbox.end(stream.streamError.map(End.init) ?? .error(domain: "none", code: 0)) }
            settled.raise()
        default:
            break
        }
    }

    /// Writes what is pending while the output has space (on the owner).
    private func flush() {
        guard let output = pair?.output else { return }
        while !pending.isEmpty && output.hasSpaceAvailable {
            let written = pending.withUnsafeBytes { raw in
                output.write(raw.bindMemory(to: UInt8.self).baseAddress!, maxLength: raw.count)
            }
            if written <= 0 { return }
            pending.removeFirst(written)
        }
    }

    func send(_ data: Data) {
        onOwner { [self] in
            pending.append(data)
            flush()
        }
    }

    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        inbox.wait(count: count, within: within)
    }

    func close() {
        inbox.markClosing()
        onOwner { [self] in
            pair?.input.close()
            pair?.output.close()
            pair = nil
        }
    }
}
