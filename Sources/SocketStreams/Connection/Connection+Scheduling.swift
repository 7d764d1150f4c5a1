// Scheduling a half on run loops and dispatch queues: each place is a reactor from the registry,
// and the open moves to the stream thread when its home stops being the one place it may run.

import CSocketStreamsShims
import CoreFoundation
import Dispatch
import Foundation
import Glibc
import Synchronization

extension Connection {
    // MARK: scheduling

    func schedule(_ half: Half, in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard let cf = cfRunLoop(of: runLoop) else {
            // The fallback: the schedule completes on that run loop's own thread, once it runs in
            // `mode`. Events raised meanwhile wait for it instead of being dropped.
            lock.withLock { halves[half].schedulesPending += 1 }
            return onCFRunLoop(of: runLoop, mode: mode) { [weak self] cf in
                self?.schedule(half, on: cf, mode: mode.rawValue, wasPending: true)
            }
        }
        schedule(half, on: cf, mode: mode.rawValue)
    }

    /// `CFReadStreamScheduleWithRunLoop` with a CoreFoundation run loop.
    func schedule(_ half: Half, onCFRunLoop runLoop: CFRunLoop, mode: String) {
        schedule(half, on: runLoop, mode: mode)
    }

    /// `wasPending`: the fallback completing a schedule; the pending count drops in the same lock
    /// section that adds the reactor, so no event raised in between is dropped.
    private func schedule(_ half: Half, on runLoop: CFRunLoop, mode: String, wasPending: Bool = false) {
        // Scheduling on a run loop clears a dispatch queue (CFStream.h).
        if dispatchQueue(of: half) != nil { setDispatchQueue(nil, for: half) }
        let reactor: Reactor
        do {
            reactor = try ReactorRegistry.shared.acquire(cfRunLoop: runLoop, mode: mode)
        } catch {
            if wasPending { lock.withLock { halves[half].schedulesPending -= 1 } }
            return scheduleFailed(half, error)
        }
        attach(half, to: reactor, wasPending: wasPending)
    }

    /// `CFReadStreamSetDispatchQueue`: the half leaves every run loop (and a previous queue) and, with a
    /// queue, joins that queue's reactor, whose callouts run on the queue.
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
        guard let queue else { return }
        let reactor: Reactor
        do {
            reactor = try ReactorRegistry.shared.acquire(queue: queue)
        } catch {
            return scheduleFailed(half, error)
        }
        attach(half, to: reactor)
    }

    /// `CFReadStreamCopyDispatchQueue`.
    func dispatchQueue(of half: Half) -> DispatchQueue? {
        lock.withLock { halves[half].reactors.lazy.compactMap(\.queue).first }
    }

    /// Out of fds for the run-loop source or the queue's epoll set: the half cannot hear anything
    /// there. The pair fails (now, or at open) with the errno instead of trapping.
    private func scheduleFailed(_ half: Half, _ error: SystemError) {
        lock.withLock {
            guard !halves[half].gone else { return }
            let failure = StreamErrors.error(for: .posix(error.code, .schedule), target: target)
            if case .fail = lifecycle.handle(.scheduleFailed(failure)) { fail(failure, from: nil) }
        }
    }

    /// The half now listens on `reactor` (which it holds a registry use of).
    private func attach(_ half: Half, to reactor: Reactor, wasPending: Bool = false) {
        let kept = lock.withLock { () -> Bool in
            if wasPending { halves[half].schedulesPending -= 1 }
            guard !halves[half].gone, !halves[half].reactors.contains(where: { $0 === reactor }) else { return false }
            halves[half].reactors.append(reactor)
            // Re-derive readiness on scheduling, as CFNetwork does the first time.
            if halves[half].events.status == .open, lifecycle.isLive {
                if half == .input {
                    halves[half].suppressed = false
                } else if !halves[half].events.awaitingClient {
                    halves[half].watchingSpace = true
                }
            }
            if halves[half].events.pending != 0 { reactor.markReady(ReadyItem(target: self, slot: half.rawValue)) }
            // The open must not depend on its home alone now that events may be awaited elsewhere.
            if reactor !== opening.home { moveOpenToStreamThread() }
            rebuildRegistrations()
            return true
        }
        if !kept { ReactorRegistry.shared.release(reactor) }
    }

    func unschedule(_ half: Half, from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        guard let cf = cfRunLoop(of: runLoop) else {
            return onCFRunLoop(of: runLoop, mode: mode) { [weak self] cf in self?.unschedule(half, from: cf, mode: mode.rawValue) }
        }
        unschedule(half, from: cf, mode: mode.rawValue)
    }

    /// `CFReadStreamUnscheduleFromRunLoop` with a CoreFoundation run loop.
    func unschedule(_ half: Half, fromCFRunLoop runLoop: CFRunLoop, mode: String) {
        unschedule(half, from: runLoop, mode: mode)
    }

    private func unschedule(_ half: Half, from runLoop: CFRunLoop, mode: String) {
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
