import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// The engine under `QueuedSocket` and `AsyncConnection`: reads and writes queued as operations that
// complete in order (GCDAsyncSocket's model), driven by a stream pair's events. It takes them as the
// pair's receiver (PairReceiver.swift: the events a delegate would get, without the weak reference's
// side table), so the delegate path's delivery stays the one engine.
//
// Ownership. The engine, like the pair under it, is owned by one reactor (`reactor`): the run loop or
// dispatch queue where the streams are scheduled, their events are delivered and the timers fire
// (`QueuedSocket`: its delegate's; `AsyncConnection`: the stream thread's). Everything that touches the
// streams (attaching to them, reading, writing, setting TLS, closing) and every completion
// runs there, inside the reactor's `perform`, and `Reactor.assertOwner` checks it in debug builds.
// Any other thread only records a request under `state`'s lock (an operation queued, a close asked
// for) and posts a pump to the owner, as an event loop's `execute` does; a request made on the owner
// pumps at once. So no thread but the owner ever touches Foundation's own, unsynchronised `Stream`
// properties (its `delegate` above all), and a close, cancel or release from another thread leaves the
// owner to finish it.
//
// One pump at a time (`SerialRunner`): a request made from a completion the pump is delivering (a
// read queued in `didRead`) goes round again instead of pumping inside the pump. A pump reads only
// after a `hasBytesAvailable` and writes only after a `hasSpaceAvailable`, one call per event, so
// nothing it does can block, and the events are exact: only the owner reads and writes. Completions go
// to the client outside the lock, in order.
//
// Reads happen only while a read operation waits (the kernel's buffer is the backpressure); each
// takes up to 64 KiB, and bytes beyond what the operation needs stay buffered for the next one.

// `@unchecked Sendable`: its mutable state is `state`, behind its own lock, and the streams'
// Foundation properties are touched only on the owner reactor's thread (above), which
// `reactor.assertOwner` checks in debug builds.
package final class StreamOperations: PairReceiver, StreamDelegate, TimerTarget, @unchecked Sendable {
    /// The request last: its 17 bytes then end the struct (49 bytes, not 56), which keeps the
    /// engine's State 8 bytes smaller and its guarded allocation a malloc chunk smaller.
    struct ReadOperation {
        let id: UInt64
        let timeout: Double
        let tag: Int
        /// Buffered bytes already searched for the delimiter (so each byte is searched once).
        var searched = 0
        let request: ReadRequest

        init(id: UInt64, request: ReadRequest, timeout: Double, tag: Int) {
            self.id = id
            self.timeout = timeout
            self.tag = tag
            self.request = request
        }
    }

    struct WriteOperation {
        let id: UInt64
        let bytes: WriteBytes
        var offset = 0
        let timeout: Double
        let tag: Int
    }

    enum ReadItem {
        case read(ReadOperation)
        case tls(UInt64)
    }

    enum WriteItem {
        case write(WriteOperation)
        /// Boxed: TLS settings are large, and every queued write would take their size. A failure:
        /// settings refused when they were given, which close the pair when the handshake's turn comes.
        indirect case tls(UInt64, Result<TLSSettings, any Error>)
        /// The write-side half-close, once the writes before it are done.
        case shutdown(tag: Int)
    }

    /// A direction's timer, and when the operation it times started. The timer may outlive its
    /// operation until the pump lets go, so that the next operation, queued from the completion of the
    /// last, adopts it: no cancel and arm per operation (see StreamOperations+Timeouts.swift). Whether
    /// it times the first operation is the direction's `timing` bit in `State`, cleared whenever that
    /// operation leaves the queue; the operation's own deadline is derived, not stored (24 bytes, not
    /// 48: every idle connection holds two; see StreamOperationsLayoutTests).
    struct Timeout {
        /// The reactor's id of the armed timer, for the cancel (0 until `arm` has recorded it).
        var timer: UInt64 = 0
        /// When the armed timer fires (the engine's clock, nanoseconds; 0: none armed). The firing
        /// carries it: one that finds another value here is of a timer since replaced, and is ignored.
        var fires: UInt64 = 0
        /// When the operation timed became first.
        var started: UInt64 = 0
    }

    struct State {
        /// The timer of the first read or write.
        subscript(timeout direction: OperationDirection) -> Timeout {
            get { direction == .read ? readTimeout : writeTimeout }
            set {
                if direction == .read { readTimeout = newValue } else { writeTimeout = newValue }
            }
        }

        /// Whether the direction's `Timeout` times its first operation (`started` is then that
        /// operation's). Cleared by `removeFirstRead`/`removeFirstWrite`, set by `updateTimers`.
        subscript(timing direction: OperationDirection) -> Bool {
            get { flags & (direction == .read ? 4 : 8) != 0 }
            set {
                let bit: UInt8 = direction == .read ? 4 : 8
                flags = newValue ? flags | bit : flags & ~bit
            }
        }

        /// Removes the first read (or TLS marker): its timer, if it had one, stays for the next.
        mutating func removeFirstRead() {
            reads.removeFirst()
            self[timing: .read] = false
        }

        /// Removes the first write (or TLS marker, or half-close): its timer, if it had one, stays for
        /// the next.
        mutating func removeFirstWrite() {
            writes.removeFirst()
            self[timing: .write] = false
        }

        // Fields in an order that leaves little padding (Swift lays them out as declared): every idle
        // connection holds one of these.
        var reads = FIFO<ReadItem>()
        var writes = FIFO<WriteItem>()
        var buffer: [UInt8] = []
        var bufferStart = 0
        var bufferCount: Int { buffer.count - bufferStart }

        var input: InputStream?
        var output: OutputStream?
        var finalError: Error?
        /// An output error seen while no write was queued: the next write fails with it.
        var outputError: Error?
        var nextID: UInt64 = 1
        /// Every byte read from the input so far (tests wait on it).
        var totalRead = 0
        /// The pump running on the owner, and requests made meanwhile.
        var pump = SerialRunner()

        var attached = false
        var canRead = false
        var canWrite = false
        var ready = false
        var readyReported = false
        var ended = false
        var endReported = false
        var closed = false
        /// `disconnectAfterReading` (bit 0), `disconnectAfterWriting` (bit 1) and the read's and the
        /// write's `timing` (bits 2 and 3) in one byte: with the flags as separate `Bool`s the state
        /// took 8 bytes more (280, a malloc chunk more per idle connection; see
        /// StreamOperationsLayoutTests).
        private var flags: UInt8 = 0
        var disconnectAfterReads: Bool {
            get { flags & 1 != 0 }
            set { flags = newValue ? flags | 1 : flags & ~1 }
        }
        var disconnectAfterWrites: Bool {
            get { flags & 2 != 0 }
            set { flags = newValue ? flags | 2 : flags & ~2 }
        }
        /// Set by a `disconnectAfter…`: reads, writes and TLS queued from then on are ignored, as
        /// GCDAsyncSocket's `kForbidReadsWrites` does.
        var forbidden = false
        /// A half-close is queued or done: writes queued from then on fail with EPIPE.
        var outputShut = false
        /// A pump is posted to the owner and has not run yet.
        var postPending = false
        /// An operation with a timeout has been queued: until then a round has no timer to look at.
        var timeoutsUsed = false
        /// The engine acquired its reactor from the registry itself (`init(queue:client:)`) and releases
        /// it when it goes.
        var holdsReactor = false
        private var closingRequested = false

        var readTimeout = Timeout()
        var writeTimeout = Timeout()
        // Optionals stored without their extra tag byte (each would cost 7 bytes of padding).
        private var securingMarker: UInt64 = 0
        private var closingError: Error?

        /// The id of the TLS marker whose handshake runs (ids start at 1).
        var securing: UInt64? {
            get { securingMarker == 0 ? nil : securingMarker }
            set { securingMarker = newValue ?? 0 }
        }
        /// Set when the connection must close: the error, or nil for an orderly close.
        var closing: Error?? {
            get { closingRequested ? .some(closingError) : nil }
            set {
                closingRequested = newValue != nil
                closingError = newValue ?? nil
            }
        }
    }

    let state = Guarded(State())
    /// The pair, set once by `attach` (under the lock, like everything else here).
    private var input: InputStream? { state.withLock { $0.input } }
    /// The owner: where the streams are scheduled, pumps run and timers fire (nil: none could be made,
    /// out of file descriptors; the engine is then closed from the start, never attaches a pair, and
    /// reports that where it is asked).
    let reactor: Reactor?
    /// The clock for timeouts (tests substitute a manual one).
    var time: any TimeSource {
        get { customTime?.source ?? SystemTime() }
        set { customTime = newValue is SystemTime ? nil : TimeSourceBox(source: newValue) }
    }
    /// A substituted clock, boxed: a reference costs every engine 8 bytes, an existential 40.
    private var customTime: TimeSourceBox?
    /// The client (`QueuedSocket`, `AsyncConnection`, GCDAsyncSocket), unretained: not `weak`, which
    /// would give every client a side table (32 bytes an idle connection) and send each of its retains
    /// and releases down the runtime's slow path (`UnretainedReference`). Guarded by `state`'s lock:
    /// set by `setClient`, loaded with a reference taken (`takeClient`), and cleared by `dropClient`,
    /// which a client calls first thing in its deinit and whenever it lets go of this engine while the
    /// engine may live on (GCDAsyncSocket's connections).
    @exclusivity(unchecked) private var clientReference: UnretainedClient?
    /// The most one read takes.
    static let readSize = 64 * 1024
    /// Reads at least this large move into an empty buffer instead of being copied.
    static let handOver = 16 * 1024

    init(reactor: Reactor?) {
        self.reactor = reactor
        super.init()
    }

    /// Makes `client` the one told of this engine's events (see `clientReference`).
    package func setClient(_ client: any StreamOperationsClient) {
        state.withLock { _ in clientReference = UnretainedClient(client) }
    }

    /// Stops telling `client` (if it is the client): from its deinit, before anything else there, and
    /// when it lets go of this engine. Holds the lock while it compares, as a delivery does while it loads.
    package func dropClient(_ client: any StreamOperationsClient) {
        state.withLock { _ in
            if clientReference?.refers(to: client) == true { clientReference = nil }
        }
    }

    /// The client, retained, unless there is none or its deinit has begun. With `state`'s lock held.
    @inline(__always)
    func takeClient() -> (any StreamOperationsClient)? {
        #if DEBUG
            assert(
                state.isHeld,
                "SocketStreams: the engine's client was loaded without its lock held (the rule: \(UnretainedChecks.referenceRule))")
        #endif
        return clientReference?.retained()
    }

    #if DEBUG
        /// Debug builds, at the end of a client's deinit: nil, or the rule broken if this engine still
        /// refers to it (UnretainedChecks.swift).
        package func unretainedProblem(afterDeinitOf client: any StreamOperationsClient) -> String? {
            state.withLock { _ in UnretainedClient.deinitProblem(clientReference, after: client) }
        }

        /// Debug builds, at the end of a client's deinit: traps if this engine still refers to it.
        package func checkLetGo(afterDeinitOf client: any StreamOperationsClient, file: StaticString = #file, line: UInt = #line) {
            UnretainedChecks.check(unretainedProblem(afterDeinitOf: client), file: file, line: line)
        }
    #endif

    deinit {
        // First: a delivery on the owner may be loading this engine as its pair's receiver.
        connection?.dropReceiver(self)
        if let reactor, state.withLock({ $0.holdsReactor }) { ReactorRegistry.shared.release(reactor) }
        #if DEBUG
            if let connection { UnretainedChecks.check(connection.unretainedProblem(afterDeinitOf: self)) }
        #endif
    }

    /// The pair's connection, when the pair is one of this package's (the engine is then its receiver).
    private var connection: Connection? { (state.withLock { $0.input } as? SocketInputStream)?.connection }

    // MARK: setting up

    /// Takes over an unopened pair: on the owner, becomes its receiver (for a pair not of this package,
    /// both streams' delegate), lets `schedule` put them there (where their events must come) and
    /// opens them. Operations queued before now start once it is ready. A pair that cannot be taken
    /// (the engine is closed) is closed.
    func attach(input: InputStream, output: OutputStream, schedule: @escaping @Sendable (InputStream, OutputStream) -> Void) {
        let accepted = state.withLock { state -> Bool in
            guard !state.attached, !state.closed, state.closing == nil, reactor != nil else { return false }
            state.attached = true
            state.input = input
            state.output = output
            return true
        }
        guard accepted, let reactor else {
            input.close()
            output.close()
            return
        }
        reactor.execute { [self] in
            reactor.assertOwner("attaching the operations engine to a pair")
            let pair = state.withLock { state -> (InputStream, OutputStream)? in
                // A close asked for meanwhile: the pump below closes the pair, which was never opened.
                guard let input = state.input, let output = state.output else { return nil }
                return (input, output)
            }
            guard let (input, output) = pair else { return }
            // The pair's events come to the engine directly (PairReceiver.swift), or, for a pair that is
            // not this package's, as its streams' delegate.
            if let socket = input as? SocketInputStream, (output as? SocketOutputStream)?.connection === socket.connection {
                socket.connection.setReceiver(self)
            } else {
                input.delegate = self
                output.delegate = self
            }
            schedule(input, output)
            input.open()
            output.open()
            requestPump()
        }
    }

    /// Every byte read from the input stream so far.
    var totalRead: Int { state.withLock { $0.totalRead } }

    /// The pair, once attached (kept until the engine is released, closed or not).
    package var streams: (input: InputStream, output: OutputStream)? {
        state.withLock { state in state.input.flatMap { input in state.output.map { (input, $0) } } }
    }

    /// Reads queued and not yet complete.
    var pendingReads: Int { state.withLock { $0.reads.count } }

    /// The bytes read but not yet taken by a read.
    var buffered: Int { state.withLock { $0.bufferCount } }

    /// Whether the pair is closed (or closing).
    var isClosed: Bool { state.withLock { $0.closed || $0.closing != nil } }

    /// Whether the pair is ready (open, handshakes done) and not closed.
    var isReady: Bool { state.withLock { $0.ready && !$0.closed && $0.closing == nil } }

    // MARK: queueing

    /// Queues a read. Returns the error that closed the connection if it is closed already.
    @discardableResult
    package func enqueueRead(_ request: ReadRequest, timeout: Double, tag: Int) -> Error? {
        enqueue { state in
            if timeout > 0 { state.timeoutsUsed = true }
            state.reads.append(.read(ReadOperation(id: state.nextID, request: request, timeout: timeout, tag: tag)))
            state.nextID += 1
            return nil
        }
    }

    /// Queues a write (the bytes are held as given, not copied). Returns the error that closed the
    /// connection if it is closed.
    @discardableResult
    package func enqueueWrite(_ bytes: [UInt8], timeout: Double, tag: Int) -> Error? {
        enqueueWrite(.array(bytes), timeout: timeout, tag: tag)
    }

    /// Queues a write of `bytes`. Returns the error that closed the connection if it is closed.
    @discardableResult
    package func enqueueWrite(_ bytes: WriteBytes, timeout: Double, tag: Int) -> Error? {
        enqueue { state in
            if state.outputShut { return Self.outputShutError }
            if timeout > 0 { state.timeoutsUsed = true }
            state.writes.append(.write(WriteOperation(id: state.nextID, bytes: bytes, timeout: timeout, tag: tag)))
            state.nextID += 1
            return nil
        }
    }

    /// Queues the write-side half-close behind the writes queued so far: once they are done, the
    /// output stream's `shutdownOutputKey` sends TLS's close_notify (over TLS) and the FIN. Reads go
    /// on; writes queued after it fail with EPIPE. Completes with `outputShutDown(tag:)`.
    @discardableResult
    package func enqueueShutdownOutput(tag: Int) -> Error? {
        enqueue { state in
            if state.outputShut { return Self.outputShutError }
            state.outputShut = true
            state.writes.append(.shutdown(tag: tag))
            return nil
        }
    }

    /// What a write after the half-close fails with: the EPIPE the pair's own write would give.
    private static var outputShutError: Error {
        NSError(
            domain: NSPOSIXErrorDomain, code: Int(EPIPE),
            userInfo: [NSLocalizedDescriptionKey: "the output was shut down (half-close): no more writes"])
    }

    /// Queues a TLS handshake behind every read and write queued so far: it starts once they have
    /// completed, and operations queued after it wait for it.
    @discardableResult
    package func enqueueTLS(_ settings: TLSSettings) -> Error? {
        enqueueTLSStage(.success(settings))
    }

    /// Queues, where a TLS handshake would go, a close with `error`: GCDAsyncSocket checks its TLS
    /// settings when the handshake's turn comes (`ssl_startTLS`), so a bad dictionary disconnects once
    /// the reads and writes queued before `startTLS` are done, not at once.
    @discardableResult
    package func enqueueTLSRefusal(_ error: any Error) -> Error? {
        enqueueTLSStage(.failure(error))
    }

    private func enqueueTLSStage(_ stage: Result<TLSSettings, any Error>) -> Error? {
        enqueue { state in
            state.reads.append(.tls(state.nextID))
            state.writes.append(.tls(state.nextID, stage))
            state.nextID += 1
            return nil
        }
    }

    /// Applies `add` unless the connection is closed (then returns why) or a `disconnectAfter…` has
    /// forbidden new operations (then returns ``StreamOperationError/closed``), and pumps on the owner:
    /// in the same critical section (one lock per operation queued on the owner, not two).
    private func enqueue(_ add: (inout State) -> Error?) -> Error? {
        let here = isOwnerHere
        var work = Round()
        var refused: Error?
        let claim = state.withLock { state -> PumpClaim in
            if let error = Self.finalError(state) {
                refused = error
            } else if state.forbidden {
                refused = StreamOperationError.closed
            } else {
                refused = add(&state)
            }
            if refused != nil { return .none }
            return claimPump(&state, here: here, &work)
        }
        pump(claim, &work)
        return refused
    }

    /// Closes once the queued reads (and/or writes) have completed; with neither, at once.
    package func close(afterReads: Bool = false, afterWrites: Bool = false, error: Error? = nil) {
        state.withLock { state in
            guard !state.closed, state.closing == nil else { return }
            if afterReads || afterWrites {
                state.forbidden = true
                state.disconnectAfterReads = state.disconnectAfterReads || afterReads
                state.disconnectAfterWrites = state.disconnectAfterWrites || afterWrites
            } else {
                state.closing = .some(error)
            }
        }
        requestPump()
    }

    /// Takes the buffered bytes (for a client that closes at the end of the stream).
    package func takeBuffered() -> [UInt8] {
        state.withLock { state in Self.take(&state, count: state.bufferCount) }
    }

    private static func finalError(_ state: State) -> Error? {
        if state.closed { return state.finalError ?? StreamOperationError.closed }
        if let closing = state.closing { return closing ?? StreamOperationError.closed }
        return nil
    }

    // MARK: stream events

    /// The pair's events when the engine is its receiver (PairReceiver.swift): as its delegate's.
    override package func pair(_ stream: Stream, handle event: Stream.Event) {
        self.stream(stream, handle: event)
    }

    /// The pair's events, delivered on the owner (where both streams are scheduled). The event is
    /// recorded and the pump entered under one lock.
    package func stream(_ stream: Stream, handle event: Stream.Event) {
        let here = isOwnerHere
        var work = Round()
        let claim = state.withLock { state -> PumpClaim in
            let isInput = stream === state.input
            switch event {
            case .hasBytesAvailable:
                state.canRead = true
                state.ready = true
            case .hasSpaceAvailable:
                state.canWrite = true
                state.ready = true
            case .endEncountered:
                if isInput { state.ended = true }
            case .errorOccurred:
                let error = stream.streamError ?? StreamOperationError.closed
                if isInput || !state.writes.isEmpty || !state.ready {
                    if state.closing == nil { state.closing = .some(error) }
                } else {
                    // The input may still hold what the peer sent before the failure; it reports
                    // its own end or error when that runs out. The next write fails with this.
                    state.outputError = error
                }
            default:
                break
            }
            return claimPump(&state, here: here, &work)
        }
        pump(claim, &work)
    }

    // MARK: pumping

    /// Whether the caller is on the owner, where the pump runs (with no reactor, the engine never
    /// attached and a pump only reports the close: anywhere).
    private var isOwnerHere: Bool { reactor?.isPerformingHere ?? true }

    /// What a request decided under the lock: run the pump now (its first round decided), post one to
    /// the owner, or nothing (the pump running goes round again, or a post is pending).
    private enum PumpClaim {
        case none
        case run
        case post
    }

    /// Pumps at once on the owner; from any other thread, posts one pump there (one at a time).
    func requestPump() {
        let here = isOwnerHere
        var work = Round()
        let claim = state.withLock { claimPump(&$0, here: here, &work) }
        pump(claim, &work)
    }

    /// Under the lock, after a request: on the owner, enters the pump and decides its first round in
    /// `work` (or leaves the request to the pump running); elsewhere, asks for a post unless one is
    /// pending.
    private func claimPump(_ state: inout State, here: Bool, _ work: inout Round) -> PumpClaim {
        guard here else {
            if state.postPending { return .none }
            state.postPending = true
            return .post
        }
        guard state.pump.enter() == .run else { return .none }
        round(&state, &work)
        return .run
    }

    /// Carries out a claim made under the lock.
    private func pump(_ claim: PumpClaim, _ work: inout Round) {
        switch claim {
        case .none: return
        case .run: runPump(&work)
        case .post:
            reactor?.post { [self] in
                var work = Round()
                let claim = state.withLock { state -> PumpClaim in
                    state.postPending = false
                    return claimPump(&state, here: true, &work)
                }
                pump(claim, &work)
            }
        }
    }

    /// Runs the pump, on the owner, from its first round (decided under the lock that entered it)
    /// until a round leaves nothing to do and nothing was asked for meanwhile.
    private func runPump(_ work: inout Round) {
        reactor?.assertOwner("the operations pump")
        while true {
            if !work.timers.isEmpty { apply(work.timers) }
            if let settings = work.startTLS?.settings, self.input?.setProperty(settings, forKey: .tlsSettingsKey) != true {
                state.withLock { state in
                    if state.closing == nil { state.closing = .some(StreamOperationError.tlsSettingsRefused) }
                }
            }
            if work.closeStreams { closePair() }
            // The client, taken under the lock by the round that has something to tell it.
            if let client = work.client.take() {
                work.events.forEach { client.operations(self, handle: $0) }
            }
            let again = work.again
            work.clear()
            let more = state.withLock { state -> Bool in
                // Go round again if this round left work (a close to carry out, TLS refused) or
                // anything was asked for meanwhile; else let go, cancelling the timers no operation
                // adopted.
                let more = again || state.closing != nil && !state.closed
                if !more, state.pump.finishRound() == nil {
                    letGoOfTimers(&state, &work.timers)
                    return false
                }
                round(&state, &work)
                return true
            }
            if !more {
                if !work.timers.isEmpty { apply(work.timers) }
                return
            }
        }
    }

    /// What one round decided, to be done outside the lock.
    private struct Round {
        /// A `FIFO`: a round almost always has none or one event (a read or a write completed), held
        /// inline, where an array would allocate and free one every round trip.
        var events = FIFO<OperationEvent>()
        var timers = TimerChanges()
        /// Boxed: a round is moved and copied several times a pump, and TLS settings are large.
        var startTLS: TLSStart?
        var closeStreams = false
        /// The round left work for another (a close it decided on).
        var again = false
        /// The client, with a reference taken, when the round has events for it (`takeClient`).
        var client: (any StreamOperationsClient)?

        /// Empties the round for the next, releasing only what it holds: assigning a fresh round
        /// destroyed every field (through the value witness, each reference released) and cost
        /// more than the rest of the pump.
        mutating func clear() {
            events.removeAll()
            timers = TimerChanges()
            if startTLS != nil { startTLS = nil }
            closeStreams = false
            again = false
        }
    }

    /// One round of work, under the lock, into `work` (a fresh one).
    private func round(_ state: inout State, _ work: inout Round) {
        step(&state, &work.events, &work.startTLS, &work.closeStreams, &work.again)
        updateTimers(&state, &work.timers)
        if !work.events.isEmpty { work.client = takeClient() }
    }

    /// One round of work, under the lock.
    private func step(
        _ state: inout State, _ events: inout FIFO<OperationEvent>, _ startTLS: inout TLSStart?, _ closeStreams: inout Bool,
        _ again: inout Bool
    ) {
        guard !state.closed else { return }
        if let reason = state.closing {
            if reason == nil { flush(&state, &events) }
            state.closed = true
            state.finalError = reason
            state.reads.removeAll()
            state.writes.removeAll()
            closeStreams = state.attached
            events.append(.closed(reason))
            return
        }
        guard state.attached else { return }
        if state.ready, !state.readyReported {
            state.readyReported = true
            events.append(.ready)
        }
        if let marker = state.securing {
            // The first has-event after the TLS property was set comes once the handshake is done.
            guard state.canRead || state.canWrite,
                state.output?.property(forKey: .tlsConnectionInfoKey) != nil || state.input?.property(forKey: .tlsConnectionInfoKey) != nil
            else { return }
            state.securing = nil
            if case .tls(marker)? = state.reads.first { state.removeFirstRead() }
            if case .tls(marker, _)? = state.writes.first { state.removeFirstWrite() }
            events.append(.secured)
        }
        guard state.ready else { return }
        writes(&state, &events)
        reads(&state, &events)
        if state.closing == nil, state.securing == nil, case .tls(let marker)? = state.reads.first,
            case .tls(marker, let stage)? = state.writes.first
        {
            switch stage {
            case .failure(let refusal):
                state.closing = .some(refusal)
            case .success(_) where state.bufferCount > 0:
                state.closing = .some(StreamOperationError.bytesBeforeTLS(unread: Self.take(&state, count: state.bufferCount)))
            case .success(let settings):
                state.securing = marker
                state.canRead = false
                state.canWrite = false
                startTLS = TLSStart(settings: settings)
            }
        }
        if state.ended, !state.endReported {
            state.endReported = true
            events.append(.ended(pendingReads: state.reads.count))
        }
        let readsDone = !state.disconnectAfterReads || state.reads.isEmpty
        let writesDone = !state.disconnectAfterWrites || state.writes.isEmpty
        if state.closing == nil, state.disconnectAfterReads || state.disconnectAfterWrites, readsDone, writesDone {
            state.closing = .some(nil)
        }
        if state.closing != nil { again = true }
    }

    private func closePair() {
        reactor?.assertOwner("closing the pair (its delegates are Foundation's unsynchronised properties)")
        let streams = state.withLock { [$0.input, $0.output].compactMap { $0 } as [Stream] }
        connection?.dropReceiver(self)
        for stream in streams {
            stream.delegate = nil
            stream.close()
        }
    }
}

/// A round's TLS handshake to start, held by reference.
final class TLSStart {
    let settings: TLSSettings
    init(settings: TLSSettings) { self.settings = settings }
}

/// A clock other than the system's, held by reference.
final class TimeSourceBox: Sendable {
    let source: any TimeSource
    init(source: any TimeSource) { self.source = source }
}
