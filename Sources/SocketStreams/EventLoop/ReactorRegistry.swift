// Who shares a reactor: one per (run loop, mode) and one per dispatch queue, counted by their users,
// with a small cache of idle reactors (moved out of Reactor.swift).

import CoreFoundation
import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc
import Synchronization

/// Finds or creates the reactor for a (run loop, mode) and counts its users.
///
/// A reactor whose last user leaves stays attached in a small cache of idle reactors, so a run
/// loop that opens connection after connection does not create and destroy its run-loop source,
/// epoll set and eventfd each time. The cache is bounded: reactors of threads that have gone away
/// are detached once newer ones push them out.
final class ReactorRegistry: @unchecked Sendable {
    static let shared = ReactorRegistry()

    /// How many unused reactors stay attached.
    static let idleCapacity = 8

    private struct Key: Hashable {
        let runLoop: ObjectIdentifier
        let mode: String

        /// The run loop and the mode's length, not its characters: a run loop has few modes, which
        /// `==` tells apart, and hashing a mode's name (`kCFRunLoopDefaultMode`, 21 bytes) cost more
        /// than the rest of a schedule's look-up, two schedules a connection.
        func hash(into hasher: inout Hasher) {
            hasher.combine(runLoop)
            hasher.combine(mode.utf8.count)
        }
    }

    private struct State {
        var reactors: [Key: Reactor] = [:]
        /// Reactors with no users, oldest first.
        var idle: [Reactor] = []
    }

    private let state = Guarded(State())

    /// The reactor for `cfRunLoop` in `mode`, created and attached on first use. Balance with
    /// `release`. Fails (EMFILE, ENFILE, ENOMEM) when the epoll set, eventfd or timerfd of a new
    /// reactor cannot be created.
    func acquire(cfRunLoop: CFRunLoop, mode: String) throws(SystemError) -> Reactor {
        try acquire(Key(runLoop: ObjectIdentifier(cfRunLoop), mode: mode)) { () throws(SystemError) in
            try Reactor(runLoop: cfRunLoop, mode: mode)
        }
    }

    /// The reactor for a dispatch queue (one per queue, however many streams use it, and whichever of
    /// its wrappers they name it by).
    func acquire(queue: DispatchQueue) throws(SystemError) -> Reactor {
        let identity = state.withLock { _ in Self.identity(of: queue) }
        return try acquire(Key(runLoop: identity, mode: Self.queueMode)) { () throws(SystemError) in
            evictIdleQueueThread()
            return try Reactor(queue: queue, mode: Self.queueMode)
        }
    }

    /// When every queue-thread slot is taken (`QueueThreadDriver.maxThreads`) and an idle reactor holds one,
    /// detaches the oldest such reactor, so the queue about to be served gets the slot rather than a
    /// queue nobody uses.
    private func evictIdleQueueThread() {
        guard QueueThreadDriver.threads.load(ordering: .relaxed) >= QueueThreadDriver.maxThreads.load(ordering: .relaxed) else { return }
        let evicted = state.withLock { state -> Reactor? in
            guard let index = state.idle.firstIndex(where: { $0.drivesQueue }) else { return nil }
            let oldest = state.idle.remove(at: index)
            if let queue = oldest.queue { state.reactors.removeValue(forKey: Key(runLoop: Self.identity(of: queue), mode: oldest.mode)) }
            return oldest
        }
        evicted?.detach()
    }

    /// The mode name a queue's reactor is keyed with.
    private static let queueMode = "SocketStreams.DispatchQueue"

    /// A queue's mark in the registry, set on the queue itself.
    private final class QueueMark: Sendable {}
    private static let queueMark = DispatchSpecificKey<QueueMark>()

    /// The identity a queue's reactor is keyed by: a mark the registry sets on the queue as a
    /// queue-specific value the first time, so that every wrapper of one queue finds it (each
    /// `DispatchQueue.main` and `DispatchQueue.global()` is a new wrapper object, and keyed by the
    /// wrapper each got a reactor of its own). The queue keeps its mark alive, and the registry the
    /// queue while its reactor is known. Called under the registry's lock, so a queue gets one mark.
    private static func identity(of queue: DispatchQueue) -> ObjectIdentifier {
        if let mark = queue.getSpecific(key: queueMark) { return ObjectIdentifier(mark) }
        let mark = QueueMark()
        queue.setSpecific(key: queueMark, value: mark)
        return ObjectIdentifier(mark)
    }

    private func acquire(_ key: Key, create: () throws(SystemError) -> Reactor) throws(SystemError) -> Reactor {
        let existing = state.withLock { state -> Reactor? in
            guard let existing = state.reactors[key] else { return nil }
            if existing.useCount == 0 { state.idle.removeAll { $0 === existing } }
            existing.useCount += 1
            return existing
        }
        if let existing { return existing }
        let reactor = try create()
        try reactor.attach()
        // Another thread may have created one meanwhile: keep the first, drop ours.
        let (kept, spare) = state.withLock { state -> (Reactor, Reactor?) in
            if let first = state.reactors[key] {
                if first.useCount == 0 { state.idle.removeAll { $0 === first } }
                first.useCount += 1
                return (first, reactor)
            }
            reactor.useCount = 1
            state.reactors[key] = reactor
            return (reactor, nil)
        }
        spare?.detach()
        return kept
    }

    /// Makes `reactor` (a driven one, made by the thread that runs its run loop before anyone else can
    /// ask for that run loop's reactors) the reactor of its run loop and mode for good: its one use is
    /// never given back, so it is never cached as idle nor detached.
    func install(_ reactor: Reactor) {
        guard let runLoop = reactor.runLoop else { return }
        state.withLock { state in
            reactor.useCount = 1
            state.reactors[Key(runLoop: ObjectIdentifier(runLoop), mode: reactor.mode)] = reactor
        }
    }

    /// The reactor of a (run loop, mode), if one exists, without counting a use.
    func existing(cfRunLoop: CFRunLoop, mode: String) -> Reactor? {
        state.withLock { $0.reactors[Key(runLoop: ObjectIdentifier(cfRunLoop), mode: mode)] }
    }

    /// How many uses `reactor` has now (tests: who holds a queue's reactor, and for how long).
    func useCount(of reactor: Reactor) -> Int {
        state.withLock { _ in reactor.useCount }
    }

    /// One more use of a reactor the caller already holds a use of.
    func retain(_ reactor: Reactor) {
        state.withLock { _ in reactor.useCount += 1 }
    }

    /// Drops one use. An unused reactor goes to the idle cache; the oldest idle one beyond its
    /// capacity is detached from its run loop.
    func release(_ reactor: Reactor) {
        let evicted = state.withLock { state -> Reactor? in
            reactor.useCount -= 1
            guard reactor.useCount == 0 else { return nil }
            state.idle.append(reactor)
            guard state.idle.count > Self.idleCapacity else { return nil }
            let oldest = state.idle.removeFirst()
            let identity = oldest.queue.map(Self.identity(of:)) ?? oldest.runLoop.map { ObjectIdentifier($0) }
            if let identity { state.reactors.removeValue(forKey: Key(runLoop: identity, mode: oldest.mode)) }
            return oldest
        }
        evicted?.detach()
    }
}
