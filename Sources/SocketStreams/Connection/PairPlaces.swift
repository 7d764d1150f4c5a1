// Where a pair listens: the reactors (run loop + mode, or queue) each half is scheduled on, and the
// fd's registration in each of those reactors' epoll sets with the events it wants there. A value its connection owns and uses only under the
// connection's lock; it knows nothing of streams, events or the lifecycle: the connection tells it
// what each half wants (`Wanted`) and it keeps the epoll sets in line.

import CSocketStreamsShims
import CoreFoundation

/// The reactors of a pair's two halves and the fd's registrations on them. Guarded by the owning
/// connection's lock (every mutating call is made with it held; `Registration.update` checks).
struct PairPlaces {
    // Inline in the connection (48 bytes), not in `HalfState`: the halves' allocation shrinks by 32.
    private var input: SmallList<Reactor> = []
    private var output: SmallList<Reactor> = []
    private var registrations: SmallList<Registration> = []

    /// The epoll events the fd is watched for, per reactor: a half's on the reactors it is
    /// scheduled on, or, while a stage runs, the stage's on the open's home alone.
    struct Wanted {
        var input: UInt32 = 0
        var output: UInt32 = 0
        /// The open's home while a stage runs, and what the stage waits for there.
        var negotiation: (home: Reactor?, events: UInt32)?
    }

    /// The reactors `half` is scheduled on.
    subscript(half: Half) -> SmallList<Reactor> {
        @inline(__always) _read {
            if half == .input { yield input } else { yield output }
        }
    }

    /// Whether `half` is scheduled anywhere.
    @inline(__always)
    func isScheduled(_ half: Half) -> Bool { !self[half].isEmpty }

    /// Whether `half` is scheduled on `reactor`.
    @inline(__always)
    func contains(_ half: Half, _ reactor: Reactor) -> Bool { self[half].contains(where: { $0 === reactor }) }

    /// Adds `reactor` to `half`'s places; false if it was there already.
    mutating func add(_ reactor: Reactor, to half: Half) -> Bool {
        guard !contains(half, reactor) else { return false }
        if half == .input { input.append(reactor) } else { output.append(reactor) }
        return true
    }

    /// Removes and returns `half`'s reactor for `runLoop` and `mode`, if it is scheduled there.
    mutating func remove(_ half: Half, runLoop: CFRunLoop, mode: String) -> Reactor? {
        let matches = { (reactor: Reactor) in reactor.runLoop === runLoop && reactor.mode == mode }
        return half == .input ? input.remove(where: matches) : output.remove(where: matches)
    }

    /// Removes and returns every reactor of `half` (for the caller to release once the lock is dropped).
    mutating func removeAll(_ half: Half) -> SmallList<Reactor> {
        defer { if half == .input { input = [] } else { output = [] } }
        return self[half]
    }

    /// The one reactor the halves still present are scheduled on, if they are scheduled in exactly
    /// one place (where an open's waits may run).
    func singlePlace(where present: (Half) -> Bool) -> Reactor? {
        var single: Reactor?
        var places = 0
        for half in [Half.input, .output] where present(half) {
            for reactor in self[half] where reactor !== single {
                single = reactor
                places += 1
            }
        }
        return places == 1 ? single : nil
    }

    // MARK: epoll interest

    @inline(__always)
    static func epollEvents(_ interest: Interest) -> UInt32 {
        (interest.contains(.readable) ? cssh_epollin() | cssh_epollrdhup() : 0) | (interest.contains(.writable) ? cssh_epollout() : 0)
    }

    /// Brings every registration's epoll events in line with `wanted`. Cheap: no allocation, and a
    /// syscall only where the wanted events changed. Called with the connection's lock held, which
    /// every `Registration.update` asserts.
    @inline(__always)
    func sync(_ wanted: Wanted) {
        for registration in registrations {
            let reactor = registration.reactor
            var events: UInt32 = 0
            if let negotiation = wanted.negotiation {
                if reactor === negotiation.home { events = negotiation.events }
            } else {
                if wanted.input != 0, contains(.input, reactor) { events |= wanted.input }
                if wanted.output != 0, contains(.output, reactor) { events |= wanted.output }
            }
            registration.update(events)
        }
    }

    /// Makes one registration of `fd` per reactor some half is scheduled on, and `home` (the open's,
    /// while a stage runs), each calling `connection`, a new one on `handover`'s reactor taking it
    /// over (and setting it to nil); then syncs their events. Called with the connection's lock held
    /// (`Registration.update` asserts it).
    mutating func rebuild(fd: Int32, home: Reactor?, for connection: Connection, handover: inout EpollHandover?, wanted: Wanted) {
        // The usual case, everything on (at most) one and the same reactor, allocates nothing.
        let single = input.first ?? output.first ?? home
        if let single, input.count <= 1, output.count <= 1, input.first.map({ $0 === single }) ?? true,
            output.first.map({ $0 === single }) ?? true, home.map({ $0 === single }) ?? true
        {
            if registrations.count == 1, registrations.first!.reactor === single { return sync(wanted) }
            for registration in registrations { registration.leave() }
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

    /// Every registration leaves its epoll set for good (the pair is torn down). Called with the
    /// connection's lock held (`Registration.update` asserts it).
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
