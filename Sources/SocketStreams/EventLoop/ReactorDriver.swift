// How a reactor is driven: who waits in its epoll set, how another thread wakes it, how its timers
// come due. The core (Reactor.swift) holds one `ReactorDriver` and asks it only here, where the four
// ways differ; each way is a file of its own (RunLoopSourceDriver.swift, DispatchSourceDriver.swift,
// QueueThreadDriver.swift, and the stream thread's wait in StreamThread.swift). What the run-loop
// drivers share is `RunLoopSignals`, what the queue drivers share `QueuePerformer` (below).
//
// A new scheduling target is one more case here and one more file, not edits through the core.

import CoreFoundation
import CSocketStreamsShims
import Dispatch
import Glibc
import Synchronization

/// One of the four ways a reactor is driven (Reactor.swift's header). Immutable once made.
enum ReactorDriver: Sendable {
    /// A run loop watches the epoll fd as a version-1 run-loop source's port.
    case runLoopSource(RunLoopSourceDriver)
    /// The stream thread waits in the epoll set itself, CoreFoundation's port set inside it.
    case streamThread(StreamThreadDriver)
    /// A dispatch source watches the epoll fd for a queue.
    case dispatchSource(DispatchSourceDriver)
    /// A thread of ours waits in the epoll set for a queue and performs on it with `queue.sync`.
    case queueThread(QueueThreadDriver)

    /// The run loop a run-loop driver serves.
    var runLoop: CFRunLoop? {
        switch self {
        case .runLoopSource(let driver): driver.runLoop
        case .streamThread(let driver): driver.runLoop
        case .dispatchSource, .queueThread: nil
        }
    }

    /// What a queue driver shares with the other queue driver.
    var performer: QueuePerformer? {
        switch self {
        case .runLoopSource, .streamThread: nil
        case .dispatchSource(let driver): driver.performer
        case .queueThread(let driver): driver.performer
        }
    }

    /// Starts watching `reactor`'s epoll fd.
    func attach(_ reactor: Reactor) throws(SystemError) {
        switch self {
        case .runLoopSource(let driver): try driver.attach(reactor)
        case .streamThread: break  // its thread already waits in the epoll set
        case .dispatchSource(let driver): driver.attach(reactor)
        case .queueThread(let driver): try driver.attach(reactor)
        }
    }

    /// Stops watching it (the stream thread's reactor is never detached).
    func detach() {
        switch self {
        case .runLoopSource(let driver): driver.detach()
        case .streamThread: break
        case .dispatchSource(let driver): driver.detach()
        case .queueThread(let driver): driver.detach()
        }
    }

    /// Closes the driver's own fds (the reactor's `deinit`).
    func close() {
        switch self {
        case .runLoopSource(let driver): driver.signals.close()
        case .streamThread(let driver): driver.signals.close()
        case .dispatchSource: break
        case .queueThread(let driver): driver.close()
        }
    }

    /// Makes `reactor`'s perform run soon on its thread or queue (its wake-up is marked pending).
    @inline(__always)
    func wake(_ reactor: Reactor) {
        switch self {
        case .runLoopSource(let driver): driver.signals.wake()
        case .streamThread(let driver): driver.signals.wake()
        case .dispatchSource(let driver): driver.performer.wake(reactor)
        case .queueThread(let driver): driver.performer.wake(reactor)
        }
    }

    /// A round found the wake-up eventfd ready (run-loop drivers only).
    func wakeSeen() {
        switch self {
        case .runLoopSource(let driver): driver.signals.wakeSeen()
        case .streamThread(let driver): driver.signals.wakeSeen()
        case .dispatchSource, .queueThread: break
        }
    }

    /// Makes `reactor`'s timers fire at `deadline` (monotonic nanoseconds). With the reactor's shared
    /// state locked.
    func arm(_ reactor: Reactor, deadline: UInt64) {
        switch self {
        case .runLoopSource(let driver): driver.signals.arm(deadline)
        case .streamThread(let driver): driver.signals.arm(deadline)
        case .dispatchSource(let driver): driver.performer.arm(reactor, deadline: deadline)
        case .queueThread(let driver): driver.performer.arm(reactor, deadline: deadline)
        }
    }

    /// No timer is left: a run-loop driver's timerfd is disarmed (a queue's pending block finds nothing).
    func disarm() {
        switch self {
        case .runLoopSource(let driver): driver.signals.disarm()
        case .streamThread(let driver): driver.signals.disarm()
        case .dispatchSource, .queueThread: break
        }
    }

    /// The timers are about to fire: a run-loop driver's timerfd is read empty.
    func timerSeen() {
        switch self {
        case .runLoopSource(let driver): driver.signals.timerSeen()
        case .streamThread(let driver): driver.signals.timerSeen()
        case .dispatchSource, .queueThread: break
        }
    }
}

/// A run loop's reactor's signals, both in its epoll set: an eventfd other threads write to post work,
/// and a timerfd for deadlines. Both are made up front, not on first use: timers must work when the
/// process is out of fds (the listener's back-off depends on one).
struct RunLoopSignals: Sendable {
    let wakeFD: Int32
    let timerFD: Int32

    init(epollFD: Int32) throws(SystemError) {
        wakeFD = try Posix.eventFD()
        do {
            timerFD = try Posix.timerFD()
        } catch {
            Posix.close(wakeFD)
            throw error
        }
        try? Posix.epollControl(epollFD, EPOLL_CTL_ADD, wakeFD, events: cssh_epollin(), token: ReactorToken.wake)
        try? Posix.epollControl(epollFD, EPOLL_CTL_ADD, timerFD, events: cssh_epollin(), token: ReactorToken.timer)
    }

    func close() {
        Posix.close(wakeFD)
        Posix.close(timerFD)
    }

    @inline(__always)
    func wake() { Posix.eventFDSignal(wakeFD) }
    func wakeSeen() { Posix.drainCounter(wakeFD) }
    func arm(_ deadline: UInt64) { Posix.timerFDArm(timerFD, deadlineNanoseconds: deadline) }
    func disarm() { Posix.timerFDArm(timerFD, deadlineNanoseconds: 0) }
    func timerSeen() { Posix.drainCounter(timerFD) }
}

/// What a dispatch queue's reactor does whichever way its epoll set is watched: performs one at a time
/// on the queue, wake-ups as `queue.async` blocks and timers as `queue.asyncAfter` blocks, so posted
/// work and timers keep their order with the user's own blocks on that queue, and a queue costs no
/// eventfd or timerfd.
final class QueuePerformer: Sendable {
    let queue: DispatchQueue
    /// The perform running on one of the queue's threads, and requests made meanwhile.
    private let runner = Guarded(SerialRunner())
    /// A timer's block came due and found a perform running (or started one): timers fire inside
    /// `perform`, like everything else the reactor runs.
    private let timersDue = Atomic<Bool>(false)

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    /// Runs `reactor`'s rounds on the queue, one perform at a time even on a concurrent queue (the
    /// dispatch source's handler, a posted wake-up and a timer's block are separate work items, which a
    /// concurrent queue runs side by side). A request that finds a perform running is left for it: the
    /// running one goes round again before it lets go (`SerialRunner`). So callouts, posted work and
    /// timers for streams on one queue never overlap, as if the queue were serial.
    /// `fetched`: the queue's thread asks, with the `count` events its wait fetched if they are still
    /// current, else nil for a fresh poll; its first round is then the only one (`single`).
    /// Returns false when another perform was running (the request is left for it).
    @discardableResult
    func perform(_ reactor: Reactor, single: Bool = false, fetched: UnsafeMutablePointer<epoll_event>? = nil, count: Int = 0) -> Bool {
        guard runner.withLock({ $0.enter() }) == .run else { return false }
        var single = single
        repeat {
            let due = timersDue.exchange(false, ordering: .acquiringAndReleasing)
            let outcome = reactor.performRounds(fetched: single ? fetched : nil, count: count, single: single, timersDue: due, rearm: .wake)
            if outcome.again { wake(reactor) }
            single = false
        } while runner.withLockWakingWaiters({ $0.finishRound() != nil })  // a queue's thread may wait for the end
        return true
    }

    /// A wake-up: a block that clears the pending flag and performs.
    func wake(_ reactor: Reactor) {
        queue.async {
            reactor.clearWakePending()
            self.perform(reactor)
        }
    }

    /// A block at `deadline` that marks the timers due and performs (capped at a day, and re-armed from
    /// there: Dispatch's time arithmetic must not overflow on absurd timeouts). A block that finds
    /// nothing due re-arms for the earliest remaining deadline; a cancelled timer's block finds nothing
    /// and does nothing.
    func arm(_ reactor: Reactor, deadline: UInt64) {
        let now = Posix.monotonicNanoseconds()
        let delay = deadline > now ? min(deadline - now, 86_400 * 1_000_000_000) : 0
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak reactor] in
            guard let reactor else { return }
            self.timersDue.store(true, ordering: .releasing)
            self.perform(reactor)
        }
    }

    /// The queue's thread, whose turn found another perform running: waits for it to end rather than
    /// find the same events again and again.
    func waitWhileRunning() {
        runner.wait { !$0.isRunning }
    }
}
