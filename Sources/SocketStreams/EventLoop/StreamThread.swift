import CoreFoundation
import CSocketStreamsShims
import Foundation
import Glibc
import Synchronization

/// The package's own run-loop thread, started on first use.
///
/// Opens that no client run loop can be trusted to drive (name resolution results, non-blocking
/// connects, Happy Eyeballs and deadline timers, handshake stages of unscheduled or blocking clients)
/// run on its reactor, and clients may schedule streams on its run loop (`RunLoop.socketStreams`) the
/// way GCDAsyncSocket schedules its CFStreams on a dedicated thread.
///
/// How it waits (the streams on it are ours end to end). The thread's reactor for the
/// default mode is *driven*: the thread waits in the reactor's epoll set itself, and CoreFoundation's
/// port set for that mode (its wake-up port, its timers' port, the ports of any other source a client
/// adds) sits in that epoll set too. A socket event costs one `epoll_wait` and no CoreFoundation pass;
/// only when the run loop has something to do (a `Timer`, a block with a wake-up, another source) does
/// the thread run it, once, without waiting (`CFRunLoopRunInMode` with a zero timeout). Timers, blocks
/// and sources on `RunLoop.socketStreams` behave as on any run loop running in the default mode. The
/// port set is found once, at the start, by asking the kernel which epoll set holds a probe port added
/// to the mode (`/proc/self/fdinfo`); where that cannot be read the thread runs the run loop forever
/// with the reactor as its source, as every other run loop does.
enum StreamThread {
    private final class Loop: Sendable {
        nonisolated(unsafe) let runLoop: RunLoop
        nonisolated(unsafe) let cfRunLoop: CFRunLoop
        nonisolated(unsafe) let thread: Thread
        /// The default mode's reactor, driven by the thread (nil: the thread runs the run loop, and the
        /// reactor is a run-loop source made on first use).
        let driven: Reactor?
        init(_ runLoop: RunLoop, _ cfRunLoop: CFRunLoop, _ thread: Thread, driven: Reactor?) {
            self.runLoop = runLoop
            self.cfRunLoop = cfRunLoop
            self.thread = thread
            self.driven = driven
        }
    }

    /// Whether a thread started from now on drives its reactor (tests turn it off, before the start, to
    /// run the fallback: what a process without `/proc` gets).
    static let drivesItsReactor = Atomic<Bool>(true)

    /// How many times the driven thread ran its run loop for CoreFoundation's own work (for tests: a
    /// port the run loop leaves ready would show as a count that keeps climbing).
    static let runLoopTurns = Atomic<Int>(0)

    /// Set once the thread runs; read without a lock on every schedule.
    private static let started = Atomic<Bool>(false)
    private static let loopSlot = Guarded<Loop?>(nil)
    private static let reactorSlot = Guarded<Reactor?>(nil)
    /// Serialises starts (a start waits for the new thread).
    private static let starting = NSLock()

    /// How many fds the new thread may need: its CoreFoundation run loop's (three to six on Swift 6.3:
    /// wake-up eventfds, port sets and timer ports), the probe that finds the port set, and its
    /// reactor's (epoll set, eventfd, timerfd). Held free until the thread makes them: CoreFoundation
    /// cannot report failing to create its own, and its thread would never become ready. What the
    /// thread does not take is free again once it runs.
    private static let runLoopDescriptors = 10

    /// The thread's run loop, starting the thread if it has not started. Throws EMFILE (ENFILE) when
    /// the fds its run loop needs are not free, EAGAIN when no thread can be made; a later call tries
    /// again.
    private static func loop() throws(SystemError) -> Loop {
        if started.load(ordering: .acquiring), let loop = loopSlot.withLock({ $0 }) { return loop }
        starting.lock()
        defer { starting.unlock() }
        if let loop = loopSlot.withLock({ $0 }) { return loop }
        var reserved = reserve.withLock { held in
            defer { held = [] }
            return held
        }
        if reserved.isEmpty { reserved = try reserveDescriptors() }
        let ready = DispatchSemaphore(value: 0)
        let handoff = Guarded<Loop?>(nil)
        let held = reserved
        // A thread of our own making: Foundation's `Thread.start()` ignores a failed `pthread_create`,
        // and this call would wait for good for a thread that never runs. Without one, the fds set
        // aside go back to the reserve for the next try, and the error (EAGAIN) is thrown.
        do {
            try Posix.startThread { run(holding: held, ready: ready, handoff: handoff) }
        } catch {
            reserve.withLock { $0 = held }
            throw error
        }
        ready.wait()
        let loop = handoff.withLock { $0! }
        loopSlot.withLock { $0 = loop }
        started.store(true, ordering: .releasing)
        return loop
    }

    /// The stream thread: closes `held` (the fds set aside for it, now CoreFoundation's and the
    /// reactor's to take), makes its run loop and reactor, hands them over in `handoff`, signals
    /// `ready`, and runs for good.
    private static func run(holding held: [Int32], ready: DispatchSemaphore, handoff: Guarded<Loop?>) -> Never {
        Thread.current.name = "SocketStreams"
        Posix.nameCurrentThread("SocketStreams")
        held.forEach(Posix.close)  // now CoreFoundation (and the reactor) can have them
        // A timer that never fires keeps the run loop's default mode from being empty, which would
        // make a run return at once (before the reactor exists, or if it could not be created).
        let keepAlive = Timer(fire: .distantFuture, interval: 1_000_000, repeats: true) { _ in }
        RunLoop.current.add(keepAlive, forMode: .default)
        let cfRunLoop = CFRunLoopGetCurrent()!
        let driven = makeDrivenReactor(cfRunLoop, likely: held)
        handoff.withLock { $0 = Loop(RunLoop.current, cfRunLoop, Thread.current, driven: driven?.0) }
        ready.signal()
        // The driven loop runs inside the run loop, in a block it calls out to, and never returns:
        // CoreFoundation ignores CFRunLoopWakeUp while its run loop is not running (its per-run
        // "ignore wake-ups" flag), and a block is called out to where the flag is clear. Each
        // turn for the run loop's own work is a nested run that does not wait.
        if let (reactor, driver) = driven {
            CFRunLoopPerformBlock(cfRunLoop, kCFRunLoopDefaultMode) { drive(reactor, driver) }
        }
        // CFRunLoopRun, not `RunLoop.run(mode:before:)`: the latter returns after every source it
        // handles (CoreFoundation's returnAfterSourceHandled), and each return and re-entry costs
        // three `_CFIsMainThread` checks, a getpid and a gettid each, per wake-up.
        while true {
            CFRunLoopRun()
        }
    }

    /// The stream thread's loop when its reactor is driven: wait in the reactor's epoll set, and run the
    /// run loop (without waiting) only when CoreFoundation's port set, in that epoll set, says it has
    /// work. Never returns.
    private static func drive(_ reactor: Reactor, _ driver: StreamThreadDriver) {
        var timeout: Int32 = -1
        while true {
            let outcome = reactor.waitAndPerform(timeout: timeout)
            timeout = outcome.again ? 0 : -1
            guard outcome.runLoopDue else { continue }
            runLoopTurns.add(1, ordering: .relaxed)
            _ = CFRunLoopRunInMode(kCFRunLoopDefaultMode, 0, true)
            driver.rearmRunLoopPorts(reactor)
        }
    }

    /// The default mode's reactor for the new thread's run loop, driven by the thread, registered as
    /// that run loop's and mode's reactor for good; nil if it or CoreFoundation's port set cannot be
    /// had (the thread then runs its run loop). On the new thread, before anything else can use it.
    private static func makeDrivenReactor(_ cfRunLoop: CFRunLoop, likely: [Int32]) -> (Reactor, StreamThreadDriver)? {
        guard drivesItsReactor.load(ordering: .relaxed), let ports = RunLoopPorts.portSet(of: cfRunLoop, likely: likely),
            let reactor = try? Reactor(runLoop: cfRunLoop, mode: RunLoop.Mode.default.rawValue, driven: true),
            let driver = reactor.driver as? StreamThreadDriver
        else { return nil }
        do {
            try driver.adoptRunLoopPorts(ports, of: reactor)
        } catch {
            return nil
        }
        ReactorRegistry.shared.install(reactor)
        return (reactor, driver)
    }

    /// The stream thread's run loop, starting the thread if needed; throws EMFILE (ENFILE) when the
    /// fds its run loop needs are not free (a later call tries again).
    static func runLoop() throws(SystemError) -> RunLoop { try loop().runLoop }

    /// The stream thread, nil if it has not started (never starts it).
    static var thread: Thread? {
        guard started.load(ordering: .acquiring) else { return nil }
        return loopSlot.withLock { $0?.thread }
    }

    /// Whether the caller runs on the stream thread.
    static var isCurrent: Bool {
        guard let thread else { return false }
        return thread === Thread.current
    }

    /// Reserves the fds the thread's run loop will need, once, if the thread has not started and
    /// nothing is reserved; a failure is ignored (a later call tries again). One atomic load once done.
    ///
    /// Called where the library makes its first objects (every stream pair, every listener): the
    /// reserve is taken while the process still has fds, and the start uses it, so the thread can
    /// always start later (`RunLoop.socketStreams` never has to wait, an open moved to the stream
    /// thread never finds it missing). The thread itself is not started here: that would make every
    /// process multi-threaded (Guides/Architecture.md, the stream thread). A process that never
    /// starts the thread holds these ten eventfds for its lifetime.
    @inline(__always)
    static func prepare() {
        if prepared.load(ordering: .acquiring) { return }
        starting.lock()
        defer { starting.unlock() }
        if prepared.load(ordering: .acquiring) { return }
        guard !started.load(ordering: .acquiring) else { return prepared.store(true, ordering: .releasing) }
        guard let fds = try? reserveDescriptors() else { return }
        reserve.withLock { $0 = fds }
        prepared.store(true, ordering: .releasing)
    }

    /// Set once the fds are reserved or the thread has started.
    private static let prepared = Atomic<Bool>(false)
    /// The reserved fds, until the start takes them. Guarded by `starting` too.
    private static let reserve = Guarded<[Int32]>([])

    /// `runLoopDescriptors` eventfds, or EMFILE (ENFILE) with none left open.
    private static func reserveDescriptors() throws(SystemError) -> [Int32] {
        var reserved: [Int32] = []
        for _ in 0..<runLoopDescriptors {
            do {
                reserved.append(try Posix.eventFD())
            } catch {
                reserved.forEach(Posix.close)
                throw error
            }
        }
        return reserved
    }

    /// The run loop for `RunLoop.socketStreams`, which cannot throw nor be absent. If the thread cannot
    /// start (out of fds before any pair or listener reserved them: see `prepare()`; or out of
    /// threads), it waits until it can, retrying with a back-off up to 100 ms and saying so once on
    /// stderr, rather than trap.
    /// CoreFoundation cannot make a run loop without fds (it halts), so there is no run loop to
    /// return meanwhile. `RunLoop.startSocketStreams()` throws instead of waiting.
    /// How many `waitingRunLoop` calls had to wait (for tests).
    static let waits = Atomic<Int>(0)

    static var waitingRunLoop: RunLoop {
        var pause: UInt32 = 1_000
        var told = false
        while true {
            do {
                return try loop().runLoop
            } catch {
                if !told {
                    told = true
                    waits.add(1, ordering: .relaxed)
                    let line = "SocketStreams: the stream thread cannot start (\(error)); waiting\n"
                    _ = line.withCString { Glibc.write(2, $0, strlen($0)) }
                }
                usleep(pause)
                pause = min(pause * 2, 100_000)
            }
        }
    }

    /// The stream thread's run loop and its CFRunLoop if the thread has started, without starting it.
    static var knownRunLoop: (runLoop: RunLoop, cfRunLoop: CFRunLoop)? {
        guard started.load(ordering: .acquiring), let loop = loopSlot.withLock({ $0 }) else { return nil }
        return (loop.runLoop, loop.cfRunLoop)
    }

    /// The reactor serving the stream thread's run loop in the default mode, created on first use
    /// and never released. Throws when it (or the thread) cannot be created (out of file
    /// descriptors); a later call tries again.
    static func reactor() throws(SystemError) -> Reactor {
        if let reactor = reactorSlot.withLock({ $0 }) { return reactor }
        let loop = try loop()
        if let driven = loop.driven { return driven }
        let created = try ReactorRegistry.shared.acquire(cfRunLoop: loop.cfRunLoop, mode: RunLoop.Mode.default.rawValue)
        let (kept, spare) = reactorSlot.withLock { slot -> (Reactor, Reactor?) in
            if let first = slot { return (first, created) }
            slot = created
            return (created, nil)
        }
        if let spare { ReactorRegistry.shared.release(spare) }
        return kept
    }
}

extension RunLoop {
    /// The run loop of SocketStreams' dedicated stream thread, started on first use.
    ///
    /// Schedule streams here (`stream.schedule(in: .socketStreams, forMode: .default)`) to have their
    /// delegates called on that thread, like CFNetwork clients that keep a private CFStream thread.
    /// Delegate callouts run on that thread: do not block in them.
    ///
    /// The file descriptors its thread needs (ten) are set aside when the first stream pair or
    /// listener is made, so the thread can start whenever it is first asked for. Only if the process
    /// was out of them before that does this wait until some are free (it never traps);
    /// ``startSocketStreams()`` throws instead.
    public static var socketStreams: RunLoop { StreamThread.waitingRunLoop }

    /// The stream thread's run loop (``socketStreams``), starting the thread if needed. Throws an
    /// `NSPOSIXErrorDomain` error, `EMFILE` or `ENFILE`, if the process is out of file descriptors
    /// (the thread needs ten), or `EAGAIN` if no thread can be made (`pthread_create`); a later call
    /// tries again. SocketStreams' own; CFNetwork's stream thread is private.
    ///
    /// The thread runs at the process's priority (the main thread's nice value). A thread may raise its
    /// own nice value but lowering it needs privilege, so if the first code to need the thread runs at
    /// a lower priority (a background task's dispatch worker, at nice 10), the thread can only keep
    /// that: call this early from the main thread to start it at the process's.
    public static func startSocketStreams() throws -> RunLoop {
        do {
            return try StreamThread.runLoop()
        } catch {
            throw StreamErrors.posix(error.code, "Could not start the SocketStreams stream thread")
        }
    }
}

/// Drives the stream thread's reactor: the thread waits in the epoll set itself (`StreamThread.drive`),
/// with no run-loop source, and CoreFoundation's port set for the default mode sits in that epoll set
/// (`ReactorToken.runLoopPorts`), so the thread runs its run loop only when the run loop has work.
final class StreamThreadDriver: RunLoopDriver {
    nonisolated(unsafe) let cfRunLoop: CFRunLoop  // CoreFoundation's run loops may be used from any thread
    let signals: RunLoopSignals
    /// CoreFoundation's port set, once adopted (-1 before).
    private let runLoopPorts = Atomic<Int32>(-1)

    init(runLoop: CFRunLoop, signals: RunLoopSignals) {
        self.cfRunLoop = runLoop
        self.signals = signals
    }

    /// Puts CoreFoundation's port set `fd` for the run loop's default mode into `reactor`'s epoll set,
    /// one-shot (re-armed by `rearmRunLoopPorts` once the run loop has run): a port the run loop leaves
    /// ready must not make every round find it again.
    func adoptRunLoopPorts(_ fd: Int32, of reactor: Reactor) throws(SystemError) {
        try Posix.epollControl(reactor.epollFD, EPOLL_CTL_ADD, fd, events: Self.portEvents, token: ReactorToken.runLoopPorts)
        runLoopPorts.store(fd, ordering: .relaxed)
    }

    /// The stream thread runs its run loop between performs, on the same thread.
    var isCurrentContext: Bool { StreamThread.isCurrent }

    /// Its thread already waits in the epoll set; it is never detached.
    func attach(_ reactor: Reactor) {}
    func detach() {}

    /// Watches CoreFoundation's port set again after the run loop ran (see `adoptRunLoopPorts`).
    func rearmRunLoopPorts(_ reactor: Reactor) {
        let fd = runLoopPorts.load(ordering: .relaxed)
        try? Posix.epollControl(reactor.epollFD, EPOLL_CTL_MOD, fd, events: Self.portEvents, token: ReactorToken.runLoopPorts)
    }

    private static var portEvents: UInt32 { cssh_epollin() | cssh_epolloneshot() }
}
