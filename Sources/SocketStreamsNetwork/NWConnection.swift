// `NWConnection` over the one engine: each attempt is a SocketStreams stream pair (name lookup, Happy
// Eyeballs, the connect timeout, TLS through OpenSSL) driven by the operations engine on the reactor of
// the connection's queue, the same engine `QueuedSocket` and GCDAsyncSocket use. The connection keeps
// what Network.framework adds: the state machine (`ConnectionLifecycle`), sends and receives held
// until ready and carried over a `.waiting` retry, and the completions by tag.
//
// Ownership: the queue's reactor owns the connection. Everything it reports runs there, in a turn of
// that reactor or in the engine's events (both on the queue, one at a time, even on a concurrent
// queue); other threads record under the state's lock and either hand a ready connection's send or
// receive to the engine (which posts it to the owner) or ask for a turn. Nothing is called under the
// lock, and the engine is never called under it either (on the owner, an engine call may pump and
// report at once).

import Foundation
import SocketStreams

/// A connection to an endpoint, TCP with or without TLS, or a UDP flow: Network.framework's `NWConnection`.
///
/// ```swift
/// let connection = NWConnection(host: "example.com", port: 443, using: .tls)
/// connection.stateUpdateHandler = { state in if case .ready = state { … } }
/// connection.start(queue: .main)
/// connection.send(content: request, completion: .contentProcessed { error in … })
/// connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, context, isComplete, error in … }
/// ```
///
/// Every handler and completion runs on the queue given to `start(queue:)`, in order, one at a time.
/// A started connection keeps itself alive until it is cancelled, as Network.framework's does; call
/// `cancel()` when done, also after `.failed`.
public final class NWConnection: CustomDebugStringConvertible, Sendable {
    /// What a receive completion is given: the content, its context, whether the context is complete
    /// (for TCP: the peer closed its side), and an error.
    typealias ReceiveCompletion = @Sendable (Data?, ContentContext?, Bool, NWError?) -> Void

    /// The endpoint the connection was made for (`NWConnection.endpoint`).
    public let endpoint: NWEndpoint
    /// The parameters it was made with, a copy of those given (`NWConnection.parameters`): as with
    /// Network.framework's, changing them changes nothing for the connection, and each read is a copy.
    public var parameters: NWParameters { frozenParameters.copy() }
    /// What the connection was made with, which nothing changes (shared with other connections made with
    /// parameters of the same values).
    let frozenParameters: NWParameters
    /// For `debugDescription`: "C1", "C2"… as Network.framework numbers them.
    private let number: Int
    /// A connection a listener accepted: its pair, used by the one attempt it makes.
    let acceptedPair: AcceptedPair?
    /// A UDP connection's flow (`NWConnection+Datagrams.swift`); nil over TCP.
    let datagrams: DatagramFlow?
    let shared: Guarded<Shared>
    /// The framer of the stack's application protocols, if it has one (NWConnection+Framing.swift):
    /// the application's sends and receives go through it.
    let framing: FramerDriver?

    struct Handlers {
        var stateUpdate: (@Sendable (State) -> Void)?
        /// The handlers few connections set, in a box made when one is set (an idle connection holds
        /// the one pointer).
        var rare: RareHandlers?

        var viabilityUpdate: (@Sendable (Bool) -> Void)? { rare?.viabilityUpdate }
        var betterPathUpdate: (@Sendable (Bool) -> Void)? { rare?.betterPathUpdate }
        var pathUpdate: (@Sendable (NWPath) -> Void)? { rare?.pathUpdate }

        mutating func set(
            viability: (@Sendable (Bool) -> Void)??, betterPath: (@Sendable (Bool) -> Void)?? = nil,
            path: (@Sendable (NWPath) -> Void)?? = nil
        ) {
            rare = RareHandlers(
                viabilityUpdate: viability ?? viabilityUpdate, betterPathUpdate: betterPath ?? betterPathUpdate,
                pathUpdate: path ?? pathUpdate)
        }
    }

    /// `viabilityUpdateHandler`, `betterPathUpdateHandler` and `pathUpdateHandler`, immutable: setting
    /// one makes a new box.
    final class RareHandlers: Sendable {
        let viabilityUpdate: (@Sendable (Bool) -> Void)?
        let betterPathUpdate: (@Sendable (Bool) -> Void)?
        let pathUpdate: (@Sendable (NWPath) -> Void)?

        init(
            viabilityUpdate: (@Sendable (Bool) -> Void)?, betterPathUpdate: (@Sendable (Bool) -> Void)?,
            pathUpdate: (@Sendable (NWPath) -> Void)?
        ) {
            self.viabilityUpdate = viabilityUpdate
            self.betterPathUpdate = betterPathUpdate
            self.pathUpdate = pathUpdate
        }
    }

    /// A send or a receive made before the connection was ready, held for it.
    enum Pending {
        case receive(ReadRequest, ReceiveCompletion)
        case send(WriteBytes?, final: Bool, SendCompletion)
    }

    struct Shared {
        var lifecycle: ConnectionLifecycle
        var handlers = Handlers()
        var queue: DispatchQueue?
        /// The queue's turns, for what the connection reports with no engine's event to report it in:
        /// made when needed, let go of once the connection is ready (its engine holds the reactor then).
        var turns: DelegateTurns?
        /// The live attempt's engine (its client is the connection, held unretained by it: the
        /// connection lives until `.cancelled`, after the engine has closed and let it go).
        var engine: StreamOperations?
        /// Sends and receives made before ready (or while the hand-over runs), in order.
        var pending: [Pending] = []
        /// The live attempt's engine once the operations held for readiness went to it: new ones go
        /// straight to it. Nil before, and from a cancel or the engine's close on (the one check a
        /// send or receive makes on its way).
        var direct: StreamOperations?
        /// Receive completions with the engine's tags, in the order they were handed over (which is the
        /// engine's order but for sends or receives made on two threads at once: found by tag).
        var receives = TaggedCompletions<ReceiveCompletion>()
        /// Send completions with the engine's tags (nil: idempotent, or a write a shutdown completes).
        var sends = TaggedCompletions<(@Sendable (NWError?) -> Void)?>()
        var nextTag = 1
        /// A complete final message was sent: the sending side is closed, later sends fail.
        var outputClosed = false
        /// A UDP connection's `direct`: its flow is ready and takes sends and receives itself.
        var datagramsDirect = false
        /// From `start` to `.cancelled`: a started connection lives until cancelled.
        var keptAlive: NWConnection?
        /// While `.waiting`: the network's changes, each a retry, as Network.framework retries on a path
        /// change.
        var changes: NetworkChanges.Observation?
        /// `.cancelled` was reported (on the owner): nothing is called from then on. The lifecycle's
        /// phase turns `.cancelled` earlier, in `cancel()` itself, while completions already on their
        /// way to the owner must still run before the report.
        var cancelledReported = false

        mutating func takeTag() -> Int {
            defer { nextTag &+= 1 }
            return nextTag
        }
    }

    /// A connection to `endpoint` with `parameters` (`NWConnection.init(to:using:)`); nothing happens
    /// until `start(queue:)`.
    public init(to endpoint: NWEndpoint, using parameters: NWParameters) {
        self.endpoint = endpoint
        frozenParameters = parameters.frozen()
        number = Self.numbers.withLock { counter in
            counter += 1
            return counter
        }
        acceptedPair = nil
        datagrams = DatagramFlow.isDatagram(frozenParameters) ? DatagramFlow(origin: .client) : nil
        shared = Guarded(Shared(lifecycle: ConnectionLifecycle()))
        // Over UDP the datagram flow refuses application protocols (`.posix(.EPROTONOSUPPORT)`).
        framing = datagrams == nil ? FramerDriver.make(for: frozenParameters) : nil
        framing?.attach(to: self)
    }

    /// A connection to `host` and `port` (`NWConnection.init(host:port:using:)`).
    public convenience init(host: NWEndpoint.Host, port: NWEndpoint.Port, using parameters: NWParameters) {
        self.init(to: .hostPort(host: host, port: port), using: parameters)
    }

    /// A connection a listener accepted, over its pair.
    init(accepted pair: AcceptedPair, from endpoint: NWEndpoint, using parameters: NWParameters) {
        self.endpoint = endpoint
        frozenParameters = parameters
        number = Self.numbers.withLock { counter in
            counter += 1
            return counter
        }
        acceptedPair = pair
        datagrams = nil
        shared = Guarded(Shared(lifecycle: ConnectionLifecycle(retries: false)))
        framing = FramerDriver.make(for: frozenParameters)
        framing?.attach(to: self)
    }

    /// A connection a UDP listener made for a new remote: a flow over the listener's socket.
    init(datagramsFrom endpoint: NWEndpoint, over flow: DatagramFlow, using parameters: NWParameters) {
        self.endpoint = endpoint
        frozenParameters = parameters
        number = Self.numbers.withLock { counter in
            counter += 1
            return counter
        }
        acceptedPair = nil
        datagrams = flow
        shared = Guarded(Shared(lifecycle: ConnectionLifecycle(retries: false)))
        framing = nil
    }

    private static let numbers = Guarded(0)

    deinit {
        // First: an engine holds its client unretained (none should be left by now: the connection
        // lives until its engine has closed).
        shared.withLock { $0.engine }?.dropClient(self)
    }

    // MARK: handlers and state

    /// Called on the queue with each new state (`NWConnection.stateUpdateHandler`). Set it before
    /// `start(queue:)`.
    public var stateUpdateHandler: (@Sendable (_ state: State) -> Void)? {
        get { shared.withLock { $0.handlers.stateUpdate } }
        set { shared.withLock { $0.handlers.stateUpdate = newValue } }
    }

    /// Called on the queue when the connection's viability changes (`NWConnection.viabilityUpdateHandler`).
    /// Linux has no per-connection viability signal: a ready connection stays viable until it fails, so
    /// this is kept and not called.
    public var viabilityUpdateHandler: (@Sendable (_ isViable: Bool) -> Void)? {
        get { shared.withLock { $0.handlers.viabilityUpdate } }
        set { shared.withLock { $0.handlers.set(viability: .some(newValue)) } }
    }

    /// Called on the queue when a better path appears (`NWConnection.betterPathUpdateHandler`). Linux
    /// routes one path per destination, so no better path is ever announced: kept and not called.
    public var betterPathUpdateHandler: (@Sendable (_ value: Bool) -> Void)? {
        get { shared.withLock { $0.handlers.betterPathUpdate } }
        set { shared.withLock { $0.handlers.set(viability: nil, betterPath: .some(newValue)) } }
    }

    /// Called on the queue with the connection's path when it is known, once ready
    /// (`NWConnection.pathUpdateHandler`). Linux routes one path per destination: it does not change
    /// while the connection lasts.
    public var pathUpdateHandler: (@Sendable (_ newPath: NWPath) -> Void)? {
        get { shared.withLock { $0.handlers.pathUpdate } }
        set { shared.withLock { $0.handlers.set(viability: nil, path: .some(newValue)) } }
    }

    /// The connection's path (`NWConnection.currentPath`): nil before start and after cancel; once ready,
    /// satisfied, over the interface its local address belongs to, with its local and remote endpoints;
    /// before that, satisfied with no interface or endpoint yet (a refused connect waits on a path that
    /// works).
    public var currentPath: NWPath? {
        // Read from the socket when asked for (it does not change while the connection lasts), so that an
        // idle connection keeps no copy of it.
        var (phase, fd) = shared.withLock { ($0.lifecycle.phase, $0.engine?.streams?.input.socketDescriptor) }
        if let datagrams { fd = datagrams.socketDescriptor }
        switch phase {
        case .setup, .cancelled: return nil
        case .ready: return fd.map { NWPath.connection(socket: $0) } ?? NWPath(status: .satisfied)
        default: return NWPath(status: .satisfied)
        }
    }

    /// The largest message a send can carry as one datagram (`NWConnection.maximumDatagramSize`): over
    /// UDP, 65,507 bytes to an IPv4 address and 65,527 to an IPv6 one (the IPv4 figure until the flow is
    /// connected); on a byte stream there is no datagram, and any size goes (`Int.max`).
    public var maximumDatagramSize: Int { datagrams?.maximumDatagramSize ?? .max }

    /// The current state (`NWConnection.state`): `.setup` until started.
    public var state: State { shared.withLock { $0.lifecycle.state } }

    /// The queue given to `start(queue:)`, nil before it (`NWConnection.queue`).
    public var queue: DispatchQueue? { shared.withLock { $0.queue } }

    /// "[C1 127.0.0.1:8080 tcp, ready]" (`NWConnection.debugDescription`).
    public var debugDescription: String {
        let state = self.state
        var stack = frozenParameters.defaultProtocolStack.applicationProtocols.contains { $0 is NWProtocolTLS.Options } ? "tls" : "tcp"
        if datagrams != nil { stack = "udp" }
        return "[C\(number) \(endpoint.debugDescription) \(stack), \(state)]"
    }

    // MARK: starting, restarting, cancelling

    /// Starts connecting, and makes `queue` the one every handler and completion runs on
    /// (`NWConnection.start(queue:)`). A second call is ignored.
    public func start(queue: DispatchQueue) {
        let turns = DelegateTurns(queue: queue)
        let actions = shared.withLock { shared -> [ConnectionAction] in
            guard shared.queue == nil else { return [] }
            shared.queue = queue
            shared.turns = turns
            let actions = shared.lifecycle.handle(.start)
            if !actions.isEmpty { shared.keptAlive = self }
            return actions
        }
        guard !actions.isEmpty else { return }
        guard turns != nil else {
            // No reactor for the queue (out of file descriptors): the connection fails there.
            let failure = NWError.posix(POSIXErrorCode(rawValue: errno) ?? .EMFILE)
            queue.async { self.perform([.report(.preparing)] + self.attemptEnded(with: failure)) }
            return
        }
        onOwner { self.perform(actions) }
    }

    /// Tries again now if the connection is `.waiting` (`NWConnection.restart()`); ignored otherwise.
    public func restart() {
        let actions = shared.withLock { $0.lifecycle.handle(.restart) }
        if !actions.isEmpty { onOwner { self.perform(actions) } }
    }

    /// Closes the connection gracefully: TLS's close_notify, then TCP's FIN (`NWConnection.cancel()`).
    /// Outstanding sends and receives complete with `.posix(.ECANCELED)`, then `.cancelled` is
    /// reported, last: no handler is called after it.
    public func cancel() {
        let (actions, engine) = shared.withLock { shared in
            shared.direct = nil
            shared.datagramsDirect = false
            return (shared.lifecycle.handle(.cancel), shared.engine)
        }
        if actions == [.closeAttempt] {
            if let datagrams { return datagrams.close(self) }
            if let framing { return framing.stop(closing: engine) }
            engine?.close()
        } else if !actions.isEmpty {
            onOwner { self.perform(actions) }
        } else {
            dropUnstarted()
        }
    }

    /// Closes at once, with a TCP reset rather than a FIN (`NWConnection.forceCancel()`); otherwise as
    /// `cancel()`.
    public func forceCancel() {
        if let fd = shared.withLock({ $0.engine?.streams?.input.socketDescriptor }) {
            TCPSocketOptions.resetOnClose(fd)
        }
        cancel()
    }

    /// A connection cancelled before it started: what was queued on it is let go of, uncalled (there is
    /// no queue to call it on), and an accepted connection's socket is closed (refused).
    private func dropUnstarted() {
        let dropped = shared.withLock { shared -> [Pending] in
            guard shared.lifecycle.phase == .cancelled, shared.queue == nil else { return [] }
            defer { shared.pending = [] }
            return shared.pending
        }
        _ = dropped
        datagrams?.detach(self)
        if let (input, output) = acceptedPair?.take() {
            input.close()
            output.close()
        }
    }

    /// Runs `body` on the owner, in a turn of the queue's reactor.
    func onOwner(_ body: @escaping @Sendable () -> Void) {
        let (queue, known) = shared.withLock { ($0.queue, $0.turns) }
        guard let queue else { return }
        if let known { return known.enqueue(OwnerTurn(body)) }
        guard let made = DelegateTurns(queue: queue) else { return queue.async(execute: body) }  // out of fds
        let turns = shared.withLock { shared -> DelegateTurns in
            if let turns = shared.turns { return turns }
            shared.turns = made
            return made
        }
        turns.enqueue(OwnerTurn(body))
    }

    // MARK: sending

    /// Sends `content` (`NWConnection.send(content:contentContext:isComplete:completion:)`). With the
    /// default context and `isComplete` true it is one message on the stream; a complete
    /// `.finalMessage` (or `.defaultStream`) then closes the sending side (TLS's close_notify, TCP's
    /// FIN) while receives go on; `content` may be nil only then. A send made before `.ready` is held
    /// and sent once ready (also for `.idempotent`). `.contentProcessed` is called once the kernel took
    /// every byte, or with the error that stopped it. Over UDP each send is one datagram, whatever the
    /// context (nil content sends none), and a datagram the kernel refuses fails that send alone.
    public func send(
        content: Data?, contentContext: ContentContext = .defaultMessage, isComplete: Bool = true, completion: SendCompletion
    ) {
        if let datagrams { return sendDatagram(content, completion, over: datagrams) }
        if let framing { return framing.send(content, context: contentContext, isComplete: isComplete, completion: completion) }
        send(content.map { WriteBytes($0) }, final: isComplete && contentContext.isFinal, completion)
    }

    /// Sends the bytes of `content`, any `DataProtocol` value (`NWConnection.send(content:contentContext:isComplete:completion:)`).
    public func send<Content: DataProtocol>(
        content: Content?, contentContext: ContentContext = .defaultMessage, isComplete: Bool = true, completion: SendCompletion
    ) {
        if let datagrams { return sendDatagram(content.map { $0 as? Data ?? Data($0) }, completion, over: datagrams) }
        if let framing {
            let data = content.map { ($0 as? Data) ?? Data($0) }
            return framing.send(data, context: contentContext, isComplete: isComplete, completion: completion)
        }
        let bytes = content.map { content -> WriteBytes in
            if let data = content as? Data { return WriteBytes(data) }
            return .array(Array(content))
        }
        send(bytes, final: isComplete && contentContext.isFinal, completion)
    }

    /// Runs `block` now (`NWConnection.batch(_:)`): the sends and receives it makes are coalesced by
    /// the engine's rounds, as Network.framework coalesces them.
    public func batch(_ block: () -> Void) { block() }

    private func send(_ bytes: WriteBytes?, final: Bool, _ completion: SendCompletion) {
        var operations: EngineOperations?
        var failure: NWError?
        let engine = shared.withLock { shared -> StreamOperations? in
            if let engine = shared.direct, !shared.outputClosed {
                if final { shared.outputClosed = true }
                operations = Self.register(.send(bytes, final: final, completion), in: &shared)
                return engine
            }
            if shared.lifecycle.phase == .cancelled || shared.lifecycle.cancelRequested {
                failure = .posix(.ECANCELED)
            } else if shared.lifecycle.phase == .failed {
                failure = shared.lifecycle.error
            } else if shared.outputClosed {
                failure = .posix(.EPIPE)
            } else {
                if final { shared.outputClosed = true }
                shared.pending.append(.send(bytes, final: final, completion))
            }
            return nil
        }
        if let engine, let operations { return Self.enqueue(operations, on: engine) }
        if let failure, case .contentProcessed(let done) = completion { onOwnerUnlessCancelled { done(failure) } }
    }

    // MARK: receiving

    /// Receives at least `minimumIncompleteLength` bytes and at most `maximumLength`
    /// (`NWConnection.receive(minimumIncompleteLength:maximumLength:completion:)`): the completion runs
    /// once, with the bytes as soon as the minimum has arrived, or, when the peer closes its side, with
    /// what there is (possibly nothing: nil) and `isComplete` true; later receives complete at once the
    /// same way. Received content comes in a final context, so `context.isFinal && isComplete` is the
    /// peer's end. While no receive is outstanding the socket is not read: the peer is flow-controlled.
    /// A `maximumLength` below 1 completes with `.posix(.EINVAL)`. Over UDP each receive completes with
    /// one datagram, `isComplete` true, in a context that is not final (not an end).
    public func receive(
        minimumIncompleteLength: Int, maximumLength: Int,
        completion: @escaping @Sendable (_ content: Data?, _ contentContext: ContentContext?, _ isComplete: Bool, _ error: NWError?) -> Void
    ) {
        guard maximumLength >= 1 else {
            return onOwnerUnlessCancelled { completion(nil, nil, false, .posix(.EINVAL)) }
        }
        if let framing { return framing.receive(minimum: max(0, minimumIncompleteLength), maximum: maximumLength, completion) }
        receive(.range(minimum: max(0, minimumIncompleteLength), maximum: maximumLength), completion)
    }

    /// Receives one complete message (`NWConnection.receiveMessage(completion:)`): on a byte stream,
    /// the whole stream once the peer has closed its side, as Network.framework delivers it; over UDP,
    /// one datagram (`isComplete` true, not an end).
    public func receiveMessage(
        completion:
            @escaping @Sendable (_ completeContent: Data?, _ contentContext: ContentContext?, _ isComplete: Bool, _ error: NWError?) ->
            Void
    ) {
        if let framing { return framing.receive(minimum: .max, maximum: .max, completion) }
        receive(.range(minimum: .max, maximum: .max), completion)
    }

    /// `receive(minimumIncompleteLength:maximumLength:completion:)` with the content as `DispatchData`
    /// (`NWConnection.receiveDiscontiguous(minimumIncompleteLength:maximumLength:completion:)`).
    public func receiveDiscontiguous(
        minimumIncompleteLength: Int, maximumLength: Int,
        completion:
            @escaping @Sendable (
                _ content: DispatchData?, _ contentContext: ContentContext?, _ isComplete: Bool, _ error: NWError?
            ) -> Void
    ) {
        receive(minimumIncompleteLength: minimumIncompleteLength, maximumLength: maximumLength) { data, context, isComplete, error in
            completion(data.map(Self.dispatchData), context, isComplete, error)
        }
    }

    /// `receiveMessage(completion:)` with the content as `DispatchData` (`NWConnection.receiveDiscontiguousMessage(completion:)`).
    public func receiveDiscontiguousMessage(
        completion:
            @escaping @Sendable (
                _ completeContent: DispatchData?, _ contentContext: ContentContext?, _ isComplete: Bool, _ error: NWError?
            ) -> Void
    ) {
        receiveMessage { data, context, isComplete, error in completion(data.map(Self.dispatchData), context, isComplete, error) }
    }

    private static func dispatchData(_ data: Data) -> DispatchData {
        data.withUnsafeBytes { DispatchData(bytes: $0) }
    }

    private func receive(_ request: ReadRequest, _ completion: @escaping ReceiveCompletion) {
        if let datagrams, case .range(_, let maximum) = request { return receiveDatagram(maximum: maximum, completion, over: datagrams) }
        var operations: EngineOperations?
        var failure: NWError?
        let engine = shared.withLock { shared -> StreamOperations? in
            if let engine = shared.direct {
                operations = Self.register(.receive(request, completion), in: &shared)
                return engine
            }
            if shared.lifecycle.phase == .cancelled || shared.lifecycle.cancelRequested {
                failure = .posix(.ECANCELED)
            } else if shared.lifecycle.phase == .failed {
                failure = shared.lifecycle.error
            } else {
                shared.pending.append(.receive(request, completion))
            }
            return nil
        }
        if let engine, let operations { return Self.enqueue(operations, on: engine) }
        if let failure { onOwnerUnlessCancelled { completion(nil, nil, false, failure) } }
    }

    /// Runs `body` on the owner, unless the connection has reported `.cancelled` by then (nothing is
    /// called after it). A completion on its way when `cancel()` is called still runs: the report
    /// comes in a later turn.
    func onOwnerUnlessCancelled(_ body: @escaping @Sendable () -> Void) {
        onOwner { [self] in
            if !shared.withLock({ $0.cancelledReported }) { body() }
        }
    }

    // MARK: metadata

    /// The metadata of the protocol `definition` names on this connection, once ready
    /// (`NWConnection.metadata(definition:)`): TLS's (what was negotiated), TCP's (the buffers),
    /// WebSocket's (what its handshake told), or UDP's.
    public func metadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
        if datagrams != nil {
            let ready = shared.withLock { $0.lifecycle.isReady }
            return ready && definition == NWProtocolUDP.definition ? NWProtocolUDP.Metadata() : nil
        }
        let (ready, input) = shared.withLock { shared in (shared.lifecycle.isReady, shared.engine?.streams?.input) }
        guard ready, let input else { return nil }
        let info = input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
        let fd = input.socketDescriptor
        if definition == NWProtocolTLS.definition { return info.map { NWProtocolTLS.Metadata(info: $0) } }
        if definition == NWProtocolTCP.definition, let fd { return NWProtocolTCP.Metadata(socket: fd) }
        if definition == NWProtocolWebSocket.definition { return framing?.webSocketMetadata }
        return nil
    }
}

/// A body run in a turn of the connection's reactor.
final class OwnerTurn: TurnCall {
    private let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    func run() { body() }
}
