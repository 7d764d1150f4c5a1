import Foundation

/// The delegate of a ``QueuedSocket``, after GCDAsyncSocket's `GCDAsyncSocketDelegate`. Every method
/// has a default that does nothing (or, for the timeout questions, lets the operation time out), so a
/// delegate implements only what it needs. All are called on the socket's run loop or dispatch queue.
///
/// The conformance cannot be isolated to an actor (`extension Controller: @MainActor QueuedSocketDelegate`
/// does not compile): the socket calls its delegate on the run loop or queue it was given, which Swift
/// cannot check against an actor, so a conformance that promised the main actor could be called off it.
/// A `@MainActor` class uses the main queue (or main run loop) and `nonisolated` methods that enter the
/// main actor with `MainActor.assumeIsolated`, which checks at run time that they are on it.
///
/// A method written with GCDAsyncSocket's Swift types (`Data`, a `UInt16` port, `UInt` lengths) is not
/// left uncalled: those spellings are requirements too, called right after this protocol's own (for
/// the timeout questions, when this protocol's spelling returned 0). Swift only warns about a method
/// that nearly matches a defaulted requirement when the conformance is declared in the same extension;
/// declared on the class, such a method would otherwise be silently ignored.
public protocol QueuedSocketDelegate: AnyObject, SendableMetatype {
    /// The connection is up (TCP, and any proxy handshake or TLS set on the pair before it opened);
    /// queued operations start now (`socket:didConnectToHost:port:`).
    func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: Int)
    /// A listening socket accepted a connection. Keep `newSocket`: it is closed when released
    /// (`socket:didAcceptNewSocket:`). It has this delegate and this run loop or queue.
    func socket(_ socket: QueuedSocket, didAcceptNewSocket newSocket: QueuedSocket)
    /// A read completed (`socket:didReadData:withTag:`).
    func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int)
    /// The read with `tag` got `partialLength` more bytes and is not complete (`socket:didReadPartialDataOfLength:tag:`).
    func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: Int, tag: Int)
    /// A write completed: the kernel accepted every byte (`socket:didWriteDataWithTag:`).
    func socket(_ socket: QueuedSocket, didWriteDataWithTag tag: Int)
    /// The write with `tag` moved `partialLength` more bytes and is not complete (`socket:didWritePartialDataOfLength:tag:`).
    func socket(_ socket: QueuedSocket, didWritePartialDataOfLength partialLength: Int, tag: Int)
    /// The read with `tag` reached its timeout. Return more seconds to extend it, or 0 to let it time
    /// out, which disconnects with ``StreamOperationError/readTimedOut(tag:)``
    /// (`socket:shouldTimeoutReadWithTag:elapsed:bytesDone:`).
    func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval
    /// The same for a write (`socket:shouldTimeoutWriteWithTag:elapsed:bytesDone:`).
    func socket(_ socket: QueuedSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval
    /// A handshake queued with ``QueuedSocket/startTLS(_:)`` finished (`socketDidSecure:`).
    func socketDidSecure(_ socket: QueuedSocket)
    /// The connection is closed: nil after ``QueuedSocket/disconnect()`` (or a disconnect after reading or
    /// writing), else the reason. Called once (`socketDidDisconnect:withError:`).
    func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?)

    // GCDAsyncSocket's spellings, called too (see above).

    /// `socket(_:didConnectToHost:port:)` with GCDAsyncSocket's `UInt16` port: called right after it.
    func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: UInt16)
    /// `socket(_:didRead:withTag:)` with GCDAsyncSocket's `Data`: called right after it.
    func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int)
    /// `socket(_:didReadPartialDataOfLength:tag:)` with GCDAsyncSocket's `UInt`: called right after it.
    func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int)
    /// `socket(_:didWritePartialDataOfLength:tag:)` with GCDAsyncSocket's `UInt`: called right after it.
    func socket(_ socket: QueuedSocket, didWritePartialDataOfLength partialLength: UInt, tag: Int)
    /// `socket(_:shouldTimeoutReadWithTag:elapsed:bytesDone:)` with GCDAsyncSocket's `UInt` length:
    /// asked when the `Int` one returns 0.
    func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval
    /// The same for a write.
    func socket(_ socket: QueuedSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval
}

extension QueuedSocketDelegate {
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: Int) {}
    /// Does nothing: the new socket is released, which closes it.
    public func socket(_ socket: QueuedSocket, didAcceptNewSocket newSocket: QueuedSocket) {}
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {}
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) {}
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didWriteDataWithTag tag: Int) {}
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didWritePartialDataOfLength partialLength: Int, tag: Int) {}
    /// Returns 0: the read times out.
    public func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int)
        -> TimeInterval
    { 0 }
    /// Returns 0: the write times out.
    public func socket(_ socket: QueuedSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int)
        -> TimeInterval
    { 0 }
    /// Does nothing.
    public func socketDidSecure(_ socket: QueuedSocket) {}
    /// Does nothing.
    public func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {}
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: UInt16) {}
    /// Does nothing (and tells the socket, so that it stops making a `Data` of each read for it).
    public func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int) { socket.delegateSkipsDataRead() }
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) {}
    /// Does nothing.
    public func socket(_ socket: QueuedSocket, didWritePartialDataOfLength partialLength: UInt, tag: Int) {}
    /// Returns 0.
    public func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt)
        -> TimeInterval
    { 0 }
    /// Returns 0.
    public func socket(_ socket: QueuedSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt)
        -> TimeInterval
    { 0 }
}

/// GCDAsyncSocket's programming model over a SocketStreams pair: say what to read and write up front
/// (to a length, up to a delimiter, whatever is available), each with a timeout and a tag, and be told
/// as each completes, in order. Operations may be queued before the connection is up; TLS can be
/// queued behind them (``startTLS(_:)``).
///
/// ```swift
/// let socket = QueuedSocket(delegate: self, delegateQueue: .main)
/// try socket.connect(toHost: "example.com", onPort: 80)
/// socket.write(Array("GET / HTTP/1.0\r\n\r\n".utf8), tag: 1)
/// socket.read(toData: Array("\r\n\r\n".utf8), maxLength: 65_536, tag: 2)  // the head
/// ```
///
/// The delegate is called on the run loop (in its mode) or the dispatch queue given at creation, one
/// call at a time, never on the caller's thread unless that is where it runs. Methods may be called
/// from any thread. The delegate is held weakly, as in GCDAsyncSocket; keep the socket itself for as
/// long as the connection should last: releasing it closes the connection (without a
/// `socketDidDisconnect`). A socket connects once; make a new one to reconnect.
///
/// Underneath is a stream pair scheduled on that run loop or queue, driven by its delegate events, so
/// its rules hold: reads happen only while a read is queued (the kernel's buffer is the backpressure),
/// and an error is the streams' own `NSError` (CFNetwork's domains and codes) or a ``StreamOperationError``.
public final class QueuedSocket: StreamOperationsClient, Sendable {
    /// Where the delegate is called: the socket's owner. Unchecked only because Foundation does not
    /// mark `RunLoop` Sendable: the socket never touches the run loop's state, it only schedules
    /// streams on it and compares it, which Foundation does under its own locks.
    private enum Context: @unchecked Sendable {
        case runLoop(RunLoop, RunLoop.Mode)
        case queue(DispatchQueue)
    }

    struct State {
        weak var delegate: QueuedSocketDelegate?
        var host: String?
        var listener: StreamListener?
        var port = 0
        /// A pair is attached (connecting or connected).
        var attached = false
        var connected = false
        var disconnected = false
        /// Made by a listening socket: `didConnectToHost` is not called for it.
        var accepted = false
        /// The delegate does not implement `didRead` with `Data` (its default said so on the first
        /// read), so reads are not copied into a `Data` for it. Cleared when the delegate changes.
        var skipsDataRead = false
    }

    private let context: Context
    let engine: StreamOperations
    let state: Guarded<State>

    /// A socket whose delegate is called on `delegateQueue` (GCDAsyncSocket's `initWithDelegate:delegateQueue:`).
    /// Events for every socket on one queue come one at a time, even on a concurrent queue.
    public convenience init(delegate: QueuedSocketDelegate?, delegateQueue: DispatchQueue) {
        self.init(delegate: delegate, context: .queue(delegateQueue))
    }

    /// A socket whose delegate is called on `runLoop` while it runs in `mode`: a run loop you run, or
    /// `RunLoop.socketStreams`, the package's stream thread.
    public convenience init(delegate: QueuedSocketDelegate?, runLoop: RunLoop = .current, mode: RunLoop.Mode = .default) {
        self.init(delegate: delegate, context: .runLoop(runLoop, mode))
    }

    private init(delegate: QueuedSocketDelegate?, context: Context) {
        self.context = context
        var initial = State()
        initial.delegate = delegate
        state = Guarded(initial)
        do {
            engine = StreamOperations(reactor: try Self.reactor(for: context))
            engine.setClient(self)
        } catch {
            // Out of file descriptors (no epoll set for the run loop or queue): the socket is closed
            // from the start, and says so (on the calling thread) at its first operation.
            engine = StreamOperations(reactor: nil)
            engine.setClient(self)
            engine.close(error: NSError(domain: NSPOSIXErrorDomain, code: Int(error.code)))
        }
    }

    deinit {
        engine.dropClient(self)  // first: the engine holds this object unretained
        engine.close()
        state.withLock { $0.listener }?.close()
        if let reactor = engine.reactor { ReactorRegistry.shared.release(reactor) }
        #if DEBUG
            engine.checkLetGo(afterDeinitOf: self)
        #endif
    }

    private static func reactor(for context: Context) throws(SystemError) -> Reactor {
        switch context {
        case .queue(let queue):
            return try ReactorRegistry.shared.acquire(queue: queue)
        case .runLoop(let runLoop, let mode):
            guard let cf = cfRunLoop(of: runLoop) else {
                // Not knowable from this thread (see cfRunLoop(of:)): the stream thread's, whose
                // timers and posts then fire there; the delegate would be called there too.
                let reactor = try StreamThread.reactor()
                ReactorRegistry.shared.retain(reactor)
                return reactor
            }
            return try ReactorRegistry.shared.acquire(cfRunLoop: cf, mode: mode.rawValue)
        }
    }

    /// The delegate (held weakly), called on the socket's run loop or queue.
    public var delegate: QueuedSocketDelegate? {
        get { state.withLock { $0.delegate } }
        set {
            state.withLock {
                $0.delegate = newValue
                $0.skipsDataRead = false
            }
        }
    }

    /// The default `socket(_:didRead: Data, withTag:)` ran: the delegate does not implement it.
    func delegateSkipsDataRead() { state.withLock { $0.skipsDataRead = true } }

    // MARK: connecting

    /// Connects to `host` and `port` (GCDAsyncSocket's `connectToHost:onPort:withTimeout:error:`): name
    /// resolution and Happy Eyeballs as `createStreamPair(host:port:)` does them. `timeout` (seconds;
    /// 0 or less for none) bounds the whole open, handshakes included. `configure` may set properties on
    /// the pair before it opens: TLS (`.tlsSettingsKey`), a proxy, `.tcpNoDelayKey`.
    ///
    /// - Throws: ``StreamOperationError/alreadyConnected`` if the socket is connected or listening,
    ///   ``StreamOperationError/closed`` if it has disconnected; an `NSPOSIXErrorDomain` `EINVAL` error
    ///   for a `port` outside 0...65535 (never masked).
    public func connect(
        toHost host: String, onPort port: Int, withTimeout timeout: TimeInterval = -1,
        configure: ((InputStream, OutputStream) -> Void)? = nil
    ) throws {
        try PortNumber.check(port, "Could not connect to \(host)")
        let pair = createStreamPair(host: host, port: port)
        if timeout > 0 { pair.input.setProperty(timeout, forKey: .connectTimeoutKey) }
        configure?(pair.input, pair.output)
        try attach(pair.input, pair.output, host: host, port: port)
    }

    /// Connects to a Unix-domain socket (GCDAsyncSocket's `connectToUrl:withTimeout:error:`).
    public func connect(toUnixPath path: String, withTimeout timeout: TimeInterval = -1) throws {
        let pair = createStreamPair(unixSocketPath: path)
        if timeout > 0 { pair.input.setProperty(timeout, forKey: .connectTimeoutKey) }
        try attach(pair.input, pair.output, host: path, port: 0)
    }

    /// Takes over an unopened stream pair made any other way (`createStreamPair(nativeSocket:)`, or one
    /// whose properties you set yourself), and opens it.
    public func connect(input: InputStream, output: OutputStream) throws {
        let host = input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemoteHostName as String)) as? String
        let port = (input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemotePortNumber as String)) as? NSNumber)?.intValue
        try attach(input, output, host: host ?? "", port: port ?? 0)
    }

    private func attach(_ input: InputStream, _ output: OutputStream, host: String, port: Int) throws {
        let refusal = state.withLock { state -> StreamOperationError? in
            if let refusal = state.refusal { return refusal }
            state.attached = true
            state.host = host
            state.port = port
            return nil
        }
        if let refusal {
            input.close()
            output.close()
            throw refusal
        }
        let context = self.context
        engine.attach(input: input, output: output) { [context] input, output in
            switch context {
            case .queue(let queue):
                CFReadStreamSetDispatchQueue(input, queue)
                CFWriteStreamSetDispatchQueue(output, queue)
            case .runLoop(let runLoop, let mode):
                input.schedule(in: runLoop, forMode: mode)
                output.schedule(in: runLoop, forMode: mode)
            }
        }
    }

    // MARK: accepting

    /// Listens on TCP (GCDAsyncSocket's `acceptOnInterface:port:error:`): `interface` nil for every
    /// interface, `"127.0.0.1"` or `"::1"` for loopback; `port` 0 for any free port (see ``localPort``).
    /// Each connection arrives as a new socket in `socket(_:didAcceptNewSocket:)`, with this delegate
    /// and run loop or queue.
    public func accept(onInterface interface: String? = nil, port: Int) throws {
        try listen(try StreamListener(host: interface, port: port))
    }

    /// Listens on a Unix-domain socket at `path` (GCDAsyncSocket's `acceptOnUrl:error:`).
    public func accept(onUnixPath path: String) throws {
        try listen(try StreamListener(unixSocketPath: path))
    }

    private func listen(_ listener: StreamListener) throws {
        let runLoop: RunLoop
        let mode: RunLoop.Mode
        switch context {
        case .runLoop(let loop, let loopMode): (runLoop, mode) = (loop, loopMode)
        case .queue:
            do {
                (runLoop, mode) = (try RunLoop.startSocketStreams(), .default)  // EMFILE thrown, never waited for
            } catch {
                listener.close()
                throw error
            }
        }
        let refusal = state.withLock { state -> StreamOperationError? in
            if let refusal = state.refusal { return refusal }
            state.listener = listener
            return nil
        }
        if let refusal {
            listener.close()
            throw refusal
        }
        listener.start(in: runLoop, forMode: mode) { [weak self] input, output in
            guard let self else { return input.close() }
            let accepted = QueuedSocket(delegate: self.delegate, context: self.context)
            accepted.state.withLock { $0.accepted = true }
            try? accepted.connect(input: input, output: output)
            self.onContext { [self] in self.delegate?.socket(self, didAcceptNewSocket: accepted) }
        }
    }

    /// Runs `body` where the delegate is called.
    private func onContext(_ body: @escaping @Sendable () -> Void) {
        switch context {
        case .runLoop: body()  // the listener's accept closure already runs on that run loop
        case .queue(let queue): queue.async(execute: body)
        }
    }

    // MARK: reading

    /// Reads exactly `length` bytes (`readDataToLength:withTimeout:tag:`). `timeout` in seconds, 0 or
    /// less for none.
    public func read(toLength length: Int, timeout: TimeInterval = -1, tag: Int = 0) {
        guard length > 0 else { return }  // as GCDAsyncSocket: nothing to read, no callback
        enqueue(.length(length), timeout: timeout, tag: tag)
    }

    /// Reads up to and including the first `delimiter` (`readDataToData:withTimeout:maxLength:tag:`).
    /// With `maxLength` above 0, a delimiter not found within that many bytes disconnects with
    /// ``StreamOperationError/readMaxedOut(maxLength:tag:)``.
    public func read(toData delimiter: [UInt8], timeout: TimeInterval = -1, maxLength: Int = 0, tag: Int = 0) {
        guard !delimiter.isEmpty else { return }
        enqueue(.delimiter(delimiter, maxLength: max(0, maxLength)), timeout: timeout, tag: tag)
    }

    /// Reads whatever has arrived, at least one byte and at most `maxLength` (0: no limit)
    /// (`readDataWithTimeout:tag:`).
    public func readAvailable(timeout: TimeInterval = -1, maxLength: Int = 0, tag: Int = 0) {
        enqueue(.available(maxLength: max(0, maxLength)), timeout: timeout, tag: tag)
    }

    private func enqueue(_ request: ReadRequest, timeout: TimeInterval, tag: Int) {
        engine.enqueueRead(request, timeout: timeout, tag: tag)
    }

    // MARK: writing

    /// Writes `bytes` (`writeData:withTimeout:tag:`): `socket(_:didWriteDataWithTag:)` follows once the
    /// kernel has accepted every byte. Writes complete in order.
    public func write(_ bytes: [UInt8], timeout: TimeInterval = -1, tag: Int = 0) {
        engine.enqueueWrite(bytes, timeout: timeout, tag: tag)
    }

    /// Writes the bytes of `data` (`writeData:withTimeout:tag:`). Like GCDAsyncSocket, which retains the
    /// `NSData` it is given, the socket holds `data` itself until it is written, and copies nothing.
    public func write(_ data: Data, timeout: TimeInterval = -1, tag: Int = 0) {
        engine.enqueueWrite(WriteBytes(data), timeout: timeout, tag: tag)
    }

    // MARK: TLS

    /// Starts TLS once every read and write queued before it has completed (`startTLS:`); operations
    /// queued after it run over TLS. `socketDidSecure(_:)` follows the handshake; a failed handshake
    /// disconnects with the TLS error (`NSOSStatusErrorDomain`, SecureTransport's codes). Bytes that
    /// arrive before the handshake starts cannot be passed to TLS and disconnect with
    /// ``StreamOperationError/bytesBeforeTLS(unread:)``.
    public func startTLS(_ settings: TLSSettings) {
        engine.enqueueTLS(settings)
    }

    // MARK: disconnecting

    /// Closes at once; queued operations are dropped (`disconnect`). The delegate then gets
    /// `socketDidDisconnect(_:withError:)` with nil.
    public func disconnect() {
        state.withLock { $0.listener }?.close()
        engine.close()
    }

    /// Closes once every queued read has completed (`disconnectAfterReading`).
    public func disconnectAfterReading() { engine.close(afterReads: true) }

    /// Closes once every queued write has completed (`disconnectAfterWriting`).
    public func disconnectAfterWriting() { engine.close(afterWrites: true) }

    /// Closes once every queued read and write has completed (`disconnectAfterReadingAndWriting`).
    public func disconnectAfterReadingAndWriting() { engine.close(afterReads: true, afterWrites: true) }

    /// Shuts the write side down once every queued write has completed (a half-close; GCDAsyncSocket
    /// has none, SwiftNIO calls it `close(mode: .output)`): over TLS close_notify, then the FIN. Reads
    /// go on until the peer's end; writes queued after it are ignored.
    public func shutdownOutputAfterWriting() { engine.enqueueShutdownOutput(tag: 0) }

    /// Whether the connection is up and not closed (`isConnected`).
    public var isConnected: Bool { state.withLock { $0.connected && !$0.disconnected } }

    /// Whether the socket has closed, or never connected (`isDisconnected`).
    public var isDisconnected: Bool { state.withLock { !$0.connected || $0.disconnected } }

    /// The host the socket connected to, as given; for an accepted socket, the peer's numeric address
    /// ("127.0.0.1", "::1"), already in `socket(_:didAcceptNewSocket:)` (`connectedHost`).
    public var connectedHost: String? { state.withLock { $0.connected || $0.accepted ? $0.host : nil } }

    /// The port the socket connected to, as given; for an accepted socket, the peer's port (`connectedPort`).
    public var connectedPort: Int { state.withLock { $0.connected || $0.accepted ? $0.port : 0 } }

    // MARK: the engine's events (on the socket's run loop or queue)

    package func operations(_ operations: StreamOperations, handle event: OperationEvent) {
        // The delegate and whether it takes `Data` reads in one acquisition of the lock.
        let (delegate, skipsDataRead) = state.withLock { ($0.delegate, $0.skipsDataRead) }
        switch event {
        case .ready:
            let (host, port) = state.withLock { state -> (String, Int) in
                state.connected = true
                return (state.host ?? "", state.port)
            }
            if !state.withLock({ $0.accepted }) {
                delegate?.socket(self, didConnectToHost: host, port: port)
                delegate?.socket(self, didConnectToHost: host, port: UInt16(truncatingIfNeeded: port))
            }
        case .read(let bytes, let tag):
            delegate?.socket(self, didRead: bytes, withTag: tag)
            if let delegate, !skipsDataRead { delegate.socket(self, didRead: Data(bytes), withTag: tag) }
        case .readPartial(let count, let tag):
            delegate?.socket(self, didReadPartialDataOfLength: count, tag: tag)
            delegate?.socket(self, didReadPartialDataOfLength: UInt(max(0, count)), tag: tag)
        case .readEnded(let unread, _):
            engine.close(error: StreamOperationError.closedByPeer(unread: unread))
        case .ended(let pending):
            // GCDAsyncSocket disconnects when the peer closes; a read still queued gets `readEnded`
            // first, with the bytes that had arrived for it.
            if pending == 0 { engine.close(error: StreamOperationError.closedByPeer(unread: engine.takeBuffered())) }
        case .wrote(let tag):
            delegate?.socket(self, didWriteDataWithTag: tag)
        case .wrotePartial(let count, let tag):
            delegate?.socket(self, didWritePartialDataOfLength: count, tag: tag)
            delegate?.socket(self, didWritePartialDataOfLength: UInt(max(0, count)), tag: tag)
        case .secured:
            delegate?.socketDidSecure(self)
        case .outputShutDown:
            break
        case .closed(let error):
            state.withLock { $0.disconnected = true }
            delegate?.socketDidDisconnect(self, withError: error)
        }
    }

    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double {
        guard let delegate else { return 0 }
        let done = UInt(max(0, bytesDone))
        switch direction {
        case .read:
            let extra = delegate.socket(self, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: bytesDone)
            return extra > 0 ? extra : delegate.socket(self, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: done)
        case .write:
            let extra = delegate.socket(self, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: bytesDone)
            return extra > 0 ? extra : delegate.socket(self, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: done)
        }
    }
}
