// Establishing the TCP (or Unix-domain) connection, on the stream thread's reactor.
//
// Happy Eyeballs (RFC 8305), kept as a small state machine in a class, every field touched only on the
// stream thread:
// - Resolution: AAAA and A are looked up in parallel (getaddrinfo per family, on a Dispatch worker so
//   no run-loop thread ever blocks in DNS). Connecting starts when the IPv6 answer arrives, or 50 ms
//   after the IPv4 answer if IPv6 is still outstanding (the Resolution Delay).
// - Addresses are interleaved by family, IPv6 first. A new attempt starts every 250 ms (the Connection
//   Attempt Delay) or as soon as the previous attempt fails, whichever comes first.
// - The first attempt to connect wins; every other attempt is closed.
// - An optional overall timeout (connectTimeoutKey) fails the open with ETIMEDOUT.
// Numeric addresses and Unix paths skip resolution.

import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc

final class Connector: @unchecked Sendable {
    /// RFC 8305 §3: wait this long for AAAA after A has arrived.
    static let resolutionDelay: UInt64 = 50_000_000
    /// RFC 8305 §5: the delay between connection attempts.
    static let attemptDelay: UInt64 = 250_000_000

    private weak var connection: Connection?
    private let reactor = StreamThread.reactor
    private let host: String
    private let port: Int
    private let fixedAddress: SocketAddress?
    private let isUnix: Bool
    private let timeout: Double?

    // Stream-thread state.
    private var resolutions: [Int32: Result<[SocketAddress], ResolutionError>] = [:]
    private var queue: [SocketAddress] = []
    private var startedConnecting = false
    private var attempts: [Attempt] = []
    private var attemptTimer: UInt64?
    private var lastAttemptStart: UInt64 = 0
    private var delayTimer: UInt64?
    private var timeoutTimer: UInt64?
    private var lastError: SystemError?
    private var finished = false

    init(connection: Connection, host: String, port: Int, timeout: Double?) {
        self.connection = connection
        self.host = host
        self.port = port & 0xFFFF
        self.fixedAddress = SocketAddress(numericHost: host, port: port & 0xFFFF)
        self.isUnix = false
        self.timeout = timeout
    }

    init(connection: Connection, unixPath: String, timeout: Double?) {
        self.connection = connection
        self.host = unixPath
        self.port = 0
        self.fixedAddress = SocketAddress(unixPath: unixPath)
        self.isUnix = true
        self.timeout = timeout
    }

    /// Starts connecting; callable from any thread.
    func start() {
        let resolve = connection?.resolve
        reactor.post { self.begin(resolve) }
    }

    /// Stops everything; callable from any thread.
    func cancel() {
        reactor.post { self.finish() }
    }

    private func begin(_ resolve: ResolveFunction?) {
        guard !finished else { return }
        if let timeout, timeout > 0 {
            timeoutTimer = reactor.schedule(after: UInt64(timeout * 1e9)) { self.timedOut() }
        }
        if let fixedAddress {
            queue = [fixedAddress]
            resolutions = [AF_INET6: .success([]), AF_INET: .success([])]
            connectNext()
            return
        }
        if isUnix {
            report(StreamErrors.posix(ENAMETOOLONG, "Could not connect to \(host)"))
            return
        }
        guard let resolve else { return }
        let (host, port, reactor) = (self.host, self.port, self.reactor)
        for family in [AF_INET6, AF_INET] {
            DispatchQueue.global().async {
                let result = resolve(host, port, family)
                reactor.post { self.resolved(family, result) }
            }
        }
    }

    private func resolved(_ family: Int32, _ result: Result<[SocketAddress], ResolutionError>) {
        guard !finished else { return }
        resolutions[family] = result
        let addresses = (try? result.get()) ?? []
        if startedConnecting {
            merge(addresses)
            if attempts.isEmpty {
                connectNext()
            } else if attemptTimer == nil, !queue.isEmpty {
                armAttemptTimer()
            }
            return
        }
        if family == AF_INET, resolutions[AF_INET6] == nil, !addresses.isEmpty {
            delayTimer = reactor.schedule(after: Self.resolutionDelay) {
                self.delayTimer = nil
                self.beginConnecting()
            }
            return
        }
        if family == AF_INET6 && !addresses.isEmpty || resolutions.count == 2 {
            beginConnecting()
        }
    }

    private func beginConnecting() {
        guard !finished, !startedConnecting else { return }
        if let delayTimer { reactor.cancelTimer(delayTimer) }
        delayTimer = nil
        startedConnecting = true
        for family in [AF_INET6, AF_INET] {
            if case .success(let addresses) = resolutions[family] { merge(addresses) }
        }
        connectNext()
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

    /// Starts the next attempt, or reports failure when nothing is left to try.
    private func connectNext() {
        guard !finished else { return }
        if let attemptTimer { reactor.cancelTimer(attemptTimer) }
        attemptTimer = nil
        while !queue.isEmpty {
            let address = queue.removeFirst()
            do {
                let fd = try Posix.socket(family: address.family)
                let handle = SocketHandle(fd: fd, closesOnRelease: true)
                do {
                    switch try Posix.connect(fd, to: address) {
                    case .processed:
                        win(handle)
                        return
                    case .wouldBlock:
                        let attempt = Attempt(connector: self, handle: handle)
                        attempt.token = try reactor.add(fd: fd, events: cssh_epollout(), handler: attempt)
                        attempts.append(attempt)
                        lastAttemptStart = Posix.monotonicNanoseconds()
                        if !queue.isEmpty { armAttemptTimer() }
                        return
                    }
                } catch {
                    handle.release()
                    throw error
                }
            } catch {
                lastError = error as? SystemError
            }
        }
        if attempts.isEmpty, resolutions.count == 2 { failAll() }
    }

    /// Starts the next attempt once the Connection Attempt Delay has passed since the last one started.
    private func armAttemptTimer() {
        let elapsed = Posix.monotonicNanoseconds() - lastAttemptStart
        let wait = elapsed >= Self.attemptDelay ? 1 : Self.attemptDelay - elapsed
        attemptTimer = reactor.schedule(after: wait) {
            self.attemptTimer = nil
            self.connectNext()
        }
    }

    fileprivate func attemptFinished(_ attempt: Attempt) {
        guard !finished else { return }
        let code = Posix.pendingError(attempt.handle.fd)
        reactor.remove(fd: attempt.handle.fd, token: attempt.token)
        attempts.removeAll { $0 === attempt }
        if code == 0 {
            win(attempt.handle)
            return
        }
        attempt.handle.release()
        lastError = SystemError(code: code, function: "connect")
        connectNext()
    }

    private func win(_ handle: SocketHandle) {
        finish()
        if let connection {
            connection.connected(handle)
        } else {
            handle.release()
        }
    }

    private func failAll() {
        let resolutionFailure = [AF_INET, AF_INET6].compactMap { family -> ResolutionError? in
            if case .failure(let error) = resolutions[family] { return error }
            return nil
        }
        if lastError == nil, let error = resolutionFailure.first(where: { $0.code != cssh_eai_nodata() }) ?? resolutionFailure.first {
            report(StreamErrors.resolution(error, host: host, port: port))
        } else {
            let code = lastError?.code ?? EINVAL
            report(StreamErrors.posix(code, "Could not connect to \(connection?.endpoint.label ?? host)"))
        }
    }

    private func timedOut() {
        timeoutTimer = nil
        guard !finished else { return }
        report(StreamErrors.posix(ETIMEDOUT, "Could not connect to \(connection?.endpoint.label ?? host)"))
    }

    private func report(_ error: NSError) {
        finish()
        connection?.connectFailed(error)
    }

    /// Closes every attempt and cancels every timer. Stream thread.
    private func finish() {
        finished = true
        for attempt in attempts {
            reactor.remove(fd: attempt.handle.fd, token: attempt.token)
            attempt.handle.release()
        }
        attempts.removeAll()
        for timer in [attemptTimer, delayTimer, timeoutTimer].compactMap({ $0 }) { reactor.cancelTimer(timer) }
        attemptTimer = nil
        delayTimer = nil
        timeoutTimer = nil
    }
}

/// One non-blocking connect in flight, waiting for the socket to become writable.
private final class Attempt: ReactorHandler, @unchecked Sendable {
    unowned let connector: Connector
    let handle: SocketHandle
    var token: UInt64 = 0

    init(connector: Connector, handle: SocketHandle) {
        self.connector = connector
        self.handle = handle
    }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        connector.attemptFinished(self)
    }
}
