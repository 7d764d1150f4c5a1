// The UDP column's NWConnection face, written as Apple-platform code writes it: `NWConnection(host:
// port: using: .udp)`, the state handler, a `receiveMessage` loop re-armed from each completion, a send
// with `.contentProcessed` per datagram.
#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport

final class NWUDPConnectionDriver: DatagramFaceDriver, @unchecked Sendable {
    // @unchecked: `connection` is set in init and used from the test's thread; the handlers touch only
    // the inbox and the signals.
    let inbox = DatagramInbox()
    private let connection: NWConnection
    private let queue = DispatchQueue(label: "FaultMatrix.NWConnection.udp")
    private let ready = Signal()
    private let cancelled = Signal()

    init(port: Int) throws {
        connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .udp)
        let (inbox, ready, cancelled) = (self.inbox, self.ready, self.cancelled)
        connection.stateUpdateHandler = { state in
            switch state {
            case .ready: ready.raise()
            case .failed(let error): inbox.failed(Self.error(error), closed: true)
            case .cancelled:
                inbox.failed(nil, closed: true)
                cancelled.raise()
            default: break
            }
        }
        connection.start(queue: queue)
        guard ready.wait(timeout: 10) else { throw NWError.posix(.ETIMEDOUT) }
        receive()
    }

    /// One datagram a `receiveMessage`, the next asked for from its completion, until an error.
    private func receive() {
        connection.receiveMessage { [weak self] content, _, _, error in
            guard let self else { return }
            if let error { return self.inbox.failed(Self.error(error), closed: false) }
            if let content { self.inbox.received(content) }
            self.receive()
        }
    }

    func send(_ datagrams: [Data]) {
        let inbox = self.inbox
        for datagram in datagrams {
            connection.send(
                content: datagram,
                completion: .contentProcessed { error in
                    if let error { inbox.failed(Self.error(error), closed: false) }
                })
        }
    }

    func close() {
        connection.cancel()
        _ = cancelled.wait(timeout: 5)
    }

    static func error(_ error: NWError) -> NSError {
        switch error {
        case .posix(let code): return NSError(domain: NSPOSIXErrorDomain, code: Int(code.rawValue))
        default: return NSError(domain: "NWError", code: -1, userInfo: [NSLocalizedDescriptionKey: "\(error)"])
        }
    }
}
