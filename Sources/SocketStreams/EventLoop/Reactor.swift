// One epoll set per (run loop, mode), plugged into that run loop as a version-1 CFRunLoopSource whose
// port is the epoll fd (the stream thread's default mode instead waits in it itself: `drive`, a driven
// reactor with the run loop's port set inside it, StreamThread.swift); or one per dispatch queue, whose
// `perform` (and every delegate callout) runs on that queue: for the first few queues in use a thread of
// ours waits in the epoll set and runs each perform with `queue.sync` (`driveQueue`), for the rest a
// DispatchSource watches the epoll fd with the queue as its target. On Linux CoreFoundation waits on its
// ports with epoll, so a socket becoming ready wakes the run loop directly and our `perform` runs on the
// run loop's own thread, in the right mode, with no thread hop. (Measured on this project's machines: a 1-byte ping-pong into a run loop
// takes ~34 µs this way, against ~50 µs for CFRunLoopPerformBlock plus CFRunLoopWakeUp from another
// thread and ~500 µs for a Timer; RunLoop.perform from another thread does not wake the loop at all.)
//
// Besides sockets a run loop's epoll set holds an eventfd, used by other threads to post work
// (`post`, `markReady`), and a timerfd for deadlines (`schedule(after:)`). A queue's reactor needs
// neither: work is posted with `queue.async` and deadlines with `queue.asyncAfter`, so a queue costs
// one fd (its epoll set), which matters to code that makes a queue per connection; a queue with a
// thread of ours has one more, an eventfd that tells the thread to stop.
//
// Lifetime: the CFRunLoopSource retains the reactor through its context's retain/release callbacks.
// The registry counts users; when the count drops to zero the source is invalidated, CoreFoundation
// releases it after any perform in progress has returned, and `deinit` closes the fds.

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

final class Reactor: @unchecked Sendable {
    /// The epoll fd: this reactor's run-loop port.
    let epollFD: Int32
    /// The run loop and mode this reactor serves (nil for a dispatch queue's).
    let runLoop: CFRunLoop?
    let mode: String
    /// The dispatch queue this reactor serves (nil for a run loop's).
    let queue: DispatchQueue?

    /// The eventfd other threads write to post work (-1 for a queue's reactor); for a queue with a
    /// thread of ours (`drivesQueue`), the eventfd `detach` writes to stop the thread.
    private let wakeFD: Int32
    /// The timerfd for deadlines (-1 for a queue's reactor). Created up front, not on first use:
    /// timers must work when the process is out of fds (the listener's back-off depends on one).
    private let timerFD: Int32
    private static let wakeToken: UInt64 = 1
    private static let timerToken: UInt64 = 2
    /// A driven reactor's token for CoreFoundation's port set (see `drive`).
    private static let runLoopPortsToken: UInt64 = 3
    /// A driven queue's stop eventfd (see `driveQueue`); rounds ignore it.
    private static let stopToken: UInt64 = 4
    /// Driven by its thread (the stream thread): no run-loop source; the thread waits on the epoll fd
    /// itself and calls `drive`, and CoreFoundation's own port set sits in the epoll set.
    let isDriven: Bool
    /// A queue's reactor whose epoll set a thread of ours waits in, running each perform on the queue
    /// with `queue.sync` (`driveQueue`); false for the main queue's and for one a dispatch source watches.
    let drivesQueue: Bool
    /// Whether this reactor holds one of the `maxQueueDrivers` slots (given back once, by `detach` or
    /// `deinit`).
    private let holdsDriverSlot: Atomic<Bool>
    /// Set by `detach` to end a driven queue's thread.
    private let driverStopping = Atomic<Bool>(false)
    /// That thread's kernel id once it runs (0 before): tests watch it wait for its queue.
    let driverThreadID = Atomic<Int32>(0)
    /// The queue's thread waits for a perform running elsewhere (a concurrent queue's) to end; the
    /// runner broadcasts when it lets go. Guarded by `lock`.
    @exclusivity(unchecked) private var driverWaiting = false
    /// CoreFoundation's port set for this run loop and mode, while it is in a driven reactor's epoll set.
    private var runLoopPorts: Int32 = -1
    /// Set by a round that found CoreFoundation's port set ready; the driven thread's only.
    @exclusivity(unchecked) private var runLoopDue = false

    // Guarded by `lock`. `@exclusivity(unchecked)` where `perform` touches a field on every wake-up:
    // the lock (or, for the spare lists, the run loop's single thread) serialises access, and Swift's
    // dynamic checks cost 18% (callgrind, delegate ping-pong 20,000 round trips: 173.3M → 204.4M
    // instructions).
    private let lock = ConditionLock.make()
    /// Registered fds' handlers, by the index in their token (see `HandlerTable`).
    @exclusivity(unchecked) private var handlers = HandlerTable()
    @exclusivity(unchecked) private var tasks: [PostedWork] = []
    @exclusivity(unchecked) private var ready: [ReadyItem] = []
    @exclusivity(unchecked) private var wakePending = false
    /// Whether `tasks` or `ready` may hold something: lets `drainWork` skip the lock when neither does.
    private let sharedWork = Atomic<Bool>(false)
    /// The thread inside `perform` (its `pthread_self`), or 0. Written only by that thread, so the
    /// thread itself can test it without the lock.
    private let performing = Atomic<UInt>(0)
    /// Armed timers, earliest first (O(log n) to arm and fire, O(1) to cancel).
    private var timers = TimerHeap<TimerAction>()
    /// The deadline the timerfd (or a queue's pending block) is armed for; `.max` when none is. A
    /// timer armed for later than this needs no new arming: what fires then re-arms for the earliest
    /// remaining one. (A cancelled timer's arming is left in place, so a connection that arms and
    /// cancels a timeout per operation costs no timerfd_settime, or dispatch timer, per operation.)
    private var armedDeadline = UInt64.max
    private var source: CFRunLoopSource?
    private var queueSource: (any DispatchSourceRead)?
    /// The users `ReactorRegistry` counts (it alone uses this, `init`, `attach` and `detach`);
    /// guarded by the registry's lock.
    var useCount = 0

    // Touched only inside `perform`, on the run loop's thread.
    private let eventCapacity: Int32 = 256
    private let events: UnsafeMutablePointer<epoll_event>
    @exclusivity(unchecked) private var firing: [(any ReactorHandler, UInt32)] = []
    @exclusivity(unchecked) private var spareTasks: [PostedWork] = []
    @exclusivity(unchecked) private var spareReady: [ReadyItem] = []
    /// `markReady` calls made inside `perform` on its own thread (every event a readiness report or a
    /// delegate's read or write raises): no lock, no wake-up, delivered before `perform` returns.
    @exclusivity(unchecked) private var localReady: [ReadyItem] = []
    /// Work posted inside `perform` on its own thread (an executor's job resumed by a callout): no lock
    /// and no wake-up either, run before `perform` returns, after the events delivered with it.
    @exclusivity(unchecked) private var localTasks: [PostedWork] = []
    /// Re-signals a read may still make before the next epoll round (`takeReadAhead`), refilled each
    /// round: a read that leaves bytes in the kernel signals `hasBytesAvailable` again at once, without
    /// an `epoll_wait`, but at most this many times a round, so that one flooded socket cannot keep the
    /// reactor from its other sockets and timers.
    @exclusivity(unchecked) private var readAheads = 0
    /// `readAheads` each round: with 64 KiB reads, an `epoll_wait` a MiB of a download, not one each 64 KiB.
    static let readAheadsPerRound = 16

    init(runLoop: CFRunLoop?, mode: String, queue: DispatchQueue? = nil, driven: Bool = false) throws(SystemError) {
        self.runLoop = runLoop
        self.mode = mode
        self.queue = queue
        self.isDriven = driven && queue == nil
        // A queue's reactor gets a thread of ours while one of the slots is free (not the main queue's:
        // its blocks run on the main thread whoever asks).
        drivesQueue = queue.map { !Self.isMainQueue($0) && Self.claimDriverSlot() } ?? false
        holdsDriverSlot = Atomic(drivesQueue)
        do {
            epollFD = try Posix.epollCreate()
        } catch {
            if drivesQueue { Self.queueDrivers.subtract(1, ordering: .relaxed) }
            throw error
        }
        guard queue == nil else {
            timerFD = -1
            events = .allocate(capacity: Int(eventCapacity))
            guard drivesQueue else {
                wakeFD = -1
                return
            }
            do {
                wakeFD = try Posix.eventFD()
                try Posix.epollControl(epollFD, EPOLL_CTL_ADD, wakeFD, events: cssh_epollin(), token: Self.stopToken)
            } catch {
                events.deallocate()
                Posix.close(epollFD)
                Self.queueDrivers.subtract(1, ordering: .relaxed)
                throw error
            }
            return
        }
        do {
            wakeFD = try Posix.eventFD()
        } catch {
            Posix.close(epollFD)
            throw error
        }
        do {
            timerFD = try Posix.timerFD()
        } catch {
            Posix.close(wakeFD)
            Posix.close(epollFD)
            throw error
        }
        events = .allocate(capacity: Int(eventCapacity))
        try? Posix.epollControl(epollFD, EPOLL_CTL_ADD, wakeFD, events: cssh_epollin(), token: Self.wakeToken)
        try? Posix.epollControl(epollFD, EPOLL_CTL_ADD, timerFD, events: cssh_epollin(), token: Self.timerToken)
    }

    deinit {
        giveBackDriverSlot()
        if wakeFD >= 0 { Posix.close(wakeFD) }
        if timerFD >= 0 { Posix.close(timerFD) }
        Posix.close(epollFD)
        events.deallocate()
    }

    /// Creates the run-loop source and adds it to the run loop in `mode`; for a queue, the dispatch
    /// source on the epoll fd.
    func attach() throws(SystemError) {
        if let queue, drivesQueue {
            // A thread of our own making, not Foundation's `Thread`, whose `start()` ignores a failed
            // `pthread_create`: the reactor would never be driven, and the queue's streams would never
            // hear of anything. Without a thread, the schedule fails with EAGAIN. The closure, which
            // holds the reactor and the queue, is released on the thread as soon as `driveQueue`
            // returns (`Posix.startThread`), not in the thread's TSD destructors, where Foundation's
            // `Thread` releases its block: a dispatch queue released there double-frees libdispatch's
            // per-thread cache (AddressSanitizer; Thread Sanitizer runs crashed soon after).
            try Posix.startThread { [self] in driveQueue(queue) }
            return
        }
        if let queue {
            let watcher = DispatchSource.makeReadSource(fileDescriptor: epollFD, queue: queue)
            watcher.setEventHandler { [self] in performOnQueue() }  // the reactor lives until the source is cancelled
            // ... and until libdispatch has let go of the epoll fd, which `deinit` closes: libdispatch
            // unregisters a cancelled source's fd on its manager thread later, and says it is safe to
            // close only once the cancel handler runs. Closed before, the fd number can be reused (by
            // the next reactor or socket) while the manager still holds the old registration.
            watcher.setCancelHandler { [self] in withExtendedLifetime(self) {} }
            lock.withLock { queueSource = watcher }
            watcher.resume()
            return
        }
        guard let runLoop, !isDriven else { return }
        var context = CFRunLoopSourceContext1()
        context.version = 1
        context.info = Unmanaged.passUnretained(self).toOpaque()
        context.retain = { info in
            _ = Unmanaged<Reactor>.fromOpaque(info!).retain()
            return info
        }
        context.release = { info in Unmanaged<Reactor>.fromOpaque(info!).release() }
        context.getPort = { info in Unmanaged<Reactor>.fromOpaque(info!).takeUnretainedValue().epollFD }
        context.perform = { info in Unmanaged<Reactor>.fromOpaque(info!).takeUnretainedValue().perform() }
        let created = withUnsafeMutablePointer(to: &context) { pointer in
            pointer.withMemoryRebound(to: CFRunLoopSourceContext.self, capacity: 1) { CFRunLoopSourceCreate(nil, 0, $0) }
        }
        guard let created else { throw SystemError(code: ENOMEM, function: "CFRunLoopSourceCreate") }
        lock.withLock { source = created }
        CFRunLoopAddSource(runLoop, created, makeCFString(mode))
        CFRunLoopWakeUp(runLoop)
    }

    /// Removes the source from its run loop; CoreFoundation then drops its reference to us. A queue's
    /// dispatch source is cancelled; its cancel handler, the last holder of the reactor, runs once
    /// libdispatch no longer watches the epoll fd.
    func detach() {
        if drivesQueue {
            driverStopping.store(true, ordering: .releasing)
            Posix.eventFDSignal(wakeFD)
            giveBackDriverSlot()
            return
        }
        let (detached, watcher) = lock.withLock { () -> (CFRunLoopSource?, (any DispatchSourceRead)?) in
            defer {
                source = nil
                queueSource = nil
            }
            return (source, queueSource)
        }
        if let detached { CFRunLoopSourceInvalidate(detached) }
        if let watcher {
            watcher.setEventHandler(handler: nil)
            watcher.cancel()
        }
    }

    // MARK: fds

    /// Adds `fd` to the epoll set (`EPOLL_CTL_ADD`); returns the token for `modify`/`remove`.
    func add(fd: Int32, events: UInt32, handler: any ReactorHandler) throws(SystemError) -> UInt64 {
        let token = lock.withLock { handlers.insert(handler) }
        do {
            try Posix.epollControl(epollFD, EPOLL_CTL_ADD, fd, events: events, token: token)
        } catch {
            lock.withLock { handlers.remove(token) }
            throw error
        }
        return token
    }

    /// Gives a registered fd's events to another handler (the fd stays in the epoll set).
    func replaceHandler(token: UInt64, with handler: any ReactorHandler) {
        lock.withLock { handlers.replace(token, with: handler) }
    }

    /// Changes the events an fd is watched for (`EPOLL_CTL_MOD`).
    func modify(fd: Int32, token: UInt64, events: UInt32) throws(SystemError) {
        try Posix.epollControl(epollFD, EPOLL_CTL_MOD, fd, events: events, token: token)
    }

    /// Removes an fd (`EPOLL_CTL_DEL`). Must happen before the fd is closed.
    func remove(fd: Int32, token: UInt64) {
        try? Posix.epollControl(epollFD, EPOLL_CTL_DEL, fd, events: 0, token: token)
        lock.withLock { handlers.remove(token) }
    }

    // MARK: work from other threads

    /// Whether the calling thread is inside this reactor's `perform` right now.
    @inline(__always)
    var isPerformingHere: Bool {
        performing.load(ordering: .relaxed) == UInt(pthread_self())
    }

    /// Takes one of this round's read-aheads (`readAheads`): true if the caller, a read on this
    /// reactor's thread inside its `perform`, may signal `hasBytesAvailable` again at once.
    @inline(__always)
    func takeReadAhead() -> Bool {
        guard isPerformingHere, readAheads > 0 else { return false }
        readAheads -= 1
        return true
    }

    /// The owner rule, checked in debug builds (as swift-nio's `preconditionInEventLoop`): the caller
    /// must be inside this reactor's `perform`, on its thread or queue, where the state it is about to
    /// touch is owned. Compiled out of release builds.
    @inline(__always)
    func assertOwner(_ what: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
        assert(isPerformingHere, "SocketStreams: \(what()) off its owner (the reactor's perform)", file: file, line: line)
    }

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
        if isPerformingHere { return localTasks.append(work) }
        let wake = lock.withLock { () -> Bool in
            tasks.append(work)
            sharedWork.store(true, ordering: .releasing)
            return needsWake()
        }
        if wake { self.wake() }
    }

    /// Asks for `item`'s pending stream events to be delivered on this reactor's thread. From inside
    /// this reactor's own `perform` that costs nothing: perform drains the list before it returns.
    func markReady(_ item: ReadyItem) {
        if isPerformingHere { return localReady.append(item) }
        let wake = lock.withLock { () -> Bool in
            ready.append(item)
            sharedWork.store(true, ordering: .releasing)
            return needsWake()
        }
        if wake { self.wake() }
    }

    /// Called with `lock` held.
    private func needsWake() -> Bool {
        if isPerformingHere || wakePending { return false }
        wakePending = true
        return true
    }

    /// Makes `perform` run soon on the reactor's thread or queue: an eventfd write that the run
    /// loop sees on the epoll fd, or for a queue a block that clears the pending flag and performs.
    private func wake() {
        guard let queue else { return Posix.eventFDSignal(wakeFD) }
        queue.async { [self] in
            lock.withLock { wakePending = false }
            performOnQueue()
        }
    }

    // MARK: the read buffer

    /// The operations engines' read buffer, lent to one read at a time on this reactor's thread: one
    /// per reactor instead of one per connection (issue 25: 64 KiB per `QueuedSocket`, idle or not).
    /// Touched only inside `perform`, which runs one at a time.
    @exclusivity(unchecked) private var spareReadBuffer: [UInt8]?

    /// A buffer of `size` bytes (contents undefined) for one read on the reactor's thread. Give it back
    /// with `takeBackReadBuffer` unless it was kept (a large read handed over whole).
    func lendReadBuffer(size: Int) -> [UInt8] {
        assertOwner("a read buffer")
        if let spare = spareReadBuffer {
            spareReadBuffer = nil
            if spare.count == size { return spare }
        }
        return [UInt8](unsafeUninitializedCapacity: size) { $1 = size }
    }

    /// Returns a buffer from `lendReadBuffer` for the next read.
    func takeBackReadBuffer(_ buffer: [UInt8]) {
        assertOwner("a read buffer")
        spareReadBuffer = buffer
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
        lock.withLock { () -> UInt64 in
            let id = timers.insert(deadline: deadline, action)
            if deadline < armedDeadline { armTimer(deadline) }
            return id
        }
    }

    /// Cancels a timer that has not fired yet (a no-op for one that has). Its closure is released now.
    func cancelTimer(_ id: UInt64) {
        _ = lock.withLock { timers.cancel(id) }  // the closure is released outside the lock
    }

    // MARK: the run-loop callback

    /// At most this many epoll rounds in one `perform` (a multiple of 8; tests lower it).
    @exclusivity(unchecked) var maxRounds = 64
    /// No new round once a `perform` has run this long (nanoseconds).
    static let roundBudget: UInt64 = 1_000_000

    /// A queue's reactor: the `perform` running on one of the queue's threads, and requests made
    /// meanwhile. Guarded by `lock`.
    @exclusivity(unchecked) private var queueRunner = SerialRunner()
    /// A queue's reactor: a timer's block came due and found a `perform` running (or started one):
    /// timers fire inside `perform`, like everything else the reactor runs.
    private let queueTimerDue = Atomic<Bool>(false)

    /// `perform` for a queue's reactor, one at a time even on a concurrent queue (the dispatch
    /// source's handler, a posted wake-up and a timer's block are separate work items, which a
    /// concurrent queue runs side by side). A request that finds a perform running is left for it:
    /// the running one goes round again before it lets go (`SerialRunner`). So callouts, posted work
    /// and timers for streams on one queue never overlap, as if the queue were serial.
    /// `driver`: the queue's thread asks, with the `count` events its wait fetched in `fetched` if they
    /// are still current, else nil for a fresh poll (see `driveQueue`); its perform runs one round.
    /// Returns false when another perform was running (the request is left for it).
    @discardableResult
    private func performOnQueue(driver: Bool = false, fetched: UnsafeMutablePointer<epoll_event>? = nil, count: Int = 0) -> Bool {
        guard lock.withLock({ queueRunner.enter() }) == .run else { return false }
        var driver = driver
        repeat {
            if performRounds(fetched: driver ? fetched : nil, count: count, single: driver) { wake() }
            driver = false
        } while lock.withLock({ () -> Bool in
            if queueRunner.finishRound() != nil { return true }
            if driverWaiting {
                driverWaiting = false
                lock.broadcast()
            }
            return false
        })
        return true
    }

    /// The version-1 source's perform callback: the run loop saw the epoll fd readable.
    private func perform() {
        if performRounds(fetched: nil, count: 0, single: false) { wake() }
    }

    // MARK: a queue's thread

    /// How many reactors hold a queue thread's slot (`drivesQueue`), process-wide, and how many may.
    static let queueDrivers = Atomic<Int>(0)
    /// Eight by default; tests change it to have a queue either way (0: every queue on a dispatch source).
    static let maxQueueDrivers = Atomic<Int>(8)

    /// Whether `queue` is the main queue: by its label, as each `DispatchQueue.main` is a new wrapper.
    private static func isMainQueue(_ queue: DispatchQueue) -> Bool {
        queue.label == DispatchQueue.main.label
    }

    private static func claimDriverSlot() -> Bool {
        var current = queueDrivers.load(ordering: .relaxed)
        while current < maxQueueDrivers.load(ordering: .relaxed) {
            let (exchanged, found) = queueDrivers.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        return false
    }

    private func giveBackDriverSlot() {
        if holdsDriverSlot.exchange(false, ordering: .relaxed) { Self.queueDrivers.subtract(1, ordering: .relaxed) }
    }

    /// A driven queue's thread: waits in the epoll set, then runs a perform on the queue with
    /// `queue.sync`, which runs the block on this thread when the queue is idle and waits for it
    /// otherwise, as a dispatch source's block would. An event then costs what it costs on the stream
    /// thread (one `epoll_wait`, no thread woken), where a dispatch source costs libdispatch's cycle: its
    /// epoll thread woken, a worker woken, the source re-armed (see Benchmarks/results/syscalls.md).
    ///
    /// The queue's rules hold: every callout runs on the queue, one at a time (`SerialRunner`), not while
    /// the queue runs other work. Posted work and timers still go through `queue.async` and
    /// `queue.asyncAfter`, so they keep their order with the user's own blocks. The perform runs one
    /// round, over what the wait fetched only if no socket was read or written since the wait looked
    /// (`Posix.ioCount`): by the time the queue runs the block, its other work (a user's read) may have
    /// taken the bytes that made a socket readable, and then the round polls afresh. One thread per
    /// queue (a shared one would deadlock where one queue's block waits for another queue's
    /// connection), for at most `maxQueueDrivers` queues at once; never the main queue.
    private func driveQueue(_ queue: DispatchQueue) {
        Posix.nameCurrentThread("SocketStreams q")
        driverThreadID.store(cssh_gettid(), ordering: .releasing)
        let fetched = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(eventCapacity))
        defer { fetched.deallocate() }
        // One work item for every turn, made once: `queue.sync` with a closure makes a block of it
        // each time (a copy and its context allocated and freed, ~500 instructions a wake-up). What a
        // turn and this loop share is held by reference, not captured as `var`s: the item escapes,
        // and Swift would check every access to a captured `var` at run time (~400 instructions).
        let shared = DriverTurn()
        let turn = DispatchWorkItem { [self] in
            let current = Posix.ioCount.load(ordering: .relaxed) == shared.ioSeen
            shared.performed = performOnQueue(driver: true, fetched: current ? fetched : nil, count: shared.count)
            shared.ioSeen = Posix.ioCount.load(ordering: .relaxed)
        }
        while true {
            let count = Posix.epollWait(epollFD, fetched, eventCapacity, timeout: -1)
            if driverStopping.load(ordering: .acquiring) { return }
            guard count > 0 else { continue }
            shared.count = count
            shared.performed = true
            queue.sync(execute: turn)
            let performed = shared.performed
            // A perform running elsewhere (a concurrent queue's) handles what is ready: wait for it to
            // end rather than find the same events again and again.
            if !performed {
                lock.withLock {
                    while queueRunner.isRunning {
                        driverWaiting = true
                        lock.wait()
                    }
                }
            }
        }
    }

    /// What a queue's driver thread and the turns it runs on the queue (`queue.sync`, on the same
    /// thread) share: touched only by that thread, one turn at a time, so without Swift's dynamic
    /// exclusivity checks.
    private final class DriverTurn {
        /// The socket I/O count (`Posix.ioCount`) when the thread last looked, on the queue: if it
        /// has not moved when the next turn runs, nothing has read or written a socket since the
        /// thread's wait looked at the epoll set, and what the wait fetched is current.
        @exclusivity(unchecked) var ioSeen = Posix.ioCount.load(ordering: .relaxed) &- 1
        /// How many events the wait fetched.
        @exclusivity(unchecked) var count = 0
        /// Whether the turn performed (false: a perform running elsewhere had the queue's work).
        @exclusivity(unchecked) var performed = true
    }

    /// A driven reactor's turn of its thread's loop: waits in `epoll_wait` for up to `timeout`
    /// milliseconds (-1: until something is ready), then runs one round over what it fetched.
    /// `runLoopDue`: CoreFoundation's port set was ready, so the thread should let the run loop handle
    /// what is due (`CFRunLoopRunInMode` with a zero timeout), then call `rearmRunLoopPorts`. `again`:
    /// work came in that no wake-up was written for, so the next wait should not block.
    ///
    /// What it saves over a run-loop source: CoreFoundation's pass each time the thread sleeps (its
    /// `ppoll`, its own `epoll_wait`, a `read` of the port that fired, and its bookkeeping), since the
    /// thread waits in this epoll set directly and runs the run loop only when the run loop has work.
    func drive(timeout: Int32) -> (runLoopDue: Bool, again: Bool) {
        let count = Posix.epollWait(epollFD, events, eventCapacity, timeout: timeout)
        runLoopDue = false
        let again = performRounds(fetched: events, count: count, single: true)
        return (runLoopDue, again)
    }

    /// Puts CoreFoundation's port set `fd` for this reactor's run loop and mode into a driven reactor's
    /// epoll set, one-shot (re-armed by `rearmRunLoopPorts` once the run loop has run): a port the run
    /// loop leaves ready must not make every round of `perform` find it again.
    func adoptRunLoopPorts(_ fd: Int32) throws(SystemError) {
        assert(isDriven)
        try Posix.epollControl(epollFD, EPOLL_CTL_ADD, fd, events: Self.runLoopPortsEvents, token: Self.runLoopPortsToken)
        runLoopPorts = fd
    }

    /// Watches CoreFoundation's port set again after the run loop ran (see `adoptRunLoopPorts`).
    func rearmRunLoopPorts() {
        try? Posix.epollControl(epollFD, EPOLL_CTL_MOD, runLoopPorts, events: Self.runLoopPortsEvents, token: Self.runLoopPortsToken)
    }

    private static var runLoopPortsEvents: UInt32 { cssh_epollin() | cssh_epolloneshot() }

    /// Runs rounds of the epoll set, each over a non-blocking `epoll_wait`, or with `single` one round
    /// (for a thread that waits in the epoll set again at once: the stream thread, a driven queue's),
    /// over the `count` events in `fetched` (what that thread's wait fetched) or else a fresh poll.
    /// Returns whether `wake` is needed (for a driven reactor, whether its thread should go round again
    /// without waiting: no wake-up is made).
    private func performRounds(fetched: UnsafeMutablePointer<epoll_event>?, count fetchedCount: Int, single: Bool) -> Bool {
        performing.store(UInt(pthread_self()), ordering: .relaxed)
        // Rounds until the epoll set has nothing ready, within a budget, so one busy socket cannot
        // starve the run loop's other sources and timers: at most `maxRounds`, and no new round once
        // `roundBudget` has passed (the clock is read every eighth round). Each return to the run
        // loop costs CoreFoundation a pass of about ten syscalls, so the budget is in time, not in
        // events (a 1 GiB download in 64 KiB reads: 8-round performs made 2,057 passes; see
        // Benchmarks/results/syscalls.md). A driven reactor runs one round, over what its wait fetched:
        // its thread's next `epoll_wait` finds whatever is left (every registration is level-triggered)
        // without a non-blocking poll that would mostly find nothing, and the run loop's own work, whose
        // port set is in the epoll set, gets its turn between any two rounds. A queue's reactor keeps
        // the rounds although libdispatch would fire its source again for what a round leaves: what the
        // next poll finds (often the peer's answer to what the round sent) would otherwise cost
        // libdispatch's cycle, its epoll thread and a worker woken (measured with one round a perform:
        // ping-pong 5.75 -> 9.86 system calls and 1.76 -> 3.06 context switches a round trip, download
        // 2.07 -> 11.24 calls a 64 KiB chunk, `Benchmarks/syscalls --perf`).
        var rounds = 0
        var exhausted = false
        let started = single ? 0 : Posix.monotonicNanoseconds()
        if queue != nil, queueTimerDue.exchange(false, ordering: .acquiringAndReleasing) { fireTimers() }
        while true {
            if rounds & 7 == 0, rounds > 0,
                rounds >= maxRounds || Posix.monotonicNanoseconds() - started >= Self.roundBudget
            {
                exhausted = true
                break
            }
            let round = rounds == 0 ? fetched ?? events : events
            let count =
                rounds == 0 && fetched != nil ? fetchedCount : single && rounds > 0 ? 0 : Posix.epollPoll(epollFD, events, eventCapacity)
            if count == 0 { break }
            rounds += 1
            readAheads = Self.readAheadsPerRound
            var wake = false
            var timer = false
            var stopOnly = false
            lock.lock()
            for index in 0..<count {
                let event = round[index]
                switch event.data.u64 {
                case Self.wakeToken: wake = true
                case Self.timerToken: timer = true
                case Self.runLoopPortsToken: runLoopDue = true
                case Self.stopToken: stopOnly = count == 1  // stays ready once its thread has stopped
                case let token:
                    if let handler = handlers[token] { firing.append((handler, event.events)) }
                }
            }
            lock.unlock()
            if stopOnly { break }
            if wake {
                Posix.drainCounter(wakeFD)
                lock.withLock { wakePending = false }
            }
            if timer { fireTimers() }
            for (handler, mask) in firing { handler.reactor(self, fired: mask) }
            firing.empty()
            drainWork()
        }
        drainWork()
        let again = lock.withLock { () -> Bool in
            performing.store(0, ordering: .relaxed)
            // Rounds used up: events are left in the epoll set, and the run loop waits for our port
            // edge-triggered, so only a fresh eventfd write brings it back. Write even if a wake-up
            // is already pending: its edge may be the one that started this perform.
            // (Measured on this project's Linux 6.18 machines: events left in an epoll set after epoll_wait
            // raise no new edge for an epoll fd that waits on it.)
            if exhausted || (!tasks.isEmpty || !ready.isEmpty) && !wakePending {
                if isDriven { return true }
                wakePending = true
                return true
            }
            return false
        }
        return again
    }

    /// Runs posted tasks and delivers stream events until there is nothing left. The lists are
    /// swapped with spare ones, so a busy reactor allocates nothing here.
    private func drainWork() {
        while true {
            if !localReady.isEmpty {
                swap(&localReady, &spareReady)
                for item in spareReady { item.target.deliverEvents(item.slot, on: self) }
                spareReady.empty()
                continue
            }
            if !localTasks.isEmpty {
                swap(&localTasks, &spareTasks)
                for task in spareTasks { task.run() }
                spareTasks.empty()
                continue
            }
            guard sharedWork.load(ordering: .acquiring) else { return }
            lock.lock()
            sharedWork.store(false, ordering: .relaxed)
            swap(&tasks, &spareTasks)
            swap(&ready, &spareReady)
            lock.unlock()
            for task in spareTasks { task.run() }
            for item in spareReady { item.target.deliverEvents(item.slot, on: self) }
            spareTasks.empty()
            spareReady.empty()
        }
    }

    /// Nothing to deliver, no posted work, and nothing ready in the epoll set (peeked without
    /// consuming: every registration is level-triggered). Lets tests run a run loop until every
    /// readiness the kernel reports has been handled, instead of waiting to see that nothing happens.
    var isQuiescent: Bool {
        let idle = lock.withLock { tasks.isEmpty && ready.isEmpty }  // localReady is empty outside perform
        guard idle else { return false }
        var event = epoll_event()
        return Posix.epollPoll(epollFD, &event, 1) == 0
    }

    private func fireTimers() {
        if timerFD >= 0 { Posix.drainCounter(timerFD) }
        let now = Posix.monotonicNanoseconds()
        let due = lock.withLock { () -> [TimerAction] in
            var due: [TimerAction] = []
            while let action = timers.popFirst(dueBy: now) { due.append(action) }
            armedDeadline = .max
            if let next = timers.nextDeadline {
                armTimer(next)
            } else if timerFD >= 0 {
                Posix.timerFDArm(timerFD, deadlineNanoseconds: 0)
            }
            return due
        }
        for action in due { action.run() }
    }

    /// Makes `fireTimers` run at `deadline` (monotonic nanoseconds): the timerfd of a run loop's
    /// reactor, or a block on the queue (capped at a day, and re-armed from there: Dispatch's time
    /// arithmetic must not overflow on absurd timeouts). A block that finds nothing due re-arms for
    /// the earliest remaining deadline; a cancelled timer's block finds nothing and does nothing.
    /// Called with `lock` held.
    private func armTimer(_ deadline: UInt64) {
        armedDeadline = deadline
        guard let queue else { return Posix.timerFDArm(timerFD, deadlineNanoseconds: deadline) }
        let now = Posix.monotonicNanoseconds()
        let delay = deadline > now ? min(deadline - now, 86_400 * 1_000_000_000) : 0
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak self] in
            guard let self else { return }
            queueTimerDue.store(true, ordering: .releasing)
            performOnQueue()
        }
    }
}

/// The CFString for a run-loop mode name. The common-modes pseudo-mode must be CoreFoundation's own
/// constant: `CFRunLoopAddSource` recognises it by pointer, and an equal string would instead name
/// an ordinary mode that nobody runs.
private func makeCFString(_ string: String) -> CFRunLoopMode {
    if string == RunLoop.Mode.common.rawValue { return kCFRunLoopCommonModes }
    if string == RunLoop.Mode.default.rawValue { return kCFRunLoopDefaultMode }
    return CFStringCreateWithCString(nil, string, CFStringBuiltInEncodings.UTF8.rawValue)
}

extension Array {
    /// Removes every element and keeps the storage, one at a time from the end: the reactor's lists
    /// hold an element or two, and `removeAll(keepingCapacity:)` goes through the generic
    /// `replaceSubrange`, about 200 instructions a call (callgrind, ping-pong: -2.3% in all).
    @inline(__always)
    fileprivate mutating func empty() {
        while !isEmpty { removeLast() }
    }
}
