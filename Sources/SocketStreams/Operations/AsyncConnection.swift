import Foundation
import Synchronization

/// async/await over a SocketStreams pair: `try await` to open, read and write, and the input as an
/// `AsyncSequence` of chunks.
///
/// ```swift
/// let connection = AsyncConnection(host: "127.0.0.1", port: 7)
/// try await connection.open()
/// try await connection.write(Array("hello\n".utf8))
/// let line = try await connection.read(upTo: [10], maxLength: 1024)
/// for try await chunk in connection.chunks() { … }
/// ```
///
/// - **Backpressure.** Nothing is read until a read is asked for: an unread connection leaves its
///   bytes in the kernel, which slows the peer down. `write` returns once the kernel has accepted every
///   byte.
/// - **Cancellation.** Cancelling a task waiting in any of these methods closes the connection: every
///   waiting call throws `CancellationError`, and later calls throw it too. A call made by a task
///   that is cancelled always throws `CancellationError`, whatever it raced with.
/// - **Threads.** Safe from any task or thread; nothing blocks a thread. Calls of one kind are meant to
///   come one at a time (one reader, one writer); concurrent reads complete in the order they were made.
///   The connection is owned by the package's stream thread (`RunLoop.socketStreams`): the pair is
///   scheduled there, and every read, write and close of the streams happens on that thread, which
///   waits in its reactor's epoll set itself, with no run-loop pass in between. A call from any other
///   thread queues its operation and wakes the thread; a task running on ``AsyncConnection/executor``
///   is already there, so a read whose bytes have arrived, or a write the socket has room for,
///   completes at once.
/// - **Isolation.** Every async method is `nonisolated(nonsending)` (SE-0461): it runs on the caller's
///   actor or executor until it has to wait, and comes back there, instead of hopping to the global
///   executor on every call (each such switch asks the task for its preferred executor, several times a
///   round trip). A `@MainActor` caller keeps main-actor isolation across the call; only the wait leaves it.
/// - **Opening.** Call ``open()`` first: a read, write or upgrade made before it was ever called throws
///   ``StreamOperationError/notOpen`` (one made while it runs, from another task, waits for it).
/// - **Closing.** ``close()``, cancellation and releasing the last reference may come from any thread
///   while data flows: each asks the stream thread to close the pair, and the operations waiting then
///   end with an error.
///
/// Errors are the streams' own (`NSError` in CFNetwork's domains, as `streamError` gives them) or a
/// ``StreamOperationError``. Underneath is the same engine as ``QueuedSocket``'s.
public final class AsyncConnection: StreamOperationsClient, Sendable {
    /// Unchecked: each is resumed exactly once, under the state lock's bookkeeping (the checked kind's
    /// box and atomics add to every suspension).
    fileprivate typealias Waiter = UnsafeContinuation<[UInt8]?, Error>

    /// An operation a caller waits for, or whose result waits for its caller.
    fileprivate struct Operation {
        let tag: Int
        /// Whether the end of the stream completes it with nil (a chunk read) rather than an error.
        let endIsNil: Bool
        var waiter: Waiter?
        /// Its result, when it completed before its caller waited: most complete inline, on the
        /// caller's own thread, and need no continuation at all.
        var result: Result<[UInt8]?, Error>?
    }

    fileprivate struct State {
        var pair: (input: InputStream, output: OutputStream)?
        var opening = false
        var ready = false
        var closed: Error??
        var cancelled = false
        var nextTag = 1
        var openWaiters: [CheckedContinuation<Void, Error>] = []
        /// Operations queued whose callers have not had their results: at most a few (one reader,
        /// one writer), so a list searched by tag, the first inline.
        var operations = OperationList()
        var tls: [CheckedContinuation<Void, Error>] = []
    }

    let engine: StreamOperations
    private let state: Guarded<State>

    /// The stream thread's reactor once known (its address; 0 until then): the thread holds it for the
    /// process's life, so it is never released and a plain load finds it. Every executor job reads it:
    /// an `Atomic<UInt>` load is inlined, where `AtomicLazyReference.load()` is an unspecialised call
    /// that instantiates `Unmanaged`'s metadata each time, at many times the cost of a lock
    /// (Benchmarks/results/syscalls.md).
    ///
    /// The stream thread, not a dispatch queue of the package's (where connections lived before): the
    /// thread waits in this reactor's epoll set directly, one `epoll_wait` a wake-up and no thread hop,
    /// where a queue's reactor is woken through libdispatch's own epoll set and a worker thread
    /// (ping-pong and connects gained from it: Benchmarks/results/syscalls.md).
    private static let sharedReactor = Atomic<UInt>(0)

    /// The stream thread's reactor, where every connection's events are delivered; nil if it cannot be
    /// had (out of file descriptors: the thread could not start), and then each connection fails when
    /// it opens. A later call tries again.
    static var reactor: Reactor? {
        let known = sharedReactor.load(ordering: .acquiring)
        if known != 0 { return Unmanaged<Reactor>.fromOpaque(UnsafeRawPointer(bitPattern: known)!).takeUnretainedValue() }
        return makeReactor()
    }

    private static func makeReactor() -> Reactor? {
        guard let created = try? StreamThread.reactor() else { return nil }
        // The stream thread holds its reactor for the process's life; the first to publish it keeps a
        // reference, so a plain load finds it.
        let address = UInt(bitPattern: Unmanaged.passRetained(created).toOpaque())
        let (exchanged, _) = sharedReactor.compareExchange(expected: 0, desired: address, ordering: .acquiringAndReleasing)
        if !exchanged { Unmanaged<Reactor>.fromOpaque(UnsafeRawPointer(bitPattern: address)!).release() }
        return created
    }

    /// Wraps an unopened pair made any way (`createStreamPair`, an accepted `StreamListener` pair), with
    /// whatever properties you set on it (TLS, a proxy). ``open()`` opens it.
    public init(input: InputStream, output: OutputStream) {
        engine = StreamOperations(reactor: Self.reactor)
        var initial = State()
        initial.pair = (input, output)
        state = Guarded(initial)
        engine.setClient(self)
    }

    /// A connection to `host` and `port` (`createStreamPair(host:port:)`), not yet open.
    public convenience init(host: String, port: Int) {
        let pair = createStreamPair(host: host, port: port)
        self.init(input: pair.input, output: pair.output)
    }

    /// Asks the stream thread to close the pair (the engine lives until it has), after letting go of
    /// the engine's reference to this object: nothing more is reported.
    deinit {
        engine.dropClient(self)
        engine.close()
        #if DEBUG
            engine.checkLetGo(afterDeinitOf: self)
        #endif
    }

    // MARK: opening and closing

    /// Opens the pair and returns once it is ready: TCP up, and any proxy or TLS handshake set on the
    /// pair done. Throws the stream's error (a refused connection, a failed name lookup or handshake).
    /// Calling it again after success returns at once.
    nonisolated(nonsending) public func open() async throws {
        try await cancellable {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let (pair, answer) = state.withLock { state -> ((InputStream, OutputStream)?, Result<Void, Error>?) in
                    if state.ready { return (nil, .success(())) }
                    if let closed = state.closed { return (nil, .failure(Self.error(closed, state))) }
                    state.openWaiters.append(continuation)
                    guard !state.opening, let pair = state.pair else { return (nil, nil) }
                    state.opening = true
                    state.pair = nil
                    return (pair, nil)
                }
                if let answer { return continuation.resume(with: answer) }
                guard let (input, output) = pair else { return }
                guard hasReactor() else { return }  // out of fds: closed with EMFILE, which open throws
                engine.attach(input: input, output: output) { input, output in
                    guard let runLoop = StreamThread.knownRunLoop?.runLoop else { return }  // it runs: it has the reactor
                    input.schedule(in: runLoop, forMode: .default)
                    output.schedule(in: runLoop, forMode: .default)
                }
            }
        }
    }

    /// Closes the pair. Waiting calls throw ``StreamOperationError/closed``.
    public func close() {
        engine.close()
    }

    private func cancel() {
        state.withLock { $0.cancelled = true }
        engine.close(error: CancellationError())
    }

    /// Runs `body` so that cancelling the calling task closes the connection, and so that a call
    /// whose task is cancelled throws `CancellationError` whatever error it met (the close it caused,
    /// or one it raced with), as `Task.checkCancellation()` would.
    nonisolated(nonsending) private func cancellable<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await withTaskCancellationHandler(operation: body) { cancel() }
        } catch {
            if Task.isCancelled || error is CancellationError { throw CancellationError() }
            throw state.withLock { $0.cancelled } ? CancellationError() : error
        }
    }

    private static func error(_ closed: Error?, _ state: State) -> Error {
        if state.cancelled { return CancellationError() }
        return closed ?? StreamOperationError.closed
    }

    // MARK: reading

    /// The next bytes that arrive, at least one and at most `maxLength`; nil at the end of the stream.
    /// Bytes already read past an earlier `read(exactly:)` or `read(upTo:maxLength:)` come first.
    nonisolated(nonsending) public func read(maxLength: Int = 65_536) async throws -> [UInt8]? {
        try await read(.available(maxLength: max(1, maxLength)), endIsNil: true)
    }

    /// Exactly `count` bytes. At the end of the stream before then, throws
    /// ``StreamOperationError/closedByPeer(unread:)`` with the bytes that did arrive.
    nonisolated(nonsending) public func read(exactly count: Int) async throws -> [UInt8] {
        guard count > 0 else { return [] }
        return try await read(.length(count), endIsNil: false) ?? []
    }

    /// The bytes up to and including the first `delimiter` (an empty one: no bytes). Throws
    /// ``StreamOperationError/readMaxedOut(maxLength:tag:)`` (and closes) when `maxLength` bytes (0: no
    /// limit) arrive without it, and ``StreamOperationError/closedByPeer(unread:)`` at the end of the stream.
    nonisolated(nonsending) public func read(upTo delimiter: [UInt8], maxLength: Int) async throws -> [UInt8] {
        guard !delimiter.isEmpty else { return [] }  // an empty delimiter is found at once
        return try await read(.delimiter(delimiter, maxLength: max(0, maxLength)), endIsNil: false) ?? []
    }

    nonisolated(nonsending) private func read(_ request: ReadRequest, endIsNil: Bool) async throws -> [UInt8]? {
        try await perform(endIsNil: endIsNil) { tag in engine.enqueueRead(request, timeout: 0, tag: tag) }
    }

    /// Queues an operation under a new tag and returns its result: at once when it completed inline
    /// (the engine pumps on this thread), else once the stream thread completes it.
    nonisolated(nonsending) private func perform(endIsNil: Bool = false, _ enqueue: (Int) -> Error?) async throws -> [UInt8]? {
        // A task cancelled before it calls closes the connection and throws, even where the call could
        // have completed at once (a write the socket has room for, on the executor).
        if Task.isCancelled {
            cancel()
            throw CancellationError()
        }
        let tag = try state.withLock { state -> Int in
            if let closed = state.closed { throw Task.isCancelled ? CancellationError() : Self.error(closed, state) }
            // `open()` never called: the operation would wait for ever (one made while `open()` runs
            // is queued, and runs once the pair is ready).
            if state.pair != nil { throw StreamOperationError.notOpen }
            let tag = state.nextTag
            state.nextTag += 1
            state.operations.append(Operation(tag: tag, endIsNil: endIsNil))
            return tag
        }
        if let refused = enqueue(tag) {
            _ = state.withLock { $0.takeResult(tag) }
            throw Task.isCancelled || state.withLock({ $0.cancelled }) ? CancellationError() : refused
        }
        if let result = state.withLock({ $0.takeResult(tag) }) { return try result.get() }
        return try await cancellable {
            try await withUnsafeThrowingContinuation { (continuation: Waiter) in
                let result = state.withLock { state -> Result<[UInt8]?, Error>? in
                    if let result = state.takeResult(tag) { return result }
                    state.setWaiter(continuation, for: tag)
                    return nil
                }
                if let result { continuation.resume(with: result) }
            }
        }
    }

    /// Completes the operation `tag`: its waiter, or a result kept for a caller not yet waiting.
    private func complete(_ tag: Int, _ result: (_ endIsNil: Bool) -> Result<[UInt8]?, Error>) {
        let resumption = state.withLock { state -> (Waiter, Result<[UInt8]?, Error>)? in
            guard let index = state.operations.firstIndex(tag: tag) else { return nil }
            let value = result(state.operations[index].endIsNil)
            guard let waiter = state.operations[index].waiter else {
                state.operations.setResult(value, at: index)
                return nil
            }
            state.removeOperation(at: index)
            return (waiter, value)
        }
        if let (waiter, value) = resumption { waiter.resume(with: value) }
    }

    /// The input as an `AsyncSequence` of chunks of at most `maxLength` bytes, ending at the end of the
    /// stream. Each chunk is read when the loop asks for it.
    public func chunks(maxLength: Int = 65_536) -> Chunks {
        Chunks(connection: self, maxLength: maxLength)
    }

    /// The input as chunks: see ``AsyncConnection/chunks(maxLength:)``.
    public struct Chunks: AsyncSequence, Sendable {
        /// A chunk of bytes.
        public typealias Element = [UInt8]
        let connection: AsyncConnection
        let maxLength: Int

        /// Reads a chunk per `next()`.
        public struct AsyncIterator: AsyncIteratorProtocol {
            let connection: AsyncConnection
            let maxLength: Int

            /// The next chunk, or nil at the end of the stream.
            nonisolated(nonsending) public mutating func next() async throws -> [UInt8]? {
                try await connection.read(maxLength: maxLength)
            }
        }

        /// An iterator over the chunks.
        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(connection: connection, maxLength: maxLength)
        }
    }

    // MARK: writing

    /// Writes every byte, returning once the kernel has accepted them all.
    nonisolated(nonsending) public func write(_ bytes: [UInt8]) async throws {
        try await write(.array(bytes))
    }

    /// Writes every byte of `data`, returning once the kernel has accepted them all. `data` is held
    /// until then, not copied.
    nonisolated(nonsending) public func write(_ data: Data) async throws {
        try await write(WriteBytes(data))
    }

    nonisolated(nonsending) private func write(_ bytes: WriteBytes) async throws {
        guard bytes.count > 0 else { return }
        _ = try await perform { tag in engine.enqueueWrite(bytes, timeout: 0, tag: tag) }
    }

    /// Shuts the write side down once the writes already made are done (a half-close, as SwiftNIO's
    /// `close(mode: .output)`; CFNetwork has none): over TLS it sends close_notify, then the FIN, so
    /// the peer reads to its end while this side keeps reading its answer. Writes after it throw
    /// EPIPE (`NSPOSIXErrorDomain`). See `Stream.PropertyKey.shutdownOutputKey`.
    nonisolated(nonsending) public func shutdownOutput() async throws {
        _ = try await perform { tag in engine.enqueueShutdownOutput(tag: tag) }
    }

    /// Upgrades the open connection to TLS in place (STARTTLS), once the reads and writes already made
    /// have completed; returns when the handshake is done, or throws its error.
    nonisolated(nonsending) public func startTLS(_ settings: TLSSettings) async throws {
        try await cancellable {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let accepted = state.withLock { state -> Bool in
                    if let closed = state.closed {
                        continuation.resume(throwing: Self.error(closed, state))
                        return false
                    }
                    if state.pair != nil {
                        continuation.resume(throwing: StreamOperationError.notOpen)
                        return false
                    }
                    state.tls.append(continuation)
                    return true
                }
                guard accepted else { return }
                engine.enqueueTLS(settings)
            }
        }
    }

    // MARK: the engine's events

    package func operations(_ operations: StreamOperations, handle event: OperationEvent) {
        switch event {
        case .ready:
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Error>] in
                state.ready = true
                defer { state.openWaiters.removeAll() }
                return state.openWaiters
            }
            for waiter in waiters { waiter.resume() }
        case .read(let bytes, let tag):
            complete(tag) { _ in .success(bytes) }
        case .readEnded(let unread, let tag):
            complete(tag) { endIsNil in
                endIsNil && unread.isEmpty ? .success(nil) : .failure(StreamOperationError.closedByPeer(unread: unread))
            }
        case .wrote(let tag), .outputShutDown(let tag):
            complete(tag) { _ in .success(nil) }
        case .secured:
            let waiter = state.withLock { state in state.tls.isEmpty ? nil : state.tls.removeFirst() }
            waiter?.resume()
        case .closed(let reason):
            let (error, opens, waiters, tls) = state.withLock { state in
                state.closed = .some(reason)
                let error = Self.error(reason, state)
                var waiters: [Waiter] = []
                for index in state.operations.indices.reversed() where state.operations[index].result == nil {
                    if let waiter = state.operations[index].waiter {
                        waiters.insert(waiter, at: 0)
                        state.removeOperation(at: index)
                    } else {
                        state.operations.setResult(.failure(error), at: index)  // its caller is about to wait: it finds this
                    }
                }
                defer {
                    state.openWaiters.removeAll()
                    state.tls.removeAll()
                }
                return (error, state.openWaiters, waiters, state.tls)
            }
            for waiter in opens { waiter.resume(throwing: error) }
            for waiter in waiters { waiter.resume(throwing: error) }
            for waiter in tls { waiter.resume(throwing: error) }
        case .readPartial, .wrotePartial, .ended:
            break
        }
    }

    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double {
        0  // no timeouts are set: a caller bounds a wait with its own task deadline
    }
}

/// A task executor that runs jobs on the package's stream thread, where every ``AsyncConnection``'s
/// stream events are delivered (`withTaskExecutorPreference(AsyncConnection.executor) { … }`).
///
/// A task that waits for a read is resumed from a stream event's callout on that thread. Run on this
/// executor, it continues there right after the callout, on the same thread, instead of on another
/// thread that has to be woken: one thread wake-up per exchange, as a delegate has. The price is that
/// every connection's events and every task preferring this executor share that one thread: use it for
/// code that awaits network operations and does little else between them, never for code that blocks.
public final class AsyncConnectionExecutor: TaskExecutor, @unchecked Sendable {
    /// Runs `job` on the stream thread (at once after the current callout, if called from one).
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        guard let reactor = AsyncConnection.reactor else {
            // No stream thread (out of file descriptors): the job still runs, on a global queue.
            return DispatchQueue.global().async { job.runSynchronously(on: executor) }
        }
        reactor.post(job, on: executor)
    }
}

extension AsyncConnection.State {
    /// Removes and returns the result of `tag`, if it has one.
    fileprivate mutating func takeResult(_ tag: Int) -> Result<[UInt8]?, Error>? {
        guard let index = operations.firstIndex(tag: tag), let result = operations[index].result else { return nil }
        removeOperation(at: index)
        return result
    }

    /// Removes one operation.
    fileprivate mutating func removeOperation(at index: Int) {
        operations.remove(at: index)
    }

    fileprivate mutating func setWaiter(_ waiter: AsyncConnection.Waiter, for tag: Int) {
        guard let index = operations.firstIndex(tag: tag) else { return }
        operations.setWaiter(waiter, at: index)
    }
}

/// A connection's operations in the order made, the first held inline: a connection has one at a
/// time most of the time (a write, then a read), and an array would allocate its storage for each
/// (its storage is dropped once empty, so an idle connection holds none). Only a second
/// operation at once allocates. Index 0 is the inline one.
private struct OperationList {
    private var head: AsyncConnection.Operation?
    private var tail: [AsyncConnection.Operation] = []

    var count: Int { head == nil ? 0 : 1 + tail.count }
    var indices: Range<Int> { 0..<count }

    subscript(index: Int) -> AsyncConnection.Operation {
        index == 0 ? head! : tail[index - 1]
    }

    /// Sets the waiter of the operation at `index`. Setters rather than a `_modify` accessor: the
    /// accessor's coroutine frame was allocated (`malloc`) on every call, twice a round trip.
    mutating func setWaiter(_ waiter: AsyncConnection.Waiter, at index: Int) {
        if index == 0 { head!.waiter = waiter } else { tail[index - 1].waiter = waiter }
    }

    /// Sets the result of the operation at `index` (see `setWaiter(_:at:)`).
    mutating func setResult(_ result: Result<[UInt8]?, Error>, at index: Int) {
        if index == 0 { head!.result = result } else { tail[index - 1].result = result }
    }

    func firstIndex(tag: Int) -> Int? {
        guard let head else { return nil }
        if head.tag == tag { return 0 }
        return tail.firstIndex { $0.tag == tag }.map { $0 + 1 }
    }

    mutating func append(_ operation: AsyncConnection.Operation) {
        if head == nil {
            head = operation
        } else {
            tail.append(operation)
        }
    }

    /// Removes one operation, keeping the order of the rest; the tail's storage goes once it is empty.
    mutating func remove(at index: Int) {
        if index == 0 {
            head = tail.isEmpty ? nil : tail.removeFirst()
        } else {
            tail.remove(at: index - 1)
        }
        if tail.isEmpty { tail = [] }
    }
}

extension AsyncConnection {
    /// The executor that runs tasks where the connections' events are delivered: see
    /// ``AsyncConnectionExecutor``.
    public static let executor = AsyncConnectionExecutor()
}
