// A connection whose stack has an `NWProtocolFramer`: the framer's driver, between the application's
// sends and receives and the connection's engine (TLS/TCP). The connection hands it what concerns the
// framer through one seam (`NWConnection.framing`): the application's sends and receives, the
// transport being up, the reads it asked for, the attempt's end, and cancel. Everything else (the
// state machine, failing what is outstanding, `.cancelled` last) stays the connection's.
//
// Ownership: the driver runs on the connection's owner (the queue's reactor), in `run()`, which is
// never re-entered: what arrives while it runs (an engine's event reported from inside an enqueue, a
// completion that sends again) is recorded under the lock and picked up by the loop. The framer's
// callbacks, the engine and the application's completions are called outside the lock. Other threads
// only record (under the lock) and ask for a turn of the owner.
//
// The instance's actions (what an `NWProtocolFramer.Instance` asks of its driver from a callback) are in
// FramerDriver+Actions.swift.
//
// Per attempt: a new implementation (`init(framer:)`, `start(framer:)`) once the transport is up, a new
// input; `cleanup(framer:)` when the attempt's engine closes. TLS a framer prepends is the engine's
// queued handshake (as GCDAsyncSocket's `startTLS`), behind the framer's writes so far.
//
// WebSocket (`NWProtocolWebSocket`) is an implementation this driver runs (`WebSocketFramer`): what it
// adds is its metadata, mapped where a send's context becomes a message (`send`) and a delivery becomes
// a context (`perform(.complete)`), its choice in `make(for:)`, and the end of output its close
// handshake asks for (`finishOutput`).

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

/// The framer of one connection (see the file's header).
final class FramerDriver: Sendable {
    typealias Message = NWProtocolFramer.Message
    typealias ReceiveCompletion = NWConnection.ReceiveCompletion

    enum Phase {
        /// No transport yet (or between attempts).
        case idle
        /// The transport is up; the framer has not marked ready.
        case starting
        /// The framer is ready: application sends go to `handleOutput`, deliveries to receives.
        case ready
        /// Cancel asked the framer to stop and it is not done yet.
        case stopping
        /// The attempt is over (failed, closed).
        case closed
    }

    struct Send {
        let content: Data?
        let message: Message
        let isComplete: Bool
        let final: Bool
        let completion: NWConnection.SendCompletion
    }

    struct Receive {
        let minimum: Int
        let maximum: Int
        let completion: ReceiveCompletion
    }

    struct State {
        var phase = Phase.idle
        var engine: StreamOperations?
        var implementation: (any NWProtocolFramerImplementation)?
        var instance: NWProtocolFramer.Instance?
        var input = FramerInput()
        /// A `deliverInputNoCopy` waiting for its bytes: how many are still to come.
        var delivering: (remaining: Int, message: Message, isComplete: Bool)?
        var passThroughInput = false
        /// The one message input passing through is delivered in (it completes at the input's end).
        var passThroughMessage: Message?
        var passThroughOutput = false
        /// `handleInput`'s last hint: the bytes wanted before it is called again.
        var wanted = 0
        /// Bytes arrived (or a delivery finished) since `handleInput` was last called.
        var inputChanged = false
        /// The input ended and `handleInput` has seen it.
        var endHandled = false
        /// The tag of the one read the framer has outstanding.
        var readTag: Int?
        var deliveries = FramerDeliveries<Message>()
        var receives: [Receive] = []
        var sends: [Send] = []
        var output: FramerOutput?
        /// What the framer wrote in the callback running, in order.
        var writes: [Data] = []
        /// TLS that `prependApplicationProtocol` put below the framer: its handshake goes after the
        /// first `count` of `writes` (what the framer wrote before the call).
        var prepended: (settings: TLSSettings, afterWrites: Int)?
        /// TLS was prepended (once an attempt).
        var secured = false
        /// The thread a framer callback is running on: the instance's actions are honoured there only
        /// (not from another thread meanwhile).
        var callbackThread: pthread_t?
        /// A framer callback is running on this thread.
        var inCallback: Bool {
            get { callbackThread.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
            set { callbackThread = newValue ? pthread_self() : nil }
        }
        /// `run()` is running.
        var running = false
        /// Blocks given to `async(execute:)`, and a wakeup due.
        var blocks: [() -> Void] = []
        var wakeupDue = false
        /// Incremented by every `scheduleWakeup`: a timer of an older one does nothing.
        var wakeupGeneration = 0
        /// `markReady` was called (or `start` returned `.ready`) and the connection is not told yet.
        var readyToReport = false
        /// `markFailed` was called: the error the attempt closes with.
        var failure: NWError?
        /// The framer ended the sending side (`finishOutput`): a final send follows its writes, once.
        var outputFinished = false
        var finalSent = false
    }

    let definition: NWProtocolFramer.Definition
    let state = Guarded(State())
    /// The connection (which lives until `.cancelled`, after its last attempt closed).
    private let connection: Guarded<Weak>

    struct Weak {
        weak var connection: NWConnection?
    }

    /// Buffered input beyond which the framer stops reading until it consumes (or the application
    /// receives what was delivered).
    static let readAhead = 65_536
    static let deliveredAhead = 1 << 20

    /// The driver for the framer (or WebSocket) in `parameters`' stack, or nil if it has none or the
    /// stack is one a connection refuses (it fails at start, as a connection without a driver).
    static func make(for parameters: NWParameters) -> FramerDriver? {
        let protocols = parameters.defaultProtocolStack.applicationProtocols
        guard isSupported(protocols) else { return nil }
        for options in protocols {
            if let framer = options as? NWProtocolFramer.Options { return FramerDriver(options: framer) }
            if let webSocket = options as? NWProtocolWebSocket.Options {
                let framer = NWProtocolFramer.Options(definition: WebSocketFramer.definition)
                framer[WebSocketFramer.optionsKey] = webSocket
                return FramerDriver(options: framer)
            }
        }
        return nil
    }

    /// Whether a connection can run `protocols` (a stack's application protocols, top first): TLS, and
    /// one framer or WebSocket above it (below TLS, or a second one, is not supported).
    static func isSupported(_ protocols: [NWProtocolOptions]) -> Bool {
        let framers = protocols.indices.filter { protocols[$0] is NWProtocolFramer.Options || protocols[$0] is NWProtocolWebSocket.Options }
        let tls = protocols.indices.filter { protocols[$0] is NWProtocolTLS.Options }
        guard framers.count + tls.count == protocols.count, framers.count <= 1 else { return false }
        return framers.allSatisfy { framer in tls.allSatisfy { framer < $0 } }
    }

    init(options: NWProtocolFramer.Options) {
        self.options = options
        definition = options.definition
        isWebSocket = options.definition === WebSocketFramer.definition
        connection = Guarded(Weak())
    }

    /// The framer is WebSocket's (its metadata is mapped to and from framer messages).
    let isWebSocket: Bool

    /// The connection is one a listener accepted.
    var isAccepted: Bool { owner?.acceptedPair != nil }

    /// WebSocket's metadata of the connection once its handshake is done (`NWConnection.metadata(definition:)`).
    var webSocketMetadata: NWProtocolWebSocket.Metadata? {
        (state.withLock { $0.implementation } as? WebSocketFramer)?.connectionMetadata.withLock { $0 }
    }

    /// The options the framer was inserted with (the connection's frozen copy).
    let options: NWProtocolFramer.Options

    var connectionParameters: NWParameters? { owner?.parameters }
    var remoteEndpoint: NWEndpoint? { owner?.endpoint }
    var localEndpoint: NWEndpoint? {
        // Read from the socket (the connection's `currentPath` has none before `.ready`).
        guard let fd = state.withLock({ $0.engine })?.streams?.input.socketDescriptor else { return nil }
        return NWPath.connection(socket: fd).localEndpoint
    }

    func attach(to connection: NWConnection) {
        self.connection.withLock { $0.connection = connection }
    }

    var owner: NWConnection? { connection.withLock { $0.connection } }

    var inCallback: Bool { state.withLock { $0.inCallback } }

    // MARK: the application's side (any thread)

    /// A send through the framer: held until it is ready, then given to `handleOutput` with the
    /// context's framer message (a new one if the context has none).
    func send(_ content: Data?, context: NWConnection.ContentContext, isComplete: Bool, completion: NWConnection.SendCompletion) {
        let message =
            isWebSocket
            ? WebSocketFramer.message(for: context)
            : (context.protocolMetadata(definition: definition) as? Message) ?? Message(definition: definition)
        let send = Send(
            content: content, message: message, isComplete: isComplete, final: isComplete && context.isFinal, completion: completion)
        if let failure = refusal() {
            guard case .contentProcessed(let done) = completion else { return }
            return owner?.onOwnerUnlessCancelled { done(failure) } ?? ()
        }
        state.withLock { $0.sends.append(send) }
        schedule()
    }

    /// A receive of the framer's messages (`receiveMessage`: `minimum == maximum == .max`).
    func receive(minimum: Int, maximum: Int, _ completion: @escaping ReceiveCompletion) {
        if let failure = refusal() {
            return owner?.onOwnerUnlessCancelled { completion(nil, nil, false, failure) } ?? ()
        }
        state.withLock { $0.receives.append(Receive(minimum: minimum, maximum: maximum, completion: completion)) }
        schedule()
    }

    /// The error a send or receive fails with at once: the connection's end.
    private func refusal() -> NWError? {
        guard let owner else { return .posix(.ECANCELED) }
        return owner.shared.withLock { shared -> NWError? in
            if shared.lifecycle.phase == .cancelled || shared.lifecycle.cancelRequested { return .posix(.ECANCELED) }
            if shared.lifecycle.phase == .failed { return shared.lifecycle.error }
            return nil
        }
    }

    /// Has `run()` called in a turn of the owner.
    func schedule() {
        owner?.onOwner { [self] in run() }
    }

    // MARK: the connection's side (on the owner)

    /// The attempt's transport is up: a new framer starts on it.
    func transportReady(_ engine: StreamOperations) {
        let instance = NWProtocolFramer.Instance(definition: definition, driver: self)
        state.withLock { state in
            let (receives, sends, running) = (state.receives, state.sends, state.running)
            state = State()
            (state.receives, state.sends, state.running) = (receives, sends, running)
            state.phase = .starting
            state.engine = engine
            state.instance = instance
            state.inCallback = true
        }
        let implementation = definition.implementation.init(framer: instance)
        let result = implementation.start(framer: instance)
        state.withLock { state in
            state.inCallback = false
            state.implementation = implementation
            if result == .ready, state.phase == .starting { state.readyToReport = true }
        }
        run()
    }

    /// One of the framer's reads completed (`ended`: at the end of the input). Returns false if the
    /// tag is not the framer's.
    func received(_ bytes: [UInt8], ended: Bool, tag: Int) -> Bool {
        let mine = state.withLock { state -> Bool in
            guard state.readTag == tag else { return false }
            state.readTag = nil
            guard state.phase == .starting || state.phase == .ready || state.phase == .stopping else { return true }
            if !bytes.isEmpty {
                state.input.append(bytes)
                state.inputChanged = true
            }
            if ended {
                state.input.isComplete = true
                state.inputChanged = true
            }
            return true
        }
        if mine { run() }
        return mine
    }

    /// Cancel: asks the framer to stop (`stop(framer:)`); closes the engine now if it agrees, else when
    /// it calls `markFailed(error:)`.
    func stop(closing engine: StreamOperations?) {
        guard let owner else { return engine?.close() ?? () }
        owner.onOwner { [self] in
            let (implementation, instance) = state.withLock { state in
                guard state.phase == .starting || state.phase == .ready else {
                    return ((any NWProtocolFramerImplementation)?.none, NWProtocolFramer.Instance?.none)
                }
                state.inCallback = true
                return (state.implementation, state.instance)
            }
            var stopped = true
            if let implementation, let instance { stopped = implementation.stop(framer: instance) }
            let close = state.withLock { state -> Bool in
                state.inCallback = false
                if !stopped, state.phase != .closed { state.phase = .stopping }
                return stopped || state.phase == .closed
            }
            flushWrites()
            if close { (engine ?? state.withLock { $0.engine })?.close() }
        }
    }

    /// The attempt's engine closed: the framer is cleaned up (`cleanup(framer:)`).
    func transportClosed() {
        let (implementation, instance) = state.withLock { state in
            defer {
                state.phase = .closed
                state.engine = nil
                state.implementation = nil
                state.instance = nil
                state.wakeupGeneration += 1
                state.blocks = []
            }
            state.inCallback = true
            return (state.implementation, state.instance)
        }
        if let implementation, let instance { implementation.cleanup(framer: instance) }
        state.withLock { $0.inCallback = false }
    }

    /// The error `markFailed` gave, for the attempt's end.
    var failure: NWError? { state.withLock { $0.failure } }

    /// Completes every application send and receive the framer holds with `error`.
    func failOutstanding(_ error: NWError) {
        let (receives, sends) = state.withLock { state in
            defer {
                state.receives = []
                state.sends = []
            }
            return (state.receives, state.sends)
        }
        for receive in receives { receive.completion(nil, nil, false, error) }
        for send in sends {
            if case .contentProcessed(let done) = send.completion { done(error) }
        }
    }

    // MARK: the loop (on the owner)

    private enum Step {
        case block(() -> Void)
        case wakeup(any NWProtocolFramerImplementation, NWProtocolFramer.Instance)
        case ready
        case handleInput(any NWProtocolFramerImplementation, NWProtocolFramer.Instance)
        case handleOutput(Send, any NWProtocolFramerImplementation, NWProtocolFramer.Instance)
        case passOutput(Send)
        case complete(ReceiveCompletion, FramerDeliveries<Message>.Received)
        case read(StreamOperations, tag: Int)
        case close(StreamOperations)
    }

    /// Does what is due, one step at a time, until nothing is.
    func run() {
        let entered = state.withLock { state -> Bool in
            guard !state.running else { return false }
            state.running = true
            return true
        }
        guard entered else { return }
        flushWrites()  // what a callback outside the loop wrote (`start`), before any read is queued
        while let step = nextStep() {
            perform(step)
            flushWrites()
        }
    }

    private func nextStep() -> Step? {
        var readTag: Int?
        if let owner, state.withLock({ $0.needsRead }) {
            readTag = owner.shared.withLock { $0.takeTag() }
        }
        return state.withLock { state -> Step? in
            let live = state.phase == .starting || state.phase == .ready || state.phase == .stopping
            if live, !state.blocks.isEmpty { return .block(state.blocks.removeFirst()) }
            if live, state.wakeupDue, let implementation = state.implementation, let instance = state.instance {
                state.wakeupDue = false
                return .wakeup(implementation, instance)
            }
            if state.readyToReport, state.phase == .starting {
                state.readyToReport = false
                state.phase = .ready
                return .ready
            }
            if live, let implementation = state.implementation, let instance = state.instance {
                state.moveInput()
                if state.wantsHandleInput {
                    state.inputChanged = false
                    if state.input.isComplete { state.endHandled = true }
                    return .handleInput(implementation, instance)
                }
                if state.input.isComplete, !state.deliveries.ended, state.delivering == nil || state.input.count == 0 {
                    // The end: a `deliverInputNoCopy` still waiting for bytes ends with the input.
                    state.endHandled = true
                    state.delivering = nil
                    state.deliveries.ended = true
                }
                if state.deliveries.ended, state.phase == .starting, let engine = state.engine {
                    // The peer closed before the framer was ready: it never will be.
                    state.failure = .posix(.ECONNRESET)
                    state.phase = .closed
                    return .close(engine)
                }
            }
            if state.phase == .ready, !state.sends.isEmpty {
                let send = state.sends.removeFirst()
                // No content in a final context is the sending side's end, not a message: no frame.
                if state.passThroughOutput || (send.content == nil && send.final) { return .passOutput(send) }
                if let implementation = state.implementation, let instance = state.instance {
                    return .handleOutput(send, implementation, instance)
                }
            }
            if state.phase == .ready, let first = state.receives.first,
                let received = state.deliveries.take(minimum: first.minimum, maximum: first.maximum)
            {
                state.receives.removeFirst()
                return .complete(first.completion, received)
            }
            if let tag = readTag, state.needsRead, let engine = state.engine {
                state.readTag = tag
                return .read(engine, tag: tag)
            }
            state.running = false
            return nil
        }
    }

    private func perform(_ step: Step) {
        switch step {
        case .block(let block):
            inCallback { block() }
        case .wakeup(let implementation, let instance):
            inCallback { implementation.wakeup(framer: instance) }
        case .ready:
            state.withLock { $0.engine }.map { owner?.framerReady($0) }
        case .handleInput(let implementation, let instance):
            let wanted = inCallback { implementation.handleInput(framer: instance) }
            state.withLock { $0.wanted = max(0, wanted) }
        case .handleOutput(let send, let implementation, let instance):
            let length = send.content?.count ?? 0
            state.withLock { state in
                state.output = FramerOutput(send.content ?? Data(), isComplete: send.isComplete)
                state.inCallback = true
            }
            implementation.handleOutput(framer: instance, message: send.message, messageLength: length, isComplete: send.isComplete)
            state.withLock { state in
                state.output = nil
                state.inCallback = false
            }
            flushWrites(completing: send)
        case .passOutput(let send):
            if let content = send.content, !content.isEmpty { state.withLock { $0.writes.append(content) } }
            flushWrites(completing: send)
        case .complete(let completion, let received):
            let context =
                received.message.map {
                    NWConnection.ContentContext(
                        identifier: definition.name, metadata: [isWebSocket ? WebSocketFramer.metadata(of: $0) : $0])
                } ?? .defaultStream
            completion(received.data, context, received.isComplete, nil)
        case .read(let engine, let tag):
            _ = engine.enqueueRead(.range(minimum: 1, maximum: Self.readAhead), timeout: -1, tag: tag)
        case .close(let engine):
            engine.close(afterWrites: true)
        }
    }

    @discardableResult
    private func inCallback<Result>(_ body: () -> Result) -> Result {
        state.withLock { $0.inCallback = true }
        defer { state.withLock { $0.inCallback = false } }
        return body()
    }

    /// Hands what the framer wrote to the engine, in order; `send`'s completion goes with the last of
    /// it (or is called now if nothing was written), and a final send's shutdown after it.
    private func flushWrites(completing send: Send? = nil) {
        let (written, engine, prepended, finish) = state.withLock { state in
            defer {
                state.writes = []
                state.prepended = nil
            }
            let finish = state.outputFinished && !state.finalSent
            if finish { state.finalSent = true }
            return (state.writes, state.engine, state.prepended, finish)
        }
        guard let owner else { return }
        guard let engine else {
            if let send, case .contentProcessed(let done) = send.completion { done(.posix(.ENOTCONN)) }
            return
        }
        let (writes, boundary) = Self.joined(written, boundary: prepended?.afterWrites)
        var operations: [NWConnection.EngineOperations] = []
        owner.shared.withLock { shared in
            for (index, bytes) in writes.enumerated() {
                let last = index == writes.count - 1 && !(send?.final ?? false)
                let completion = last ? (send?.completion ?? .idempotent) : .idempotent
                operations.append(NWConnection.register(.send(bytes, final: false, completion), in: &shared))
            }
            if let send, send.final {
                operations.append(NWConnection.register(.send(nil, final: true, send.completion), in: &shared))
            }
            if finish { operations.append(NWConnection.register(.send(nil, final: true, .idempotent), in: &shared)) }
        }
        for (index, each) in operations.enumerated() {
            if let prepended, boundary == index { engine.enqueueTLS(prepended.settings) }
            NWConnection.enqueue(each, on: engine)
        }
        if let prepended, let boundary, boundary >= operations.count { engine.enqueueTLS(prepended.settings) }
        if let send, writes.isEmpty, !send.final, case .contentProcessed(let done) = send.completion { done(nil) }
    }

    /// The most bytes of consecutive writes joined into one (``joined(_:boundary:)``).
    static let joinLimit = 16 * 1024

    /// `writes` as the engine's writes, runs of consecutive small ones joined into one array of up to
    /// ``joinLimit`` bytes, so that a framer's header and its message go to the socket in one system
    /// call and one segment, not one each with the peer woken for each; larger writes stay as they
    /// are (a copy would cost more than the call it saves). Nothing is joined across `boundary`, the
    /// number of writes before a TLS upgrade goes in; the result's boundary is the same point in it.
    static func joined(_ writes: [Data], boundary: Int?) -> (writes: [WriteBytes], boundary: Int?) {
        var result: [WriteBytes] = []
        result.reserveCapacity(writes.count)
        var joinedBoundary = boundary.map { $0 >= writes.count ? Int.max : $0 }
        var start = 0
        while start < writes.count {
            if start == boundary { joinedBoundary = result.count }
            var end = start + 1
            var total = writes[start].count
            while end < writes.count, end != boundary, total + writes[end].count <= joinLimit {
                total += writes[end].count
                end += 1
            }
            if end == start + 1 {
                result.append(WriteBytes(writes[start]))
            } else {
                var bytes: [UInt8] = []
                bytes.reserveCapacity(total)
                for write in writes[start..<end] { write.withUnsafeBytes { bytes.append(contentsOf: $0) } }
                result.append(.array(bytes))
            }
            start = end
        }
        if joinedBoundary == Int.max { joinedBoundary = result.count }
        return (result, joinedBoundary)
    }
}

extension FramerDriver.State {
    /// Moves input that needs no parsing to the deliveries: the bytes of a `deliverInputNoCopy` still
    /// arriving, and everything once input passes through.
    mutating func moveInput() {
        if let (remaining, message, isComplete) = delivering, input.count > 0 || remaining == 0 {
            let part = input.take(remaining)
            let left = remaining - part.count
            if !part.isEmpty || left == 0 { deliveries.append(part, message: message, isComplete: left == 0 && isComplete) }
            if left == 0 {
                delivering = nil
                inputChanged = true
            } else {
                delivering = (left, message, isComplete)
            }
        }
        if delivering == nil, passThroughInput, input.count > 0, let instance {
            let message = passThroughMessage ?? NWProtocolFramer.Message(instance: instance)
            passThroughMessage = message
            deliveries.append(input.take(input.count), message: message, isComplete: false)
        }
    }

    /// `handleInput` is due: bytes arrived since it was last called and there are as many as it
    /// wanted, or the input ended and it has not seen that.
    var wantsHandleInput: Bool {
        guard delivering == nil, !passThroughInput, inputChanged else { return false }
        if input.isComplete { return !endHandled && input.count > 0 }
        return input.count > 0 && input.count >= wanted
    }

    /// Another read is wanted: the input is open, nothing is outstanding, and what is buffered (input
    /// and deliveries) is below the read-ahead, unless the framer waits for more.
    var needsRead: Bool {
        guard phase == .starting || phase == .ready || phase == .stopping, engine != nil, readTag == nil, !input.isComplete else {
            return false
        }
        if deliveries.byteCount >= FramerDriver.deliveredAhead, receives.isEmpty { return false }
        return input.count < Swift.max(wanted, FramerDriver.readAhead) || delivering != nil
    }
}
