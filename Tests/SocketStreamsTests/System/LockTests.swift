import CSocketStreamsShims
import Dispatch
import Foundation
@testable import SocketStreams
import XCTest

/// The futex lock every connection, reactor and `Guarded` uses (`cssh_lock_t`, `ConditionLock`):
/// mutual exclusion under contention, the holder check, and a condition that loses no wake-up.
final class LockTests: XCTestCase {
    /// A counter only the lock protects: plain loads and stores, so a lost exclusion loses increments
    /// (and Thread Sanitizer, which the lock tells about every acquisition, would report a race).
    private final class Counter: @unchecked Sendable {
        let lock = ConditionLock.make()
        var value = 0
        var turn = 0
        var released = false
        var waiting = 0
    }

    /// Runs `body(index)` on `count` threads at once and returns when all have finished.
    private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            Thread {
                body(index)
                group.leave()
            }.start()
        }
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success, "threads still running after 60 s")
    }

    func testContendedIncrementsAreAllKept() {
        let counter = Counter()
        let threads = 4
        let increments = 100_000
        onThreads(threads) { _ in
            for _ in 0..<increments {
                counter.lock.lock()
                counter.value &+= 1
                counter.lock.unlock()
            }
        }
        XCTAssertEqual(counter.value, threads * increments)
    }

    func testGuardedStateUnderContention() {
        let guarded = Guarded(0)
        let threads = 4
        let increments = 100_000
        onThreads(threads) { _ in
            for _ in 0..<increments { guarded.withLock { $0 &+= 1 } }
        }
        XCTAssertEqual(guarded.withLock { $0 }, threads * increments)
    }

    func testTheHolderIsTheThreadThatLocked() {
        let counter = Counter()
        let lock = counter.lock
        let raw = lock.withUnsafeMutablePointerToElements { $0 }
        XCTAssertEqual(cssh_lock_held(raw), 0)
        lock.lock()
        XCTAssertEqual(cssh_lock_held(raw), 1)
        let seenElsewhere = Guarded<Int32>(-1)
        onThreads(1) { _ in
            let held = counter.lock.withUnsafeMutablePointerToElements { cssh_lock_held($0) }
            seenElsewhere.withLock { $0 = held }
        }
        XCTAssertEqual(seenElsewhere.withLock { $0 }, 0, "another thread is taken for the holder")
        lock.unlock()
        XCTAssertEqual(cssh_lock_held(raw), 0)
    }

    /// Every waiter returns from a broadcast, including those that began waiting just before it.
    func testBroadcastWakesEveryWaiter() {
        let counter = Counter()
        let waiters = 6
        let group = DispatchGroup()
        for _ in 0..<waiters {
            group.enter()
            Thread {
                counter.lock.lock()
                counter.waiting += 1
                counter.lock.broadcast()  // tells the test this waiter is in
                while !counter.released { counter.lock.wait() }
                counter.lock.unlock()
                group.leave()
            }.start()
        }
        counter.lock.lock()
        while counter.waiting < waiters { counter.lock.wait() }
        counter.released = true
        counter.lock.broadcast()
        counter.lock.unlock()
        XCTAssertEqual(group.wait(timeout: .now() + 60), .success, "a waiter missed the broadcast")
    }

    /// Two threads take turns 20,000 times, each waiting for the other's broadcast: a wake-up lost
    /// between a waiter's release of the lock and its sleep would stop them both.
    func testTurnTakingLosesNoWakeUp() {
        let counter = Counter()
        let turns = 20_000
        onThreads(2) { me in
            for _ in 0..<(turns / 2) {
                counter.lock.lock()
                while counter.turn % 2 != me { counter.lock.wait() }
                counter.turn += 1
                counter.lock.broadcast()
                counter.lock.unlock()
            }
        }
        XCTAssertEqual(counter.turn, turns)
    }
}
