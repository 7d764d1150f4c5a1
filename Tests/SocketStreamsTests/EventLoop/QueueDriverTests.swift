import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// A dispatch queue's reactor either way: with a thread of the package's that waits in its epoll set and
/// runs each perform with `queue.sync` (the first `QueueThreadDriver.maxThreads` queues in use), or watched
/// by a dispatch source. Callouts run on the queue either way.
final class QueueDriverTests: SocketStreamsTestCase {
    private let key = DispatchSpecificKey<String>()

    private func makeQueue(_ name: String) -> DispatchQueue {
        let queue = DispatchQueue(label: name)
        queue.setSpecific(key: key, value: name)
        return queue
    }

    /// Lets the next queue reactor made have a thread (`driven`) or not, whatever other tests' cached
    /// reactors hold; restores the limit after the test.
    private func allowQueueThread(_ driven: Bool) {
        let saved = QueueThreadDriver.maxThreads.load(ordering: .relaxed)
        addTeardownBlock { QueueThreadDriver.maxThreads.store(saved, ordering: .relaxed) }
        QueueThreadDriver.maxThreads.store(driven ? QueueThreadDriver.threads.load(ordering: .relaxed) + 1 : 0, ordering: .relaxed)
    }

    /// The reactor `queue`'s streams use (the registry's count balanced at once).
    private func reactor(of queue: DispatchQueue) throws -> Reactor {
        let reactor = try ReactorRegistry.shared.acquire(queue: queue)
        ReactorRegistry.shared.release(reactor)
        return reactor
    }

    /// A server that writes "late" to its one connection once `send` is raised, then reads to EOF.
    private func startLateSender() throws -> (port: Int, send: Signal) {
        let send = Signal()
        addCleanup { send.raise() }
        let server = try startRawServer { connection in
            guard send.wait(timeout: 30) else { return }
            try? connection.write("late")
            _ = try? connection.readToEOF(timeout: 10)
        }
        return (server.port, send)
    }

    /// An echo exchange on a new queue with a thread (`driven`) or a dispatch source, every callout
    /// checked to run there.
    private func exchange(driven: Bool) throws {
        allowQueueThread(driven)
        let server = try startStreamEchoServer()
        let name = driven ? "driver.thread" : "driver.source"
        let queue = makeQueue(name)
        XCTAssertEqual(try reactor(of: queue).drivesQueue, driven)
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(sending: "ping")
        let offQueue = Locked(0)
        recorder.onEvent = { [key] _, _ in
            if DispatchQueue.getSpecific(key: key) != name { offQueue.mutate { $0 += 1 } }
        }
        recorder.start(pair, on: queue)
        XCTAssertTrue(recorder.wait(timeout: shortTimeout) { $0.receivedString == "ping" }, recorder.trace)
        XCTAssertEqual(offQueue.value, 0, "callouts off the queue")
        queue.sync {
            pair.input.close()
            pair.output.close()
        }
    }

    func testAQueueWithAThreadDeliversOnTheQueue() throws {
        try exchange(driven: true)
    }

    func testAQueueWatchedByADispatchSourceDeliversOnTheQueue() throws {
        try exchange(driven: false)
    }

    /// Never the main queue: its blocks run on the main thread whoever asks.
    func testTheMainQueueHasNoThread() throws {
        allowQueueThread(true)
        XCTAssertFalse(try reactor(of: .main).drivesQueue)
    }

    /// Every `DispatchQueue.main` and `DispatchQueue.global()` is a new wrapper of the one queue: all of
    /// them share the queue's one reactor (keyed by the wrapper, each got a reactor, an epoll set and
    /// a queue thread of its own, and the last one's queue-specific mark hid the others' owner).
    func testEveryWrapperOfOneQueueSharesItsReactor() throws {
        for (name, make) in [("main", { DispatchQueue.main }), ("global", { DispatchQueue.global() })] as [(String, () -> DispatchQueue)] {
            let first = try ReactorRegistry.shared.acquire(queue: make())
            defer { ReactorRegistry.shared.release(first) }
            let second = try ReactorRegistry.shared.acquire(queue: make())
            defer { ReactorRegistry.shared.release(second) }
            XCTAssertTrue(first === second, "two reactors for the \(name) queue")
        }
        let own = try ReactorRegistry.shared.acquire(queue: makeQueue("own"))
        defer { ReactorRegistry.shared.release(own) }
        let other = try ReactorRegistry.shared.acquire(queue: makeQueue("other"))
        defer { ReactorRegistry.shared.release(other) }
        XCTAssertFalse(own === other, "two queues share a reactor")
    }

    /// The queue's thread wakes when bytes arrive, then waits for the queue, busy with a block of the
    /// user's that reads those bytes itself. Once the queue is free, the perform must not report
    /// `hasBytesAvailable` for bytes that are gone (a delegate's read would then block): it polls
    /// afresh rather than trusting what the wait fetched.
    func testBytesReadOnTheQueueWhileItsThreadWaitsForItAreNotSignalledAgain() throws {
        allowQueueThread(true)
        let (port, send) = try startLateSender()
        let queue = makeQueue("driver.stale")
        let driver = try reactor(of: queue)
        XCTAssertTrue(driver.drivesQueue)
        let pair = makePair(port: port)
        let recorder = DelegateRecorder()
        recorder.readsOnHasBytes = false
        let falseSignals = Locked(0)
        let fd = Locked<Int32>(-1)
        recorder.onEvent = { stream, event in
            guard event == .hasBytesAvailable, stream === pair.input else { return }
            var probe = pollfd(fd: fd.value, events: Int16(POLLIN), revents: 0)
            if poll(&probe, 1, 0) != 1 { falseSignals.mutate { $0 += 1 } }
        }
        recorder.start(pair, on: queue)
        XCTAssertTrue(recorder.wait(timeout: shortTimeout) { $0.has(.openCompleted, on: .input) }, recorder.trace)
        let native = try XCTUnwrap(queue.sync { nativeHandle(of: pair.input) })
        fd.mutate { $0 = native }

        let readByTheBlock = Locked("")
        let blockDone = DispatchSemaphore(value: 0)
        nonisolated(unsafe) let input = pair.input  // touched only on `queue` from here on
        queue.async {
            send.raise()
            // Wait for the bytes, then for the queue's thread to be blocked waiting for this queue
            // (its kernel state: in futex), then read them here, on the queue.
            var probe = pollfd(fd: fd.value, events: Int16(POLLIN), revents: 0)
            _ = poll(&probe, 1, 10_000)
            _ = waitForThread(driver.queueThreadID, inSyscall: 202, timeout: 10)
            var buffer = [UInt8](repeating: 0, count: 16)
            let count = input.read(&buffer, maxLength: buffer.count)
            readByTheBlock.mutate { $0 = count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : "" }
            blockDone.signal()
        }
        XCTAssertEqual(blockDone.wait(timeout: .now() + 30), .success)
        queue.sync {}  // the thread's perform, queued before this, has run
        XCTAssertEqual(readByTheBlock.value, "late")
        XCTAssertEqual(falseSignals.value, 0, "hasBytesAvailable for bytes already read: \(recorder.trace)")
        queue.sync {
            pair.input.close()
            pair.output.close()
        }
    }

    /// On a concurrent queue a perform can run on one of the queue's workers (posted work) while bytes
    /// arrive: the queue's thread, woken by them, finds that perform running and leaves the bytes to it.
    /// It must then wait for that perform to end, not wake again and again for the same bytes (a busy
    /// loop for as long as the perform runs).
    func testTheQueueThreadWaitsForAPerformRunningElsewhere() throws {
        allowQueueThread(true)
        let (port, send) = try startLateSender()
        let queue = DispatchQueue(label: "driver.concurrent", attributes: .concurrent)
        let driver = try reactor(of: queue)
        XCTAssertTrue(driver.drivesQueue)
        let pair = makePair(port: port)
        let recorder = DelegateRecorder()
        recorder.start(pair, on: queue)
        XCTAssertTrue(recorder.wait(timeout: shortTimeout) { $0.has(.openCompleted, on: .input) }, recorder.trace)
        let fd = try XCTUnwrap(queue.sync { nativeHandle(of: pair.input) })
        let tid = driver.queueThreadID
        XCTAssertGreaterThan(tid, 0)

        let inPerform = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        driver.post {
            inPerform.signal()
            _ = release.wait(timeout: .now() + 30)
        }
        XCTAssertEqual(inPerform.wait(timeout: .now() + 10), .success)
        send.raise()
        var probe = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(poll(&probe, 1, 10_000), 1, "the bytes arrived")
        // The slow callout's time: the queue's thread should spend it asleep.
        let before = cpuTicks(ofThread: tid)
        _ = release.wait(timeout: .now() + 0.3)
        let spent = cpuTicks(ofThread: tid) - before
        release.signal()
        XCTAssertLessThanOrEqual(spent, 5, "the queue's thread used \(spent) ticks of CPU in 300 ms")
        XCTAssertTrue(recorder.wait(timeout: shortTimeout) { $0.receivedString == "late" }, recorder.trace)
        queue.sync(flags: .barrier) {
            pair.input.close()
            pair.output.close()
        }
    }
}

/// User and system CPU time of thread `tid` of this process, in clock ticks (/proc/self/task/TID/stat).
private func cpuTicks(ofThread tid: Int32) -> Int {
    let stat = (try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8)) ?? ""
    // Fields after the command name (which is in parentheses and may hold spaces): state is the 3rd
    // field of the line, utime and stime the 14th and 15th.
    guard let close = stat.lastIndex(of: ")") else { return 0 }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12 else { return 0 }
    return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
}

/// Waits until thread `tid` of this process is in system call `number` (/proc/self/task/TID/syscall),
/// or `timeout` passes. Returns whether it was seen there.
private func waitForThread(_ tid: Int32, inSyscall number: Int, timeout: TimeInterval) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while Date() < deadline {
        let state = (try? String(contentsOfFile: "/proc/self/task/\(tid)/syscall", encoding: .utf8)) ?? ""
        if state.split(separator: " ").first == Substring(String(number)) { return true }
        sched_yield()
    }
    return false
}
