import CoreFoundation
import SocketStreamsTestSupport
import Dispatch
import Foundation
@testable import SocketStreams
import XCTest

/// The reactor's timer heap (issue 25: timers in O(log n)), fuzzed against a plain sorted list, and the
/// reactor's timers through it on a run loop and on a dispatch queue.
final class TimerHeapTests: XCTestCase {
    /// A small deterministic generator (SplitMix64), so a failing seed can be replayed.
    private struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// The model: every live timer in a list, the earliest found by scanning (deadline, then arming order).
    private struct Model {
        var live: [(deadline: UInt64, order: Int, id: UInt64, value: Int)] = []
        var nextOrder = 0

        mutating func insert(_ deadline: UInt64, id: UInt64, value: Int) {
            live.append((deadline, nextOrder, id, value))
            nextOrder += 1
        }

        mutating func cancel(_ id: UInt64) -> Int? {
            guard let index = live.firstIndex(where: { $0.id == id }) else { return nil }
            return live.remove(at: index).value
        }

        var earliestIndex: Int? {
            live.indices.min { (live[$0].deadline, live[$0].order) < (live[$1].deadline, live[$1].order) }
        }

        mutating func popFirst(dueBy now: UInt64) -> Int? {
            guard let index = earliestIndex, live[index].deadline <= now else { return nil }
            return live.remove(at: index).value
        }
    }

    /// Random arms (few distinct deadlines, so many ties), cancels of live, fired, cancelled and unknown
    /// ids, and pops as time advances: the heap must give what the model gives, op for op.
    func testFuzzedAgainstASortedList() {
        for seed in UInt64(1)...20 {
            var random = SplitMix(state: seed)
            var heap = TimerHeap<Int>()
            var model = Model()
            var everIssued: [UInt64] = []
            var now: UInt64 = 0
            var value = 0
            for step in 0..<4_000 {
                let context = "seed \(seed), step \(step)"
                switch random.next() % 10 {
                case 0...3:
                    let deadline = now + random.next() % 64
                    let id = heap.insert(deadline: deadline, value)
                    XCTAssertNotEqual(id, 0, context)
                    XCTAssertFalse(model.live.contains { $0.id == id }, "an id in use was issued again: \(context)")
                    model.insert(deadline, id: id, value: value)
                    everIssued.append(id)
                    value += 1
                case 4...6:
                    // Any id ever issued: live (cancelled now), fired or cancelled before (no-ops).
                    guard !everIssued.isEmpty else { continue }
                    let id = everIssued[Int(random.next() % UInt64(everIssued.count))]
                    XCTAssertEqual(heap.cancel(id), model.cancel(id), context)
                case 7:
                    XCTAssertNil(heap.cancel(random.next() | 1 << 63), "an id never issued: \(context)")
                default:
                    now += random.next() % 24
                    while true {
                        let expected = model.popFirst(dueBy: now)
                        XCTAssertEqual(heap.popFirst(dueBy: now), expected, context)
                        if expected == nil { break }
                    }
                }
                XCTAssertEqual(heap.count, model.live.count, context)
                XCTAssertEqual(heap.nextDeadline, model.earliestIndex.map { model.live[$0].deadline }, context)
                XCTAssertLessThanOrEqual(heap.storedEntries, heap.count + heap.count / 2 + 65, "stale entries pile up: \(context)")
            }
            now = .max
            while let expected = model.popFirst(dueBy: now) { XCTAssertEqual(heap.popFirst(dueBy: now), expected) }
            XCTAssertNil(heap.popFirst(dueBy: now))
            XCTAssertTrue(heap.isEmpty)
        }
    }

    /// A slot reused by a new timer has a new id: the old id (fired or cancelled) leaves it alone.
    func testAStaleIdNeverCancelsTheTimerThatReusedItsSlot() {
        var heap = TimerHeap<String>()
        let first = heap.insert(deadline: 10, "first")
        XCTAssertEqual(heap.cancel(first), "first")
        let second = heap.insert(deadline: 20, "second")
        XCTAssertNotEqual(first, second)
        XCTAssertNil(heap.cancel(first))
        XCTAssertEqual(heap.popFirst(dueBy: 20), "second")
        let third = heap.insert(deadline: 30, "third")
        XCTAssertNil(heap.cancel(second), "a fired timer's id")
        XCTAssertEqual(heap.nextDeadline, 30)
        XCTAssertEqual(heap.cancel(third), "third")
    }

    /// What a server with a read timeout on every idle connection does: many long timers stay armed
    /// while short ones are armed and cancelled once per operation. The heap stays near the live count
    /// and the long ones keep their order.
    func testArmAndCancelPerOperationAmongManyIdleTimers() {
        var heap = TimerHeap<Int>()
        let idle = 5_000
        var idleIDs = (0..<idle).map { heap.insert(deadline: 600_000 + UInt64($0), $0) }
        for operation in 0..<50_000 {
            let write = heap.insert(deadline: 30_000 + UInt64(operation), -1)
            XCTAssertEqual(heap.cancel(write), -1)
            let connection = operation % idle
            XCTAssertEqual(heap.cancel(idleIDs[connection]), connection)
            idleIDs[connection] = heap.insert(deadline: 600_000 + UInt64(idle + operation), connection)
        }
        XCTAssertEqual(heap.count, idle)
        XCTAssertLessThanOrEqual(heap.storedEntries, idle + idle / 2 + 65)
        var fired: [Int] = []
        while let value = heap.popFirst(dueBy: .max) { fired.append(value) }
        XCTAssertEqual(fired, (0..<idle).map { $0 }, "re-armed in connection order, so they fire in it")
    }

    /// Through a run loop's reactor (its timerfd): cancelled timers never fire, the others fire in
    /// deadline order, and one armed later than the armed deadline (no timerfd arming of its own) still fires.
    func testReactorTimersOnARunLoopFireInOrderAndCancelledOnesNever() throws {
        let reactor = try ReactorRegistry.shared.acquire(cfRunLoop: CFRunLoopGetCurrent(), mode: RunLoop.Mode.default.rawValue)
        defer { ReactorRegistry.shared.release(reactor) }
        let fired = Locked<[Int]>([])
        var ids: [Int: UInt64] = [:]
        // Absolute deadlines: arming 200 timers takes milliseconds under a sanitizer, and relative ones
        // armed later would then fall due later than their delay says (seen under TSan).
        let base = Posix.monotonicNanoseconds()
        for index in 0..<200 {
            // Deadlines 2 to 41 ms, in a scrambled order, several equal.
            let milliseconds = UInt64(2 + (index * 37) % 40)
            ids[index] = reactor.schedule(at: base + milliseconds * 1_000_000) { fired.mutate { $0.append(index) } }
        }
        let cancelled = Set((0..<200).filter { $0 % 3 == 0 })
        for index in cancelled { reactor.cancelTimer(ids[index]!) }
        let expected = (0..<200).filter { !cancelled.contains($0) }.sorted { (($0 * 37) % 40, $0) < (($1 * 37) % 40, $1) }
        XCTAssertTrue(runUntil(timeout: 10) { fired.value.count == expected.count }, "fired \(fired.value.count) of \(expected.count)")
        XCTAssertEqual(fired.value, expected)
        // Nothing cancelled fires late either.
        let late = Locked(false)
        reactor.schedule(after: 60_000_000) { late.value = true }
        XCTAssertTrue(runUntil(timeout: 10) { late.value })
        XCTAssertEqual(fired.value, expected)
    }

    /// The same on a dispatch queue's reactor, whose deadlines are blocks on the queue.
    func testReactorTimersOnAQueueFireInOrderAndCancelledOnesNever() throws {
        let queue = DispatchQueue(label: "TimerHeapTests")
        let reactor = try ReactorRegistry.shared.acquire(queue: queue)
        defer { ReactorRegistry.shared.release(reactor) }
        let fired = Locked<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        let expectedCount = Locked(0)
        queue.sync {
            var ids: [Int: UInt64] = [:]
            let base = Posix.monotonicNanoseconds()  // absolute deadlines, as above
            for index in 0..<200 {
                let milliseconds = UInt64(2 + (index * 37) % 40)
                ids[index] = reactor.schedule(at: base + milliseconds * 1_000_000) {
                    let count = fired.mutate { list -> Int in
                        list.append(index)
                        return list.count
                    }
                    if count == expectedCount.value { done.signal() }
                }
            }
            for index in 0..<200 where index % 3 == 0 { reactor.cancelTimer(ids[index]!) }
            expectedCount.value = (0..<200).filter { $0 % 3 != 0 }.count
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        let expected = (0..<200).filter { $0 % 3 != 0 }.sorted { (($0 * 37) % 40, $0) < (($1 * 37) % 40, $1) }
        XCTAssertEqual(fired.value, expected)
    }
}
