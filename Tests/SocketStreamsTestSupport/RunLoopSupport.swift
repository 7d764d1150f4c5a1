import Foundation

/// Runs the current thread's run loop in `mode`, in short slices, until `condition` holds or
/// `timeout` seconds have passed. Returns whether the condition holds. Tests assert the result.
@discardableResult
package func runUntil(timeout: TimeInterval, mode: RunLoop.Mode = .default, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while !condition() {
        let now = Date()
        if now >= deadline { return condition() }
        let sliceEnd = min(deadline, now.addingTimeInterval(0.01))
        if !RunLoop.current.run(mode: mode, before: sliceEnd) {
            // Nothing is scheduled in `mode` (yet): run(mode:before:) returns at once. Wait out
            // the slice instead of spinning; nothing can be delivered in this mode meanwhile.
            Thread.sleep(until: sliceEnd)
        }
    }
    return true
}

/// Runs the current run loop in `mode` for `duration` seconds (used to show that something
/// does NOT happen in a window).
package func runFor(_ duration: TimeInterval, mode: RunLoop.Mode = .default) {
    runUntil(timeout: duration, mode: mode) { false }
}

/// A value carried across threads by tests whose threading is explicit (a stream pair handed
/// to a worker thread, a result handed back). The tests own the synchronisation.
package final class UncheckedBox<Value>: @unchecked Sendable {
    package var value: Value
    package init(_ value: Value) { self.value = value }
}

/// Runs `body` on a fresh thread and waits at most `timeout` seconds for it. Returns nil if it
/// did not finish in time (the thread is then abandoned; the caller fails the test and closes
/// whatever the body is blocked on). Used for blocking `read`/`write` calls, so that a library
/// bug shows up as a failed assertion instead of a hung suite.
package func callWithDeadline<T>(_ timeout: TimeInterval, _ body: @escaping () -> T) -> T? {
    let work = UncheckedBox(body)
    let result = Locked<T?>(nil)
    let done = Signal()
    let thread = Thread {
        result.value = work.value()
        done.raise()
    }
    thread.name = "callWithDeadline"
    thread.start()
    guard done.wait(timeout: timeout) else { return nil }
    return result.value
}

/// A thread that does nothing but run its RunLoop in `mode`, like an application's network
/// thread. `sync` runs a closure on that thread (between run-loop slices) and waits for it.
package final class RunLoopThread: @unchecked Sendable {
    // @unchecked: `mode` is immutable; the jobs, flags, loop and thread are touched only under `condition`.
    package let mode: RunLoop.Mode
    private let condition = NSCondition()
    private var jobs: [() -> Void] = []
    private var stopping = false
    private var finished = false
    private var loop: RunLoop?
    private var threadObject: Thread?

    package init(name: String, mode: RunLoop.Mode = .default) {
        self.mode = mode
        // Weak: the thread holds the object only while it runs, so a stopped RunLoopThread and its
        // Thread do not keep each other alive (LeakSanitizer reported the cycle).
        let thread = Thread { [weak self] in self?.main() }
        thread.name = name
        thread.start()
        condition.lock()
        while loop == nil { condition.wait() }
        condition.unlock()
    }

    deinit { stop() }

    /// The thread's RunLoop (schedule streams on it from inside `sync`).
    package var runLoop: RunLoop {
        condition.lock()
        defer { condition.unlock() }
        return loop!
    }

    /// The Thread object, to compare with `Thread.current` seen by delegates.
    package var thread: Thread {
        condition.lock()
        defer { condition.unlock() }
        return threadObject!
    }

    /// Runs `body` on the run-loop thread and returns its result. Returns nil (without running
    /// it) once the thread is stopping, or if the thread does not get to it within `timeout`.
    @discardableResult
    package func sync<T>(timeout: TimeInterval = 5, _ body: @escaping () -> T) -> T? {
        let work = UncheckedBox(body)
        let result = Locked<T?>(nil)
        let done = Signal()
        condition.lock()
        if stopping || finished {  // nobody left to run it
            condition.unlock()
            return nil
        }
        jobs.append {
            result.value = work.value()
            done.raise()
        }
        condition.unlock()
        guard done.wait(timeout: timeout) else { return nil }
        return result.value
    }

    /// Asks the thread to leave its loop and waits (at most 2 s) until it has.
    package func stop() {
        condition.lock()
        stopping = true
        let deadline = Date(timeIntervalSinceNow: 2)
        while !finished && condition.wait(until: deadline) {}
        condition.unlock()
    }

    private func main() {
        let runLoop = RunLoop.current
        // A timer that never fires keeps run(mode:before:) waiting (instead of returning at
        // once) while no stream is scheduled in the mode yet.
        let keepAlive = Timer(fire: .distantFuture, interval: 1_000_000, repeats: true) { _ in }
        runLoop.add(keepAlive, forMode: mode)
        condition.lock()
        loop = runLoop
        threadObject = Thread.current
        condition.broadcast()
        condition.unlock()
        while true {
            condition.lock()
            let pending = jobs
            jobs.removeAll()
            let stop = stopping
            condition.unlock()
            for job in pending { job() }
            if stop { break }
            _ = runLoop.run(mode: mode, before: Date(timeIntervalSinceNow: 0.01))
        }
        keepAlive.invalidate()
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }
}

/// True if `thread` is the main thread.
package func isMainThread(_ thread: Thread) -> Bool {
    thread === Thread.mainThread
}
