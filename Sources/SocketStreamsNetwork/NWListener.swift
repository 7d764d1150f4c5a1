// `NWListener` over SocketStreams' `StreamListener`: the listening socket accepts on the package's
// stream thread; each connection is handed, unstarted, to `newConnectionHandler` on the listener's
// queue, and runs on whatever queue its own `start(queue:)` names. A TLS listener's connections are TLS
// servers with the identity the TLS options name (`sec_protocol_options_set_local_identity`).

import Foundation
import SocketStreams

/// A listener for incoming connections: Network.framework's `NWListener`.
///
/// ```swift
/// let listener = try NWListener(using: .tcp, on: .any)
/// listener.newConnectionHandler = { connection in connection.start(queue: .main) }
/// listener.stateUpdateHandler = { state in if state == .ready { print(listener.port!) } }
/// listener.start(queue: .main)
/// ```
///
/// Every handler runs on the queue given to `start(queue:)`, in order. A started listener keeps itself
/// alive until it is cancelled.
public final class NWListener: CustomDebugStringConvertible, Sendable {
    /// Where a listener is in its life: Network.framework's `NWListener.State`. States move forward;
    /// `.cancelled` is last.
    public enum State: Equatable, Sendable {
        /// Made and not started (`NWListener.State.setup`).
        case setup
        /// Waiting for a usable network (`NWListener.State.waiting(_:)`). Not reported on Linux: a
        /// listener binds at once or fails.
        case waiting(NWError)
        /// Listening: `port` is known (`NWListener.State.ready`).
        case ready
        /// Could not listen, e.g. `.posix(.EADDRINUSE)` (`NWListener.State.failed(_:)`).
        case failed(NWError)
        /// Cancelled, last (`NWListener.State.cancelled`).
        case cancelled
    }

    /// A Bonjour service to advertise: Network.framework's `NWListener.Service`. Linux has no
    /// mDNSResponder: a listener given one fails at `start` with `.dns(kDNSServiceErr_Unsupported)`.
    public struct Service: Equatable, Sendable {
        /// The service's name, nil for the host's (`NWListener.Service.name`).
        public var name: String?
        /// The service type, such as "_http._tcp" (`NWListener.Service.type`).
        public var type: String
        /// The domain, nil for the default (`NWListener.Service.domain`).
        public var domain: String?
        /// The TXT record (`NWListener.Service.txtRecord`).
        public var txtRecord: Data?

        /// A service to advertise (`NWListener.Service.init(name:type:domain:txtRecord:)`).
        public init(name: String? = nil, type: String, domain: String? = nil, txtRecord: Data? = nil) {
            self.name = name
            self.type = type
            self.domain = domain
            self.txtRecord = txtRecord
        }
    }

    /// No limit on new connections (`NWListener.InfiniteConnectionLimit`).
    public static let InfiniteConnectionLimit = Int(UInt32.max)

    struct Handlers {
        var stateUpdate: (@Sendable (State) -> Void)?
        var newConnection: (@Sendable (NWConnection) -> Void)?
    }

    struct Shared {
        var state = State.setup
        var handlers = Handlers()
        var queue: DispatchQueue?
        var turns: DelegateTurns?
        var listener: StreamListener?
        var port: NWEndpoint.Port?
        var limit = NWListener.InfiniteConnectionLimit
        var service: Service?
        /// Connections accepted while the limit was 0, delivered when it is raised.
        var held: [NWConnection] = []
        var keptAlive: NWListener?
    }

    /// The parameters connections are accepted with (`NWListener.parameters`).
    public let parameters: NWParameters
    private let requestedPort: NWEndpoint.Port
    private let shared: Guarded<Shared>
    /// A UDP listener's socket and flows (`NWListener+Datagrams.swift`); nil over TCP.
    private let datagrams: DatagramListener?

    /// A listener on `port` (`.any` for one the system picks) of every local address, or of
    /// `parameters.requiredLocalEndpoint`'s address (`NWListener.init(using:on:)`).
    ///
    /// With `.udp` parameters, one socket on the port serves every remote: each new remote endpoint is
    /// handed to `newConnectionHandler` as a connection of its own (see `NWListener+Datagrams.swift`).
    ///
    /// - Throws: `NWError.posix(.EINVAL)` for parameters no listener can use (DTLS or another protocol
    ///   above UDP, QUIC; a local endpoint that is not an address and port).
    public init(using parameters: NWParameters, on port: NWEndpoint.Port) throws {
        self.parameters = parameters.copy()
        let stack = self.parameters.defaultProtocolStack
        let tcp = stack.transportProtocol is NWProtocolTCP.Options && FramerDriver.isSupported(stack.applicationProtocols)
        let udp = stack.transportProtocol is NWProtocolUDP.Options && stack.applicationProtocols.isEmpty
        guard tcp || udp else { throw NWError.posix(.EINVAL) }
        datagrams = udp ? DatagramListener(parameters: self.parameters) : nil
        var requested = port
        if let local = parameters.requiredLocalEndpoint {
            guard case .hostPort(_, let localPort) = local else { throw NWError.posix(.EINVAL) }
            if port == .any { requested = localPort }
        }
        requestedPort = requested
        shared = Guarded(Shared())
    }

    /// A listener on `parameters.requiredLocalEndpoint`, or on a port the system picks
    /// (`NWListener.init(using:)`).
    public convenience init(using parameters: NWParameters) throws {
        try self.init(using: parameters, on: .any)
    }

    /// Called on the queue with each new state (`NWListener.stateUpdateHandler`).
    public var stateUpdateHandler: (@Sendable (_ newState: State) -> Void)? {
        get { shared.withLock { $0.handlers.stateUpdate } }
        set { shared.withLock { $0.handlers.stateUpdate = newValue } }
    }

    /// Called on the queue with each accepted connection, unstarted: start it to accept it, cancel it
    /// to refuse it (`NWListener.newConnectionHandler`). Set it before `start(queue:)`; without one,
    /// connections are refused.
    public var newConnectionHandler: (@Sendable (_ connection: NWConnection) -> Void)? {
        get { shared.withLock { $0.handlers.newConnection } }
        set { shared.withLock { $0.handlers.newConnection = newValue } }
    }

    /// How many more connections to deliver: each delivered one lowers it, and at 0 new connections
    /// wait (accepted, not delivered) until it is raised (`NWListener.newConnectionLimit`).
    public var newConnectionLimit: Int {
        get { shared.withLock { $0.limit } }
        set {
            let raised = shared.withLock { shared -> Bool in
                let raised = shared.limit == 0 && newValue > 0
                shared.limit = max(0, newValue)
                return raised
            }
            if raised { deliverHeld() }
        }
    }

    /// The Bonjour service to advertise (`NWListener.service`): refused at `start` on Linux.
    public var service: Service? {
        get { shared.withLock { $0.service } }
        set { shared.withLock { $0.service = newValue } }
    }

    /// The port listened on, once `.ready` (`NWListener.port`).
    public var port: NWEndpoint.Port? { shared.withLock { $0.port } }

    /// The current state (`NWListener.state`).
    public var state: State { shared.withLock { $0.state } }

    /// The queue given to `start(queue:)`, nil before it (`NWListener.queue`).
    public var queue: DispatchQueue? { shared.withLock { $0.queue } }

    /// "[L1 ready, local endpoint: <NULL>, port: 8080]"-like text (`NWListener.debugDescription`).
    public var debugDescription: String {
        let (state, port) = shared.withLock { ($0.state, $0.port) }
        return "[listener \(state), port: \(port.map { "\($0.rawValue)" } ?? "none")]"
    }

    /// Starts listening and makes `queue` the one every handler runs on (`NWListener.start(queue:)`).
    /// A second call is ignored.
    public func start(queue: DispatchQueue) {
        let turns = DelegateTurns(queue: queue)
        let started = shared.withLock { shared -> Bool in
            guard shared.queue == nil, shared.state == .setup else { return false }
            shared.queue = queue
            shared.turns = turns
            shared.keptAlive = self
            return true
        }
        guard started else { return }
        guard turns != nil else {
            return queue.async { self.finish(.failed(.posix(.EMFILE))) }
        }
        let outcome = listen()
        onOwner { self.finish(outcome) }
    }

    /// Binds and starts accepting; the state to report.
    private func listen() -> State {
        if shared.withLock({ $0.service }) != nil { return .failed(.dns(-65544)) }  // kDNSServiceErr_Unsupported
        var host: String?
        if case .hostPort(let local, _)? = parameters.requiredLocalEndpoint {
            let text = ConnectionConfiguration.text(of: local)
            if text != "0.0.0.0", text != "::" { host = text }
        }
        if let datagrams {
            guard let queue = shared.withLock({ $0.queue }) else { return .cancelled }
            let port: NWEndpoint.Port
            do throws(NWError) {
                port = try datagrams.listen(host: host, port: requestedPort, queue: queue, for: self)
            } catch {
                return error == .posix(.ECANCELED) ? .cancelled : .failed(error)
            }
            let ready = shared.withLock { shared -> Bool in
                guard shared.state == .setup else { return false }
                shared.port = port
                return true
            }
            guard ready else {
                datagrams.close()
                return .cancelled
            }
            return .ready
        }
        if let tls = parameters.defaultProtocolStack.applicationProtocols.lazy.compactMap({ $0 as? NWProtocolTLS.Options }).first {
            do throws(NWError) {
                _ = try tls.settings(role: .server, endpointHost: nil)
            } catch {
                return .failed(error)
            }
        }
        let listener: StreamListener
        let runLoop: RunLoop
        do {
            listener = try StreamListener(host: host, port: Int(requestedPort.rawValue))
            let tcp = parameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options
            if parameters.allowFastOpen || tcp?.enableFastOpen == true { _ = listener.allowFastOpen() }
            runLoop = try RunLoop.startSocketStreams()
        } catch {
            return .failed(NWError(engineError: error))
        }
        let parameters = self.parameters
        listener.start(in: runLoop) { [weak self] input, output in
            let host = input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemoteHostName as String)) as? String
            let port = (input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemotePortNumber as String)) as? NSNumber)?
                .uint16Value
            let endpoint = NWEndpoint.hostPort(host: NWEndpoint.Host(host ?? ""), port: NWEndpoint.Port(rawValue: port ?? 0) ?? .any)
            let connection = NWConnection(accepted: NWConnection.AcceptedPair(input, output), from: endpoint, using: parameters.copy())
            guard let self else { return connection.cancel() }
            self.accepted(connection)
        }
        let ready = shared.withLock { shared -> Bool in
            guard shared.state == .setup else { return false }
            shared.listener = listener
            shared.port = NWEndpoint.Port(rawValue: UInt16(clamping: listener.port))
            return true
        }
        guard ready else {
            listener.close()
            return .cancelled
        }
        return .ready
    }

    /// An accepted connection, on the stream thread: delivered on the queue, or held while the limit is 0.
    func accepted(_ connection: NWConnection) {
        onOwner { [self] in
            let (handler, deliver) = shared.withLock { shared -> ((@Sendable (NWConnection) -> Void)?, Bool) in
                guard shared.state == .ready else { return (nil, false) }
                guard shared.limit > 0 else {
                    shared.held.append(connection)
                    return (nil, false)
                }
                if shared.limit != NWListener.InfiniteConnectionLimit { shared.limit -= 1 }
                return (shared.handlers.newConnection, true)
            }
            guard deliver, let handler else {
                if !deliver, shared.withLock({ $0.held.contains { $0 === connection } }) { return }
                return connection.cancel()
            }
            handler(connection)
        }
    }

    /// Delivers the connections held while the limit was 0, as far as the new limit goes.
    private func deliverHeld() {
        onOwner { [self] in
            while true {
                let next = shared.withLock { shared -> (NWConnection, (@Sendable (NWConnection) -> Void)?)? in
                    guard shared.state == .ready, shared.limit > 0, !shared.held.isEmpty else { return nil }
                    if shared.limit != NWListener.InfiniteConnectionLimit { shared.limit -= 1 }
                    return (shared.held.removeFirst(), shared.handlers.newConnection)
                }
                guard let (connection, handler) = next else { return }
                if let handler { handler(connection) } else { connection.cancel() }
            }
        }
    }

    /// Stops listening (`NWListener.cancel()`): `.cancelled` follows, last. A TCP listener's connections
    /// already delivered go on; those held for the limit are closed. A UDP listener's connections all
    /// end (cancelled): they shared its socket.
    public func cancel() {
        let (listener, started) = shared.withLock { shared -> (StreamListener?, Bool) in
            guard shared.state != .cancelled else { return (nil, false) }
            defer { shared.listener = nil }
            if shared.queue == nil { shared.state = .cancelled }
            return (shared.listener, shared.queue != nil)
        }
        listener?.close()
        datagrams?.close()
        if started { onOwner { self.finish(.cancelled) } }
    }

    /// Moves to `state` and reports it, on the owner; after `.cancelled` (or a failure's cancel) the
    /// handlers and the listener's hold on itself go.
    private func finish(_ state: State) {
        let (handler, stale, held) = shared.withLock { shared -> ((@Sendable (State) -> Void)?, StreamListener?, [NWConnection]) in
            if shared.state == .cancelled || shared.state == state { return (nil, nil, []) }
            if case .failed = shared.state, state != .cancelled { return (nil, nil, []) }
            shared.state = state
            var held: [NWConnection] = []
            var stale: StreamListener?
            if state == .cancelled {
                held = shared.held
                shared.held = []
                stale = shared.listener
                shared.listener = nil
            }
            return (shared.handlers.stateUpdate, stale, held)
        }
        stale?.close()
        held.forEach { $0.cancel() }
        handler?(state)
        guard state == .cancelled else { return }
        let released = shared.withLock { shared -> (Handlers, NWListener?) in
            defer {
                shared.handlers = Handlers()
                shared.keptAlive = nil
            }
            return (shared.handlers, shared.keptAlive)
        }
        _ = released
    }

    private func onOwner(_ body: @escaping @Sendable () -> Void) {
        guard let turns = shared.withLock({ $0.turns }) else { return }
        turns.enqueue(OwnerTurn(body))
    }
}
