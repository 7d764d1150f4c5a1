// Establishing the TCP (or Unix-domain) connection.
//
// Happy Eyeballs (RFC 8305), kept as a small state machine in a class:
// - Resolution: AAAA and A are looked up in parallel (getaddrinfo per family, on a Dispatch worker so
//   no run-loop thread ever blocks in DNS). Connecting starts when the IPv6 answer arrives, or 50 ms
//   after the IPv4 answer if IPv6 is still outstanding (the Resolution Delay).
// - Addresses are interleaved by family, IPv6 first. A new attempt starts every 250 ms (the Connection
//   Attempt Delay) or as soon as the previous attempt fails, whichever comes first.
// - The first attempt to connect wins; every other attempt is closed.
// - An optional overall timeout (connectTimeoutKey) fails the open with ETIMEDOUT.
// Numeric addresses and Unix paths skip resolution.
//
// Threads: the state is guarded by `lock`, so whichever thread has news drives the machine: the
// thread calling `open()` starts it, Dispatch workers deliver answers, and the *home* reactor runs
// the waits (connect completion, timers). Home is the run loop the opening stream is scheduled on,
// as CFNetwork schedules its connect on the stream's run loops, so the open completes there with no
// thread hop; for unscheduled streams it is the stream thread. A blocking call or a status poll
// during the open must not depend on some run loop being run (CFNetwork runs the caller's own run
// loop for it), so it first moves the waits to the stream thread (`moveToStreamThread`). The
// connector calls into its connection only with `lock` released.

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
        case connected(SocketHandle)
        case failed(NSError)
    }

    private weak var connection: Connection?
    private let host: String
    private let port: Int
    private let endpoint: Endpoint
    /// How errors name the endpoint (built only when one is reported).
    private var label: String { endpoint.label }
    private let fixedAddress: SocketAddress?
    private let isUnix: Bool
    private let timeout: Double?
    private let resolve: ResolveFunction

    private let lock = NSLock()
    // Guarded by `lock`.
    private var home: Reactor
    private var resolutions: [Int32: Result<[SocketAddress], ResolutionError>] = [:]
    private var queue: [SocketAddress] = []
    private var startedConnecting = false
    private var attempts: [Attempt] = []
    private var attemptTimer: UInt64?
    private var lastAttemptStart: UInt64 = 0
    private var delayTimer: UInt64?
    private var timeoutTimer: UInt64?
    private var deadline: UInt64 = 0
    private var lastError: SystemError?
    private var finished = false

    /// A connector for `endpoint` (a host or a Unix path) whose waits run on `home`, which it holds
    /// a registry use of until it finishes.
    init(connection: Connection, endpoint: Endpoint, timeout: Double?, home: Reactor) {
        self.connection = connection
        self.timeout = timeout
        self.resolve = connection.resolve
        self.home = home
        switch endpoint {
        case .host(let name, let port):
            host = name
            self.port = port & 0xFFFF
            fixedAddress = SocketAddress(numericHost: name, port: port & 0xFFFF)
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

    // MARK: entry points (any thread, connection lock not held unless stated)

    /// Starts connecting. For a numeric address the first `connect(2)` happens right here.
    func start() {
        lock.lock()
        if let timeout, timeout > 0 {
            deadline = Posix.monotonicNanoseconds() + UInt64(timeout * 1e9)
            timeoutTimer = home.schedule(after: UInt64(timeout * 1e9)) { self.timedOut() }
        }
        if let fixedAddress {
            queue = [fixedAddress]
            resolutions = [AF_INET6: .success([]), AF_INET: .success([])]
            startedConnecting = true
            let outcome = connectNext()
            lock.unlock()
            report(outcome)
            return
        }
        if isUnix {
            let outcome = finish(.failed(StreamErrors.posix(ENAMETOOLONG, "Could not connect to \(label)")))
            lock.unlock()
            report(outcome)
            return
        }
        lock.unlock()
        let (host, port, resolve) = (self.host, self.port, self.resolve)
        for family in [AF_INET6, AF_INET] {
            DispatchQueue.global().async {
                let result = resolve(host, port, family)
                self.resolved(family, result)
            }
        }
    }

    /// Stops everything. Called with the connection lock held; never calls back.
    func cancel() {
        lock.withLock { _ = finish(.none) }
    }

    /// Moves the waits to the stream thread, which always runs, for a caller that blocks on or polls
    /// the open. Called with the connection lock held; never calls back.
    func moveToStreamThread() {
        lock.withLock {
            let target = StreamThread.reactor
            guard !finished, home !== target else { return }
            _ = ReactorRegistry.shared.acquire(cfRunLoop: target.runLoop, mode: target.mode)
            let old = home
            for attempt in attempts {
                old.remove(fd: attempt.handle.fd, token: attempt.token)
                attempt.token = (try? target.add(fd: attempt.handle.fd, events: cssh_epollout(), handler: attempt)) ?? 0
            }
            home = target
            let now = Posix.monotonicNanoseconds()
            if let timer = timeoutTimer {
                old.cancelTimer(timer)
                timeoutTimer = target.schedule(after: deadline > now ? deadline - now : 1) { self.timedOut() }
            }
            if let timer = attemptTimer {
                old.cancelTimer(timer)
                attemptTimer = nil
                armAttemptTimer()
            }
            if let timer = delayTimer {
                old.cancelTimer(timer)
                delayTimer = target.schedule(after: Self.resolutionDelay) { self.resolutionDelayPassed() }
            }
            ReactorRegistry.shared.release(old)
        }
    }

    // MARK: inputs

    private func resolved(_ family: Int32, _ result: Result<[SocketAddress], ResolutionError>) {
        lock.lock()
        guard !finished else { return lock.unlock() }
        resolutions[family] = result
        let addresses = (try? result.get()) ?? []
        var outcome = Outcome.none
        if startedConnecting {
            merge(addresses)
            if attempts.isEmpty {
                outcome = connectNext()
            } else if attemptTimer == nil, !queue.isEmpty {
                armAttemptTimer()
            }
        } else if family == AF_INET, resolutions[AF_INET6] == nil, !addresses.isEmpty {
            delayTimer = home.schedule(after: Self.resolutionDelay) { self.resolutionDelayPassed() }
        } else if family == AF_INET6 && !addresses.isEmpty || resolutions.count == 2 {
            outcome = beginConnecting()
        }
        lock.unlock()
        report(outcome)
    }

    private func resolutionDelayPassed() {
        lock.lock()
        delayTimer = nil
        let outcome = finished ? .none : beginConnecting()
        lock.unlock()
        report(outcome)
    }

    fileprivate func attemptFinished(_ attempt: Attempt) {
        lock.lock()
        guard !finished, attempts.contains(where: { $0 === attempt }) else { return lock.unlock() }
        let code = Posix.pendingError(attempt.handle.fd)
        home.remove(fd: attempt.handle.fd, token: attempt.token)
        attempts.removeAll { $0 === attempt }
        let outcome: Outcome
        if code == 0 {
            outcome = finish(.connected(attempt.handle))
        } else {
            attempt.handle.release()
            lastError = SystemError(code: code, function: "connect")
            outcome = connectNext()
        }
        lock.unlock()
        report(outcome)
    }

    private func attemptDelayPassed() {
        lock.lock()
        attemptTimer = nil
        let outcome = finished ? .none : connectNext()
        lock.unlock()
        report(outcome)
    }

    private func timedOut() {
        lock.lock()
        timeoutTimer = nil
        let outcome = finished ? .none : finish(.failed(StreamErrors.posix(ETIMEDOUT, "Could not connect to \(label)")))
        lock.unlock()
        report(outcome)
    }

    // MARK: the machine (lock held)

    private func beginConnecting() -> Outcome {
        guard !startedConnecting else { return .none }
        if let delayTimer { home.cancelTimer(delayTimer) }
        delayTimer = nil
        startedConnecting = true
        for family in [AF_INET6, AF_INET] {
            if case .success(let addresses) = resolutions[family] { merge(addresses) }
        }
        return connectNext()
    }

    /// Adds addresses to the queue, alternating families (RFC 8305 §4).
    private func merge(_ addresses: [SocketAddress]) {
        var v6 = queue.filter { $0.family == AF_INET6 } + addresses.filter { $0.family == AF_INET6 }
        var v4 = queue.filter { $0.family != AF_INET6 } + addresses.filter { $0.family != AF_INET6 }
        queue.removeAll()
        while !v6.isEmpty || !v4.isEmpty {
            if !v6.isEmpty { queue.append(v6.removeFirst()) }
            if !v4.isEmpty { queue.append(v4.removeFirst()) }
        }
    }

    /// Starts the next attempt, or fails when nothing is left to try and nothing is in flight.
    private func connectNext() -> Outcome {
        if let attemptTimer { home.cancelTimer(attemptTimer) }
        attemptTimer = nil
        while !queue.isEmpty {
            let address = queue.removeFirst()
            do {
                let fd = try Posix.socket(family: address.family)
                let handle = SocketHandle(fd: fd, closesOnRelease: true)
                do {
                    switch try Posix.connect(fd, to: address) {
                    case .processed:
                        return finish(.connected(handle))
                    case .wouldBlock:
                        let attempt = Attempt(connector: self, handle: handle)
                        attempt.token = try home.add(fd: fd, events: cssh_epollout(), handler: attempt)
                        attempts.append(attempt)
                        lastAttemptStart = Posix.monotonicNanoseconds()
                        if !queue.isEmpty { armAttemptTimer() }
                        return .none
                    }
                } catch {
                    handle.release()
                    throw error
                }
            } catch {
                lastError = error as? SystemError
            }
        }
        guard attempts.isEmpty, resolutions.count == 2 else { return .none }
        return finish(.failed(failure()))
    }

    /// Starts the next attempt once the Connection Attempt Delay has passed since the last one started.
    private func armAttemptTimer() {
        let elapsed = Posix.monotonicNanoseconds() - lastAttemptStart
        let wait = elapsed >= Self.attemptDelay ? 1 : Self.attemptDelay - elapsed
        attemptTimer = home.schedule(after: wait) { self.attemptDelayPassed() }
    }

    /// The error for "every address failed": the resolution error if nothing resolved, else the last
    /// connect error.
    private func failure() -> NSError {
        let resolutionFailures = [AF_INET, AF_INET6].compactMap { family -> ResolutionError? in
            if case .failure(let error) = resolutions[family] { return error }
            return nil
        }
        if lastError == nil,
           let error = resolutionFailures.first(where: { $0.code != cssh_eai_nodata() }) ?? resolutionFailures.first {
            return StreamErrors.resolution(error, host: host, port: port)
        }
        return StreamErrors.posix(lastError?.code ?? EINVAL, "Could not connect to \(label)")
    }

    /// Ends the machine: closes every other attempt, cancels every timer, gives back the home reactor.
    private func finish(_ outcome: Outcome) -> Outcome {
        guard !finished else {
            if case .connected(let handle) = outcome { handle.release() }
            return .none
        }
        finished = true
        for attempt in attempts {
            home.remove(fd: attempt.handle.fd, token: attempt.token)
            attempt.handle.release()
        }
        attempts.removeAll()
        for timer in [attemptTimer, delayTimer, timeoutTimer].compactMap({ $0 }) { home.cancelTimer(timer) }
        attemptTimer = nil
        delayTimer = nil
        timeoutTimer = nil
        ReactorRegistry.shared.release(home)
        return outcome
    }

    /// Tells the connection, with `lock` released.
    private func report(_ outcome: Outcome) {
        switch outcome {
        case .none:
            break
        case .connected(let handle):
            if let connection {
                connection.connected(handle)
            } else {
                handle.release()
            }
        case .failed(let error):
            connection?.connectFailed(error)
        }
    }
}

/// One non-blocking connect in flight, waiting for the socket to become writable.
private final class Attempt: ReactorHandler, @unchecked Sendable {
    /// Weak: a reactor may still hold this attempt for the current batch of events after the pair
    /// was closed and its connector freed; that late event is then ignored.
    weak var connector: Connector?
    let handle: SocketHandle
    var token: UInt64 = 0

    init(connector: Connector, handle: SocketHandle) {
        self.connector = connector
        self.handle = handle
    }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        connector?.attemptFinished(self)
    }
}
