import CoreFoundation
import Foundation
import Synchronization

/// The package's own run-loop thread, started on first use.
///
/// It runs a Foundation `RunLoop` in the default mode forever. Opens that no client run loop can be
/// trusted to drive (name resolution results, non-blocking connects, Happy Eyeballs and deadline
/// timers, handshake stages of unscheduled or blocking clients) run on its reactor, and clients may
/// schedule streams on its run loop (`RunLoop.socketStreams`) the way GCDAsyncSocket schedules its
/// CFStreams on a dedicated thread.
enum StreamThread {
    private final class Loop: Sendable {
        nonisolated(unsafe) let runLoop: RunLoop
        nonisolated(unsafe) let cfRunLoop: CFRunLoop
        nonisolated(unsafe) let thread: Thread
        init(_ runLoop: RunLoop, _ cfRunLoop: CFRunLoop, _ thread: Thread) {
            self.runLoop = runLoop
            self.cfRunLoop = cfRunLoop
            self.thread = thread
        }
    }

    /// Set once the thread runs; read without a lock on every schedule.
    private static let started = Atomic<Bool>(false)
    private static let loopSlot = Guarded<Loop?>(nil)
    private static let reactorSlot = Guarded<Reactor?>(nil)
    /// Serialises starts (a start waits for the new thread).
    private static let starting = NSLock()

    /// How many fds the new thread's CoreFoundation run loop may need (its epoll set, wake-up
    /// eventfd and timers). Held free until the thread creates its run loop: CoreFoundation cannot
    /// report failing to create them, and its thread would never become ready.
    private static let runLoopDescriptors = 4

    /// The thread's run loop, starting the thread if it has not started. Throws EMFILE (ENFILE) when
    /// the fds its run loop needs are not free; a later call tries again.
    private static func loop() throws(SystemError) -> Loop {
        if started.load(ordering: .acquiring), let loop = loopSlot.withLock({ $0 }) { return loop }
        starting.lock()
        defer { starting.unlock() }
        if let loop = loopSlot.withLock({ $0 }) { return loop }
        var reserved: [Int32] = []
        for _ in 0..<runLoopDescriptors {
            do {
                reserved.append(try Posix.eventFD())
            } catch {
                reserved.forEach(Posix.close)
                throw error
            }
        }
        let ready = DispatchSemaphore(value: 0)
        let handoff = Guarded<Loop?>(nil)
        let held = reserved
        let thread = Thread {
            Posix.nameCurrentThread("SocketStreams")
            held.forEach(Posix.close)  // now CoreFoundation can have them
            // A timer that never fires keeps `run` waiting even while no source is attached (before
            // the reactor exists, or if it could not be created).
            let keepAlive = Timer(fire: .distantFuture, interval: 1_000_000, repeats: true) { _ in }
            RunLoop.current.add(keepAlive, forMode: .default)
            handoff.withLock { $0 = Loop(RunLoop.current, CFRunLoopGetCurrent(), Thread.current) }
            ready.signal()
            while true {
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
            }
        }
        thread.name = "SocketStreams"
        thread.start()
        ready.wait()
        let loop = handoff.withLock { $0! }
        loopSlot.withLock { $0 = loop }
        started.store(true, ordering: .releasing)
        return loop
    }

    /// The stream thread's run loop (starting the thread). Out of fds on the very first use, this
    /// traps with EMFILE: a `RunLoop` cannot be absent. (The library's own uses go through
    /// `reactor()`, which reports EMFILE instead.)
    static var runLoop: RunLoop { startedLoop.runLoop }

    /// The stream thread (starting it; traps as `runLoop` does).
    static var thread: Thread { startedLoop.thread }

    private static var startedLoop: Loop {
        do {
            return try loop()
        } catch {
            fatalError("SocketStreams: the stream thread could not start: \(error)")
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
        let created = try ReactorRegistry.shared.acquire(cfRunLoop: try loop().cfRunLoop, mode: RunLoop.Mode.default.rawValue)
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
    public static var socketStreams: RunLoop { StreamThread.runLoop }
}
