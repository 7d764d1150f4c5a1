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

    /// The engine's client for one attempt. It keeps the connection alive while the engine lives (the
    /// connection keeps it, as its live attempt, until the engine closes).
    final class Attempt: StreamOperationsClient {
        let connection: NWConnection
        let engine: StreamOperations

        init(connection: NWConnection, engine: StreamOperations) {
            self.connection = connection
            self.engine = engine
        }

        func operations(_ operations: StreamOperations, handle event: OperationEvent) {
            connection.handle(event, from: self)
        }

        func operations(
            _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
        ) -> Double { 0 }
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
            case .beginAttempt: beginAttempt()
            case .closeAttempt: shared.withLock { $0.attempt }?.engine.close()
            case .failOutstanding(let error): failOutstanding(error)
            }
        }
    }

    private func report(_ state: State) {
        let handler = shared.withLock { shared in
            if case .cancelled = state { shared.cancelledReported = true }
            return shared.handlers.stateUpdate
        }
        handler?(state)
        guard case .cancelled = state else { return }
        // Last: the handlers go (breaking the cycles they usually make with their owner), and so does
        // the connection's hold on itself.
        let released = shared.withLock { shared -> (Handlers, NWConnection?, DelegateTurns?) in
            defer {
                shared.handlers = Handlers()
                shared.keptAlive = nil
            }
            return (shared.handlers, shared.keptAlive, nil)
        }
        _ = released
    }

    /// Completes every outstanding send and receive, held or handed to an engine, in the order they
    /// were made, with `error`.
    private func failOutstanding(_ error: NWError) {
        let (pending, receives, sends) = shared.withLock { shared in
            defer {
                shared.pending = []
                shared.receives = TaggedCompletions()
                shared.sends = TaggedCompletions()
            }
            return (shared.pending, shared.receives, shared.sends)
        }
        for completion in receives.inTagOrder { completion(nil, nil, false, error) }
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
            let attempt = Attempt(connection: self, engine: engine)
            cancelled = shared.withLock { shared in
                shared.attempt = attempt
                return shared.lifecycle.cancelRequested
            }
            return attempt
        }
        engine.attach(input: streams.0, output: streams.1, queue: queue)
        if cancelled { engine.close() }
    }

    /// The attempt's stream pair, configured from the parameters (see `ConnectionConfiguration`).
    private func makeStreams() throws(NWError) -> (InputStream, OutputStream) {
        let configuration = try ConnectionConfiguration(endpoint: endpoint, parameters: parameters, accepted: acceptedPair != nil)
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
        while true {
            let batch = shared.withLock { shared -> (StreamOperations, [EngineOperations])? in
                guard shared.lifecycle.isReady, let engine = shared.attempt?.engine else { return nil }
                guard !shared.pending.isEmpty else {
                    shared.direct = engine
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

    func handle(_ event: OperationEvent, from attempt: Attempt) {
        switch event {
        case .ready:
            let (actions, fd) = shared.withLock { shared -> ([ConnectionAction], Int32?) in
                guard shared.attempt === attempt else { return ([], nil) }
                let input = attempt.engine.streams?.input
                shared.tlsInfo = input?.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
                return (shared.lifecycle.handle(.connected), input?.socketDescriptor)
            }
            if let fd, let tcp = parameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options {
                TCPSocketOptions(tcp).applyOnceConnected(to: fd)
            }
            perform(actions)
            handOver()
        case .read(let bytes, let tag):
            let completion = shared.withLock { $0.receives.remove(tag) }
            completion?(Data(bytes), .defaultStream, false, nil)
        case .readEnded(let unread, let tag):
            let completion = shared.withLock { $0.receives.remove(tag) }
            completion?(unread.isEmpty ? nil : Data(unread), .defaultStream, true, nil)
        case .wrote(let tag), .outputShutDown(let tag):
            let completion = shared.withLock { $0.sends.remove(tag) }
            completion??(nil)
        case .closed(let error):
            let actions = shared.withLock { shared -> [ConnectionAction] in
                guard shared.attempt === attempt else { return [] }
                shared.attempt = nil
                shared.direct = nil
                return shared.lifecycle.handle(.attemptClosed(error.map(NWError.init(engineError:))))
            }
            attempt.engine.dropClient(attempt)
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
