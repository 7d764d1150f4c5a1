// The NWConnection face's driver, written as Apple-platform code writes it: the state handler, a
// receive loop, NWProtocolTCP.Options' connectionTimeout, TLS with a verify block that accepts.
#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport

final class NWConnectionDriver: FaceDriver, @unchecked Sendable {
    // @unchecked: `connection` is set and cleared on the test's thread; the handlers touch only the
    // Inbox, the Signals and `states` (Locked).
    private let settings: FaceSettings
    private var connection: NWConnection?
    private let inbox = Inbox()
    private let queue = DriverQueues.nwConnection
    private let ready = Signal()
    private let finished = Signal()
    let states = Locked<[NWConnection.State]>([])
    /// Whether the receive loop runs: from then on its completion reports the end, and `.failed`
    /// (which follows an error) is only counted in `failures`.
    private let receiving = Locked(false)

    /// How many times the connection went `.failed` (at most once).
    var failures: Int { states.value.filter { if case .failed = $0 { return true } else { return false } }.count }

    init(_ settings: FaceSettings) { self.settings = settings }

    var endsReported: Int { inbox.endsReported }

    static func end(_ error: NWError) -> End {
        switch error {
        case .posix(let code): return .error(domain: "NWError.posix", code: Int(code.rawValue))
        case .dns(let code): return .error(domain: "NWError.dns", code: Int(code))
        case .tls(let status): return .error(domain: "NWError.tls", code: Int(status))
        @unknown default: return .error(domain: "NWError", code: -1)
        }
    }

    func connect(port: Int) -> End? {
        let tcp = NWProtocolTCP.Options()
        tcp.connectionTimeout = max(1, Int(settings.connectTimeout.rounded(.up)))
        tcp.noDelay = true
        var tls: NWProtocolTLS.Options?
        if settings.transport == .tls {
            let options = NWProtocolTLS.Options()
            sec_protocol_options_set_verify_block(options.securityProtocolOptions, { _, _, complete in complete(true) }, queue)
            tls = options
        }
        let connection = NWConnection(
            host: NWEndpoint.Host(settings.host), port: NWEndpoint.Port(rawValue: UInt16(port))!, using: NWParameters(tls: tls, tcp: tcp))
        self.connection = connection
        let inbox = self.inbox
        connection.stateUpdateHandler = { [states, ready, finished, receiving] state in
            states.mutate { $0.append(state) }
            switch state {
            case .ready: ready.raise()
            case .failed(let error):
                if !receiving.value { inbox.end(Self.end(error)) }
                ready.raise()
                finished.raise()
            case .waiting(let error):
                inbox.end(Self.end(error))
                ready.raise()
            case .cancelled: finished.raise()
            default: break
            }
        }
        connection.start(queue: queue)
        guard ready.wait(timeout: settings.connectTimeout + 3) else { return .waiting }
        if let end = inbox.wait(count: Int.max, within: 0).end, end != .waiting { return end }
        receiving.value = true
        receiveLoop(connection)
        return nil
    }

    private func receiveLoop(_ connection: NWConnection) {
        let inbox = self.inbox
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { [weak self] content, _, isComplete, error in
            if let content, !content.isEmpty { inbox.append(content) }
            if let error {
                inbox.end(Self.end(error))
            } else if isComplete {
                inbox.end(.endOfStream)
            } else {
                self?.receiveLoop(connection)
            }
        }
    }

    func send(_ data: Data) {
        connection?.send(content: data, completion: .contentProcessed { _ in })
    }

    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        inbox.wait(count: count, within: within)
    }

    func close() {
        inbox.markClosing()
        connection?.cancel()
        connection = nil
        _ = finished.wait(timeout: 5)
    }
}
