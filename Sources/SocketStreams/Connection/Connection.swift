// The context shared by the two streams of a pair: one socket, one property set, one status machine
// per half, and the bookkeeping that turns socket readiness into CFNetwork's stream events.
//
// Life of a connection:
//   idle ──open()──▶ connecting ──TCP up──▶ negotiating ──last stage done──▶ live ──error──▶ failed
//                        │          (openCompleted)   │  ▲                        │
//                        │                            │  └──a stage is added──────┤ (STARTTLS)
//                        └───────────error────────────┴───────────────────────────┴─both halves gone─▶ closed
// `openCompleted` fires when TCP is up. Then the handshake stages run in order (`HandshakeStage`: a
// proxy, then TLS), each driven by the readiness it asks for; with none, the pair is live at once.
// `hasBytesAvailable`/`hasSpaceAvailable` wait until the last stage is done, so the first of them
// means "the handshakes are done", as in CFNetwork. Every byte goes through `transport`, which the
// stages may replace with one layered over it (TLS, or bytes read past a proxy's reply).
//
// The open (connect and stages) runs its waits on a *home* reactor: the run loop and mode the pair's
// streams are scheduled on when that is one place, so it completes there with no thread hop, as
// CFNetwork schedules its connect on the stream's run loops; otherwise the stream thread. A blocking
// `read`/`write`, a status poll, or a schedule change that would leave the open waiting on a run loop
// nobody may run moves it to the stream thread first. `connectTimeoutKey` bounds the whole open,
// stages included, on the same home.
//
// Events: each half has a `StreamEventState` (CFNetwork's status machine and pending bitmask).
// `signal` applies it and, if the half is scheduled somewhere, asks its reactors to deliver, lowest
// bit first, from `deliverEvents`. Readiness is semi-level-triggered: `hasBytesAvailable` is signalled
// while the transport is readable, but once signalled it is not signalled again until `read` is
// called (the fd leaves the epoll set meanwhile, so nothing spins). `hasSpaceAvailable` is signalled
// after a write that moved data if the fd is still writable, otherwise when epoll says it became
// writable. A transport holding bytes the kernel does not show keeps `hasBytesAvailable` coming.
//
// Locking: `lock` guards everything below it. Delegate callouts and blocking waits happen without it;
// stages run under it. Lock order: connection lock, then the connector's, a reactor's or the reactor
// registry's; never the other way round.

import CSocketStreamsShims
import CoreFoundation
import Dispatch
import Foundation
import Glibc
import Synchronization

/// Which stream of the pair.
enum Half: Int, Sendable {
    case input = 0
    case output = 1
}

/// A `getaddrinfo`-shaped function; tests inject their own to exercise Happy Eyeballs.
typealias ResolveFunction = @Sendable (_ host: String, _ port: Int, _ family: Int32) -> Result<[SocketAddress], ResolutionError>

final class Connection: EventTarget, @unchecked Sendable {
    struct HalfState {
        // References first, then the bytes: 32 bytes a half.
        /// The reactors (run loop + mode) this half is scheduled on.
        var reactors: SmallList<Reactor> = []
        var error: NSError?
        /// Status, pending events, and whether the one-shot has-event awaits the client.
        var events = StreamEventState()
        /// Closed or deinitialised: the half no longer holds the socket open.
        var gone = false
        /// Input: readiness came again while `hasBytesAvailable` awaited the client; stop watching until `read`.
        var suppressed = false
        /// Output: epoll watches the fd for writability (from a write that left it unwritable until
        /// epoll reports it writable while `hasSpaceAvailable` still awaits the client).
        var watchingSpace = false
        /// Output, plain socket: a poll found the socket writable and nothing has been written since,
        /// so `hasSpaceAvailable` can answer without asking the kernel again. Only writes take space
        /// away; every write clears it on its way in.
        var spaceConfirmed = false
        /// Schedules waiting for their run loop's CFRunLoop (`onCFRunLoop`'s fallback): events are
        /// kept for them meanwhile, as for a scheduled half.
        var schedulesPending: UInt8 = 0
    }

    /// What only an open with a deadline or stages needs: allocated when a stage is added or a
    /// deadline armed, dropped once the pair is live, failed or closed, so neither an idle pair nor
    /// a plain connect carries it.
    final class OpenState {
        /// Stages still to run, in order; the first one runs while `phase` is `.negotiating`.
        var stages: [any HandshakeStage] = []
        /// When the open deadline expires (`time`'s clock), and its timer on the open's home.
        var deadline: UInt64 = 0
        var deadlineTimer: UInt64?
        /// What the running stage (or a flush before it) waits for.
        var negotiationInterest: Interest = []
    }

    /// What few pairs need: their settings, clients, a deferred error, and the tests' seams.
    final class Options {
        var settings = PairSettings()
        var time: any TimeSource = SystemTime()
        var resolve: ResolveFunction = Connection.systemResolve
        /// `CFReadStreamSetClient`/`CFWriteStreamSetClient` per half: while set, it gets the events.
        var clients: [StreamClient?] = [nil, nil]
        /// An error that reaches the input stream only once the bytes that arrived before it are read.
        var deferredInputError: NSError?
        /// Whether a client was ever set (so deliveries need not look in `clients`).
        var hasClients = false
        /// `shutdownOutputKey` was set: the write side is shut (close_notify, FIN), the read side is not.
        var outputShutDown = false
        /// What `tearDown` could not close yet, a transfer being in flight (see `releaseDeferred`).
        var deferredRelease: (transport: ActiveTransport?, socket: SocketHandle?)?
    }

    typealias Lifecycle = PairLifecycle<Connector, NSError>

    /// What the pair was created for: what stages and error messages name.
    let target: Endpoint
    // The one-byte fields follow `target` (25 bytes) and fill its padding, and what few pairs need
    // lives in `options`: the object is 168 bytes, a 176-byte malloc chunk (was 240; idle pairs in
    // stream-bench measure every such chunk).
    /// Set when `tearDown` left the transport and socket for the last transfer in flight to close:
    /// an fd number is never given back while a thread may still poll or read it.
    let releaseDeferred = Atomic<Bool>(false)
    // Properties. Guarded by `lock`.
    var closesNativeSocket: Bool
    /// Whether ShouldCloseNativeSocket was set explicitly (an unset one reads back as nil, as in CFNetwork).
    var closesNativeSocketWasSet = false
    /// A blocking call or status poll moved the open to the stream thread; later stages stay there.
    var openOnStreamThread = false
    /// The round delivering events right now, if any, and the halves (a bit each) that wait for it:
    /// never two callouts at once for one pair. Guarded by `lock`, which is why the dynamic
    /// exclusivity check is off: its mutating calls cost two runtime calls each otherwise (callgrind,
    /// thread ping-pong: +5.8% instructions).
    @exclusivity(unchecked) var callouts = SerialRunner()
    /// `kCFStreamPropertyNoDelay` as set (nil: never set).
    var noDelay: Bool?
    /// Also the condition blocking calls wait on (an open, a handshake). Not a `Guarded`: callers wait on it.
    let lock = ConditionLock.make()

    // Guarded by `lock`. `@exclusivity(unchecked)` on the fields every read, write and event touches:
    // the lock already serialises them, and Swift's dynamic checks cost 20% (callgrind, ping-pong
    // 20,000 round trips: delegate client 173.3M → 207.5M instructions, polling 43.1M → 53.1M).
    @exclusivity(unchecked) var lifecycle = Lifecycle()
    /// The socket's owner, for properties and ShouldCloseNativeSocket. Nil until TCP is up.
    var socket: SocketHandle?
    /// What reads and writes go through: the socket, or layers over it. Nil until TCP is up.
    @exclusivity(unchecked) var transport: ActiveTransport?
    /// Threads inside `read`/`write` past their gate: they use the transport and its fd without the
    /// lock. Raised under the lock, lowered without it (`endTransfer`).
    let transfersInFlight = Atomic<Int>(0)
    /// Indexed by `Half.rawValue`; guarded by `lock` like the rest.
    let halves = FixedPair(HalfState(), HalfState())
    /// The streams, for delegate callouts (weak: the client owns them).
    weak var inputStream: Stream?
    weak var outputStream: Stream?
    @exclusivity(unchecked) var registrations: SmallList<Registration> = []
    /// Where the open's waits run, with a registry use held; nil when no open is in progress.
    var openHome: Reactor?
    /// The open's deadline and stages, when it has any.
    var opening: OpenState?
    var options: Options?

    /// The options, created on first use.
    var someOptions: Options {
        if let options { return options }
        let created = Options()
        options = created
        return created
    }

    /// Time for the connector and the deadline; tests substitute a clock they advance.
    var time: any TimeSource {
        get { options?.time ?? SystemTime() }
        set { someOptions.time = newValue }
    }

    /// Name resolution; tests substitute their own answers.
    var resolve: ResolveFunction {
        get { options?.resolve ?? Self.systemResolve }
        set { someOptions.resolve = newValue }
    }

    private static let systemResolve: ResolveFunction = { Resolver.resolve(host: $0, port: $1, family: $2) }

    private var openState: OpenState {
        if let opening { return opening }
        let created = OpenState()
        opening = created
        return created
    }

    /// Stages still to run. Lock held.
    var stages: [any HandshakeStage] {
        get { opening?.stages ?? [] }
        set { openState.stages = newValue }
    }

    init(endpoint: Endpoint) {
        self.target = endpoint
        if case .native = endpoint { closesNativeSocket = false } else { closesNativeSocket = true }
    }

    /// The lifecycle's state (idle, connecting, negotiating, live, failed, closed). Lock held.
    var phase: Lifecycle.State { lifecycle.state }

    var isNegotiating: Bool { lifecycle.isNegotiating }

    /// Connecting or negotiating: an open is in progress. Lock held.
    var isOpening: Bool { lifecycle.isOpening }

    // MARK: status and events

    func status(_ half: Half) -> Stream.Status {
        lock.withLock {
            let status = halves[half.rawValue].events.status
            if status == .opening || isNegotiating { moveOpenToStreamThread() }  // a polling client must see progress
            return status
        }
    }

    func error(_ half: Half) -> NSError? {
        lock.withLock { halves[half.rawValue].error }
    }

    /// Applies CFNetwork's event filter and status rules to `event` on `half` (`_CFStreamSignalEvent`),
    /// and asks the half's reactors to deliver it. Lock held.
    func signal(_ half: Half, _ event: Stream.Event, error: NSError? = nil) {
        lock.assertHeld()
        let h = half.rawValue
        let scheduled = !halves[h].reactors.isEmpty
        guard halves[h].events.signal(event, scheduled: scheduled || halves[h].schedulesPending > 0) else { return }
        if event == .errorOccurred { halves[h].error = error }
        guard scheduled else { return }
        for reactor in halves[h].reactors { reactor.markReady(ReadyItem(target: self, slot: h)) }
    }

    /// Delivers a half's pending events to its delegate, lowest bit first, one callout each, on the
    /// thread of `reactor` (which runs in a mode the half is scheduled in).
    func deliverEvents(_ slot: Int, on reactor: Reactor) {
        reactor.assertOwner("a pair's event delivery")
        var entry: SerialRunner.Entry?
        while true {
            lock.lock()
            guard halves[slot].events.hasPending, halves[slot].reactors.contains(where: { $0 === reactor }) else { break }
            if entry == nil {
                // The pair may deliver on several threads (its halves on two queues or run loops, or
                // one half scheduled on two run loops): never two callouts at once for one pair, not
                // even for the same half. The round running elsewhere, when it ends, hands this one
                // back to its reactors. A round already running on this thread is a delegate running
                // a run loop inside its callout: deliver, as before.
                let entered = callouts.enter(request: 1 << slot, reentrant: true)
                if entered == .busy { break }
                entry = entered
            }
            // The stream is taken after every `break`: releasing it with the lock held could run its deinit.
            guard let event = halves[slot].events.next(), let stream = slot == 0 ? inputStream : outputStream else { break }
            // A half scheduled on several reactors can be read (or written) in a callout on another
            // thread after its has-event was signalled, even by the read that was in progress when it
            // was: the event is delivered only if the socket still confirms it, so that the delegate's
            // read (or write) never blocks inside its callout. One it does not confirm is cleared, and
            // the stream watches again.
            if halves[slot].reactors.count > 1,
                event.rawValue & (StreamEventState.hasBytesAvailable | StreamEventState.hasSpaceAvailable) != 0,
                !(slot == 0 ? confirmBytesAvailable() : confirmSpaceAvailable())
            {
                lock.unlock()
                continue
            }
            let client = options.flatMap { $0.hasClients ? $0.clients[slot] : nil }
            lock.unlock()
            // `stream` is released at the end of this iteration, before the lock is taken again: the
            // client may have let go of it during the callout, and its deinit takes the lock.
            if let client {
                client.deliver(stream, event)
            } else {
                stream.delegate?.stream(stream, handle: event)
            }
        }
        // The lock is held here.
        if entry == .run {
            let waiting = callouts.leave()
            for other in 0..<2 where waiting & (1 << other) != 0 {
                for reactor in halves[other].reactors { reactor.markReady(ReadyItem(target: self, slot: other)) }
            }
        }
        lock.unlock()
    }

    /// `CFReadStreamSetClient`/`CFWriteStreamSetClient`: nil removes the client (its context is released).
    func setClient(_ client: StreamClient?, for half: Half) {
        let replaced = lock.withLock { () -> StreamClient? in
            if client == nil && options == nil { return nil }
            let old = someOptions.clients[half.rawValue]
            someOptions.clients[half.rawValue] = client
            if client != nil { someOptions.hasClients = true }
            return old
        }
        _ = replaced  // released outside the lock: its context's release callback is the client's code
    }

    // MARK: open

    func open(_ half: Half) {
        lock.lock()
        guard !halves[half.rawValue].gone, halves[half.rawValue].events.open() else { return lock.unlock() }
        var started: Connector?
        switch lifecycle.handle(.open) {
        case .start:
            started = start()
        case .completeOpen:
            signal(half, .openCompleted)
        case .completeOpenLive:
            signal(half, .openCompleted)
            if half == .output { halves[1].watchingSpace = true }
            rebuildRegistrations()
        case .reportFailure(let error):
            signal(half, .errorOccurred, error: error)
        default:
            break
        }
        lock.unlock()
        started?.start()  // may complete the open at once, so not under the lock
    }

    /// The first `open()` of either half starts the shared work. Lock held. Returns the connector to
    /// start once the lock is released.
    private func start() -> Connector? {
        lock.assertHeld()
        if case .native(let fd, _) = target {
            let handle = SocketHandle(fd: fd, closesOnRelease: closesNativeSocket, lent: true)
            do {
                try Posix.setNonBlocking(fd)
                tcpUp(handle, writable: false)
            } catch {
                handle.release()
                fail(.posix(error.code, .adopt), from: nil)
            }
            return nil
        }
        if case .host(_, let port) = target, !PortNumber.isValid(port) {
            // Never masked to 16 bits and dialled: EINVAL, whose message names the port (PortNumber).
            fail(.posix(EINVAL, .connect), from: nil)
            return nil
        }
        do {
            try beginOpen()
        } catch {
            fail(.posix(error.code, .connect), from: nil)
            return nil
        }
        let connector = Connector(
            connection: self, endpoint: options?.settings.firstHop ?? target, home: openHome!, time: time, resolve: resolve,
            local: options?.settings.localBinding)
        _ = lifecycle.handle(.dial(connector))
        return connector
    }

    /// Picks the open's home and arms its deadline. Lock held.
    private func beginOpen() throws(SystemError) {
        lock.assertHeld()
        // The open's waits run where the pair's events will be delivered, when that is one place.
        // Unscheduled, or scheduled in several places (any of which may be the one that runs), they
        // run on the stream thread, which always runs.
        var single: Reactor?
        var places = 0
        for h in 0..<2 where !halves[h].gone {
            for reactor in halves[h].reactors where reactor !== single {
                single = reactor
                places += 1
            }
        }
        let home: Reactor
        if places == 1, !openOnStreamThread, let single {
            home = single
        } else {
            home = try StreamThread.reactor()
            openOnStreamThread = true
        }
        ReactorRegistry.shared.retain(home)
        openHome = home
        if let timeout = options?.settings.connectTimeout, timeout > 0 {
            let nanoseconds = timeout.saturatingNanoseconds
            openState.deadline = time.now() &+ nanoseconds
            armDeadline(after: nanoseconds, on: home)
        }
    }

    private func armDeadline(after nanoseconds: UInt64, on reactor: Reactor) {
        opening?.deadlineTimer = time.schedule(after: nanoseconds, on: reactor) { [weak self] in self?.deadlinePassed() }
    }

    /// The open deadline passed (`connectTimeoutKey`): the connect or the handshake in progress fails
    /// with ETIMEDOUT.
    private func deadlinePassed() {
        lock.withLock {
            guard let state = opening, state.deadlineTimer != nil, time.now() >= state.deadline else { return }
            state.deadlineTimer = nil
            switch lifecycle.handle(.deadlinePassed) {
            case .timeOutConnect(let connector):
                connector.cancel()
                fail(.posix(ETIMEDOUT, .connect), from: nil)
            case .timeOutHandshake:
                fail(.posix(ETIMEDOUT, .handshake(stages.first?.name ?? "handshake")), from: nil)
            default:
                break
            }
        }
    }

    /// The open is over (live, failed or closed): its deadline and home go, and with no stage left
    /// to run, the whole open state. Lock held.
    private func endOpen() {
        lock.assertHeld()
        if let state = opening {
            if let home = openHome, let timer = state.deadlineTimer { time.cancel(timer, on: home) }
            state.deadlineTimer = nil
            if state.stages.isEmpty { opening = nil }
        }
        if let home = openHome {
            openHome = nil
            ReactorRegistry.shared.release(home)
        }
    }

    /// Before a call waits for (or polls) an open in progress: make sure the open does not depend on
    /// some client run loop being run. Lock held.
    func moveOpenToStreamThread() {
        lock.assertHeld()
        guard isOpening, let old = openHome else { return }
        guard let target = try? StreamThread.reactor(), target !== old else {
            openOnStreamThread = true
            return
        }
        openOnStreamThread = true
        ReactorRegistry.shared.retain(target)
        openHome = target
        lifecycle.dial?.move(to: target)
        if let state = opening, let timer = state.deadlineTimer {
            time.cancel(timer, on: old)
            let now = time.now()
            armDeadline(after: state.deadline > now ? state.deadline - now : 1, on: target)
        }
        if isNegotiating { rebuildRegistrations() }
        ReactorRegistry.shared.release(old)
    }

    /// The connector's success: TCP is up on `handle`.
    func connected(_ handle: SocketHandle, handover: EpollHandover?) {
        lock.lock()
        defer { lock.unlock() }
        guard case .adopt = lifecycle.handle(.connected) else {
            handover?.cancel()
            handle.release()  // closed or timed out meanwhile
            return
        }
        handle.closesOnRelease = closesNativeSocket
        tcpUp(handle, writable: true, handover: handover)
    }

    /// The connector's failure.
    func connectFailed(_ failure: StreamFailure) {
        lock.withLock {
            guard case .fail = lifecycle.handle(.connectFailed) else { return }
            var failure = failure
            if let proxy = options?.settings.proxy, failure.operation == .connect { failure.operation = .connectToProxy(proxy.description) }
            fail(failure, from: nil)
        }
    }

    /// TCP is up: every half that was opened completes, then the stages run, or the pair goes live.
    /// `writable`: the socket just reported writable (a completed connect). Lock held.
    private func tcpUp(_ handle: SocketHandle, writable: Bool, handover: EpollHandover? = nil) {
        lock.assertHeld()
        // The connector's epoll registration, if it left one: the first registration on its reactor
        // takes it over; if none does (a failure, or no stream scheduled there), it is removed.
        var handover = handover
        defer { handover?.cancel() }
        socket = handle
        transport = .socket(fd: handle.fd)
        // The stages are fixed now, not at open(): TLS may still be set while TCP connects.
        let configured = options?.settings.stages(for: target) ?? []
        if !configured.isEmpty { stages.insert(contentsOf: configured, at: 0) }
        if noDelay == true { try? Posix.setOption(handle.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1) }
        for half in [Half.input, .output] where halves[half.rawValue].events.status == .opening {
            signal(half, .openCompleted)
        }
        switch lifecycle.handle(.tcpUp(stages: !stages.isEmpty)) {
        case .goLive: goLive(writable: writable, handover: &handover)
        case .negotiate: beginNegotiation(handover: &handover)
        default: break
        }
    }

    /// The last stage is done (or there were none): has-events flow. With `writable`, as after a
    /// completed connect, `hasSpaceAvailable` follows `openCompleted` at once, as CFNetwork's connect
    /// callback does; otherwise epoll reports it. Lock held.
    private func goLive(writable: Bool) {
        lock.assertHeld()
        var none: EpollHandover?
        goLive(writable: writable, handover: &none)
    }

    /// The lifecycle has moved to `live` already.
    private func goLive(writable: Bool, handover: inout EpollHandover?) {
        endOpen()
        if halves[1].events.status == .open {
            if writable {
                signal(.output, .hasSpaceAvailable)
            } else {
                halves[1].watchingSpace = true
            }
        }
        if halves[0].events.status == .open, transport?.hasBufferedInput == true {
            signal(.input, .hasBytesAvailable)
        }
        rebuildRegistrations(handover: &handover)
        lock.broadcast()
    }

    // MARK: handshake stages

    /// Adds a stage to run before the stream is (again) live. Before the open it waits its turn; on a
    /// live pair it starts now (STARTTLS): has-events stop until it is done, bytes already received
    /// stay in the transport for it, and the deadline is `connectTimeoutKey` again. Returns false on
    /// a failed or closed pair.
    func addStage(_ stage: any HandshakeStage) -> Bool {
        lock.withLock { queueStage(stage) }
    }

    /// `addStage` with the lock held.
    func queueStage(_ stage: any HandshakeStage) -> Bool {
        lock.assertHeld()
        switch lifecycle.handle(.stageAdded) {
        case .queueStage:
            stages.append(stage)
            return true
        case .negotiate:
            stages.append(stage)
            beginNegotiation()
            return true
        default:
            return false
        }
    }

    /// Enters `negotiating` and starts the first stage. Lock held.
    private func beginNegotiation() {
        lock.assertHeld()
        var none: EpollHandover?
        beginNegotiation(handover: &none)
    }

    /// The lifecycle has moved to `negotiating` already.
    private func beginNegotiation(handover: inout EpollHandover?) {
        if openHome == nil {
            do {
                try beginOpen()
            } catch {
                return fail(.posix(error.code, .handshake(stages.first?.name ?? "handshake")), from: nil)
            }
        }
        for half in [Half.input, .output] {
            halves[half.rawValue].events.withdraw(half == .input ? .hasBytesAvailable : .hasSpaceAvailable)
        }
        halves[0].suppressed = false
        halves[1].watchingSpace = false
        halves[1].spaceConfirmed = false
        openState.negotiationInterest = []
        rebuildRegistrations(handover: &handover)
        advanceNegotiation()
    }

    /// Runs the current stage as far as it goes: first a flush of output the transport still holds,
    /// then the stage itself; a finished stage hands its transport to the next. Lock held.
    private func advanceNegotiation() {
        lock.assertHeld()
        while isNegotiating, let current = transport, let stage = stages.first {
            if current.hasPendingOutput {
                switch current.flush() {
                case .wouldBlock:
                    return waitForNegotiation(current.writeInterest)
                case .failed(let failure):
                    return fail(failure, from: nil)
                case .processed, .end:
                    continue
                }
            }
            switch stage.advance(over: current.base) {
            case .wait(let interest):
                return waitForNegotiation(interest)
            case .failed(let failure):
                return fail(failure, from: nil)
            case .done(let next):
                transport = ActiveTransport(next)
                opening?.stages.removeFirst()
            }
        }
        if isNegotiating, case .goLive = lifecycle.handle(.stagesDone) { goLive(writable: false) }
    }

    private func waitForNegotiation(_ interest: Interest) {
        opening?.negotiationInterest = interest
        syncInterest()
    }

    // MARK: failure, close, release

    /// A connection-level failure: connect, a stage, read or write. It goes to both opened halves; the
    /// input half of a live pair keeps reading what arrived before it unless the failure came from
    /// reading. Lock held.
    func fail(_ failure: StreamFailure, from origin: Half?) {
        lock.assertHeld()
        fail(StreamErrors.error(for: failure, target: target), from: origin)
    }

    private func fail(_ error: NSError, from origin: Half?) {
        guard case .failed(let wasLive, let connector) = lifecycle.handle(.fail(error)) else { return }
        connector?.cancel()
        opening?.stages.removeAll()
        endOpen()
        for half in [Half.input, .output] {
            let status = halves[half.rawValue].events.status
            guard status != .notOpen, status != .closed, status != .error else { continue }
            if half == .input, origin != .input, wasLive, status == .open, let transport,
                transport.hasBufferedInput || Posix.bytesAvailable(transport.fd) > 0
            {
                someOptions.deferredInputError = error
                continue
            }
            signal(half, .errorOccurred, error: error)
        }
        syncInterest()
        lock.broadcast()
    }

    func close(_ half: Half) {
        let released = lock.withLock { () -> SmallList<Reactor> in
            let h = half.rawValue
            guard !halves[h].gone, halves[h].events.close() else { return [] }
            return letGo(half)
        }
        for reactor in released { ReactorRegistry.shared.release(reactor) }
    }

    /// A stream was deinitialised.
    func streamReleased(_ half: Half) {
        let released = lock.withLock { halves[half.rawValue].gone ? [] : letGo(half) }
        for reactor in released { ReactorRegistry.shared.release(reactor) }
    }

    /// The half stops holding the connection; when both have, the socket goes. Lock held.
    /// Returns the reactors to release once the lock is dropped.
    private func letGo(_ half: Half) -> SmallList<Reactor> {
        lock.assertHeld()
        halves[half.rawValue].gone = true
        let reactors = halves[half.rawValue].reactors
        halves[half.rawValue].reactors = []
        if halves[0].gone && halves[1].gone {
            tearDown()
        } else {
            rebuildRegistrations()
        }
        lock.broadcast()
        return reactors
    }

    /// Both halves are gone: stop opening, leave every epoll set, give the fd back. Lock held.
    private func tearDown() {
        lock.assertHeld()
        if case .tearDown(let connector) = lifecycle.handle(.bothHalvesGone) { connector?.cancel() }
        opening?.stages.removeAll()
        endOpen()
        for registration in registrations { registration.leave() }
        registrations = []
        let release = (transport: transport, socket: socket)
        transport = nil
        socket = nil
        // Flag first, then count (both sequentially consistent); `endTransfer` lowers the count, then
        // reads the flag. So either this sees no transfer left, or the last one out sees the flag
        // (and takes the lock, so it finds what is stored here).
        releaseDeferred.store(true, ordering: .sequentiallyConsistent)
        if transfersInFlight.load(ordering: .sequentiallyConsistent) == 0 {
            release.transport?.close()
            release.socket?.release()
        } else {
            someOptions.deferredRelease = release
        }
    }

    /// Closes what `tearDown` deferred, once no transfer is in flight. Lock held.
    func releaseIfIdle() {
        lock.assertHeld()
        guard transfersInFlight.load(ordering: .sequentiallyConsistent) == 0, let deferred = options?.deferredRelease else { return }
        options?.deferredRelease = nil
        deferred.transport?.close()
        deferred.socket?.release()
    }

    // MARK: scheduling

    func schedule(_ half: Half, in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard let cf = cfRunLoop(of: runLoop) else {
            // The fallback: the schedule completes on that run loop's own thread, once it runs in
            // `mode`. Events raised meanwhile wait for it instead of being dropped.
            lock.withLock { halves[half.rawValue].schedulesPending += 1 }
            return onCFRunLoop(of: runLoop, mode: mode) { [weak self] cf in
                self?.schedule(half, on: cf, mode: mode.rawValue, wasPending: true)
            }
        }
        schedule(half, on: cf, mode: mode.rawValue)
    }

    /// `CFReadStreamScheduleWithRunLoop` with a CoreFoundation run loop.
    func schedule(_ half: Half, onCFRunLoop runLoop: CFRunLoop, mode: String) {
        schedule(half, on: runLoop, mode: mode)
    }

    /// `wasPending`: the fallback completing a schedule; the pending count drops in the same lock
    /// section that adds the reactor, so no event raised in between is dropped.
    private func schedule(_ half: Half, on runLoop: CFRunLoop, mode: String, wasPending: Bool = false) {
        // Scheduling on a run loop clears a dispatch queue (CFStream.h).
        if dispatchQueue(of: half) != nil { setDispatchQueue(nil, for: half) }
        let reactor: Reactor
        do {
            reactor = try ReactorRegistry.shared.acquire(cfRunLoop: runLoop, mode: mode)
        } catch {
            if wasPending { lock.withLock { halves[half.rawValue].schedulesPending -= 1 } }
            return scheduleFailed(half, error)
        }
        attach(half, to: reactor, wasPending: wasPending)
    }

    /// `CFReadStreamSetDispatchQueue`: the half leaves every run loop (and a previous queue) and, with a
    /// queue, joins that queue's reactor, whose callouts run on the queue.
    func setDispatchQueue(_ queue: DispatchQueue?, for half: Half) {
        let left = lock.withLock { () -> SmallList<Reactor> in
            let h = half.rawValue
            guard !halves[h].gone else { return [] }
            let left = halves[h].reactors
            halves[h].reactors = []
            if let home = openHome, left.contains(where: { $0 === home }) { moveOpenToStreamThread() }
            rebuildRegistrations()
            return left
        }
        for reactor in left { ReactorRegistry.shared.release(reactor) }
        guard let queue else { return }
        let reactor: Reactor
        do {
            reactor = try ReactorRegistry.shared.acquire(queue: queue)
        } catch {
            return scheduleFailed(half, error)
        }
        attach(half, to: reactor)
    }

    /// `CFReadStreamCopyDispatchQueue`.
    func dispatchQueue(of half: Half) -> DispatchQueue? {
        lock.withLock { halves[half.rawValue].reactors.lazy.compactMap(\.queue).first }
    }

    /// Out of fds for the run-loop source or the queue's epoll set: the half cannot hear anything
    /// there. The pair fails (now, or at open) with the errno instead of trapping.
    private func scheduleFailed(_ half: Half, _ error: SystemError) {
        lock.withLock {
            guard !halves[half.rawValue].gone else { return }
            let failure = StreamErrors.error(for: .posix(error.code, .schedule), target: target)
            if case .fail = lifecycle.handle(.scheduleFailed(failure)) { fail(failure, from: nil) }
        }
    }

    /// The half now listens on `reactor` (which it holds a registry use of).
    private func attach(_ half: Half, to reactor: Reactor, wasPending: Bool = false) {
        let kept = lock.withLock { () -> Bool in
            let h = half.rawValue
            if wasPending { halves[h].schedulesPending -= 1 }
            guard !halves[h].gone, !halves[h].reactors.contains(where: { $0 === reactor }) else { return false }
            halves[h].reactors.append(reactor)
            // Re-derive readiness on scheduling, as CFNetwork does the first time.
            if halves[h].events.status == .open, lifecycle.isLive {
                if half == .input {
                    halves[h].suppressed = false
                } else if !halves[h].events.awaitingClient {
                    halves[h].watchingSpace = true
                }
            }
            if halves[h].events.pending != 0 { reactor.markReady(ReadyItem(target: self, slot: h)) }
            // The open must not depend on its home alone now that events may be awaited elsewhere.
            if reactor !== openHome { moveOpenToStreamThread() }
            rebuildRegistrations()
            return true
        }
        if !kept { ReactorRegistry.shared.release(reactor) }
    }

    func unschedule(_ half: Half, from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard let cf = cfRunLoop(of: runLoop) else {
            return onCFRunLoop(of: runLoop, mode: mode) { [weak self] cf in self?.unschedule(half, from: cf, mode: mode.rawValue) }
        }
        unschedule(half, from: cf, mode: mode.rawValue)
    }

    /// `CFReadStreamUnscheduleFromRunLoop` with a CoreFoundation run loop.
    func unschedule(_ half: Half, fromCFRunLoop runLoop: CFRunLoop, mode: String) {
        unschedule(half, from: runLoop, mode: mode)
    }

    private func unschedule(_ half: Half, from runLoop: CFRunLoop, mode: String) {
        let removed = lock.withLock { () -> Reactor? in
            guard let reactor = halves[half.rawValue].reactors.remove(where: { $0.runLoop === runLoop && $0.mode == mode })
            else { return nil }
            if reactor === openHome { moveOpenToStreamThread() }  // nor on a run loop the stream has just left
            rebuildRegistrations()
            return reactor
        }
        if let removed { ReactorRegistry.shared.release(removed) }
    }

    // MARK: epoll interest

    @inline(__always)
    private static func epollEvents(_ interest: Interest) -> UInt32 {
        (interest.contains(.readable) ? cssh_epollin() | cssh_epollrdhup() : 0) | (interest.contains(.writable) ? cssh_epollout() : 0)
    }

    /// The epoll events this connection wants from `reactor`: the running stage's on the open's home,
    /// else from the halves scheduled there. Lock held.
    private func wantedEvents(on reactor: Reactor) -> UInt32 {
        lock.assertHeld()
        // Not the phase: after a failure the input half may still be open, draining what arrived first.
        let reading: Interest
        let writing: Interest
        switch transport {
        case .none: return 0
        case .socket?: (reading, writing) = (.readable, .writable)
        case .layered(let layered)?: (reading, writing) = (layered.readInterest, layered.writeInterest)
        }
        if isNegotiating { return reactor === openHome ? Self.epollEvents(opening?.negotiationInterest ?? []) : 0 }
        var events: UInt32 = 0
        if halves[0].events.status == .open, !halves[0].suppressed, halves[0].reactors.contains(where: { $0 === reactor }) {
            events |= Self.epollEvents(reading)
        }
        if halves[1].events.status == .open, halves[1].watchingSpace, halves[1].reactors.contains(where: { $0 === reactor }) {
            events |= Self.epollEvents(writing)
        }
        return events
    }

    /// Brings every registration's epoll events in line with what the halves want. Lock held.
    /// Cheap: no allocation, and a syscall only where the wanted events changed.
    func syncInterest() {
        lock.assertHeld()
        for registration in registrations { registration.update(wantedEvents(on: registration.reactor)) }
    }

    /// Makes one registration per reactor that some half is scheduled on, and the open's home while
    /// a stage runs (after scheduling changes or the socket appearing), then syncs their events.
    /// Lock held.
    func rebuildRegistrations() {
        lock.assertHeld()
        var none: EpollHandover?
        rebuildRegistrations(handover: &none)
    }

    /// As `rebuildRegistrations()`, a new registration on `handover`'s reactor taking it over (and
    /// setting it to nil).
    func rebuildRegistrations(handover: inout EpollHandover?) {
        guard let fd = socket?.fd else { return }
        let home = isNegotiating ? openHome : nil
        // The usual case, everything on (at most) one and the same reactor, allocates nothing.
        let single = halves[0].reactors.first ?? halves[1].reactors.first ?? home
        if let single, halves[0].reactors.count <= 1, halves[1].reactors.count <= 1,
            halves[0].reactors.first.map({ $0 === single }) ?? true, halves[1].reactors.first.map({ $0 === single }) ?? true,
            home.map({ $0 === single }) ?? true
        {
            if registrations.count == 1, registrations.first!.reactor === single { return syncInterest() }
            for registration in registrations { registration.leave() }
            registrations = [makeRegistration(on: single, fd: fd, handover: &handover)]
            return syncInterest()
        }
        var reactors: [Reactor] = []
        for h in 0..<2 {
            for reactor in halves[h].reactors where !reactors.contains(where: { $0 === reactor }) { reactors.append(reactor) }
        }
        if let home, !reactors.contains(where: { $0 === home }) { reactors.append(home) }
        registrations.removeAll { registration in
            if reactors.contains(where: { $0 === registration.reactor }) { return false }
            registration.leave()
            return true
        }
        for reactor in reactors where !registrations.contains(where: { $0.reactor === reactor }) {
            registrations.append(makeRegistration(on: reactor, fd: fd, handover: &handover))
        }
        syncInterest()
    }

    /// A registration of the socket on `reactor`, taking over the connector's if it was made there.
    private func makeRegistration(on reactor: Reactor, fd: Int32, handover: inout EpollHandover?) -> Registration {
        let registration = Registration(connection: self, reactor: reactor, fd: fd)
        if let taken = handover, taken.reactor === reactor, taken.fd == fd {
            registration.takeOver(taken)
            handover = nil
        }
        return registration
    }

    /// Readiness from one reactor's epoll set, on that reactor's thread.
    func handleReadiness(_ events: UInt32, from reactor: Reactor) {
        lock.lock()
        defer { lock.unlock() }
        let problem = cssh_epollerr() | cssh_epollhup()
        var reported: Interest = []
        if events & (cssh_epollin() | cssh_epollrdhup() | problem) != 0 { reported.insert(.readable) }
        if events & (cssh_epollout() | problem) != 0 { reported.insert(.writable) }
        if isNegotiating {
            if reactor === openHome { advanceNegotiation() }
            return syncInterest()
        }
        let ready: Interest
        switch transport {
        case .none: return
        case .socket?: ready = reported
        case .layered(let layered)?: ready = layered.ready(reported)
        }
        if ready.contains(.readable), halves[0].events.status == .open, halves[0].reactors.contains(where: { $0 === reactor }) {
            if halves[0].events.awaitingClient {
                halves[0].suppressed = true
            } else {
                signal(.input, .hasBytesAvailable)
            }
        }
        if ready.contains(.writable), halves[1].events.status == .open, halves[1].watchingSpace,
            halves[1].reactors.contains(where: { $0 === reactor })
        {
            if halves[1].events.awaitingClient {
                // Signalled and not yet written: stop watching until a write (nothing spins).
                halves[1].watchingSpace = false
            } else {
                // Keep watching: a writer that fills the socket again in its callout then needs no
                // epoll_ctl (a 1 GiB upload: two fewer a time the socket fills).
                signal(.output, .hasSpaceAvailable)
            }
        }
        syncInterest()
    }
}

/// The connection's fd in one reactor's epoll set. Present only while it wants some event, so a
/// socket in error or hang-up state cannot make the run loop spin.
///
/// It holds its connection strongly (a weak reference would give every connection a side table, and
/// the slow path for every retain and release of it). The connection drops its registrations when
/// both halves are gone (`tearDown`), which ends the cycle; one the reactor is still firing in its
/// current round keeps the connection alive until then, and finds it torn down.
final class Registration: ReactorHandler, @unchecked Sendable {
    let connection: Connection
    let reactor: Reactor
    let fd: Int32
    private var token: UInt64 = 0
    private var events: UInt32 = 0

    init(connection: Connection, reactor: Reactor, fd: Int32) {
        self.connection = connection
        self.reactor = reactor
        self.fd = fd
    }

    /// Becomes the handler of an fd already in the reactor's epoll set (watched for `events`), so
    /// the next `update` modifies that registration instead of adding one.
    func takeOver(_ handover: EpollHandover) {
        token = handover.token
        events = handover.events
        reactor.replaceHandler(token: token, with: self)
    }

    /// Adds, modifies or removes the fd so epoll reports exactly `wanted`. Connection lock held.
    func update(_ wanted: UInt32) {
        connection.lock.assertHeld()
        guard wanted != events else { return }
        if wanted == 0 {
            reactor.remove(fd: fd, token: token)
        } else if events == 0 {
            guard let token = try? reactor.add(fd: fd, events: wanted, handler: self) else { return }
            self.token = token
        } else {
            try? reactor.modify(fd: fd, token: token, events: wanted)
        }
        events = wanted
    }

    /// Leaves the epoll set for good. Connection lock held.
    func leave() { update(0) }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        connection.handleReadiness(events, from: reactor)
    }
}
