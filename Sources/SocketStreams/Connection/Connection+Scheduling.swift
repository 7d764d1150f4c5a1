// Scheduling a half on run loops and dispatch queues: each place is a reactor from the registry,
// and the open moves to the stream thread when its home stops being the one place it may run.

import CoreFoundation
import Dispatch
import Foundation

extension Connection {
    /// `-[NSStream scheduleInRunLoop:forMode:]`. A run loop that has never run is scheduled on its own
    /// thread once it runs in `mode`; events raised meanwhile wait for it instead of being dropped.
    func schedule(_ half: Half, in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard let cf = cfRunLoop(of: runLoop) else {
            lock.withLock { halves[half].schedulesPending += 1 }
            return onCFRunLoop(of: runLoop, mode: mode) { [weak self] cf in
                self?.schedule(half, onCFRunLoop: cf, mode: mode.rawValue, wasPending: true)
            }
        }
        schedule(half, onCFRunLoop: cf, mode: mode.rawValue)
    }

    /// `CFReadStreamScheduleWithRunLoop`. `wasPending`: the fallback above completing a schedule; the
    /// pending count drops in the lock section that adds the reactor, so no event is dropped between.
    func schedule(_ half: Half, onCFRunLoop runLoop: CFRunLoop, mode: String, wasPending: Bool = false) {
        // Scheduling on a run loop clears a dispatch queue (CFStream.h).
        if dispatchQueue(of: half) != nil { setDispatchQueue(nil, for: half) }
        join(half, wasPending: wasPending) { () throws(SystemError) in try ReactorRegistry.shared.acquire(cfRunLoop: runLoop, mode: mode) }
    }

    /// `CFReadStreamSetDispatchQueue`: the half leaves every run loop and queue, and joins `queue`'s reactor.
    func setDispatchQueue(_ queue: DispatchQueue?, for half: Half) {
        let left = lock.withLock { () -> SmallList<Reactor> in
            guard !halves[half].gone else { return [] }
            let left = halves[half].reactors
            halves[half].reactors = []
            if let home = opening.home, left.contains(where: { $0 === home }) { moveOpenToStreamThread() }
            rebuildRegistrations()
            return left
        }
        for reactor in left { ReactorRegistry.shared.release(reactor) }
        if let queue { join(half) { () throws(SystemError) in try ReactorRegistry.shared.acquire(queue: queue) } }
    }

    /// `CFReadStreamCopyDispatchQueue`.
    func dispatchQueue(of half: Half) -> DispatchQueue? {
        lock.withLock { halves[half].reactors.lazy.compactMap(\.queue).first }
    }

    /// The half listens on the reactor `acquire` gives (a registry use, released if not kept). Out of
    /// fds for a run-loop source or a queue's epoll set, the pair fails (now, or at open), no trap.
    private func join(_ half: Half, wasPending: Bool = false, _ acquire: () throws(SystemError) -> Reactor) {
        let reactor: Reactor
        do {
            reactor = try acquire()
        } catch {
            return lock.withLock {
                if wasPending { halves[half].schedulesPending -= 1 }
                guard !halves[half].gone else { return }
                let failure = StreamErrors.error(for: .posix(error.code, .schedule), target: target)
                if case .fail = lifecycle.handle(.scheduleFailed(failure)) { fail(failure, from: nil) }
            }
        }
        let kept = lock.withLock { () -> Bool in
            if wasPending { halves[half].schedulesPending -= 1 }
            guard !halves[half].gone, !halves.isScheduled(half, on: reactor) else { return false }
            halves[half].reactors.append(reactor)
            if lifecycle.isLive { halves.rederive(half) }  // as CFNetwork does the first time
            if halves[half].events.pending != 0 { reactor.markReady(ReadyItem(target: self, slot: half.rawValue)) }
            // The open must not depend on its home alone now that events may be awaited elsewhere.
            if reactor !== opening.home { moveOpenToStreamThread() }
            rebuildRegistrations()
            return true
        }
        if !kept { ReactorRegistry.shared.release(reactor) }
    }

    /// `-[NSStream removeFromRunLoop:forMode:]`.
    func unschedule(_ half: Half, from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard let cf = cfRunLoop(of: runLoop) else {
            return onCFRunLoop(of: runLoop, mode: mode) { [weak self] cf in self?.unschedule(half, fromCFRunLoop: cf, mode: mode.rawValue) }
        }
        unschedule(half, fromCFRunLoop: cf, mode: mode.rawValue)
    }

    /// `CFReadStreamUnscheduleFromRunLoop`.
    func unschedule(_ half: Half, fromCFRunLoop runLoop: CFRunLoop, mode: String) {
        let removed = lock.withLock { () -> Reactor? in
            guard let reactor = halves[half].reactors.remove(where: { $0.runLoop === runLoop && $0.mode == mode })
            else { return nil }
            if reactor === opening.home { moveOpenToStreamThread() }  // nor on a run loop the stream has just left
            rebuildRegistrations()
            return reactor
        }
        if let removed { ReactorRegistry.shared.release(removed) }
    }
}
