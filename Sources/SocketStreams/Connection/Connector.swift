// Establishing the TCP (or Unix-domain) connection to the first hop.
//
// Happy Eyeballs (RFC 8305), kept as a small state machine in a class:
// - Resolution: AAAA and A are looked up in parallel (getaddrinfo per family, each on a queue of its
//   own, `LookupQueue`, so no run-loop thread ever blocks in DNS and no lookup waits for another's
//   answer). Connecting starts when the IPv6 answer arrives, or 50 ms
//   after the IPv4 answer if IPv6 is still outstanding (the Resolution Delay, §3).
// - Addresses are interleaved by family, IPv6 first (§4). A new attempt starts every 250 ms (the
//   Connection Attempt Delay, §5) or as soon as the previous attempt fails, whichever comes first.
// - The first attempt to connect wins; every other attempt is closed.
// - A connect(2) that says EINPROGRESS is polled once at once (zero timeout), unless completing
//   there would cost a wake-up that waiting does not (`Connection.connectWaitsFor`): a peer on this
//   host has usually answered already. A refusal seen there moves on to the next address at once,
//   as one epoll reports does. Only a connect still in progress waits in the home reactor's epoll set.
// Numeric addresses and Unix paths skip resolution. The open's deadline (connectTimeoutKey) belongs to
// the connection, which cancels the connector when it passes.
//
// Threads: the state is guarded by the connection's own lock (one lock per connection), so whichever
// thread has news drives the machine: the thread calling `open()` starts it, Dispatch workers deliver
// answers, and the *home* reactor runs the waits (connect completion, timers). Home is chosen by the
// connection (see Connection.swift); `move(to:)` moves the waits when the connection says so. Time
// comes from the connection's `TimeSource`, so tests can advance it. The connector reports to its
// connection with the lock released.

import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc

final class Connector: @unchecked Sendable {
    /// RFC 8305 §3: wait this long for AAAA after A has arrived.
    static let resolutionDelay: UInt64 = 50_000_000
    /// RFC 8305 §5: the delay between connection attempts.
    static let attemptDelay: UInt64 = 250_000_000

    /// How the machine's inputs end for the connection: connected, failed, or nothing yet.
    private enum Outcome {
        case none
        /// With the attempt's epoll registration, when it had one, for the connection to take over.
        case connected(SocketHandle, EpollHandover?)
        case failed(StreamFailure)
    }

    private struct State {
        var home: Reactor
        var resolutions: [Int32: Result<[SocketAddress], ResolutionError>] = [:]
        var queue: [SocketAddress] = []
        var startedConnecting = false
        var attempts: [Attempt] = []
        var attemptTimer: UInt64?
        var lastAttemptStart: UInt64 = 0
        var delayTimer: UInt64?
        var lastError: SystemError?
        var finished = false
    }

    /// Strong: a weak reference would give every connection a side table, and with it the slow path
    /// for every retain and release of it, several of which every round trip makes. The
    /// cycle lasts while the connection is `.connecting`: it drops the connector when the connect
    /// ends, is cancelled or times out.
    private let connection: Connection
    /// The address dialled: the pair's target, or its first hop.
    private let endpoint: Endpoint
    private let host: String
    private let port: Int
    private let fixedAddress: SocketAddress?
    private let isUnix: Bool
    private let resolve: ResolveFunction
    /// Where each attempt's socket is bound before it connects (`localBindingKey`), if anywhere.
    private let local: LocalBinding?
    /// Whether each attempt connects with TCP Fast Open (`tcpFastOpenKey`).
    private let fastOpen: Bool
    private let time: any TimeSource
    /// The connection's lock, which guards `state` as well.
    private let lock: ConditionLock
    @exclusivity(unchecked) private var state: State

    /// A connector for `endpoint` (a host or a Unix path) whose waits run on `home`, of which it takes
    /// a registry use until it finishes.
    init(
        connection: Connection, endpoint: Endpoint, home: Reactor, time: any TimeSource, resolve: @escaping ResolveFunction,
        local: LocalBinding? = nil, fastOpen: Bool = false
    ) {
        self.connection = connection
        self.resolve = resolve
        self.local = local
        self.fastOpen = fastOpen
        self.time = time
        ReactorRegistry.shared.retain(home)
        lock = connection.lock
        state = State(home: home)
        switch endpoint {
        case .host(let name, let port):
            host = name
            self.port = port  // checked by the connection's open (PortNumber)
            fixedAddress = SocketAddress(numericHost: name, port: port)
            isUnix = false
        case .unix(let path):
            host = path
            port = 0
            fixedAddress = SocketAddress(unixPath: path)
            isUnix = true
        case .native:
            preconditionFailure("a native socket needs no connector")
        }
        self.endpoint = endpoint
    }

    /// Runs `body` on the state under the connection's lock.
    @inline(__always)
    private func locked<Result>(_ body: (inout State) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    // MARK: entry points (any thread, connection lock not held unless stated)

    /// Starts connecting. For a numeric address the first `connect(2)` happens right here.
    func start() {
        if let fixedAddress {
            let outcome = locked { state -> Outcome in
                state.queue = [fixedAddress]
                state.resolutions = [AF_INET6: .success([]), AF_INET: .success([])]
                state.startedConnecting = true
                return connectNext(&state)
            }
            return report(outcome)
        }
        if isUnix {
            let outcome = locked { finish(&$0, .failed(.posix(ENAMETOOLONG, .connect, endpoint: endpoint))) }
            return report(outcome)
        }
        let (host, port, resolve) = (self.host, self.port, self.resolve)
        for family in [AF_INET6, AF_INET] {
            LookupQueue.run {
                let result = resolve(host, port, family)
                self.resolved(family, result)
            }
        }
    }

    /// Stops everything. Called with the connection lock held; never calls back.
    func cancel() {
        _ = finish(&state, .none)
    }

    /// Moves the waits to `target` (the stream thread's reactor), which always runs, for a caller
    /// that blocks on or polls the open. Called with the connection lock held; never calls back.
    func move(to target: Reactor) {
        do {
            guard !state.finished, state.home !== target else { return }
            ReactorRegistry.shared.retain(target)
            let old = state.home
            for attempt in state.attempts {
                old.remove(fd: attempt.handle.fd, token: attempt.token)
                attempt.token = (try? target.add(fd: attempt.handle.fd, events: cssh_epollout(), handler: attempt)) ?? 0
            }
            state.home = target
            if let timer = state.attemptTimer {
                time.cancel(timer, on: old)
                state.attemptTimer = nil
                armAttemptTimer(&state)
            }
            if let timer = state.delayTimer {
                time.cancel(timer, on: old)
                state.delayTimer = time.schedule(after: Self.resolutionDelay, on: target) { self.resolutionDelayPassed() }
            }
            ReactorRegistry.shared.release(old)
        }
    }

    // MARK: inputs

    private func resolved(_ family: Int32, _ result: Result<[SocketAddress], ResolutionError>) {
        let outcome = locked { state -> Outcome in
            guard !state.finished else { return .none }
            state.resolutions[family] = result
            let addresses = (try? result.get()) ?? []
            if state.startedConnecting {
                merge(&state, addresses)
                if state.attempts.isEmpty { return connectNext(&state) }
                if state.attemptTimer == nil, !state.queue.isEmpty { armAttemptTimer(&state) }
            } else if family == AF_INET, state.resolutions[AF_INET6] == nil, !addresses.isEmpty {
                state.delayTimer = time.schedule(after: Self.resolutionDelay, on: state.home) { self.resolutionDelayPassed() }
            } else if family == AF_INET6 && !addresses.isEmpty || state.resolutions.count == 2 {
                return beginConnecting(&state)
            }
            return .none
        }
        report(outcome)
    }

    private func resolutionDelayPassed() {
        let outcome = locked { state -> Outcome in
            state.delayTimer = nil
            return state.finished ? .none : beginConnecting(&state)
        }
        report(outcome)
    }

    /// An attempt's socket reported `events`: connected, or failed. Without EPOLLERR or EPOLLHUP the
    /// connect succeeded, and SO_ERROR need not be asked (one syscall less a connection).
    fileprivate func attemptFinished(_ attempt: Attempt, events: UInt32) {
        let outcome = locked { state -> Outcome in
            guard !state.finished, state.attempts.contains(where: { $0 === attempt }) else { return .none }
            let code = events & (cssh_epollerr() | cssh_epollhup()) == 0 ? 0 : Posix.pendingError(attempt.handle.fd)
            state.attempts.removeAll { $0 === attempt }
            if code == 0 {
                // The fd stays in the epoll set: the connection takes the registration over (one
                // EPOLL_CTL_MOD instead of a DEL and an ADD a connection).
                let handover = EpollHandover(reactor: state.home, fd: attempt.handle.fd, token: attempt.token, events: cssh_epollout())
                return finish(&state, .connected(attempt.handle, handover))
            }
            state.home.remove(fd: attempt.handle.fd, token: attempt.token)
            attempt.handle.release()
            state.lastError = SystemError(code: code, function: "connect")
            return connectNext(&state)
        }
        report(outcome)
    }

    private func attemptDelayPassed() {
        let outcome = locked { state -> Outcome in
            state.attemptTimer = nil
            return state.finished ? .none : connectNext(&state)
        }
        report(outcome)
    }

    // MARK: the machine (lock held)

    private func beginConnecting(_ state: inout State) -> Outcome {
        guard !state.startedConnecting else { return .none }
        if let delayTimer = state.delayTimer { time.cancel(delayTimer, on: state.home) }
        state.delayTimer = nil
        state.startedConnecting = true
        for family in [AF_INET6, AF_INET] {
            if case .success(let addresses) = state.resolutions[family] { merge(&state, addresses) }
        }
        return connectNext(&state)
    }

    /// Adds addresses to the queue, alternating families (RFC 8305 §4).
    private func merge(_ state: inout State, _ addresses: [SocketAddress]) {
        var v6 = state.queue.filter { $0.family == AF_INET6 } + addresses.filter { $0.family == AF_INET6 }
        var v4 = state.queue.filter { $0.family != AF_INET6 } + addresses.filter { $0.family != AF_INET6 }
        state.queue.removeAll()
        while !v6.isEmpty || !v4.isEmpty {
            if !v6.isEmpty { state.queue.append(v6.removeFirst()) }
            if !v4.isEmpty { state.queue.append(v4.removeFirst()) }
        }
    }

    /// Starts the next attempt, or fails when nothing is left to try and nothing is in flight.
    private func connectNext(_ state: inout State) -> Outcome {
        if let attemptTimer = state.attemptTimer { time.cancel(attemptTimer, on: state.home) }
        state.attemptTimer = nil
        while !state.queue.isEmpty {
            let address = state.queue.removeFirst()
            do throws(SystemError) {
                let fd = try Posix.socket(family: address.family)
                let handle = SocketHandle(fd: fd, closesOnRelease: true)
                do {
                    if let local { try local.bind(fd, family: address.family) }
                    // Without the kernel's support the connect is an ordinary one, as Apple's is
                    // where the server or the path refuses fast open.
                    if fastOpen { _ = Posix.setFastOpenConnect(fd) }
                    switch try Posix.connect(fd, to: address) {
                    case .processed:
                        return finish(&state, .connected(handle, nil))
                    case .wouldBlock:
                        // A peer on this host has usually answered inside connect(2) already (the
                        // handshake runs through the loopback device before the call returns, and
                        // still says EINPROGRESS): one poll sees it, for the attempt's epoll ADD,
                        // wait and MOD. A refusal fails the attempt here, and the next address is
                        // tried at once, as `attemptFinished` would. Not where the events would
                        // then need a wake-up that the attempt's readiness gives for nothing.
                        if !connection.connectWaitsFor(state.home), try settledAtOnce(fd) {
                            return finish(&state, .connected(handle, nil))
                        }
                        let attempt = Attempt(connector: self, handle: handle)
                        attempt.token = try state.home.add(fd: fd, events: cssh_epollout(), handler: attempt)
                        state.attempts.append(attempt)
                        state.lastAttemptStart = time.now()
                        if !state.queue.isEmpty { armAttemptTimer(&state) }
                        return .none
                    }
                } catch {
                    handle.release()
                    throw error
                }
            } catch {
                state.lastError = error
            }
        }
        guard state.attempts.isEmpty, state.resolutions.count == 2 else { return .none }
        return finish(&state, .failed(failure(state)))
    }

    /// Whether a connect in progress on `fd` has already completed: true if connected, false if still
    /// in progress (or the poll itself failed: the reactor then waits as for any attempt); throws the
    /// connect's error if it failed. A zero-timeout `poll(POLLOUT)`, as curl makes after its connect;
    /// without POLLERR or POLLHUP the connect succeeded, and SO_ERROR need not be asked.
    private func settledAtOnce(_ fd: Int32) throws(SystemError) -> Bool {
        let revents = (try? Posix.poll(fd, events: Int16(POLLOUT), timeout: 0)) ?? 0
        guard revents != 0 else { return false }
        if revents & Int16(POLLERR | POLLHUP) == 0 { return revents & Int16(POLLOUT) != 0 }
        let code = Posix.pendingError(fd)
        guard code == 0 else { throw SystemError(code: code, function: "connect") }
        return true
    }

    /// Starts the next attempt once the Connection Attempt Delay has passed since the last one started.
    private func armAttemptTimer(_ state: inout State) {
        let elapsed = time.now() &- state.lastAttemptStart
        let wait = elapsed >= Self.attemptDelay ? 1 : Self.attemptDelay - elapsed
        state.attemptTimer = time.schedule(after: wait, on: state.home) { self.attemptDelayPassed() }
    }

    /// The failure for "every address failed": the resolution error if nothing resolved, else the
    /// last connect error.
    private func failure(_ state: State) -> StreamFailure {
        let resolutionFailures = [AF_INET, AF_INET6].compactMap { family -> ResolutionError? in
            if case .failure(let error) = state.resolutions[family] { return error }
            return nil
        }
        if state.lastError == nil,
            let error = resolutionFailures.first(where: { $0.code != cssh_eai_nodata() }) ?? resolutionFailures.first
        {
            return StreamFailure(.resolution(error), .resolve, endpoint: endpoint)
        }
        return .posix(state.lastError?.code ?? EINVAL, .connect, endpoint: endpoint)
    }

    /// Ends the machine: closes every other attempt, cancels every timer, gives back the home reactor.
    private func finish(_ state: inout State, _ outcome: Outcome) -> Outcome {
        guard !state.finished else {
            if case .connected(let handle, let handover) = outcome {
                handover?.cancel()
                handle.release()
            }
            return .none
        }
        state.finished = true
        for attempt in state.attempts {
            state.home.remove(fd: attempt.handle.fd, token: attempt.token)
            attempt.handle.release()
        }
        state.attempts.removeAll()
        for timer in [state.attemptTimer, state.delayTimer].compactMap({ $0 }) { time.cancel(timer, on: state.home) }
        state.attemptTimer = nil
        state.delayTimer = nil
        ReactorRegistry.shared.release(state.home)
        return outcome
    }

    /// Tells the connection, with the lock released.
    private func report(_ outcome: Outcome) {
        switch outcome {
        case .none:
            break
        case .connected(let handle, let handover):
            connection.connected(handle, handover: handover)  // releases both if the pair was closed meanwhile
        case .failed(let failure):
            connection.connectFailed(failure)
        }
    }
}

/// One non-blocking connect in flight, waiting for the socket to become writable.
private final class Attempt: ReactorHandler, @unchecked Sendable {
    /// Weak: a reactor may still hold this attempt for the current batch of events after the pair
    /// was closed and its connector freed; that late event is then ignored.
    weak var connector: Connector?
    let handle: SocketHandle
    /// Guarded by the connection's lock.
    var token: UInt64 = 0

    init(connector: Connector, handle: SocketHandle) {
        self.connector = connector
        self.handle = handle
    }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        connector?.attemptFinished(self, events: events)
    }
}

/// A connected attempt's registration in its reactor's epoll set (the fd, watched for `events`
/// under `token`), passed to the connection so that its own registration there can take it over.
struct EpollHandover {
    let reactor: Reactor
    let fd: Int32
    let token: UInt64
    let events: UInt32

    /// Not taken over: the fd leaves the epoll set.
    func cancel() { reactor.remove(fd: fd, token: token) }
}
