// Epoll interest: what the pair's fd is watched for on each reactor it is scheduled on (or the
// open's home while a stage runs), kept in its `PairRegistrations`, and readiness from those
// reactors turned into has-events (by `PairHalves`' rules).

import Foundation

extension Connection {
    // MARK: epoll interest

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
        if isNegotiating { return reactor === opening.home ? PairRegistrations.epollEvents(opening.interest) : 0 }
        return halves.wantedEvents(
            on: reactor, reading: PairRegistrations.epollEvents(reading), writing: PairRegistrations.epollEvents(writing))
    }

    /// Brings every registration's epoll events in line with what the halves want. Lock held.
    /// Cheap: no allocation, and a syscall only where the wanted events changed.
    func syncInterest() {
        lock.assertHeld()
        registrations.sync { wantedEvents(on: $0) }
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
    /// setting it to nil). Lock held.
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
        switch transport {
        case .none: return
        case .socket?: ready = PairRegistrations.interest(reportedBy: events)
        case .layered(let layered)?: ready = layered.ready(PairRegistrations.interest(reportedBy: events))
        }
        let signals = halves.take(ready, from: reactor)
        if signals.bytes { signal(.input, .hasBytesAvailable) }
        if signals.space { signal(.output, .hasSpaceAvailable) }
        syncInterest()
    }
}
