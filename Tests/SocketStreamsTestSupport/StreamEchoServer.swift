import Foundation
import SocketStreams

/// A `StreamListener` running on a run-loop thread of its own, with a handler for each
/// accepted (unopened) pair. The handler runs on that thread.
package final class ListenerHost: @unchecked Sendable {
    // @unchecked: immutable `let`s; the listener is used only on `loop`'s thread.
    package let listener: StreamListener
    package let loop: RunLoopThread
    package let port: Int

    package init(
        _ listener: StreamListener, name: String = "ListenerHost",
        onAccept: @escaping (StreamPair) -> Void
    ) {
        self.listener = listener
        self.port = listener.port
        loop = RunLoopThread(name: name)
        let box = UncheckedBox(onAccept)
        loop.sync {
            listener.start(in: RunLoop.current, forMode: .default) { input, output in
                box.value((input, output))
            }
        }
    }

    deinit { stop() }

    package func stop() {
        let listener = self.listener  // no capture of self: stop() also runs from deinit
        loop.sync { listener.close() }
        loop.stop()
    }
}

/// An echo server made of the library's own accept side: every accepted pair is opened on the
/// server's run-loop thread and echoes whatever it reads, closing both streams at end/error.
package final class StreamEchoServer: @unchecked Sendable {
    // @unchecked: `host` is set once in `init`; the connection table and counters only under `lock`.
    private var host: ListenerHost!
    private let lock = NSLock()
    private var connections: [ObjectIdentifier: EchoConnection] = [:]
    private var acceptedTotal = 0
    private var finishedTotal = 0

    package var port: Int { host.port }

    /// TLS settings given to every accepted pair before it is opened (nil: plain).
    private let tls: TLSSettings?

    /// Listens on TCP (`host` nil = all interfaces); with `tls`, every connection is a TLS server.
    package convenience init(host: String?, backlog: Int32 = 128, tls: TLSSettings? = nil) throws {
        try self.init(listener: StreamListener(host: host, port: 0, backlog: backlog), tls: tls)
    }

    /// Listens on a Unix-domain socket path.
    package convenience init(unixSocketPath: String) throws {
        try self.init(listener: StreamListener(unixSocketPath: unixSocketPath))
    }

    package init(listener: StreamListener, tls: TLSSettings? = nil) throws {
        self.tls = tls
        host = ListenerHost(listener, name: "StreamEchoServer") { [unowned self] pair in
            self.accept(pair)
        }
    }

    deinit { host?.stop() }

    package var acceptedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return acceptedTotal
    }
    package var finishedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return finishedTotal
    }
    package var openConnections: Int {
        lock.lock()
        defer { lock.unlock() }
        return connections.count
    }

    /// Stops accepting and closes every connection still open.
    package func stop() {
        host.loop.sync {
            self.host.listener.close()
            self.lock.lock()
            let open = Array(self.connections.values)
            self.lock.unlock()
            for connection in open { connection.finish() }
        }
        host.loop.stop()
    }

    private func accept(_ pair: StreamPair) {
        if let tls { _ = pair.input.setProperty(tls, forKey: .tlsSettingsKey) }
        let connection = EchoConnection(pair: pair) { [unowned self] finished in
            self.lock.lock()
            if self.connections.removeValue(forKey: ObjectIdentifier(finished)) != nil {
                self.finishedTotal += 1
            }
            self.lock.unlock()
        }
        lock.lock()
        connections[ObjectIdentifier(connection)] = connection
        acceptedTotal += 1
        lock.unlock()
        connection.start()
    }
}

/// One echoing connection (server side).
private final class EchoConnection: NSObject, StreamDelegate {
    private let input: SocketInputStream
    private let output: SocketOutputStream
    private let onFinish: (EchoConnection) -> Void
    private var pending = Data()
    private var canWrite = false
    private var finished = false

    package init(pair: StreamPair, onFinish: @escaping (EchoConnection) -> Void) {
        input = pair.input
        output = pair.output
        self.onFinish = onFinish
    }

    package func start() {
        for stream in [input as Stream, output as Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
        }
        input.open()
        output.open()
    }

    package func finish() {
        guard !finished else { return }
        finished = true
        input.close()
        output.close()
        input.remove(from: .current, forMode: .default)
        output.remove(from: .current, forMode: .default)
        onFinish(self)
    }

    package func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        switch eventCode {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = input.read(&buffer, maxLength: buffer.count)
            if count > 0 {
                pending.append(contentsOf: buffer[0..<count])
                if canWrite { flush() }
            } else if count < 0 {
                finish()
            }
        case .hasSpaceAvailable:
            if pending.isEmpty { canWrite = true } else { flush() }
        case .endEncountered, .errorOccurred:
            finish()
        default:
            break
        }
    }

    private func flush() {
        canWrite = false
        let written = pending.withUnsafeBytes { raw in
            output.write(raw.bindMemory(to: UInt8.self).baseAddress!, maxLength: pending.count)
        }
        if written < 0 {
            finish()
        } else {
            pending.removeFirst(written)
        }
    }
}
