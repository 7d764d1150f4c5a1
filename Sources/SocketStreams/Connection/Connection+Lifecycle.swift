// Carrying out the pair's lifecycle: the open, the handshake stages, failure, close and teardown.
// Every move of `PairLifecycle` is made here, under the lock, and each action it returns is done here.

import Foundation
import Glibc

extension Connection {
    // MARK: open

    func open(_ half: Half) {
        lock.lock()
        guard !halves[half].gone, halves[half].events.open() else { return lock.unlock() }
        var started: Connector?
        switch lifecycle.handle(.open) {
        case .start:
            started = start()
        case .completeOpen:
            signal(half, .openCompleted)
        case .completeOpenLive:
            signal(half, .openCompleted)
            if half == .output { outputOpensLive() }
            rebuildRegistrations()
        case .reportFailure(let error):
            signal(half, .errorOccurred, error: error)
        default:
            break
        }
        lock.unlock()
        started?.start()
    }

    /// The output opens on a live pair (the input's open connected at once, or it opens late): space
    /// follows `openCompleted` at once where the socket surely takes bytes (a plain socket whose
    /// send-space bound is above zero, so that a send takes bytes; otherwise one whose socket a
    /// measurement finds room in, as after a TLS handshake), as when the output was open before the
    /// connect completed; otherwise epoll reports it. Lock held.
    private func outputOpensLive() {
        let space = halves[.output].sendSpace
        if case .socket? = transport?.active, space.isBound, space.kib > 0, !halves[.output].reactors.isEmpty {
            signal(.output, .hasSpaceAvailable)
        } else if spaceMeasuredNow() {
            signal(.output, .hasSpaceAvailable)
        } else {
            halves[.output].watchingSpace = true
        }
    }

    /// The first `open()` starts the shared work; the connector it returns starts once the lock is released.
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
            connection: self, endpoint: options?.settings.firstHop ?? target, home: opening.home!, time: options?.time ?? SystemTime(),
            resolve: options?.resolve ?? PairOptions.systemResolve,
            local: options?.settings.localBinding, fastOpen: options?.settings.fastOpen ?? false)
        _ = lifecycle.handle(.dial(connector))
        return connector
    }

    /// Picks the open's home and arms its deadline (`PairOpen`). Lock held.
    private func beginOpen() throws(SystemError) {
        lock.assertHeld()
        try opening.begin(scheduledOn: halves)
        if let options, let seconds = options.settings.connectTimeout, seconds > 0 {
            opening.armDeadline(after: seconds, time: options.time, alarm: deadlineAlarm)
        }
    }

    /// What the open's deadline (`connectTimeoutKey`) runs, made only for an open that has one: the
    /// connect or the handshake in progress fails with ETIMEDOUT.
    private func deadlineAlarm() -> @Sendable () -> Void {
        { [weak self] in
            guard let self else { return }
            lock.withLock {
                guard opening.deadlinePassed() else { return }
                switch lifecycle.handle(.deadlinePassed) {
                case .timeOutConnect(let connector):
                    connector.cancel()
                    fail(.posix(ETIMEDOUT, .connect), from: nil)
                case .timeOutHandshake: fail(.posix(ETIMEDOUT, .handshake(opening.stageName)), from: nil)
                default: break
                }
            }
        }
    }

    /// A call waits for (or polls) the open: it must not depend on a client's run loop running. Lock held.
    func moveOpenToStreamThread() {
        lock.assertHeld()
        guard lifecycle.isOpening, let (target, old) = opening.moveToStreamThread(alarm: deadlineAlarm) else { return }
        lifecycle.dial?.move(to: target)
        if isNegotiating { rebuildRegistrations() }
        ReactorRegistry.shared.release(old)
    }

    /// Whether a connect completing now, on this thread, is best left for `home`'s epoll to report.
    /// Inside `home`'s perform it never is. Elsewhere it is when the halves are scheduled on `home`
    /// and nowhere else (the events would need an eventfd wake-up, a write and a read, to reach it,
    /// where the attempt's own readiness wakes it for nothing), and when handshake stages are to
    /// run (they run on the open's home). Unscheduled halves, or several places, gain from
    /// completing at once: no reactor has to wake for it. Lock held. (The cheap tests first: the
    /// settings' test copies the TLS settings.)
    func connectWaitsFor(_ home: Reactor) -> Bool {
        lock.assertHeld()
        if home.isPerformingHere { return false }
        if deliversOnlyOn(home) { return true }
        return !opening.stages.isEmpty || options?.settings.tls != nil || options?.settings.proxy != nil
    }

    /// Whether some half is scheduled, on `reactor` and nowhere else. Lock held.
    private func deliversOnlyOn(_ reactor: Reactor) -> Bool {
        var scheduled = false
        if !halves[.input].gone {
            for other in halves[.input].reactors {
                guard other === reactor else { return false }
                scheduled = true
            }
        }
        if !halves[.output].gone {
            for other in halves[.output].reactors {
                guard other === reactor else { return false }
                scheduled = true
            }
        }
        return scheduled
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
        // The connector's epoll registration: taken over by the first registration on its reactor, else removed.
        var handover = handover
        defer { handover?.cancel() }
        socket = handle
        transport = .socket(fd: handle.fd)
        // The stages are fixed now, not at open(): TLS may still be set while TCP connects.
        opening.queueFirst(options?.settings.stages(for: target, resume: resumer(for:)) ?? [])
        if case .host = target, opening.stages.isEmpty, let fresh = SendSpace.freshlyConnected {
            halves[.output].sendSpace = fresh  // a socket this pair made and nothing has written to
        }
        if noDelay == true { try? Posix.setOption(handle.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1) }
        options?.settings.trafficClass?.apply(to: handle.fd)
        for half in [Half.input, .output] where halves[half].events.status == .opening {
            signal(half, .openCompleted)
        }
        switch lifecycle.handle(.tcpUp(stages: !opening.stages.isEmpty)) {
        case .goLive: goLive(writable: writable, handover: &handover)
        case .negotiate: beginNegotiation(handover: &handover)
        default: break
        }
    }

    /// The lifecycle moved to `live`: has-events flow. With `writable` (a completed connect) space follows
    /// `openCompleted` at once, as CFNetwork's connect callback does; after the stages (`staged`) it
    /// does where the send-space bound, measured now, says the socket takes bytes; otherwise epoll
    /// reports it. Lock held.
    private func goLive(writable: Bool, staged: Bool = false, handover: inout EpollHandover?) {
        opening.end()
        if halves[.output].events.status == .open {
            if writable || staged && spaceMeasuredNow() {
                signal(.output, .hasSpaceAvailable)
            } else {
                halves[.output].watchingSpace = true
            }
        }
        if halves[.input].events.status == .open, transport?.active.hasBufferedInput == true {
            signal(.input, .hasBytesAvailable)
        }
        rebuildRegistrations(handover: &handover)
        lock.broadcast()
    }

    /// Whether the socket surely takes bytes now, for a scheduled output going live without a bound
    /// that says so (after the stages, a TLS handshake or a proxy's; or opening late on such a pair):
    /// nothing waits to go out, and one measurement of the send-space bound (`SendSpace`) finds room,
    /// where the bound models the socket; else a zero-timeout poll answers, as after a write. Space then
    /// follows at once, as after a plain connect, instead of an EPOLLOUT registration, a wake-up round
    /// and the registration's removal after the first write (Benchmarks/results/syscalls.md). What was
    /// sent before is in the measurement, so a layered transport's own count of its sends starts again.
    /// Lock held.
    private func spaceMeasuredNow() -> Bool {
        guard let transport = transport?.active, !halves[.output].reactors.isEmpty, !transport.hasPendingOutput else { return false }
        _ = transport.takeSendCharge()
        return halves[.output].sendSpace.remeasure(transport.fd, madeFor: target)
    }

    // MARK: handshake stages

    /// Adds a stage to run before the pair is (again) live: it waits its turn before the open; on a live
    /// pair it starts now (STARTTLS), has-events stop until it is done, bytes received stay for it, and
    /// the deadline is `connectTimeoutKey` again. False on a failed or closed pair. Lock held.
    func queueStage(_ stage: any HandshakeStage) -> Bool {
        lock.assertHeld()
        switch lifecycle.handle(.stageAdded) {
        case .queueStage:
            opening.queue(stage)
            return true
        case .negotiate:
            opening.queue(stage)
            var none: EpollHandover?
            beginNegotiation(handover: &none)
            return true
        default:
            return false
        }
    }

    /// The lifecycle has moved to `negotiating`: the first stage starts. Lock held.
    private func beginNegotiation(handover: inout EpollHandover?) {
        if opening.home == nil {
            do {
                try beginOpen()
            } catch {
                return fail(.posix(error.code, .handshake(opening.stageName)), from: nil)
            }
        }
        halves.suspend()
        opening.clearInterest()
        rebuildRegistrations(handover: &handover)
        advanceNegotiation()
    }

    /// Runs the stages as far as they go (`PairOpen.runStages`) and carries out the outcome. Lock held.
    func advanceNegotiation() {
        lock.assertHeld()
        guard isNegotiating else { return }
        switch opening.runStages(over: &transport) {
        case .wait:
            syncInterest()
        case .failed(let failure):
            fail(failure, from: nil)
        case .done:
            guard case .goLive = lifecycle.handle(.stagesDone) else { return }
            var none: EpollHandover?
            goLive(writable: false, staged: true, handover: &none)
        }
    }

    /// What a TLS stage calls when a trust evaluation's answer lets it go on. Made only then: a weak
    /// reference gives the connection a side table, and every retain and release of it then takes the
    /// slow path, which every TLS round trip paid when every TLS stage captured one.
    func resumer(for tls: TLSSettings) -> @Sendable () -> Void {
        guard tls.trustEvaluation != nil else { return {} }
        return { [weak self] in self?.resumeNegotiation() }
    }

    /// Runs the negotiation again on the open's home reactor. From any thread.
    func resumeNegotiation() {
        guard let home = lock.withLock({ isNegotiating ? opening.home : nil }) else { return }
        home.execute { [weak self] in
            guard let self else { return }
            let moved = lock.withLock { () -> Bool in
                guard isNegotiating else { return false }
                guard opening.home === home else { return true }
                advanceNegotiation()
                syncInterest()
                return false
            }
            // The open moved to the stream thread meanwhile: run it there.
            if moved { resumeNegotiation() }
        }
    }

    // MARK: failure, close, release

    /// A connection-level failure (connect, a stage, read or write), as `StreamErrors` names it.
    func fail(_ failure: StreamFailure, from origin: Half?) {
        fail(StreamErrors.error(for: failure, target: target), from: origin)
    }

    /// It goes to both opened halves; a live pair's input reads what came before it, unless reading failed. Lock held.
    func fail(_ error: NSError, from origin: Half?) {
        lock.assertHeld()
        guard case .failed(let wasLive, let connector) = lifecycle.handle(.fail(error)) else { return }
        connector?.cancel()
        opening.end(dropStages: true)
        for half in [Half.input, .output] {
            let status = halves[half].events.status
            guard status != .notOpen, status != .closed, status != .error else { continue }
            if half == .input, origin != .input, wasLive, status == .open, let transport = transport?.active,
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

    /// `close()` of a half (or, `deinitialised`, its stream going away): the half lets go of the pair.
    func close(_ half: Half, deinitialised: Bool = false) {
        let released = lock.withLock { () -> SmallList<Reactor> in
            // First of all: the stream's memory goes when its deinit returns (`UnretainedReference`).
            if deinitialised {
                if half == .input { inputStream = nil } else { outputStream = nil }
            }
            guard !halves[half].gone, deinitialised || halves[half].events.close() else { return [] }
            return letGo(half)
        }
        for reactor in released { ReactorRegistry.shared.release(reactor) }
    }

    #if DEBUG
        /// Debug builds, at the end of a stream's deinit: nil, or the rule broken if its half still refers
        /// to it (UnretainedChecks.swift).
        func unretainedProblem(afterDeinitOf stream: Stream, _ half: Half) -> String? {
            lock.withLock { UnretainedReference.deinitProblem(half == .input ? inputStream : outputStream, after: stream) }
        }
    #endif

    /// The half lets go (both gone: the socket goes). Lock held; returns the reactors to release after.
    private func letGo(_ half: Half) -> SmallList<Reactor> {
        lock.assertHeld()
        halves[half].gone = true
        let reactors = halves[half].reactors
        halves[half].reactors = []
        if halves[.input].gone && halves[.output].gone {
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
        // A native socket never opened was never adopted (no `SocketHandle` holds it): an accepted pair
        // refused by closing or releasing it unopened still hands its socket back, when it owns it.
        if case .idle = lifecycle.state, case .native(let fd, _) = target, closesNativeSocket { Posix.close(fd) }
        if case .tearDown(let connector) = lifecycle.handle(.bothHalvesGone) { connector?.cancel() }
        opening.end(dropStages: true)
        registrations.leaveAll()
        let release = (transport: transport, socket: socket)
        transport = nil
        socket = nil
        if transfers.deferRelease() {
            release.transport?.close()
            release.socket?.release()
        } else {
            someOptions.deferredRelease = release
        }
    }

    /// Closes what `tearDown` deferred, once no transfer is in flight. Lock held.
    func releaseIfIdle() {
        lock.assertHeld()
        guard transfers.count == 0, let deferred = options?.deferredRelease else { return }
        options?.deferredRelease = nil
        deferred.transport?.close()
        deferred.socket?.release()
    }
}
