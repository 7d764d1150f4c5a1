// How a reactor is driven: who waits in its epoll set, how another thread wakes it, how its timers
// come due. The core (Reactor.swift) holds one `ReactorDriver` and asks it only through the protocol's
// requirements, where the four ways differ; each way is a file of its own (RunLoopSourceDriver.swift,
// DispatchSourceDriver.swift, QueueThreadDriver.swift, and the stream thread's wait in
// StreamThread.swift). What the run-loop drivers share is `RunLoopSignals` (`RunLoopDriver`), what the
// queue drivers share `QueuePerformer` (`QueueDriver`), both below.
//
// A new scheduling target is one more conforming class in a file of its own, not edits through the core.

import CoreFoundation
import CSocketStreamsShims
import Dispatch
import Glibc
import Synchronization

/// One of the four ways a reactor is driven (Reactor.swift's header): a class of its own for each,
/// immutable once made. A protocol, not an enum of four cases: an enum of class payloads keeps its case
/// in the pointer's spare bits, which LeakSanitizer cannot follow, so a driver reachable only through
/// its reactor (a dispatch source's) was reported leaked; the existential holds a plain pointer, and a
/// call through its witness table costs what the switch did.
protocol ReactorDriver: AnyObject, Sendable {
    /// The run loop a run-loop driver serves (nil for a queue's).
    var runLoop: CFRunLoop? { get }
    /// What a queue driver shares with the other queue driver (nil for a run loop's).
    var performer: QueuePerformer? { get }
    /// Starts watching `reactor`'s epoll fd.
    func attach(_ reactor: Reactor) throws(SystemError)
    /// Stops watching it (the stream thread's reactor is never detached).
    func detach()
    /// Closes the driver's own fds (the reactor's `deinit`).
    func close()
    /// Makes `reactor`'s perform run soon on its thread or queue (its wake-up is marked pending).
    func wake(_ reactor: Reactor)
    /// A round found the wake-up eventfd ready (run-loop drivers only).
    func wakeSeen()
    /// Makes `reactor`'s timers fire at `deadline` (monotonic nanoseconds). With the reactor's shared
    /// state locked.
    func arm(_ reactor: Reactor, deadline: UInt64)
    /// No timer is left: a run-loop driver's timerfd is disarmed (a queue's pending block finds nothing).
    func disarm()
    /// The timers are about to fire: a run-loop driver's timerfd is read empty.
    func timerSeen()
    /// Whether the calling thread is where the reactor performs, between performs (the stream thread,
    /// a block on the queue), so that no perform can run meanwhile; false where that is not known
    /// without a cost (a run loop's thread: `CFRunLoopGetCurrent` would make one for any thread).
    var isCurrentContext: Bool { get }
}

/// The two run-loop drivers (`RunLoopSourceDriver`, `StreamThreadDriver`): an eventfd wakes the run
/// loop's thread and a timerfd times it, both in the epoll set (`RunLoopSignals`).
protocol RunLoopDriver: ReactorDriver {
    var cfRunLoop: CFRunLoop { get }
    var signals: RunLoopSignals { get }
}

extension RunLoopDriver {
    var runLoop: CFRunLoop? { cfRunLoop }
    var performer: QueuePerformer? { nil }
    func close() { signals.close() }
    @inline(__always)
    func wake(_ reactor: Reactor) { signals.wake() }
    func wakeSeen() { signals.wakeSeen() }
    func arm(_ reactor: Reactor, deadline: UInt64) { signals.arm(deadline) }
    func disarm() { signals.disarm() }
    func timerSeen() { signals.timerSeen() }
}

/// The two queue drivers (`DispatchSourceDriver`, `QueueThreadDriver`): wake-ups and timers are blocks
/// on the queue (`QueuePerformer`), so there is no signal to read and nothing to disarm.
protocol QueueDriver: ReactorDriver {
    var queuePerformer: QueuePerformer { get }
}

extension QueueDriver {
    var runLoop: CFRunLoop? { nil }
    var isCurrentContext: Bool { DispatchQueue.getSpecific(key: QueuePerformer.identity) == ObjectIdentifier(queuePerformer) }
    var performer: QueuePerformer? { queuePerformer }
    @inline(__always)
    func wake(_ reactor: Reactor) { queuePerformer.wake(reactor) }
    func wakeSeen() {}
    func arm(_ reactor: Reactor, deadline: UInt64) { queuePerformer.arm(reactor, deadline: deadline) }
    func disarm() {}
    func timerSeen() {}
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

/// What a queue's perform came to (`QueuePerformer.perform`).
enum QueueTurn {
    /// Another perform was running: the request is left for it.
    case busy
    case done
    /// Another turn is due at once (with `RoundRearm.caller`: the caller runs it).
    case again
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

    /// Marks the queue with its performer, so that a block on it knows it is where the reactor
    /// performs (`ReactorDriver.isCurrentContext`).
    static let identity = DispatchSpecificKey<ObjectIdentifier>()

    init(queue: DispatchQueue) {
        self.queue = queue
        queue.setSpecific(key: Self.identity, value: ObjectIdentifier(self))
    }

    /// Runs `reactor`'s rounds on the queue, one perform at a time even on a concurrent queue (the
    /// dispatch source's handler, a posted wake-up and a timer's block are separate work items, which a
    /// concurrent queue runs side by side). A request that finds a perform running is left for it: the
    /// running one goes round again before it lets go (`SerialRunner`). So callouts, posted work and
    /// timers for streams on one queue never overlap, as if the queue were serial.
    /// `fetched`: the queue's thread asks, with the `count` events its wait fetched if they are still
    /// current, else nil for a fresh poll; its first round is then the only one (`single`), and with
    /// `rearm` `.caller` it runs the next turn itself when one is due (`QueueTurn.again`) rather than
    /// have a block queued for it.
    /// `ticket`: the reactor's `performsEnded` when this perform was asked for (0 when not known: a
    /// dispatch source's handler, which then runs no turn; see `Reactor.performNextTurn`); a round
    /// repeated for requests made meanwhile keeps it, so it runs no turn the perform itself asked for.
    @discardableResult
    func perform(
        _ reactor: Reactor, single: Bool = false, fetched: UnsafeMutablePointer<epoll_event>? = nil, count: Int = 0,
        rearm: RoundRearm = .wake, ticket: UInt64
    ) -> QueueTurn {
        guard runner.withLock({ $0.enter() }) == .run else { return .busy }
        var single = single
        var again = false
        repeat {
            let due = timersDue.exchange(false, ordering: .acquiringAndReleasing)
            let outcome = reactor.performRounds(
                fetched: single ? fetched : nil, count: count, single: single, timersDue: due, rearm: rearm, ticket: ticket)
            again = outcome.again && rearm == .caller
            if outcome.again, rearm == .wake { wake(reactor) }
            single = false
        } while runner.withLockWakingWaiters({ $0.finishRound() != nil })  // a queue's thread may wait for the end
        return again ? .again : .done
    }

    /// A wake-up: a block that clears the pending flag and performs.
    func wake(_ reactor: Reactor) {
        let ticket = reactor.performsEnded.load(ordering: .relaxed)
        queue.async {
            reactor.clearWakePending()
            self.perform(reactor, ticket: ticket)
        }
    }

    /// A block at `deadline` that marks the timers due and performs (capped at a day, and re-armed from
    /// there: Dispatch's time arithmetic must not overflow on absurd timeouts). A block that finds
    /// nothing due re-arms for the earliest remaining deadline; a cancelled timer's block finds nothing
    /// and does nothing.
    func arm(_ reactor: Reactor, deadline: UInt64) {
        let now = Posix.monotonicNanoseconds()
        let delay = deadline > now ? min(deadline - now, 86_400 * 1_000_000_000) : 0
        let ticket = reactor.performsEnded.load(ordering: .relaxed)
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak reactor] in
            guard let reactor else { return }
            self.timersDue.store(true, ordering: .releasing)
            self.perform(reactor, ticket: ticket)
        }
    }

    /// The queue's thread, whose turn found another perform running: waits for it to end rather than
    /// find the same events again and again.
    func waitWhileRunning() {
        runner.wait { !$0.isRunning }
    }
}
