import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// The engine under `QueuedSocket` and `AsyncConnection`: reads and writes queued as operations that
// complete in order (GCDAsyncSocket's model), driven by a stream pair's delegate events. It is a client
// of the pair like any other, so the delegate path stays the one engine.
//
// Ownership. The engine, like the pair under it, is owned by one reactor (`reactor`): the run loop or
// dispatch queue where the streams are scheduled, their events are delivered and the timers fire
// (`QueuedSocket`: its delegate's; `AsyncConnection`: the stream thread's). Everything that touches the
// streams (attaching as their delegate, reading, writing, setting TLS, closing) and every completion
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

/// What a queued read waits for.
package enum ReadRequest: Sendable, Equatable {
    /// Exactly this many bytes.
    case length(Int)
    /// Up to and including the first occurrence of the delimiter; fails once `maxLength` (0: no limit)
    /// bytes have arrived without it.
    case delimiter([UInt8], maxLength: Int)
    /// Whatever has arrived, at least one byte and at most `maxLength` (0: no limit).
    case available(maxLength: Int)
}

/// The failures the operations layer adds to the streams' own errors (which pass through unchanged).
///
/// Bridged to `NSError` in ``StreamOperationError/errorDomain`` with the codes below, as GCDAsyncSocket
/// reports its own in `GCDAsyncSocketErrorDomain`.
public enum StreamOperationError: Error, Sendable, Equatable, CustomNSError, LocalizedError {
    /// A read's timeout passed and the delegate gave no extension (GCDAsyncSocketReadTimeoutError).
    case readTimedOut(tag: Int)
    /// A write's timeout passed and the delegate gave no extension (GCDAsyncSocketWriteTimeoutError).
    case writeTimedOut(tag: Int)
    /// A delimiter read reached its `maxLength` without the delimiter (GCDAsyncSocketReadMaxedOutError).
    case readMaxedOut(maxLength: Int, tag: Int)
    /// The peer closed the connection before a read could complete. `unread` holds the bytes that had
    /// arrived for it, so nothing is lost (GCDAsyncSocketClosedError).
    case closedByPeer(unread: [UInt8])
    /// Bytes arrived before a queued TLS handshake began; they cannot be handed to TLS, so the connection
    /// is closed rather than guess. `unread` holds them.
    case bytesBeforeTLS(unread: [UInt8])
    /// The pair did not accept the TLS settings (`setProperty` returned false).
    case tlsSettingsRefused
    /// The connection was closed (by `disconnect()`, `close()` or an earlier failure) before the
    /// operation could run.
    case closed
    /// `connect` or `accept` on a socket that is already connected or listening
    /// (GCDAsyncSocketBadConfigError's "Attempting to connect while connected or accepting connections").
    case alreadyConnected

    /// "SocketStreams.StreamOperationError".
    public static var errorDomain: String { "SocketStreams.StreamOperationError" }

    /// 1 read timeout, 2 write timeout, 3 read maxed out, 4 closed by peer, 5 bytes before TLS,
    /// 6 TLS settings refused, 7 closed, 8 already connected.
    public var errorCode: Int {
        switch self {
        case .readTimedOut: return 1
        case .writeTimedOut: return 2
        case .readMaxedOut: return 3
        case .closedByPeer: return 4
        case .bytesBeforeTLS: return 5
        case .tlsSettingsRefused: return 6
        case .closed: return 7
        case .alreadyConnected: return 8
        }
    }

    /// A sentence saying what happened.
    public var errorDescription: String? {
        switch self {
        case .readTimedOut(let tag): return "the read with tag \(tag) timed out"
        case .writeTimedOut(let tag): return "the write with tag \(tag) timed out"
        case .readMaxedOut(let maxLength, let tag):
            return "the read with tag \(tag) reached its maximum length of \(maxLength) bytes without finding its delimiter"
        case .closedByPeer(let unread):
            return "the peer closed the connection" + (unread.isEmpty ? "" : " (\(unread.count) bytes arrived for an unfinished read)")
        case .bytesBeforeTLS(let unread): return "\(unread.count) bytes arrived before the TLS handshake could start"
        case .tlsSettingsRefused: return "the stream pair refused the TLS settings"
        case .closed: return "the connection is closed"
        case .alreadyConnected: return "Attempting to connect while connected or accepting connections. Disconnect first."
        }
    }

    /// The same sentence, for `NSError.localizedDescription`.
    public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: errorDescription ?? ""] }
}

/// Which queue a timeout belongs to.
package enum OperationDirection: Sendable {
    case read
    case write
}

/// What the engine tells its client, in order, outside its lock.
package enum OperationEvent {
    /// The pair is ready: open, and any proxy or TLS handshake set before `open()` done.
    case ready
    /// A read completed.
    case read([UInt8], tag: Int)
    /// A read got this many more bytes but is not complete.
    case readPartial(Int, tag: Int)
    /// A read cannot complete: the stream is at its end. `unread` holds the bytes that had arrived.
    case readEnded(unread: [UInt8], tag: Int)
    /// The input stream reached its end (once). `pendingReads` is how many reads were then queued.
    case ended(pendingReads: Int)
    /// A write completed: every byte was accepted by the kernel.
    case wrote(tag: Int)
    /// A write moved this many bytes but is not complete.
    case wrotePartial(Int, tag: Int)
    /// A queued TLS handshake finished.
    case secured
    /// The half-close queued with `tag` is done: TLS's close_notify (over TLS) and the FIN went to the
    /// kernel; the input stays open.
    case outputShutDown(tag: Int)
    /// The pair is closed (once): nil after `close(error: nil)`, else the reason. Queued operations
    /// that had not completed are dropped.
    case closed(Error?)
}

/// The engine's client: `QueuedSocket` or `AsyncConnection`.
protocol StreamOperationsClient: AnyObject, Sendable {
    /// Handles one event (see `OperationEvent`).
    func operations(_ operations: StreamOperations, handle event: OperationEvent)
    /// A timeout passed for the operation with `tag` after `elapsed` seconds with `bytesDone` moved.
    /// Returns the extension in seconds, or 0 or less to fail the operation.
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double
    /// The same question answered later, from any thread: `answer` (called once) takes the extension.
    /// GCDAsyncSocket asks its delegate on the delegate queue and comes back. The default answers at
    /// once with the synchronous method.
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    )
}

extension StreamOperationsClient {
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    ) {
        answer(self.operations(operations, shouldTimeOut: direction, tag: tag, elapsed: elapsed, bytesDone: bytesDone))
    }
}

final class StreamOperations: NSObject, StreamDelegate, TimerTarget, @unchecked Sendable {
    private struct ReadOperation {
        let id: UInt64
        let request: ReadRequest
        let timeout: Double
        let tag: Int
        /// Buffered bytes already searched for the delimiter (so each byte is searched once).
        var searched = 0
    }

    private struct WriteOperation {
        let id: UInt64
        let bytes: [UInt8]
        var offset = 0
        let timeout: Double
        let tag: Int
    }

    private enum ReadItem {
        case read(ReadOperation)
        case tls(UInt64)
    }

    private enum WriteItem {
        case write(WriteOperation)
        /// Boxed: TLS settings are large, and every queued write would take their size.
        indirect case tls(UInt64, TLSSettings)
        /// The write-side half-close, once the writes before it are done.
        case shutdown(tag: Int)
    }

    private struct Timeout {
        /// The operation's id (ids start at 1; 0 in `none`).
        let operation: UInt64
        var timer: UInt64
        let started: UInt64

        static let none = Timeout(operation: 0, timer: 0, started: 0)
    }

    private struct State {
        /// The timeout of the first read or write.
        subscript(timeout direction: OperationDirection) -> Timeout? {
            get { direction == .read ? readTimeout : writeTimeout }
            set {
                if direction == .read { readTimeout = newValue } else { writeTimeout = newValue }
            }
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
        var disconnectAfterReads = false
        var disconnectAfterWrites = false
        /// Set by a `disconnectAfter…`: reads, writes and TLS queued from then on are ignored, as
        /// GCDAsyncSocket's `kForbidReadsWrites` does.
        var forbidden = false
        /// A half-close is queued or done: writes queued from then on fail with EPIPE.
        var outputShut = false
        /// A pump is posted to the owner and has not run yet.
        var postPending = false
        private var closingRequested = false

        // Optionals stored without their extra tag byte (each would cost 7 bytes of padding).
        private var readTimeoutStorage = Timeout.none
        private var writeTimeoutStorage = Timeout.none
        private var securingMarker: UInt64 = 0
        private var closingError: Error?

        var readTimeout: Timeout? {
            get { readTimeoutStorage.operation == 0 ? nil : readTimeoutStorage }
            set { readTimeoutStorage = newValue ?? .none }
        }
        var writeTimeout: Timeout? {
            get { writeTimeoutStorage.operation == 0 ? nil : writeTimeoutStorage }
            set { writeTimeoutStorage = newValue ?? .none }
        }
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

    private let state = Guarded(State())
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
    weak var client: (any StreamOperationsClient)?
    /// The most one read takes.
    static let readSize = 64 * 1024
    /// Reads at least this large move into an empty buffer instead of being copied.
    static let handOver = 16 * 1024

    init(reactor: Reactor?) {
        self.reactor = reactor
        super.init()
    }

    // MARK: setting up

    /// Takes over an unopened pair: on the owner, becomes both streams' delegate, lets `schedule` put
    /// them there (where their events must come) and opens them. Operations queued before now start
    /// once it is ready. A pair that cannot be taken (the engine is closed) is closed.
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
            input.delegate = self
            output.delegate = self
            schedule(input, output)
            input.open()
            output.open()
            pumpHere()
        }
    }

    /// Every byte read from the input stream so far.
    var totalRead: Int { state.withLock { $0.totalRead } }

    /// The pair, once attached (kept until the engine is released, closed or not).
    var streams: (input: InputStream, output: OutputStream)? {
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
    func enqueueRead(_ request: ReadRequest, timeout: Double, tag: Int) -> Error? {
        enqueue { state in
            state.reads.append(.read(ReadOperation(id: state.nextID, request: request, timeout: timeout, tag: tag)))
            state.nextID += 1
            return nil
        }
    }

    /// Queues a write (the bytes are copied). Returns the error that closed the connection if it is closed.
    @discardableResult
    func enqueueWrite(_ bytes: [UInt8], timeout: Double, tag: Int) -> Error? {
        enqueue { state in
            if state.outputShut { return Self.outputShutError }
            state.writes.append(.write(WriteOperation(id: state.nextID, bytes: bytes, timeout: timeout, tag: tag)))
            state.nextID += 1
            return nil
        }
    }

    /// Queues the write-side half-close behind the writes queued so far: once they are done, the
    /// output stream's `shutdownOutputKey` sends TLS's close_notify (over TLS) and the FIN. Reads go
    /// on; writes queued after it fail with EPIPE. Completes with `outputShutDown(tag:)`.
    @discardableResult
    func enqueueShutdownOutput(tag: Int) -> Error? {
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
    func enqueueTLS(_ settings: TLSSettings) -> Error? {
        enqueue { state in
            state.reads.append(.tls(state.nextID))
            state.writes.append(.tls(state.nextID, settings))
            state.nextID += 1
            return nil
        }
    }

    /// Applies `add` unless the connection is closed (then returns why) or a `disconnectAfter…` has
    /// forbidden new operations (then returns ``StreamOperationError/closed``), and pumps on the owner.
    private func enqueue(_ add: (inout State) -> Error?) -> Error? {
        let refused = state.withLock { state -> Error? in
            if let error = Self.finalError(state) { return error }
            if state.forbidden { return StreamOperationError.closed }
            return add(&state)
        }
        if refused == nil { requestPump() }
        return refused
    }

    /// Closes once the queued reads (and/or writes) have completed; with neither, at once.
    func close(afterReads: Bool = false, afterWrites: Bool = false, error: Error? = nil) {
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
    func takeBuffered() -> [UInt8] {
        state.withLock { state in Self.take(&state, count: state.bufferCount) }
    }

    private static func finalError(_ state: State) -> Error? {
        if state.closed { return state.finalError ?? StreamOperationError.closed }
        if let closing = state.closing { return closing ?? StreamOperationError.closed }
        return nil
    }

    // MARK: stream events

    /// The pair's events, delivered on the owner (where both streams are scheduled).
    func stream(_ stream: Stream, handle event: Stream.Event) {
        state.withLock { state in
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
        }
        requestPump()
    }

    // MARK: pumping

    /// Pumps at once on the owner; from any other thread, posts one pump there (one at a time).
    private func requestPump() {
        guard let reactor else { return pumpHere() }  // never attached: only reports the close
        if reactor.isPerformingHere { return pumpHere() }
        let post = state.withLock { state -> Bool in
            if state.postPending { return false }
            state.postPending = true
            return true
        }
        if post {
            reactor.post { [self] in
                state.withLock { $0.postPending = false }
                pumpHere()
            }
        }
    }

    /// Runs the pump, on the owner, unless one runs already (which then goes round again).
    private func pumpHere() {
        reactor?.assertOwner("the operations pump")
        var round = state.withLock { state -> Round? in
            guard state.pump.enter() == .run else { return nil }
            return self.round(&state)
        }
        while let work = round {
            apply(work.timers)
            if let settings = work.startTLS?.settings, self.input?.setProperty(settings, forKey: .tlsSettingsKey) != true {
                state.withLock { state in
                    if state.closing == nil { state.closing = .some(StreamOperationError.tlsSettingsRefused) }
                }
            }
            if work.closeStreams { closePair() }
            if let client {
                for event in work.events { client.operations(self, handle: event) }
            }
            round = state.withLock { state -> Round? in
                // Go round again if this round left work (a close to carry out, TLS refused) or
                // anything was asked for meanwhile; else let go.
                let more = work.again || state.closing != nil && !state.closed
                if !more, state.pump.finishRound() == nil { return nil }
                return self.round(&state)
            }
        }
    }

    /// What one round decided, to be done outside the lock.
    private struct Round {
        var events: [OperationEvent] = []
        var timers: [TimerChange] = []
        /// Boxed: a round is moved and copied several times a pump, and TLS settings are large.
        var startTLS: TLSStart?
        var closeStreams = false
        /// The round left work for another (a close it decided on).
        var again = false
    }

    /// One round of work, under the lock.
    private func round(_ state: inout State) -> Round {
        var work = Round()
        step(&state, &work.events, &work.startTLS, &work.closeStreams, &work.again)
        work.timers = updateTimers(&state)
        return work
    }

    /// One round of work, under the lock.
    private func step(
        _ state: inout State, _ events: inout [OperationEvent], _ startTLS: inout TLSStart?, _ closeStreams: inout Bool,
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
            if case .tls(marker)? = state.reads.first { state.reads.removeFirst() }
            if case .tls(marker, _)? = state.writes.first { state.writes.removeFirst() }
            events.append(.secured)
        }
        guard state.ready else { return }
        writes(&state, &events)
        reads(&state, &events)
        if state.closing == nil, state.securing == nil, case .tls(let marker)? = state.reads.first,
            case .tls(marker, let settings)? = state.writes.first
        {
            if state.bufferCount > 0 {
                state.closing = .some(StreamOperationError.bytesBeforeTLS(unread: Self.take(&state, count: state.bufferCount)))
            } else {
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

    private func writes(_ state: inout State, _ events: inout [OperationEvent]) {
        while state.closing == nil, let first = state.writes.first {
            if let error = state.outputError {
                state.closing = .some(error)
                return
            }
            guard case .write(var operation) = first else {
                guard case .shutdown(let tag) = first else { return }  // TLS: started by `step`
                // Only after a has-space event: the half-close sends TLS's last record and close_notify,
                // and must not wait for room.
                guard let output = state.output, Self.useEvent(&state.canWrite) else { return }
                guard output.setProperty(true as NSNumber, forKey: .shutdownOutputKey) else {
                    state.closing = .some(output.streamError ?? StreamOperationError.closed)
                    return
                }
                state.writes.removeFirst()
                events.append(.outputShutDown(tag: tag))
                continue
            }
            if operation.offset < operation.bytes.count {
                guard let output = state.output, Self.useEvent(&state.canWrite) else { return }
                let moved = operation.bytes.withUnsafeBufferPointer { bytes in
                    output.write(bytes.baseAddress! + operation.offset, maxLength: bytes.count - operation.offset)
                }
                guard moved >= 0 else {
                    state.closing = .some(output.streamError ?? StreamOperationError.closed)
                    return
                }
                operation.offset += moved
                if operation.offset < operation.bytes.count {
                    state.writes.replaceFirst(.write(operation))
                    if moved > 0 { events.append(.wrotePartial(moved, tag: operation.tag)) }
                    continue
                }
            }
            state.writes.removeFirst()
            events.append(.wrote(tag: operation.tag))
        }
    }

    /// An orderly close (`disconnect()`, `close()`) first sends what the kernel accepts at once of the
    /// writes queued before it, in order, as GCDAsyncSocket's `disconnect` does: a write issued just
    /// before it, from any thread, is not lost to the close having reached the owner first. Writes (or
    /// the rest of one) that would block are dropped; a completed one reports `wrote` before `closed`.
    /// Nothing is sent before the pair is ready or while a TLS handshake runs.
    private func flush(_ state: inout State, _ events: inout [OperationEvent]) {
        guard state.attached, state.ready, state.securing == nil, state.outputError == nil, let output = state.output else { return }
        while case .write(var operation)? = state.writes.first {
            // `hasSpaceAvailable` polls the socket: a write it allows does not block.
            while operation.offset < operation.bytes.count, output.hasSpaceAvailable {
                let moved = operation.bytes.withUnsafeBufferPointer { bytes in
                    output.write(bytes.baseAddress! + operation.offset, maxLength: bytes.count - operation.offset)
                }
                guard moved > 0 else { return }
                operation.offset += moved
            }
            guard operation.offset == operation.bytes.count else { return }
            state.writes.removeFirst()
            events.append(.wrote(tag: operation.tag))
        }
    }

    private func reads(_ state: inout State, _ events: inout [OperationEvent]) {
        while state.closing == nil, case .read(var operation)? = state.reads.first {
            if let bytes = Self.complete(&state, &operation) {
                state.reads.removeFirst()
                events.append(.read(bytes, tag: operation.tag))
                continue
            }
            if case .delimiter(_, let maxLength) = operation.request, maxLength > 0, state.bufferCount >= maxLength {
                state.closing = .some(StreamOperationError.readMaxedOut(maxLength: maxLength, tag: operation.tag))
                return
            }
            state.reads.replaceFirst(.read(operation))
            if state.ended {
                state.reads.removeFirst()
                events.append(.readEnded(unread: Self.take(&state, count: state.bufferCount), tag: operation.tag))
                continue
            }
            guard let input = state.input, let reactor, Self.useEvent(&state.canRead) else { return }
            // The owner's read buffer, lent for this call: one per reactor, none per connection, so
            // an idle connection holds no read buffer at all (issue 25: 64 KiB each).
            var scratch = reactor.lendReadBuffer(size: Self.readSize)
            let count = input.read(&scratch, maxLength: scratch.count)
            if count > 0, state.bufferCount == 0, count >= Self.handOver {
                // A large read into an empty buffer becomes the buffer: no copy, and a read that
                // takes it all hands the same array to the client. The owner makes a new one.
                scratch.removeSubrange(count...)  // unique: shortens in place
                state.buffer = scratch
                state.bufferStart = 0
            } else {
                if count > 0 { state.buffer.append(contentsOf: scratch[..<count]) }
                reactor.takeBackReadBuffer(scratch)
            }
            if count > 0 {
                state.totalRead += count
                if Self.satisfiable(state, operation) == false { events.append(.readPartial(count, tag: operation.tag)) }
            } else if count == 0 {
                state.ended = true
            } else if input.streamStatus == .atEnd {
                state.ended = true
            } else {
                state.closing = .some(input.streamError ?? StreamOperationError.closed)
                return
            }
        }
    }

    /// Whether one read (or write) may be made now, using up the event that allowed it. The event is
    /// exact: only the owner reads and writes, so no other read can have used the bytes (space) it
    /// announced, and the read (write) cannot block.
    private static func useEvent(_ signalled: inout Bool) -> Bool {
        defer { signalled = false }
        return signalled
    }

    /// Whether the buffer now completes `operation` (checked without consuming, and without copying
    /// the state: a copy retained and released every reference in it, on every read).
    private static func satisfiable(_ state: State, _ operation: ReadOperation) -> Bool {
        completion(state, operation).count != nil
    }

    /// Takes the bytes that complete `operation` from the buffer, or returns nil if it cannot complete yet.
    private static func complete(_ state: inout State, _ operation: inout ReadOperation) -> [UInt8]? {
        let (count, searched) = completion(state, operation)
        operation.searched = searched
        return count.map { take(&state, count: $0) }
    }

    /// How many buffered bytes complete `operation` (nil: not enough yet), and how far a delimiter
    /// read has searched (so each byte is searched once).
    private static func completion(_ state: State, _ operation: ReadOperation) -> (count: Int?, searched: Int) {
        switch operation.request {
        case .length(let count):
            return (state.bufferCount >= count ? count : nil, operation.searched)
        case .available(let maxLength):
            guard state.bufferCount > 0 else { return (nil, operation.searched) }
            return (maxLength > 0 ? min(maxLength, state.bufferCount) : state.bufferCount, operation.searched)
        case .delimiter(let delimiter, let maxLength):
            guard !delimiter.isEmpty else { return (0, operation.searched) }
            let limit = maxLength > 0 ? min(maxLength, state.bufferCount) : state.bufferCount
            var index = max(0, operation.searched - delimiter.count + 1)
            while index + delimiter.count <= limit {
                if state.buffer[state.bufferStart + index] == delimiter[0],
                    state.buffer[(state.bufferStart + index)..<(state.bufferStart + index + delimiter.count)].elementsEqual(delimiter)
                {
                    return (index + delimiter.count, operation.searched)
                }
                index += 1
            }
            return (nil, limit)
        }
    }

    private static func take(_ state: inout State, count: Int) -> [UInt8] {
        if state.bufferStart == 0, count == state.buffer.count {
            defer { state.buffer = [] }
            return state.buffer
        }
        let bytes = Array(state.buffer[state.bufferStart..<(state.bufferStart + count)])
        state.bufferStart += count
        if state.bufferStart == state.buffer.count {
            state.buffer = []  // nothing in flight: an idle connection keeps no buffer
            state.bufferStart = 0
        } else if state.bufferStart >= 64 * 1024, state.bufferStart * 2 >= state.buffer.count {
            state.buffer.removeFirst(state.bufferStart)
            state.bufferStart = 0
        }
        return bytes
    }

    private func closePair() {
        reactor?.assertOwner("closing the pair (its delegates are Foundation's unsynchronised properties)")
        let streams = state.withLock { [$0.input, $0.output].compactMap { $0 } as [Stream] }
        for stream in streams {
            stream.delegate = nil
            stream.close()
        }
    }

    // MARK: timeouts

    private enum TimerChange {
        case cancel(UInt64)
        case arm(OperationDirection, operation: UInt64, after: Double)
    }

    /// Cancels the timer of an operation that is no longer first, and asks for one for the new first
    /// operation if it has a timeout. Under the lock; the changes are applied outside it.
    private func updateTimers(_ state: inout State) -> [TimerChange] {
        var changes: [TimerChange] = []
        var firstRead: (UInt64, Double)?
        var firstWrite: (UInt64, Double)?
        if !state.closed {
            if case .read(let operation)? = state.reads.first {
                firstRead = (operation.id, operation.timeout)
            }
            if case .write(let operation)? = state.writes.first { firstWrite = (operation.id, operation.timeout) }
        }
        if let current = state.readTimeout, current.operation != firstRead?.0 {
            changes.append(.cancel(current.timer))
            state.readTimeout = nil
        }
        if let current = state.writeTimeout, current.operation != firstWrite?.0 {
            changes.append(.cancel(current.timer))
            state.writeTimeout = nil
        }
        if state.readTimeout == nil, let (id, timeout) = firstRead, timeout > 0 {
            state.readTimeout = Timeout(operation: id, timer: 0, started: time.now())
            changes.append(.arm(.read, operation: id, after: timeout))
        }
        if state.writeTimeout == nil, let (id, timeout) = firstWrite, timeout > 0 {
            state.writeTimeout = Timeout(operation: id, timer: 0, started: time.now())
            changes.append(.arm(.write, operation: id, after: timeout))
        }
        return changes
    }

    private func apply(_ changes: [TimerChange]) {
        for change in changes {
            switch change {
            case .cancel(let timer):
                if let reactor { time.cancel(timer, on: reactor) }
            case .arm(let direction, let operation, let seconds):
                arm(direction, operation: operation, after: seconds)
            }
        }
    }

    /// Schedules the timer of `operation`'s timeout (first, or extended) and records it.
    private func arm(_ direction: OperationDirection, operation: UInt64, after seconds: Double) {
        guard let reactor else { return }
        // A target and a number instead of a closure: no allocation per operation's timeout.
        let context = operation << 1 | (direction == .write ? 1 : 0)
        let timer = time.schedule(after: seconds.saturatingNanoseconds, on: reactor, target: self, context: context)
        state.withLock { state in
            if state[timeout: direction]?.operation == operation { state[timeout: direction]?.timer = timer }
        }
    }

    /// On the reactor's thread: asks the client whether to extend, then extends or fails.
    /// A timeout's timer (see `arm`), on the reactor's thread.
    func timerFired(_ context: UInt64) {
        timerFired(context & 1 == 1 ? .write : .read, operation: context >> 1)
    }

    private func timerFired(_ direction: OperationDirection, operation: UInt64) {
        let now = time.now()
        let question = state.withLock { state -> (tag: Int, elapsed: Double, done: Int)? in
            guard !state.closed, state.closing == nil, let timeout = state[timeout: direction], timeout.operation == operation
            else { return nil }
            let elapsed = Double(now - timeout.started) / 1e9
            switch (direction, state.reads.first, state.writes.first) {
            case (.read, .read(let first)?, _) where first.id == operation: return (first.tag, elapsed, state.bufferCount)
            case (.write, _, .write(let first)?) where first.id == operation: return (first.tag, elapsed, first.offset)
            default: return nil
            }
        }
        guard let question else { return }
        guard let client else { return timeoutAnswered(direction, operation: operation, tag: question.tag, extra: 0) }
        client.operations(self, shouldTimeOut: direction, tag: question.tag, elapsed: question.elapsed, bytesDone: question.done) {
            [weak self] extra in
            self?.timeoutAnswered(direction, operation: operation, tag: question.tag, extra: extra)
        }
    }

    /// The client's answer to a timeout (from any thread): re-arms for `extra` seconds, or fails the
    /// connection, unless the operation has completed or the connection closed meanwhile.
    private func timeoutAnswered(_ direction: OperationDirection, operation: UInt64, tag: Int, extra: Double) {
        let current = state.withLock { state in
            !state.closed && state.closing == nil && state[timeout: direction]?.operation == operation
        }
        guard current else { return }
        if extra > 0, extra.isFinite {
            return arm(direction, operation: operation, after: extra)
        }
        state.withLock { state in
            if state.closing == nil, state[timeout: direction]?.operation == operation {
                state.closing = .some(
                    direction == .read
                        ? StreamOperationError.readTimedOut(tag: tag) : StreamOperationError.writeTimedOut(tag: tag))
            }
        }
        requestPump()
    }
}

/// A round's TLS handshake to start, held by reference.
private final class TLSStart {
    let settings: TLSSettings
    init(settings: TLSSettings) { self.settings = settings }
}

/// A clock other than the system's, held by reference.
private final class TimeSourceBox: Sendable {
    let source: any TimeSource
    init(source: any TimeSource) { self.source = source }
}

/// A first-in, first-out list whose front removal costs O(1): the first element inline, the rest in an
/// array with a start index. (An array's `removeFirst` moves every element: queueing 16,384 writes of
/// 64 KiB and completing them made GCDAsyncSocket-style uploads quadratic.) A removed element is released
/// at once. The usual one operation at a time (the read an idle connection keeps pending, a ping-pong's
/// write) allocates nothing, and an emptied list keeps no storage: an idle connection holds no array
/// (issue 25).
struct FIFO<Element> {
    private var head: Element?
    /// Where the rest starts in `rest` (32 bits: it fits in the head's padding).
    private var start: UInt32 = 0
    private var rest: [Element?] = []

    var isEmpty: Bool { head == nil }
    var count: Int { head == nil ? 0 : 1 + rest.count - Int(start) }
    var first: Element? { head }

    mutating func append(_ element: Element) {
        if head == nil { head = element } else { rest.append(element) }
    }

    /// Replaces the first element (which must exist).
    mutating func replaceFirst(_ element: Element) { head = element }

    mutating func removeFirst() {
        let index = Int(start)
        guard index < rest.count else {
            head = nil
            if !rest.isEmpty { rest = [] }
            start = 0
            return
        }
        head = rest[index].take()
        if index + 1 == rest.count {
            rest = []
            start = 0
        } else if index + 1 >= 1024, (index + 1) * 2 >= rest.count {
            rest.removeFirst(index + 1)
            start = 0
        } else {
            start += 1
        }
    }

    mutating func removeAll() {
        head = nil
        rest = []
        start = 0
    }
}
