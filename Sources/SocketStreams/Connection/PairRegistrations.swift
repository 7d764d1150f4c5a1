// The pair's fd in the epoll sets of the reactors it listens on: one `Registration` per reactor
// that some half is scheduled on (and the open's home while a stage runs), each watching for what
// the connection wants there. A value its connection owns and calls under its lock; it knows
// nothing of streams, events or the lifecycle: the connection says which reactors it needs and what
// it wants on each, and this keeps the epoll sets in line, with a syscall only where that changed.

import CSocketStreamsShims

/// A connection's registrations, one per reactor. Guarded by the owning connection's lock: every
/// call is made with it held, which each `Registration.update` asserts.
struct PairRegistrations {
    private var registrations: SmallList<Registration> = []

    /// The epoll events that make a transport's `interest` ready.
    @inline(__always)
    static func epollEvents(_ interest: Interest) -> UInt32 {
        (interest.contains(.readable) ? cssh_epollin() | cssh_epollrdhup() : 0) | (interest.contains(.writable) ? cssh_epollout() : 0)
    }

    /// The readiness epoll `events` report: an error or a hang-up makes both directions ready (the
    /// transfer that follows reports it).
    @inline(__always)
    static func interest(reportedBy events: UInt32) -> Interest {
        let problem = cssh_epollerr() | cssh_epollhup()
        var reported: Interest = []
        if events & (cssh_epollin() | cssh_epollrdhup() | problem) != 0 { reported.insert(.readable) }
        if events & (cssh_epollout() | problem) != 0 { reported.insert(.writable) }
        return reported
    }

    /// Brings every registration's epoll events in line with `wanted(reactor)`. Cheap: no
    /// allocation, and a syscall only where the wanted events changed. Connection lock held.
    @inline(__always)
    func sync(_ wanted: (Reactor) -> UInt32) {
        registrations.forEach { $0.update(wanted($0.reactor)) }
    }

    /// Makes one registration of `fd` per reactor in `input`, `output` and `home` (the halves' and,
    /// while a stage runs, the open's home), each calling back `connection`; a new one on
    /// `handover`'s reactor takes it over (and sets it to nil). Registrations on reactors no longer
    /// needed leave their epoll sets. Then syncs their events. Connection lock held. Inlined into its
    /// one caller, `Connection.rebuildRegistrations`, as it was before it moved here (a call with the
    /// lists and the closure as arguments was a measurable share of what a connect costs).
    @inline(__always)
    mutating func rebuild(
        fd: Int32, input: SmallList<Reactor>, output: SmallList<Reactor>, home: Reactor?, for connection: Connection,
        handover: inout EpollHandover?, wanted: (Reactor) -> UInt32
    ) {
        // The usual case, everything on (at most) one and the same reactor, allocates nothing.
        let single = input.first ?? output.first ?? home
        if let single, input.count <= 1, output.count <= 1, input.first.map({ $0 === single }) ?? true,
            output.first.map({ $0 === single }) ?? true, home.map({ $0 === single }) ?? true
        {
            if registrations.count == 1, registrations.first!.reactor === single { return sync(wanted) }
            leaveAll()
            registrations = [Self.register(fd, on: single, for: connection, handover: &handover)]
            return sync(wanted)
        }
        var reactors: [Reactor] = []
        for reactor in input where !reactors.contains(where: { $0 === reactor }) { reactors.append(reactor) }
        for reactor in output where !reactors.contains(where: { $0 === reactor }) { reactors.append(reactor) }
        if let home, !reactors.contains(where: { $0 === home }) { reactors.append(home) }
        registrations.removeAll { registration in
            if reactors.contains(where: { $0 === registration.reactor }) { return false }
            registration.leave()
            return true
        }
        for reactor in reactors where !registrations.contains(where: { $0.reactor === reactor }) {
            registrations.append(Self.register(fd, on: reactor, for: connection, handover: &handover))
        }
        sync(wanted)
    }

    /// Every registration leaves its epoll set for good. Connection lock held.
    mutating func leaveAll() {
        for registration in registrations { registration.leave() }
        registrations = []
    }

    /// A registration of `fd` on `reactor`, taking over the connector's if it was made there.
    private static func register(
        _ fd: Int32, on reactor: Reactor, for connection: Connection, handover: inout EpollHandover?
    ) -> Registration {
        let registration = Registration(connection: connection, reactor: reactor, fd: fd)
        if let taken = handover, taken.reactor === reactor, taken.fd == fd {
            registration.takeOver(taken)
            handover = nil
        }
        return registration
    }
}
