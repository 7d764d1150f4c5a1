// Epoll interest: what the pair's fd is watched for on each reactor it is scheduled on (or the
// open's home while a stage runs), and readiness from those reactors turned into has-events.

import CSocketStreamsShims
import CoreFoundation
import Dispatch
import Foundation
import Glibc
import Synchronization

extension Connection {
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
        if halves[.input].events.status == .open, !halves[.input].suppressed, halves[.input].reactors.contains(where: { $0 === reactor }) {
            events |= Self.epollEvents(reading)
        }
        if halves[.output].events.status == .open, halves[.output].watchingSpace,
            halves[.output].reactors.contains(where: { $0 === reactor })
        {
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
        let single = halves[.input].reactors.first ?? halves[.output].reactors.first ?? home
        if let single, halves[.input].reactors.count <= 1, halves[.output].reactors.count <= 1,
            halves[.input].reactors.first.map({ $0 === single }) ?? true, halves[.output].reactors.first.map({ $0 === single }) ?? true,
            home.map({ $0 === single }) ?? true
        {
            if registrations.count == 1, registrations.first!.reactor === single { return syncInterest() }
            for registration in registrations { registration.leave() }
            registrations = [makeRegistration(on: single, fd: fd, handover: &handover)]
            return syncInterest()
        }
        var reactors: [Reactor] = []
        for half in [Half.input, .output] {
            for reactor in halves[half].reactors where !reactors.contains(where: { $0 === reactor }) { reactors.append(reactor) }
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
        if ready.contains(.readable), halves[.input].events.status == .open, halves[.input].reactors.contains(where: { $0 === reactor }) {
            if halves[.input].events.awaitingClient {
                halves[.input].suppressed = true
            } else {
                signal(.input, .hasBytesAvailable)
            }
        }
        if ready.contains(.writable), halves[.output].events.status == .open, halves[.output].watchingSpace,
            halves[.output].reactors.contains(where: { $0 === reactor })
        {
            if halves[.output].events.awaitingClient {
                // Signalled and not yet written: stop watching until a write (nothing spins).
                halves[.output].watchingSpace = false
            } else {
                // Keep watching: a writer that fills the socket again in its callout then needs no
                // epoll_ctl (a 1 GiB upload: two fewer a time the socket fills).
                signal(.output, .hasSpaceAvailable)
            }
        }
        syncInterest()
    }
}
