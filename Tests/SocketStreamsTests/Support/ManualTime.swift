import CoreFoundation
import Foundation
@testable import SocketStreams
import XCTest

/// A clock that moves only when the test advances it. Timers that come due are posted to their
/// reactors, so they still fire on the reactor's own thread, as real ones do. Inject it before
/// `open()` with `connection.someOptions.time = clock`.
final class ManualTime: TimeSource, @unchecked Sendable {
    private struct Timer {
        let deadline: UInt64
        let id: UInt64
        let reactor: Reactor
        let fire: @Sendable () -> Void
    }

    private let lock = NSCondition()
    private var current: UInt64 = 1_000_000_000_000
    private var nextID: UInt64 = 1
    private var timers: [Timer] = []

    func now() -> UInt64 { lock.withLock { current } }

    func schedule(after nanoseconds: UInt64, on reactor: Reactor, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        lock.withLock {
            let id = nextID
            nextID += 1
            let (deadline, overflow) = current.addingReportingOverflow(nanoseconds)
            timers.append(Timer(deadline: overflow ? .max : deadline, id: id, reactor: reactor, fire: fire))
            lock.broadcast()
            return id
        }
    }

    func cancel(_ timer: UInt64, on reactor: Reactor) {
        lock.withLock {
            timers.removeAll { $0.id == timer }
            lock.broadcast()  // `waitForTimers` waits for cancels too
        }
    }

    /// How far in the future each pending timer is, in seconds, soonest first.
    var pending: [TimeInterval] {
        lock.withLock { timers.map { Double($0.deadline - current) / 1e9 }.sorted() }
    }

    /// Moves the clock on; timers now due are posted to their reactors, earliest first.
    func advance(by seconds: TimeInterval) {
        let due = lock.withLock { () -> [Timer] in
            current += UInt64((seconds * 1e9).rounded())
            let due = timers.filter { $0.deadline <= current }.sorted { $0.deadline < $1.deadline }
            timers.removeAll { $0.deadline <= current }
            return due
        }
        for timer in due { timer.reactor.post(timer.fire) }
    }

    /// Blocks the calling thread (not a run loop) until `predicate` holds for the pending timers.
    func waitForTimers(timeout: TimeInterval = 5, _ predicate: ([TimeInterval]) -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        lock.lock()
        defer { lock.unlock() }
        while !predicate(timers.map { Double($0.deadline - current) / 1e9 }.sorted()) {
            if !lock.wait(until: deadline) { return false }
        }
        return true
    }
}

/// Runs the current thread's run loop in `mode` until its reactor has nothing ready and nothing to
/// deliver: every readiness the kernel reports right now has been turned into events and those
/// events delivered. The deterministic form of "run a while and see that nothing (more) happens".
func settle(mode: RunLoop.Mode = .default, file: StaticString = #filePath, line: UInt = #line) {
    for _ in 0..<10_000 {
        _ = RunLoop.current.run(mode: mode, before: Date())
        let reactor = ReactorRegistry.shared.existing(cfRunLoop: CFRunLoopGetCurrent(), mode: mode.rawValue)
        if reactor?.isQuiescent ?? true { return }
    }
    XCTFail("the run loop never settled", file: file, line: line)
}

/// Waits (spinning, at most `timeout`) until the kernel holds at least `count` unread bytes for
/// `fd` (`FIONREAD`): a barrier for "the peer's bytes have arrived" before checking that nothing
/// is delivered for them.
func waitForKernelBytes(_ fd: Int32, atLeast count: Int, timeout: TimeInterval = 5) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while Posix.bytesAvailable(fd) < count {
        if Date() >= deadline { return false }
        sched_yield()
    }
    return true
}
