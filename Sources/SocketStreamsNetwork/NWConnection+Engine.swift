// An `NWConnection`'s attempts: a stream pair made for the endpoint and parameters, an engine over it
// on the queue's reactor, the sends and receives handed to that engine by tag, and what its events mean
// for the connection. All of it runs on the owner (the queue's reactor), except `register` (under the
// state's lock, from any thread) and `enqueue` (any thread, outside the lock).

import Foundation
import SocketStreams

extension NWConnection {
    /// One engine operation a send or receive became.
    enum EngineOperation {
        case read(ReadRequest, tag: Int)
        case write(WriteBytes, tag: Int)
        case shutdown(tag: Int)
    }

    /// An accepted connection's pair, taken once by its one attempt.
    final class AcceptedPair: Sendable {
        let streams: Guarded<(InputStream, OutputStream)?>
        init(_ input: InputStream, _ output: OutputStream) {
            // The listener hands the pair over `sending`: nothing else holds it; from here it is reached
            // only under the lock, and taken once by the connection's one attempt.
            nonisolated(unsafe) let pair = (input, output)
            streams = Guarded(pair)
        }
        func take() -> (InputStream, OutputStream)? {
            streams.withLock { pair in
                defer { pair = nil }
                return pair
            }
        }
    }

    /// What one send or receive becomes in the engine: one or two operations (a final message's write
    /// and shutdown), held inline (an array was an allocation per call).
    struct EngineOperations {
        var first: EngineOperation
        var second: EngineOperation?
    }

    /// Gives `pending` tags and records its completion, under the lock; returns what to enqueue.
    static func register(_ pending: Pending, in shared: inout Shared) -> EngineOperations {
        switch pending {
        case .receive(let request, let completion):
            let tag = shared.takeTag()
            shared.receives.append(tag, completion)
            return EngineOperations(first: .read(request, tag: tag))
        case .send(let bytes, let final, let completion):
            var done: (@Sendable (NWError?) -> Void)?
            if case .contentProcessed(let body) = completion { done = body }
            if final {
                let tag = shared.takeTag()
                shared.sends.append(tag, done)
                let shutdown = EngineOperation.shutdown(tag: tag)
                guard let bytes, bytes.count > 0 else { return EngineOperations(first: shutdown) }
                let write = shared.takeTag()
                shared.sends.append(write, nil)
                return EngineOperations(first: .write(bytes, tag: write), second: shutdown)
            }
            let tag = shared.takeTag()
            shared.sends.append(tag, done)
            return EngineOperations(first: .write(bytes ?? .array([]), tag: tag))
        }
    }

    /// Hands `operations` to `engine`, in order (outside the lock: on the owner the engine may pump
    /// and report at once). A refusal needs nothing here: the engine is closed, and its `closed` event
    /// completes what is registered.
    static func enqueue(_ operations: EngineOperations, on engine: StreamOperations) {
        enqueue(operations.first, on: engine)
        if let second = operations.second { enqueue(second, on: engine) }
    }

    private static func enqueue(_ operation: EngineOperation, on engine: StreamOperations) {
        switch operation {
        case .read(let request, let tag): _ = engine.enqueueRead(request, timeout: -1, tag: tag)
        case .write(let bytes, let tag): _ = engine.enqueueWrite(bytes, timeout: -1, tag: tag)
        case .shutdown(let tag): _ = engine.enqueueShutdownOutput(tag: tag)
        }
    }

    // MARK: carrying out the lifecycle's actions (on the owner)

    func perform(_ actions: [ConnectionAction]) {
        for action in actions {
            switch action {
            case .report(let state): report(state)
            case .beginAttempt: if let datagrams { datagrams.begin(self) } else { beginAttempt() }
            case .closeAttempt: if let datagrams { datagrams.close(self) } else { shared.withLock { $0.engine }?.close() }
            case .failOutstanding(let error): failOutstanding(error)
            }
        }
    }

    private func report(_ state: State) {
        // A waiting connection tries again when the network changes; in any other state it does not
        // listen (the observation is let go of outside the lock: its cancel waits for a retry in flight,
        // which takes the lock).
        var observation: NetworkChanges.Observation?
        if case .waiting = state {
            observation = NetworkChanges.shared.observe { [weak self] in self?.networkChanged() }
        }
        let (handler, old) = shared.withLock { shared in
            defer { shared.changes = observation }
            if case .cancelled = state { shared.cancelledReported = true }
            return (shared.handlers.stateUpdate, shared.changes)
        }
        old?.cancel()
        handler?(state)
        guard case .cancelled = state else { return }
        // Last: the handlers go (breaking the cycles they usually make with their owner), and so does
        // the connection's hold on itself.
        let released = shared.withLock { shared -> (Handlers, NWConnection?, NetworkChanges.Observation?) in
            defer {
                shared.handlers = Handlers()
                shared.keptAlive = nil
                shared.changes = nil
            }
            return (shared.handlers, shared.keptAlive, shared.changes)
        }
        released.2?.cancel()
    }

    /// The network changed (on the routing socket's thread): a waiting connection tries again.
    private func networkChanged() {
        let actions = shared.withLock { $0.lifecycle.handle(.restart) }
        if !actions.isEmpty { onOwner { self.perform(actions) } }
    }

    /// Completes every outstanding send and receive, held or handed to an engine, in the order they
    /// were made, with `error`.
    private func failOutstanding(_ error: NWError) {
        if let (receives, sends) = datagrams?.takeOutstanding() {
            for completion in receives { completion(nil, nil, false, error) }
            for completion in sends { completion(error) }
        }
        let (pending, receives, sends) = shared.withLock { shared in
            defer {
                shared.pending = []
                shared.receives = TaggedCompletions()
                shared.sends = TaggedCompletions()
            }
            return (shared.pending, shared.receives, shared.sends)
        }
        for completion in receives.inTagOrder { completion(nil, nil, false, error) }
        framing?.failOutstanding(error)
        for completion in sends.inTagOrder { completion?(error) }
        for operation in pending {
            switch operation {
            case .receive(_, let completion): completion(nil, nil, false, error)
            case .send(_, _, .contentProcessed(let completion)): completion(error)
            case .send(_, _, .idempotent): break
            }
        }
    }

    /// The actions for an attempt that ended before it began (a refused configuration).
    func attemptEnded(with error: NWError) -> [ConnectionAction] {
        shared.withLock { $0.lifecycle.handle(.attemptClosed(error)) }
    }

    /// Makes a new attempt: the stream pair for the endpoint with the parameters' settings, an engine on
    /// the queue over it.
    private func beginAttempt() {
        guard let queue = shared.withLock({ $0.queue }) else { return }
        let streams: (InputStream, OutputStream)
        do throws(NWError) {
            streams = try makeStreams()
        } catch {
            return perform(attemptEnded(with: error))
        }
        // The attempt is the live one before the engine can report anything (out of file
        // descriptors, it reports its close at once).
        // A cancel that came before the attempt existed found nothing to close: the attempt closes
        // itself (the cancel and this both look under the lock, so one of them sees the other).
        var cancelled = false
        let engine = StreamOperations(queue: queue) { engine in
            cancelled = shared.withLock { shared in
                shared.engine = engine
                return shared.lifecycle.cancelRequested
            }
            return self
        }
        engine.attach(input: streams.0, output: streams.1, queue: queue)
        if cancelled { engine.close() }
    }

    /// The attempt's stream pair, configured from the parameters (see `ConnectionConfiguration`).
    private func makeStreams() throws(NWError) -> (InputStream, OutputStream) {
        let configuration = try ConnectionConfiguration(endpoint: endpoint, parameters: frozenParameters, accepted: acceptedPair != nil)
        let streams: (InputStream, OutputStream)
        if let acceptedPair {
            guard let pair = acceptedPair.take() else { throw NWError.posix(.ENOTCONN) }
            streams = pair
        } else {
            streams = try configuration.makePair()
        }
        try configuration.configure(streams.0)
        return streams
    }

    /// Hands the operations held for readiness to the live engine, in order, then lets new ones go
    /// straight to it. Operations made meanwhile are held and taken by the next pass.
    private func handOver() {
        var released: DelegateTurns?
        defer { _ = released }  // let go of after the lock
        while true {
            let batch = shared.withLock { shared -> (StreamOperations, [EngineOperations])? in
                guard shared.lifecycle.isReady, let engine = shared.engine else { return nil }
                guard !shared.pending.isEmpty else {
                    shared.direct = engine
                    released = shared.turns
                    shared.turns = nil
                    return nil
                }
                let pending = shared.pending
                shared.pending = []
                return (engine, pending.map { Self.register($0, in: &shared) })
            }
            guard let (engine, operations) = batch else { return }
            for each in operations { Self.enqueue(each, on: engine) }
        }
    }

    // MARK: the engine's events (on the owner)

    /// The attempt is up (TCP, then TLS, then the stack's framer if it has one): the connection is ready.
    func framerReady(_ engine: StreamOperations) {
        let (actions, fd) = shared.withLock { shared -> ([ConnectionAction], Int32?) in
            guard shared.engine === engine else { return ([], nil) }
            return (shared.lifecycle.handle(.connected), engine.streams?.input.socketDescriptor)
        }
        if let fd, let tcp = frozenParameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options {
            TCPSocketOptions(tcp).applyOnceConnected(to: fd)
        }
        if !actions.isEmpty, let fd, let handler = shared.withLock({ $0.handlers.pathUpdate }) {
            handler(NWPath.connection(socket: fd))
        }
        perform(actions)
        handOver()
    }

    func handle(_ event: OperationEvent, from engine: StreamOperations) {
        switch event {
        case .ready:
            // With a framer, the connection is ready once the framer is (`framerReady`).
            if let framing, shared.withLock({ $0.engine === engine }) { return framing.transportReady(engine) }
            framerReady(engine)
        case .read(let bytes, let tag):
            if let framing, framing.received(bytes, ended: false, tag: tag) { return }
            let completion = shared.withLock { $0.receives.remove(tag) }
            completion?(Data(bytes), .defaultStream, false, nil)
        case .readEnded(let unread, let tag):
            if let framing, framing.received(unread, ended: true, tag: tag) { return }
            let completion = shared.withLock { $0.receives.remove(tag) }
            completion?(unread.isEmpty ? nil : Data(unread), .defaultStream, true, nil)
        case .wrote(let tag), .outputShutDown(let tag):
            let completion = shared.withLock { $0.sends.remove(tag) }
            completion??(nil)
        case .closed(let error):
            let actions = shared.withLock { shared -> [ConnectionAction] in
                guard shared.engine === engine else { return [] }
                shared.engine = nil
                shared.direct = nil
                return shared.lifecycle.handle(.attemptClosed(framing?.failure ?? error.map(NWError.init(engineError:))))
            }
            framing?.transportClosed()
            engine.dropClient(self)
            perform(actions)
        case .readPartial, .wrotePartial, .ended, .secured:
            break  // the peer's end shows in the receives; the connection stays ready for sends
        }
    }
}

/// Completions waiting for the engine, with their tags, in the order they were handed over. The engine
/// completes in that order, so the one wanted is nearly always the first.
struct TaggedCompletions<Completion> {
    private var entries: [(tag: Int, completion: Completion)] = []

    mutating func append(_ tag: Int, _ completion: Completion) { entries.append((tag, completion)) }

    /// The completion for `tag`, taken out; nil if it is not here (already completed).
    mutating func remove(_ tag: Int) -> Completion? {
        guard let index = entries.firstIndex(where: { $0.tag == tag }) else { return nil }
        return entries.remove(at: index).completion
    }

    /// Every completion, oldest first.
    var inTagOrder: [Completion] { entries.sorted { $0.tag < $1.tag }.map(\.completion) }
}

/// The connection is its live engine's client: one object fewer per connection than a client of its own.
extension NWConnection: StreamOperationsClient {
    package func operations(_ operations: StreamOperations, handle event: OperationEvent) {
        handle(event, from: operations)
    }

    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double { 0 }
}
