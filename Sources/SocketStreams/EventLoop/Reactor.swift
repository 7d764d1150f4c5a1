// The event loop's core: one epoll set, the handlers of the fds in it, work posted from other threads,
// timers, and the rounds that deliver all of it on the owner's thread. What every reactor does is here;
// how a reactor is driven (who waits in its epoll set, how another thread wakes it, how its timers
// come due) is its `ReactorDriver`, one of four, each in a file of its own:
//
// - `RunLoopSourceDriver`: a run loop (any mode) watches the epoll fd as the port of a version-1
//   CFRunLoopSource and calls `perform` on its own thread. On Linux CoreFoundation waits on its ports
//   with epoll, so a socket becoming ready wakes the run loop directly, in the right mode, with no
//   thread hop (what that costs against the alternatives: Guides/Performance.md).
// - `StreamThreadDriver` (StreamThread.swift): the package's own thread waits in the epoll set itself,
//   with CoreFoundation's port set for its default mode inside it.
// - `QueueThreadDriver`: a dispatch queue's reactor whose epoll set a thread of ours waits in, running
//   each perform on the queue with `queue.sync` (the first few queues in use).
// - `DispatchSourceDriver`: a dispatch queue's reactor watched by a `DispatchSource` (every other queue,
//   the main queue among them).
//
// Run-loop drivers signal the core through fds in the epoll set (an eventfd for posted work, a timerfd
// for deadlines: `RunLoopSignals`); queue drivers through the queue (`queue.async`, `queue.asyncAfter`:
// `QueuePerformer`), so posted work keeps its order with the queue's other blocks.
//
// Who may touch what, as types:
// - `shared` (`ReactorShared`): what other threads change (handlers, posted work, ready targets,
//   timers); reached only through `shared.withLock { (state: inout ReactorShared) in … }`.
// - `owned` (`ReactorOwned`): what only the thread inside `perform` touches (the event buffer, the
//   local lists, the read-ahead budget, the lent read buffer); reached only through `withOwned`, which
//   checks in debug builds that the caller is that thread (`assertOwner`).
// - The driver: immutable once made; its own mutable parts are atomics or under its own lock.
//
// Lifetime: whatever watches the epoll fd holds the reactor (the run-loop source through its context's
// retain/release, the dispatch source's handlers, the queue's thread its closure). The registry counts
// users; when the count drops to zero the reactor is detached, the watcher lets go once any perform in
// progress has returned, and `deinit` closes the fds.

import CoreFoundation
import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc
import Synchronization

/// Receives readiness for an fd registered with a `Reactor`, on the reactor's thread.
protocol ReactorHandler: AnyObject, Sendable {
    /// `events` is the epoll event mask (`EPOLLIN`, `EPOLLOUT`, `EPOLLERR`, `EPOLLHUP`, …).
    func reactor(_ reactor: Reactor, fired events: UInt32)
}

/// Something with events to deliver on a reactor's thread: a stream half, known to the event loop
/// only as a target and a slot number.
protocol EventTarget: AnyObject, Sendable {
    /// Delivers what is pending for `slot`, on `reactor`'s thread, from inside its `perform`.
    func deliverEvents(_ slot: Int, on reactor: Reactor)
}

/// One `markReady` request.
struct ReadyItem: Sendable {
    let target: any EventTarget
    let slot: Int
}

/// The epoll tokens of a driver's own fds; a handler's token is 16 or more (`HandlerTable`).
enum ReactorToken {
    /// A run-loop driver's eventfd: work was posted (`RunLoopSignals`).
    static let wake: UInt64 = 1
    /// A run-loop driver's timerfd: a deadline passed (`RunLoopSignals`).
    static let timer: UInt64 = 2
    /// The stream thread's CoreFoundation port set: the run loop has work of its own.
    static let runLoopPorts: UInt64 = 3
    /// A queue thread's stop eventfd: the thread should end (rounds ignore it).
    static let stop: UInt64 = 4
}

/// What other threads change in a reactor: reached only under its lock (`Reactor.shared`).
struct ReactorShared {
    /// Registered fds' handlers, by the index in their token (see `HandlerTable`).
    var handlers = HandlerTable()
    var tasks: [PostedWork] = []
    var ready: [ReadyItem] = []
    /// A wake-up is on its way (an eventfd write, a queued block) and not yet seen by a perform.
    var wakePending = false
    /// Armed timers, earliest first (O(log n) to arm and fire, O(1) to cancel).
    var timers = TimerHeap<TimerAction>()
    /// The deadline the driver is armed for; `.max` when none is. A timer armed for later than this
    /// needs no new arming: what fires then re-arms for the earliest remaining one. (A cancelled
    /// timer's arming is left in place, so a connection that arms and cancels a timeout per operation
    /// costs no timerfd_settime, or dispatch timer, per operation.)
    var armedDeadline = UInt64.max
    /// Delegate calls waiting for their turns (`enqueueTurn`), the next at `turnNext`; a call's slot is
    /// emptied as it is taken, so that the call is let go of after its turn, outside the lock (its
    /// release may free a face, whose deinit takes the face's own lock, which is held around
    /// `enqueueTurn`: dropped under this lock, that would be a lock-order inversion).
    var turnCalls: [(any TurnCall)?] = []
    var turnNext = 0
    /// A turn is asked for, and will run the call at `turnNext`.
    var turnScheduled = false
}

/// What only the thread inside a reactor's `perform` touches (`Reactor.withOwned`).
struct ReactorOwned {
    static let eventCapacity: Int32 = 256
    /// Where a round's `epoll_wait` puts its events.
    let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(eventCapacity))
    var firing: [(any ReactorHandler, UInt32)] = []
    var spareTasks: [PostedWork] = []
    var spareReady: [ReadyItem] = []
    /// `markReady` calls made inside `perform` on its own thread (every event a readiness report or a
    /// delegate's read or write raises): no lock, no wake-up, delivered before `perform` returns.
    var localReady: [ReadyItem] = []
    /// Work posted inside `perform` on its own thread (an executor's job resumed by a callout): no lock
    /// and no wake-up either, run before `perform` returns, after the events delivered with it.
    var localTasks: [PostedWork] = []
    /// Work for the next performs (`performNextTurn`), the first of it run first thing in each that
    /// was asked for after the perform that asked for it ended (`askedIn`, `Reactor.performsEnded`).
    var nextTurns: [(work: PostedWork, askedIn: UInt64)] = []
    /// Re-signals a read may still make before the next epoll round (`takeReadAhead`), refilled each
    /// round: a read that leaves bytes in the kernel signals `hasBytesAvailable` again at once, without
    /// an `epoll_wait`, but at most this many times a round, so that one flooded socket cannot keep the
    /// reactor from its other sockets and timers.
    var readAheads = 0
    /// The operations engines' read buffer between two reads (`lendReadBuffer`).
    var spareReadBuffer: [UInt8]?
    /// The datagram sockets' batch memory (`withBatchBuffer`), grown to the largest asked for; freed
    /// with the reactor.
    var batchBuffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    var batchBufferLent = false
}

/// How a round's caller gets the next round when one is due (events left, work posted meanwhile).
enum RoundRearm {
    /// A wake-up through the driver (`ReactorDriver.wake`): a run loop or queue calls perform again.
    case wake
    /// The caller's own loop goes round again without waiting (the stream thread's).
    case caller
}

/// What a perform's rounds found for the driver.
struct RoundsOutcome {
    /// Another round is due (with `RoundRearm.wake`, the wake-up has been marked pending).
    var again = false
    /// CoreFoundation's port set was ready (the stream thread's: run the run loop).
    var runLoopDue = false
}

// `@unchecked Sendable`: its mutable state is `shared`, reached only under its lock, and `owned`, reached only
// by the thread inside `perform` (`withOwned`, asserted in debug builds); `useCount` is the registry's, under
// the registry's lock; everything else is a `let` or an atomic.
final class Reactor: @unchecked Sendable {
    /// The epoll fd: for a run loop's reactor, its run-loop port.
    let epollFD: Int32
    /// The run-loop mode this reactor serves (a fixed name for a queue's).
    let mode: String
    /// How this reactor is driven.
    let driver: any ReactorDriver

    /// What other threads change; see `ReactorShared`.
    private let shared: Guarded<ReactorShared>
    /// Whether `tasks` or `ready` may hold something: lets `drainWork` skip the lock when neither does.
    private let sharedWork = Atomic<Bool>(false)
    /// The thread inside `perform` (its `pthread_self`), or 0. Written only by that thread, so the
    /// thread itself can test it without the lock.
    private let performing = Atomic<UInt>(0)
    /// How many performs have ended (incremented by the performing thread as one ends): a queue's
    /// perform is asked for with the count at that moment, its ticket, and runs a turn only if the
    /// perform that asked for the turn ended before (`performNextTurn`).
    let performsEnded = Atomic<UInt64>(0)
    /// What only the performing thread touches; see `ReactorOwned`. Behind a pointer, not fields: no
    /// dynamic exclusivity checks on the hot path, and `withOwned` is the one way to it.
    private let owned: UnsafeMutablePointer<ReactorOwned>
    /// The users `ReactorRegistry` counts (it alone uses this); guarded by the registry's lock.
    var useCount = 0

    /// `readAheads` each round: with 64 KiB reads, an `epoll_wait` a MiB of a download, not one each 64 KiB.
    static let readAheadsPerRound = 16
    /// At most this many epoll rounds in one `perform` (a multiple of 8; tests lower it).
    private let roundLimit = Atomic<Int>(64)
    /// No new round once a `perform` has run this long (nanoseconds).
    static let roundBudget: UInt64 = 1_000_000

    /// A run loop's reactor for `mode`. `driven`: the calling thread (the stream thread) will wait in
    /// the epoll set itself (`StreamThreadDriver`) rather than have the run loop watch it.
    convenience init(runLoop: CFRunLoop, mode: String, driven: Bool = false) throws(SystemError) {
        try self.init(mode: mode) { epollFD throws(SystemError) in
            let signals = try RunLoopSignals(epollFD: epollFD)
            return driven
                ? StreamThreadDriver(runLoop: runLoop, signals: signals)
                : RunLoopSourceDriver(runLoop: runLoop, mode: mode, signals: signals)
        }
    }

    /// A dispatch queue's reactor: a thread of ours while one of the slots is free (never the main
    /// queue's, whose blocks run on the main thread whoever asks), else a dispatch source.
    convenience init(queue: DispatchQueue, mode: String) throws(SystemError) {
        try self.init(mode: mode) { epollFD throws(SystemError) in
            let performer = QueuePerformer(queue: queue)
            if let thread = try QueueThreadDriver(performer: performer, epollFD: epollFD) { return thread }
            return DispatchSourceDriver(performer: performer)
        }
    }

    private init(mode: String, driver makeDriver: (Int32) throws(SystemError) -> any ReactorDriver) throws(SystemError) {
        self.mode = mode
        epollFD = try Posix.epollCreate()
        do {
            driver = try makeDriver(epollFD)
        } catch {
            Posix.close(epollFD)
            throw error
        }
        shared = Guarded(ReactorShared())
        owned = .allocate(capacity: 1)
        owned.initialize(to: ReactorOwned())
    }

    deinit {
        driver.close()
        Posix.close(epollFD)
        owned.pointee.events.deallocate()
        owned.pointee.batchBuffer.deallocate()
        owned.deinitialize(count: 1)
        owned.deallocate()
    }

    /// The run loop this reactor serves (nil for a dispatch queue's).
    var runLoop: CFRunLoop? { driver.runLoop }
    /// The dispatch queue this reactor serves (nil for a run loop's).
    var queue: DispatchQueue? { driver.performer?.queue }
    /// Whether its thread waits in the epoll set itself (the stream thread's reactor).
    var isDriven: Bool { driver is StreamThreadDriver }
    /// Whether a thread of ours waits in the epoll set for its queue.
    var drivesQueue: Bool { driver is QueueThreadDriver }

    /// The kernel id of the queue's thread once it runs (0 before, and for the other drivers): tests
    /// watch it wait for its queue.
    var queueThreadID: Int32 {
        guard let driver = driver as? QueueThreadDriver else { return 0 }
        return driver.threadID.load(ordering: .acquiring)
    }

    /// Starts watching the epoll fd: the run-loop source added to its run loop, the queue's thread
    /// started, the dispatch source resumed.
    func attach() throws(SystemError) { try driver.attach(self) }

    /// Stops watching it; whatever watched it lets go of the reactor once no perform runs.
    func detach() { driver.detach() }

    // MARK: fds

    /// Adds `fd` to the epoll set (`EPOLL_CTL_ADD`); returns the token for `modify`/`remove`.
    func add(fd: Int32, events: UInt32, handler: any ReactorHandler) throws(SystemError) -> UInt64 {
        let token = shared.withLock { $0.handlers.insert(handler) }
        do {
            try Posix.epollControl(epollFD, EPOLL_CTL_ADD, fd, events: events, token: token)
        } catch {
            shared.withLock { $0.handlers.remove(token) }
            throw error
        }
        return token
    }

    /// Gives a registered fd's events to another handler (the fd stays in the epoll set).
    func replaceHandler(token: UInt64, with handler: any ReactorHandler) {
        shared.withLock { $0.handlers.replace(token, with: handler) }
    }

    /// Changes the events an fd is watched for (`EPOLL_CTL_MOD`).
    func modify(fd: Int32, token: UInt64, events: UInt32) throws(SystemError) {
        try Posix.epollControl(epollFD, EPOLL_CTL_MOD, fd, events: events, token: token)
    }

    /// Removes an fd (`EPOLL_CTL_DEL`). Must happen before the fd is closed.
    ///
    /// Called on another thread than a `perform` in progress, this does not wait for it: a handler the
    /// round has already taken from the table (`firing`) is still called once after this returns, and
    /// so is one taken before an earlier handler of the same round removed it. So every handler checks,
    /// under the lock its remover holds, that it is still wanted before it touches the fd: the
    /// listener's `acceptLocked` (closed), `RoutingSocket` (`fdOpen`, the recv under the lock),
    /// `DatagramSocket` (`fdOpen`; removed only on its owner), the connection's `Registration`
    /// (`handleReadiness` under the connection lock: no transport, or not scheduled on this reactor,
    /// does nothing), a connect `Attempt` (the connector finished, or the attempt no longer listed).
    func remove(fd: Int32, token: UInt64) {
        try? Posix.epollControl(epollFD, EPOLL_CTL_DEL, fd, events: 0, token: token)
        shared.withLock { $0.handlers.remove(token) }
    }

    // MARK: ownership

    /// Whether the calling thread is inside this reactor's `perform` right now.
    @inline(__always)
    var isPerformingHere: Bool {
        performing.load(ordering: .relaxed) == UInt(pthread_self())
    }

    /// Whether the calling thread may act as the owner now: inside this reactor's `perform`, or where
    /// it performs between performs (its run loop's thread, a block on its queue, which must be serial
    /// for this: a concurrent queue's blocks run beside a perform).
    var isOwnerContext: Bool { isPerformingHere || driver.isCurrentContext }

    /// The owner rule, checked in debug builds (as swift-nio's `preconditionInEventLoop`): the caller
    /// must be inside this reactor's `perform`, on its thread or queue, where the state it is about to
    /// touch is owned. Compiled out of release builds.
    @inline(__always)
    func assertOwner(_ what: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
        assert(isPerformingHere, "SocketStreams: \(what()) off its owner (the reactor's perform)", file: file, line: line)
    }

    /// The performing thread's state, for `body`; in debug builds, traps for any other thread.
    @inline(__always)
    private func withOwned<Result>(_ body: (inout ReactorOwned) -> Result) -> Result {
        assertOwner("the reactor's own state")
        return body(&owned.pointee)
    }

    /// Takes one of this round's read-aheads (`readAheads`): true if the caller, a read on this
    /// reactor's thread inside its `perform`, may signal `hasBytesAvailable` again at once.
    @inline(__always)
    func takeReadAhead() -> Bool {
        guard isPerformingHere else { return false }
        return withOwned { owned in
            guard owned.readAheads > 0 else { return false }
            owned.readAheads -= 1
            return true
        }
    }

    // MARK: work from other threads

    /// Runs `work` at once if the caller is inside this reactor's `perform`, else posts it there:
    /// the way other threads reach state this reactor's thread owns.
    func execute(_ work: @escaping @Sendable () -> Void) {
        if isPerformingHere { return work() }
        post(work)
    }

    /// Runs `work` on the reactor's thread the next time its run loop runs in its mode.
    func post(_ work: @escaping @Sendable () -> Void) {
        post(.closure(work))
    }

    /// Runs `job` on `executor`, on the reactor's thread, as `post` runs a closure.
    func post(_ job: UnownedJob, on executor: UnownedTaskExecutor) {
        post(.job(job, executor))
    }

    private func post(_ work: PostedWork) {
        if isPerformingHere { return withOwned { $0.localTasks.append(work) } }
        let wake = shared.withLock { state -> Bool in
            state.tasks.append(work)
            sharedWork.store(true, ordering: .releasing)
            return needsWake(&state)
        }
        if wake { driver.wake(self) }
    }

    /// Asks for `item`'s pending stream events to be delivered on this reactor's thread. From inside
    /// this reactor's own `perform` that costs nothing: perform drains the list before it returns.
    func markReady(_ item: ReadyItem) {
        if isPerformingHere { return withOwned { $0.localReady.append(item) } }
        let wake = shared.withLock { state -> Bool in
            state.ready.append(item)
            sharedWork.store(true, ordering: .releasing)
            return needsWake(&state)
        }
        if wake { driver.wake(self) }
    }

    private func needsWake(_ state: inout ReactorShared) -> Bool {
        if isPerformingHere || state.wakePending { return false }
        state.wakePending = true
        return true
    }

    /// A driver's wake-up has been seen: the next post writes a new one.
    func clearWakePending() {
        shared.withLock { $0.wakePending = false }
    }

    /// Runs `work` first thing in a later perform of this reactor, one such work a perform, in the order
    /// asked; call it from inside a perform. For a queue, only a perform asked for after this one ended
    /// runs it (its ticket, `performsEnded` when it was asked for, is past this perform's): such a
    /// perform waits behind the blocks already on the queue, put there by what ran in this one, where a
    /// perform asked for earlier (a wake-up posted from another thread, the queue's thread's own) may be
    /// ahead of them. So a face that makes one delegate call a turn (`DelegateTurns`) keeps the order
    /// separate blocks would have, without a thread woken for it (a queue's thread runs its next turn
    /// itself, `QueueThreadDriver`).
    func performNextTurn(_ work: @escaping @Sendable () -> Void) {
        let current = performsEnded.load(ordering: .relaxed)  // inside perform: this perform's number
        withOwned { $0.nextTurns.append((.closure(work), askedIn: current)) }
    }

    /// Runs `call` in a turn of its own (`performNextTurn`), after every call enqueued here before it,
    /// one a turn: the faces' delegate calls for this queue (`DelegateTurns`). Any thread.
    func enqueueTurn(_ call: any TurnCall) {
        let schedule = shared.withLock { state -> Bool in
            state.turnCalls.append(call)
            guard !state.turnScheduled else { return false }
            state.turnScheduled = true
            return true
        }
        guard schedule else { return }
        if isPerformingHere {
            performNextTurn { self.runTurnCall() }
        } else {
            post { self.performNextTurn { self.runTurnCall() } }
        }
    }

    /// A turn: the first waiting call, then another turn if more wait.
    private func runTurnCall() {
        let call = shared.withLock { state -> any TurnCall in
            let call = state.turnCalls[state.turnNext]!
            state.turnCalls[state.turnNext] = nil
            state.turnNext += 1
            if state.turnNext >= 1024, state.turnNext * 2 >= state.turnCalls.count {  // a list never empty keeps no read part
                state.turnCalls.removeFirst(state.turnNext)
                state.turnNext = 0
            }
            return call
        }
        call.run()
        let more = shared.withLock { state -> Bool in
            if state.turnNext < state.turnCalls.count { return true }
            state.turnCalls.removeAll(keepingCapacity: state.turnCalls.count <= 16)
            state.turnNext = 0
            state.turnScheduled = false
            return false
        }
        if more { performNextTurn { self.runTurnCall() } }
    }

    /// The first of the work asked for by `performNextTurn`, inside perform, if a perform with `ticket`
    /// may run it (asked for after the perform that asked for the work ended).
    private func takeNextTurn(ticket: UInt64) -> PostedWork? {
        let owned = self.owned  // inside perform: the performing thread's
        guard let first = owned.pointee.nextTurns.first, first.askedIn < ticket else { return nil }
        return owned.pointee.nextTurns.removeFirst().work
    }

    // MARK: the read buffer

    /// A buffer of `size` bytes (contents undefined) for one read on the reactor's thread: one per
    /// reactor, lent to one read at a time, instead of one per connection, idle or not. Give it back
    /// with `takeBackReadBuffer` unless it was kept (a large read handed over whole).
    func lendReadBuffer(size: Int) -> [UInt8] {
        let spare = withOwned { owned -> [UInt8]? in
            defer { owned.spareReadBuffer = nil }
            return owned.spareReadBuffer
        }
        if let spare, spare.count == size { return spare }
        return [UInt8](unsafeUninitializedCapacity: size) { $1 = size }
    }

    /// Returns a buffer from `lendReadBuffer` for the next read.
    func takeBackReadBuffer(_ buffer: [UInt8]) {
        withOwned { $0.spareReadBuffer = buffer }
    }

    /// Lends `body` at least `size` bytes (16-byte aligned, contents undefined) for one batch of
    /// datagram I/O on the reactor's thread: one buffer per reactor, whatever the number of sockets, so
    /// an idle socket holds none. Its pages are the kernel's to fill: a batch of small datagrams touches
    /// a few of them, however large the buffer.
    /// A batch begun inside another's `body` (a callout that reads another socket) gets memory of its own.
    func withBatchBuffer<Result>(size: Int, _ body: (UnsafeMutableRawBufferPointer) -> Result) -> Result {
        let buffer = withOwned { owned -> UnsafeMutableRawBufferPointer? in
            guard !owned.batchBufferLent else { return nil }
            if owned.batchBuffer.count < size {
                owned.batchBuffer.deallocate()
                owned.batchBuffer = .allocate(byteCount: size, alignment: 16)
            }
            owned.batchBufferLent = true
            return owned.batchBuffer
        }
        guard let buffer else {
            let own = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
            defer { own.deallocate() }
            return body(own)
        }
        defer { withOwned { $0.batchBufferLent = false } }
        return body(buffer)
    }

    // MARK: timers

    /// Runs `fire` on the reactor's thread once `nanoseconds` have passed. Returns an id for `cancelTimer`.
    @discardableResult
    func schedule(after nanoseconds: UInt64, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        schedule(after: nanoseconds, .closure(fire))
    }

    /// Calls `target.timerFired(context)` on the reactor's thread once `nanoseconds` have passed, unless
    /// the target is gone (held weakly). No closure: a timeout per operation allocates nothing.
    func schedule(after nanoseconds: UInt64, target: any TimerTarget, context: UInt64) -> UInt64 {
        schedule(after: nanoseconds, .target(WeakTimerTarget(target: target), context))
    }

    /// Runs `fire` on the reactor's thread at `deadline` (`Posix.monotonicNanoseconds()`), at once if it
    /// has passed. Timers due together fire in deadline order, equal deadlines in the order armed.
    @discardableResult
    func schedule(at deadline: UInt64, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        schedule(at: deadline, .closure(fire))
    }

    private func schedule(after nanoseconds: UInt64, _ action: TimerAction) -> UInt64 {
        schedule(at: Posix.monotonicNanoseconds() + max(nanoseconds, 1), action)
    }

    private func schedule(at deadline: UInt64, _ action: TimerAction) -> UInt64 {
        shared.withLock { state -> UInt64 in
            let id = state.timers.insert(deadline: deadline, action)
            if deadline < state.armedDeadline {
                state.armedDeadline = deadline
                driver.arm(self, deadline: deadline)
            }
            return id
        }
    }

    /// Cancels a timer that has not fired yet (a no-op for one that has). Its closure is released now.
    func cancelTimer(_ id: UInt64) {
        _ = shared.withLock { $0.timers.cancel(id) }  // the closure is released outside the lock
    }

    /// Runs the timers that are due, and arms the driver for the earliest one left. Inside `perform`.
    private func fireTimers() {
        driver.timerSeen()
        let now = Posix.monotonicNanoseconds()
        let due = shared.withLock { state -> [TimerAction] in
            var due: [TimerAction] = []
            while let action = state.timers.popFirst(dueBy: now) { due.append(action) }
            state.armedDeadline = state.timers.nextDeadline ?? .max
            if let next = state.timers.nextDeadline {
                driver.arm(self, deadline: next)
            } else {
                driver.disarm()
            }
            return due
        }
        for action in due { action.run() }
    }

    // MARK: rounds

    /// At most this many epoll rounds in one `perform` (tests lower it).
    var maxRounds: Int {
        get { roundLimit.load(ordering: .relaxed) }
        set { roundLimit.store(newValue, ordering: .relaxed) }
    }

    /// The stream thread's turn: waits in `epoll_wait` for up to `timeout` milliseconds (-1: until
    /// something is ready), then runs one round over what it fetched.
    func waitAndPerform(timeout: Int32) -> RoundsOutcome {
        let events = owned.pointee.events  // the waiting thread is the only one that performs
        let count = Posix.epollWait(epollFD, events, ReactorOwned.eventCapacity, timeout: timeout)
        return performRounds(fetched: events, count: count, single: true, timersDue: false, rearm: .caller)
    }

    /// Runs rounds of the epoll set, each over a non-blocking `epoll_wait`, or with `single` one round
    /// (for a thread that waits in the epoll set again at once: the stream thread, a queue's thread),
    /// over the `count` events in `fetched` (what that thread's wait fetched) or else a fresh poll.
    /// `timersDue`: a queue driver's timer block came due (fire the timers first). When another round
    /// is due the outcome says so, and with `.wake` the wake-up is marked pending for the caller to make.
    /// `ticket`: for a queue's perform, `performsEnded` when it was asked for (see `performNextTurn`);
    /// a run loop's performs run the next turn whenever they come.
    func performRounds(
        fetched: UnsafeMutablePointer<epoll_event>?, count fetchedCount: Int, single: Bool, timersDue: Bool, rearm: RoundRearm,
        ticket: UInt64 = .max
    ) -> RoundsOutcome {
        performing.store(UInt(pthread_self()), ordering: .relaxed)
        // Rounds until the epoll set has nothing ready, within a budget, so one busy socket cannot
        // starve the run loop's other sources and timers: at most `maxRounds`, and no new round once
        // `roundBudget` has passed (the clock is read every eighth round). Each return to the run
        // loop costs CoreFoundation a pass of about ten syscalls, so the budget is in time, not in
        // events (Benchmarks/results/syscalls.md). A single-round caller's next `epoll_wait` finds
        // whatever is left (every registration is level-triggered) without a non-blocking poll that
        // would mostly find nothing, and the run loop's own work, whose port set is in the epoll set,
        // gets its turn between any two rounds. A queue's reactor keeps the rounds although
        // libdispatch would fire its source again for what a round leaves: what the next poll finds
        // (often the peer's answer to what the round sent) would otherwise cost libdispatch's cycle,
        // its epoll thread and a worker woken (Benchmarks/results/syscalls.md).
        var outcome = RoundsOutcome()
        var rounds = 0
        var exhausted = false
        let started = single ? 0 : Posix.monotonicNanoseconds()
        let limit = maxRounds
        takeNextTurn(ticket: ticket)?.run()
        if timersDue { fireTimers() }
        let events = owned.pointee.events
        while true {
            if rounds & 7 == 0, rounds > 0, rounds >= limit || Posix.monotonicNanoseconds() - started >= Self.roundBudget {
                exhausted = true
                break
            }
            let round = rounds == 0 ? fetched ?? events : events
            let count =
                rounds == 0 && fetched != nil
                ? fetchedCount : single && rounds > 0 ? 0 : Posix.epollPoll(epollFD, events, ReactorOwned.eventCapacity)
            if count == 0 { break }
            rounds += 1
            var wake = false
            var timer = false
            var stopOnly = false
            withOwned { owned in
                owned.readAheads = Self.readAheadsPerRound
                shared.withLock { state in
                    for index in 0..<count {
                        let event = round[index]
                        switch event.data.u64 {
                        case ReactorToken.wake: wake = true
                        case ReactorToken.timer: timer = true
                        case ReactorToken.runLoopPorts: outcome.runLoopDue = true
                        case ReactorToken.stop: stopOnly = count == 1  // stays ready once its thread has stopped
                        case let token:
                            if let handler = state.handlers[token] { owned.firing.append((handler, event.events)) }
                        }
                    }
                }
            }
            if stopOnly { break }
            if wake {
                driver.wakeSeen()
                clearWakePending()
            }
            if timer { fireTimers() }
            for (handler, mask) in owned.pointee.firing { handler.reactor(self, fired: mask) }
            owned.pointee.firing.empty()
            drainWork()
        }
        drainWork()
        let turnsLeft = !owned.pointee.nextTurns.isEmpty
        outcome.again = shared.withLock { state -> Bool in
            performing.store(0, ordering: .relaxed)
            performsEnded.add(1, ordering: .relaxed)
            // Rounds used up: events are left in the epoll set, and the run loop waits for our port
            // edge-triggered, so only a fresh eventfd write brings it back. Write even if a wake-up
            // is already pending: its edge may be the one that started this perform. (Events left in
            // an epoll set after epoll_wait raise no new edge for an epoll fd that waits on it:
            // `ReactorTests` has the case.)
            guard exhausted || (turnsLeft || !state.tasks.isEmpty || !state.ready.isEmpty) && !state.wakePending else { return false }
            if rearm == .wake { state.wakePending = true }
            return true
        }
        return outcome
    }

    /// Runs posted tasks and delivers stream events until there is nothing left. The lists are
    /// swapped with spare ones, so a busy reactor allocates nothing here.
    private func drainWork() {
        let owned = self.owned  // inside perform: the performing thread's
        while true {
            if !owned.pointee.localReady.isEmpty {
                swap(&owned.pointee.localReady, &owned.pointee.spareReady)
                for item in owned.pointee.spareReady { item.target.deliverEvents(item.slot, on: self) }
                owned.pointee.spareReady.empty()
                continue
            }
            if !owned.pointee.localTasks.isEmpty {
                swap(&owned.pointee.localTasks, &owned.pointee.spareTasks)
                for task in owned.pointee.spareTasks { task.run() }
                owned.pointee.spareTasks.empty()
                continue
            }
            guard sharedWork.load(ordering: .acquiring) else { return }
            shared.withLock { state in
                sharedWork.store(false, ordering: .relaxed)
                swap(&state.tasks, &owned.pointee.spareTasks)
                swap(&state.ready, &owned.pointee.spareReady)
            }
            for task in owned.pointee.spareTasks { task.run() }
            for item in owned.pointee.spareReady { item.target.deliverEvents(item.slot, on: self) }
            owned.pointee.spareTasks.empty()
            owned.pointee.spareReady.empty()
        }
    }

    /// Nothing to deliver, no posted work, and nothing ready in the epoll set (peeked without
    /// consuming: every registration is level-triggered). Lets tests run a run loop until every
    /// readiness the kernel reports has been handled, instead of waiting to see that nothing happens.
    var isQuiescent: Bool {
        let idle = shared.withLock { $0.tasks.isEmpty && $0.ready.isEmpty }  // the local lists are empty outside perform
        guard idle else { return false }
        var event = epoll_event()
        return Posix.epollPoll(epollFD, &event, 1) == 0
    }
}

extension Array {
    /// Removes every element and keeps the storage, one at a time from the end: the reactor's lists
    /// hold an element or two, and `removeAll(keepingCapacity:)` goes through the generic
    /// `replaceSubrange`, far dearer than this loop for a list of one or two.
    @inline(__always)
    mutating func empty() {
        while !isEmpty { removeLast() }
    }
}
