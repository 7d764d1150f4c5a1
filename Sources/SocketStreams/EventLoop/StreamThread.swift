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
    private static let reactorSlot = Guarded<Reactor?>(nil)

    private static let loop: Loop = {
        let ready = DispatchSemaphore(value: 0)
        let handoff = Guarded<Loop?>(nil)
        let thread = Thread {
            Posix.nameCurrentThread("SocketStreams")
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
        started.store(true, ordering: .releasing)
        return loop
    }()

    /// The stream thread's run loop (starting the thread).
    static var runLoop: RunLoop { loop.runLoop }

    /// The stream thread (starting it).
    static var thread: Thread { loop.thread }

    /// The stream thread's run loop and its CFRunLoop if the thread has started, without starting it.
    static var knownRunLoop: (runLoop: RunLoop, cfRunLoop: CFRunLoop)? {
        guard started.load(ordering: .acquiring) else { return nil }
        return (loop.runLoop, loop.cfRunLoop)
    }

    /// The reactor serving the stream thread's run loop in the default mode, created on first use
    /// and never released. Throws when it cannot be created (out of file descriptors); a later call
    /// tries again.
    static func reactor() throws(SystemError) -> Reactor {
        if let reactor = reactorSlot.withLock({ $0 }) { return reactor }
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
    public static var socketStreams: RunLoop { StreamThread.runLoop }
}
