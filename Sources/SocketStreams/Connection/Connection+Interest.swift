// Epoll interest: what the fd is watched for on each reactor (`PairRegistrations`), and readiness
// from them turned into has-events (`PairHalves`' rules).

import Foundation

extension Connection {
    // MARK: epoll interest

    /// What epoll should report from `reactor`: the running stage's wants on the open's home, else the halves'.
    private func wantedEvents(on reactor: Reactor) -> UInt32 {
        lock.assertHeld()
        // Not the phase: after a failure the input half may still be open, draining what arrived first.
        let reading: Interest
        let writing: Interest
        switch transport?.active {
        case .none: return 0
        case .socket?: (reading, writing) = (.readable, .writable)
        case let layered?: (reading, writing) = (layered.readInterest, layered.writeInterest)
        }
        if isNegotiating { return reactor === opening.home ? PairRegistrations.epollEvents(opening.interest) : 0 }
        return halves.wantedEvents(
            on: reactor, reading: PairRegistrations.epollEvents(reading), writing: PairRegistrations.epollEvents(writing))
    }

    /// Every registration in line with what is wanted: no allocation, a syscall only where it changed.
    func syncInterest() {
        lock.assertHeld()
        registrations.sync { wantedEvents(on: $0) }
    }

    /// One registration per reactor a half is scheduled on, and the open's home while a stage runs
    /// (after a schedule changes or the socket appears), then in line. Lock held.
    func rebuildRegistrations() {
        lock.assertHeld()
        var none: EpollHandover?
        rebuildRegistrations(handover: &none)
    }

    /// As `rebuildRegistrations()`, a new one on `handover`'s reactor taking it over (and setting it to nil).
    func rebuildRegistrations(handover: inout EpollHandover?) {
        lock.assertHeld()
        guard let fd = socket?.fd else { return }
        registrations.rebuild(
            fd: fd, input: halves[.input].reactors, output: halves[.output].reactors, home: isNegotiating ? opening.home : nil,
            for: self, handover: &handover, wanted: { wantedEvents(on: $0) })
    }

    /// Readiness from one reactor's epoll set, on that reactor's thread.
    func handleReadiness(_ events: UInt32, from reactor: Reactor) {
        lock.lock()
        defer { lock.unlock() }
        if isNegotiating {
            if reactor === opening.home { advanceNegotiation() }
            return syncInterest()
        }
        let ready: Interest
        switch transport?.active {
        case .none: return
        case .socket?: ready = PairRegistrations.interest(reportedBy: events)
        case let layered?:
            let reported = PairRegistrations.interest(reportedBy: events)
            if readersWaiting > 0, reported.contains(.readable) {
                // A blocking read waits for these bytes on the socket (`waitForInput`): leave them there.
                ready = layered.ready(reported.subtracting(.readable)).union(.readable)
            } else {
                ready = layered.ready(reported)
            }
        }
        let signals = halves.takeReadiness(ready, from: reactor)
        if signals.bytes { signal(.input, .hasBytesAvailable) }
        if signals.space { signal(.output, .hasSpaceAvailable) }
        syncInterest()
    }
}
