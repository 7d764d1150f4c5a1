// The GCDAsyncSocket face's driver, written as Apple-platform code writes it: a delegate on a queue,
// reads with the read timeout issued one after the other, startTLS with manual trust evaluation.
import CocoaAsyncSocket
import Foundation
import SocketStreamsTestSupport

final class GCDAsyncSocketDriver: NSObject, FaceDriver, GCDAsyncSocketDelegate, @unchecked Sendable {
    // @unchecked: `socket` is set before the connect and cleared by close() on the test's thread; the
    // delegate's state is the Inbox's and the Signals'.
    private let settings: FaceSettings
    private var socket: GCDAsyncSocket?
    private let inbox = Inbox()
    private let queue = DriverQueues.gcdAsyncSocket
    /// Raised when connected (plain) or secured (TLS), or when disconnected.
    private let settled = Signal()
    private let disconnected = Signal()
    /// Every socketDidDisconnect, before and after close().
    let disconnects = Locked(0)

    init(_ settings: FaceSettings) { self.settings = settings }

    var endsReported: Int { inbox.endsReported }

    func connect(port: Int) -> End? {
        let socket = GCDAsyncSocket(delegate: self, delegateQueue: queue, socketQueue: nil)
        self.socket = socket
        do {
            try socket.connect(toHost: settings.host, onPort: UInt16(port), withTimeout: settings.connectTimeout)
        } catch {
            return End(error)
        }
        if settings.transport == .tls {
            socket.startTLS([GCDAsyncSocketManuallyEvaluateTrust: NSNumber(value: true)])
        }
        // GCDAsyncSocket has no handshake timeout: a handshake that stalls waits (as on Apple platforms).
        guard settled.wait(timeout: settings.connectTimeout + 1) else { return .waiting }
        if let end = inbox.wait(count: Int.max, within: 0).end, end != .waiting { return end }
        socket.readData(withTimeout: settings.readTimeout, tag: 1)
        return nil
    }

    func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt16) {
        if settings.transport != .tls { settled.raise() }
    }

    func socketDidSecure(_ sock: GCDAsyncSocket) { settled.raise() }

    func socket(_ sock: GCDAsyncSocket, didReceive trust: SecTrust, completionHandler: @escaping (Bool) -> Void) {
        completionHandler(true)
    }

    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
        inbox.append(data)
        sock.readData(withTimeout: settings.readTimeout, tag: 1)
    }

    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
        disconnects.mutate { $0 += 1 }
        inbox.end(err.map(End.init) ?? .endOfStream)
        settled.raise()
        disconnected.raise()
    }

    func send(_ data: Data) { socket?.write(data, withTimeout: settings.writeTimeout, tag: 2) }

    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        inbox.wait(count: count, within: within)
    }

    func close() {
        inbox.markClosing()
        socket?.disconnect()
        socket = nil
        // socketDidDisconnect comes once, whoever ended the connection.
        _ = disconnected.wait(timeout: 5)
    }
}
