// The context shared by the two streams of a pair: one socket, one property set, one status machine
// per half, and the bookkeeping that turns socket readiness into CFNetwork's stream events.
//
// Life of a connection:
//   idle ──open()──▶ connecting ──TCP up──▶ live ──error──▶ failed
//                         │                  │
//                         └──────error───────┴──both halves closed/released──▶ closed
// `openCompleted` fires when TCP is up. Later issues put handshake stages (SOCKS, TLS) between
// "TCP up" and the first `hasBytesAvailable`/`hasSpaceAvailable`: `becomeLive` is where they start,
// and `read`/`write` in Connection+IO.swift are the one place a byte transform would sit.
//
// Events: each half has a pending bitmask (CFNetwork's `whatToSignal`). `signal` applies CFNetwork's
// status rules and records the event if the half is scheduled somewhere; the reactors the half is
// scheduled on deliver it, lowest bit first, from `deliverEvents`. Readiness is semi-level-triggered:
// `hasBytesAvailable` is signalled while the fd is readable, but once signalled it is not signalled
// again until `read` is called (the fd is taken out of the epoll set meanwhile, so nothing spins).
// `hasSpaceAvailable` is signalled after a write that moved data if the fd is still writable,
// otherwise when epoll says it became writable.
//
// Locking: `lock` guards everything below it. Delegate callouts and blocking waits happen without it.
// Lock order: connection lock, then a reactor's lock; never the other way round.

import CSocketStreamsShims
import Foundation
import Glibc

/// Which stream of the pair.
enum Half: Int, Sendable {
    case input = 0
    case output = 1
}

/// What a pair connects to.
enum Endpoint: Sendable {
    case host(String, port: Int)
    case unix(path: String)
    case native(fd: Int32)

    /// How errors name it: "example.com port 80", or the socket path.
    var label: String {
        switch self {
        case .host(let name, let port): return "\(name) port \(port)"
        case .unix(let path): return path
        case .native(let fd): return "native socket \(fd)"
        }
    }
}

/// A `getaddrinfo`-shaped function; tests inject their own to exercise Happy Eyeballs.
typealias ResolveFunction = @Sendable (_ host: String, _ port: Int, _ family: Int32) -> Result<[SocketAddress], ResolutionError>

final class Connection: @unchecked Sendable {
    struct HalfState {
        var status: Stream.Status = .notOpen
        /// Stream.Event bits waiting for delivery.
        var pending: UInt = 0
        /// The reactors (run loop + mode) this half is scheduled on.
        var reactors: [Reactor] = []
        var error: NSError?
        /// Closed or deinitialised: the half no longer holds the socket open.
        var gone = false
        /// Input: `hasBytesAvailable` was signalled and `read` has not been called since.
        /// Output: `hasSpaceAvailable` was signalled and `write` has not been called since.
        var awaitingClient = false
        /// Input: readiness came again while `awaitingClient`; stop watching until `read`.
        var suppressed = false
        /// Output: waiting for epoll to report the fd writable.
        var watchingSpace = false
    }

    enum Phase {
        case idle
        case connecting(Connector)
        case live
        case failed(NSError)
        case closed
    }

    let endpoint: Endpoint
    let lock = NSCondition()

    // Guarded by `lock`, which makes Swift's dynamic exclusivity checks redundant on the hot path.
    @exclusivity(unchecked) var phase: Phase = .idle
    @exclusivity(unchecked) var socket: SocketHandle?
    @exclusivity(unchecked) var halves = [HalfState(), HalfState()]
    weak var inputStream: SocketInputStream?
    weak var outputStream: SocketOutputStream?
    @exclusivity(unchecked) var registrations: [Registration] = []
    /// An error that reaches the input stream only once the bytes that arrived before it are read.
    var deferredInputError: NSError?
    var closesNativeSocket: Bool
    /// Whether ShouldCloseNativeSocket was set explicitly (an unset one reads back as nil, as in CFNetwork).
    var closesNativeSocketWasSet = false
    var connectTimeout: Double?
    var noDelay: Bool?
    var resolve: ResolveFunction = { Resolver.resolve(host: $0, port: $1, family: $2) }

    init(endpoint: Endpoint) {
        self.endpoint = endpoint
        if case .native = endpoint { closesNativeSocket = false } else { closesNativeSocket = true }
    }

    // MARK: status and events

    func status(_ half: Half) -> Stream.Status {
        lock.withLock {
            let status = halves[half.rawValue].status
            if status == .opening { connectWithoutClientRunLoop() }  // a polling client must see progress
            return status
        }
    }

    func error(_ half: Half) -> NSError? {
        lock.withLock { halves[half.rawValue].error }
    }

    /// Applies CFNetwork's event filter and status rules (`_CFStreamSignalEvent`), records the event
    /// for delivery if the half is scheduled, and asks its reactors to deliver. Lock held.
    func signal(_ half: Half, _ event: Stream.Event, error: NSError? = nil) {
        let h = half.rawValue
        switch halves[h].status {
        case .notOpen, .closed, .error:
            return
        case .atEnd where event != .errorOccurred:
            return
        default:
            break
        }
        switch event {
        case .openCompleted:
            guard halves[h].status == .opening else { return }
            halves[h].status = .open
        case .endEncountered:
            halves[h].status = .atEnd
        case .errorOccurred:
            halves[h].status = .error
            halves[h].error = error
        case .hasBytesAvailable, .hasSpaceAvailable:
            halves[h].awaitingClient = true
        default:
            break
        }
        guard !halves[h].reactors.isEmpty else { return }
        halves[h].pending |= event.rawValue
        for reactor in halves[h].reactors { reactor.markReady(ReadyItem(connection: self, half: half)) }
    }

    /// Delivers a half's pending events to its delegate, lowest bit first, one callout each, on the
    /// thread of `reactor` (which runs in a mode the half is scheduled in).
    func deliverEvents(_ half: Half, on reactor: Reactor) {
        let h = half.rawValue
        while true {
            lock.lock()
            let pending = halves[h].pending
            guard pending != 0, halves[h].reactors.contains(where: { $0 === reactor }),
                  let stream: Stream = half == .input ? inputStream : outputStream
            else {
                lock.unlock()
                return
            }
            let bit = pending & (~pending &+ 1)
            halves[h].pending = pending & ~bit
            lock.unlock()
            stream.delegate?.stream(stream, handle: Stream.Event(rawValue: bit))
        }
    }

    // MARK: open, close, release

    func open(_ half: Half) {
        lock.lock()
        guard halves[half.rawValue].status == .notOpen, !halves[half.rawValue].gone else { return lock.unlock() }
        halves[half.rawValue].status = .opening
        var started: Connector?
        switch phase {
        case .idle:
            started = start(half)
        case .connecting:
            break
        case .live:
            openHalf(half, writable: false)
            rebuildRegistrations()
        case .failed(let error):
            signal(half, .errorOccurred, error: error)
        case .closed:
            break
        }
        lock.unlock()
        started?.start()  // may complete the open at once, so not under the lock
    }

    /// The first `open()` of either half starts the shared work. Lock held. Returns the connector to
    /// start once the lock is released.
    private func start(_ half: Half) -> Connector? {
        if case .native(let fd) = endpoint {
            do {
                try Posix.setNonBlocking(fd)
                becomeLive(SocketHandle(fd: fd, closesOnRelease: closesNativeSocket), writable: false)
            } catch {
                fail(StreamErrors.posix(error.code, "Could not use \(endpoint.label)"), from: nil)
            }
            return nil
        }
        // The connect's waits run where the opening stream's events will be delivered, so the open
        // completes there without a thread hop. Unscheduled, or scheduled in several places (any of
        // which may be the one that runs), they run on the stream thread, which always runs.
        let reactors = halves[half.rawValue].reactors
        let home = reactors.count == 1 ? reactors[0] : StreamThread.reactor
        let connector = Connector(connection: self, endpoint: endpoint, timeout: connectTimeout,
                                  home: ReactorRegistry.shared.acquire(cfRunLoop: home.runLoop, mode: home.mode))
        phase = .connecting(connector)
        return connector
    }

    /// Before a call waits for (or polls) an open in progress: make sure the connect does not depend
    /// on some client run loop being run. Lock held.
    func connectWithoutClientRunLoop() {
        if case .connecting(let connector) = phase { connector.moveToStreamThread() }
    }

    /// The connector's success: TCP is up on `handle`.
    func connected(_ handle: SocketHandle) {
        lock.lock()
        defer { lock.unlock() }
        guard case .connecting = phase else {
            handle.release()  // closed meanwhile
            return
        }
        handle.closesOnRelease = closesNativeSocket
        becomeLive(handle, writable: true)
    }

    /// The connector's failure.
    func connectFailed(_ error: NSError) {
        lock.withLock {
            guard case .connecting = phase else { return }
            fail(error, from: nil)
        }
    }

    /// TCP is up: the pair goes live and every half that was opened completes. `writable`: the
    /// socket just reported writable (a completed connect), so `hasSpaceAvailable` follows
    /// `openCompleted` at once, as CFNetwork's connect callback does. Lock held.
    private func becomeLive(_ handle: SocketHandle, writable: Bool) {
        socket = handle
        phase = .live
        if noDelay == true { try? Posix.setOption(handle.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1) }
        for half in [Half.input, .output] where halves[half.rawValue].status == .opening {
            openHalf(half, writable: writable)
        }
        rebuildRegistrations()
        lock.broadcast()
    }

    /// One half completes its open on a live connection; the caller syncs the registrations. Lock held.
    private func openHalf(_ half: Half, writable: Bool) {
        signal(half, .openCompleted)
        guard half == .output else { return }
        if writable {
            signal(.output, .hasSpaceAvailable)
        } else {
            halves[half.rawValue].watchingSpace = true
        }
    }

    /// A connection-level failure (connect, read or write). It goes to both opened halves; the input
    /// half keeps reading what arrived before it unless the failure came from reading. Lock held.
    func fail(_ error: NSError, from origin: Half?) {
        if case .closed = phase {} else { phase = .failed(error) }
        for half in [Half.input, .output] {
            let status = halves[half.rawValue].status
            guard status != .notOpen, status != .closed, status != .error else { continue }
            if half == .input, origin != .input, status == .open, let socket, Posix.bytesAvailable(socket.fd) > 0 {
                deferredInputError = error
                continue
            }
            signal(half, .errorOccurred, error: error)
        }
        syncInterest()
        lock.broadcast()
    }

    func close(_ half: Half) {
        let released = lock.withLock { () -> [Reactor] in
            let h = half.rawValue
            guard halves[h].status != .notOpen, !halves[h].gone else { return [] }
            if halves[h].status != .error { halves[h].status = .closed }
            halves[h].pending = 0
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
    private func letGo(_ half: Half) -> [Reactor] {
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

    /// Both halves are gone: stop connecting, leave every epoll set, give the fd back. Lock held.
    private func tearDown() {
        if case .connecting(let connector) = phase { connector.cancel() }
        phase = .closed
        for registration in registrations { registration.leave() }
        registrations.removeAll()
        socket?.release()
        socket = nil
    }

    // MARK: scheduling

    func schedule(_ half: Half, in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let reactor = ReactorRegistry.shared.acquire(runLoop: runLoop, mode: mode)
        let kept = lock.withLock { () -> Bool in
            let h = half.rawValue
            guard !halves[h].gone, !halves[h].reactors.contains(where: { $0 === reactor }) else { return false }
            halves[h].reactors.append(reactor)
            // Re-derive readiness on scheduling, as CFNetwork does the first time.
            if halves[h].status == .open, case .live = phase {
                if half == .input {
                    halves[h].suppressed = false
                } else if !halves[h].awaitingClient {
                    halves[h].watchingSpace = true
                }
            }
            if halves[h].pending != 0 { reactor.markReady(ReadyItem(connection: self, half: half)) }
            connectWithoutClientRunLoop()  // the connect must not depend on the earlier schedule alone
            rebuildRegistrations()
            return true
        }
        if !kept { ReactorRegistry.shared.release(reactor) }
    }

    func unschedule(_ half: Half, from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let target = cfRunLoop(of: runLoop)
        let removed = lock.withLock { () -> Reactor? in
            guard let index = halves[half.rawValue].reactors.firstIndex(where: { $0.runLoop === target && $0.mode == mode.rawValue })
            else { return nil }
            let reactor = halves[half.rawValue].reactors.remove(at: index)
            connectWithoutClientRunLoop()  // nor on a run loop the stream has just left
            rebuildRegistrations()
            return reactor
        }
        if let removed { ReactorRegistry.shared.release(removed) }
    }

    // MARK: epoll interest

    /// The epoll events this connection wants from `reactor`, from the halves scheduled there. Lock held.
    private func wantedEvents(on reactor: Reactor) -> UInt32 {
        // Not the phase: after a failure the input half may still be open, draining what arrived first.
        guard socket != nil else { return 0 }
        var events: UInt32 = 0
        if halves[0].status == .open, !halves[0].suppressed, halves[0].reactors.contains(where: { $0 === reactor }) {
            events |= cssh_epollin() | cssh_epollrdhup()
        }
        if halves[1].status == .open, halves[1].watchingSpace, halves[1].reactors.contains(where: { $0 === reactor }) {
            events |= cssh_epollout()
        }
        return events
    }

    /// Brings every registration's epoll events in line with what the halves want. Lock held.
    /// Cheap: no allocation, and a syscall only where the wanted events changed.
    func syncInterest() {
        for registration in registrations { registration.update(wantedEvents(on: registration.reactor)) }
    }

    /// Makes one registration per reactor that some half is scheduled on (after scheduling changes
    /// or the socket appearing), then syncs their events. Lock held.
    func rebuildRegistrations() {
        guard let socket else { return }
        // The usual case, both halves on (at most) one and the same reactor, allocates nothing.
        let single = halves[0].reactors.first ?? halves[1].reactors.first
        if let single, halves[0].reactors.count <= 1, halves[1].reactors.count <= 1,
           halves[0].reactors.first.map({ $0 === single }) ?? true, halves[1].reactors.first.map({ $0 === single }) ?? true {
            if registrations.count == 1, registrations[0].reactor === single { return syncInterest() }
            for registration in registrations { registration.leave() }
            registrations = [Registration(connection: self, reactor: single, fd: socket.fd)]
            return syncInterest()
        }
        var reactors: [Reactor] = []
        for half in halves {
            for reactor in half.reactors where !reactors.contains(where: { $0 === reactor }) { reactors.append(reactor) }
        }
        registrations.removeAll { registration in
            if reactors.contains(where: { $0 === registration.reactor }) { return false }
            registration.leave()
            return true
        }
        for reactor in reactors where !registrations.contains(where: { $0.reactor === reactor }) {
            registrations.append(Registration(connection: self, reactor: reactor, fd: socket.fd))
        }
        syncInterest()
    }

    /// Readiness from one reactor's epoll set, on that reactor's thread.
    func handleReadiness(_ events: UInt32, from reactor: Reactor) {
        lock.lock()
        defer { lock.unlock() }
        let problem = cssh_epollerr() | cssh_epollhup()
        if events & (cssh_epollin() | cssh_epollrdhup() | problem) != 0,
           halves[0].status == .open, halves[0].reactors.contains(where: { $0 === reactor }) {
            if halves[0].awaitingClient {
                halves[0].suppressed = true
            } else {
                signal(.input, .hasBytesAvailable)
            }
        }
        if events & (cssh_epollout() | problem) != 0,
           halves[1].status == .open, halves[1].watchingSpace, halves[1].reactors.contains(where: { $0 === reactor }) {
            halves[1].watchingSpace = false
            signal(.output, .hasSpaceAvailable)
        }
        syncInterest()
    }
}

/// The connection's fd in one reactor's epoll set. Present only while it wants some event, so a
/// socket in error or hang-up state cannot make the run loop spin.
final class Registration: ReactorHandler, @unchecked Sendable {
    weak var connection: Connection?
    let reactor: Reactor
    let fd: Int32
    private var token: UInt64 = 0
    private var events: UInt32 = 0

    init(connection: Connection, reactor: Reactor, fd: Int32) {
        self.connection = connection
        self.reactor = reactor
        self.fd = fd
    }

    /// Adds, modifies or removes the fd so epoll reports exactly `wanted`. Connection lock held.
    func update(_ wanted: UInt32) {
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
        connection?.handleReadiness(events, from: reactor)
    }
}
