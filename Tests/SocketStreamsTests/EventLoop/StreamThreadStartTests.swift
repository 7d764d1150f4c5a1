#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The stream thread's start never traps when the process is out of file descriptors (issue 21,
/// finding 8). The thread is process-wide and starts once, so each scenario runs in a child process
/// of this test binary where nothing has started it yet.
final class StreamThreadStartTests: SocketStreamsTestCase {
    private var scenario: String? { Self.childScenario }

    /// In the parent, runs the calling test again in a child process with `scenario` set, where nothing
    /// has started the stream thread yet, checks how it ended and returns false; in that child, checks
    /// that the thread has not started and returns true (the test goes on).
    private func inFreshChild(_ scenario: String, environment: [String: String] = [:], test: String = #function) throws -> Bool {
        guard self.scenario == scenario else {
            let name = test.hasSuffix("()") ? String(test.dropLast(2)) : test
            try runInChild("SocketStreamsTests.StreamThreadStartTests/\(name)", scenario: scenario, environment: environment)
            return false
        }
        XCTAssertNil(StreamThread.thread, "something started the thread already")
        return true
    }

    /// With no fd free before anything started the thread: `RunLoop.startSocketStreams()` throws
    /// EMFILE, an `AsyncConnection`'s open throws it, and `RunLoop.socketStreams` (which cannot throw)
    /// waits instead of trapping, returning a running run loop once fds are free again.
    ///
    /// Synchronous on purpose: an async test runs XCTest's main run loop meanwhile, and CoreFoundation
    /// halts if that run loop needs a new fd while none is free (it cannot report failing to make one).
    func testOutOfDescriptorsBeforeTheThreadStartsThrowsOrWaits() throws {
        guard try inFreshChild("stream-thread-never-started") else { return }
        let restore = tightenDescriptorLimit()
        XCTAssertEqual(open("/dev/null", O_RDONLY), -1, "a descriptor was still free")
        XCTAssertThrowsError(try RunLoop.startSocketStreams()) { error in
            XCTAssertEqual((error as NSError).domain, NSPOSIXErrorDomain)
            XCTAssertEqual((error as NSError).code, Int(EMFILE), "\(error)")
        }
        let outcome = Locked<Error?>(nil)
        let opened = Signal()
        Task.detached {
            let connection = AsyncConnection(host: "127.0.0.1", port: 9)
            do {
                try await connection.open()
            } catch {
                outcome.value = error
            }
            opened.raise()
        }
        XCTAssertTrue(opened.wait(timeout: shortTimeout), "open hung")
        let error = try XCTUnwrap(outcome.value as NSError?, "open succeeded")
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain, "\(error)")
        XCTAssertEqual(error.code, Int(EMFILE), "\(error)")
        XCTAssertNil(StreamThread.thread)

        // The non-throwing accessor, on another thread: it waits while no fd is free.
        let got = Signal()
        let ran = Signal()
        Thread.detachNewThread {
            let runLoop = RunLoop.socketStreams
            got.raise()
            runLoop.perform { ran.raise() }
            // A block alone does not wake a waiting run loop.
            if let known = StreamThread.knownRunLoop, known.runLoop === runLoop { CFRunLoopWakeUp(known.cfRunLoop) }
        }
        let deadline = Date(timeIntervalSinceNow: shortTimeout)
        while StreamThread.waits.load(ordering: .relaxed) == 0, Date() < deadline { sched_yield() }
        XCTAssertEqual(StreamThread.waits.load(ordering: .relaxed), 1, "RunLoop.socketStreams did not wait")
        XCTAssertFalse(got.wait(timeout: 0), "returned a run loop while out of fds")
        restore()
        XCTAssertTrue(got.wait(timeout: shortTimeout), "still waiting with fds free")
        XCTAssertTrue(ran.wait(timeout: shortTimeout), "the stream thread's run loop does not run")
        XCTAssertNotNil(StreamThread.thread)
    }

    /// The first pair sets the stream thread's fds aside (without starting it), so running out of
    /// fds later cannot stop the thread from starting: `RunLoop.socketStreams` answers at once, and a
    /// pair scheduled there, which needs an fd for its socket, fails with EMFILE instead of trapping.
    /// (The reserve allows for the most CoreFoundation has been seen to take; what the thread did not
    /// take is used up first.)
    func testTheFirstPairReservesTheThreadsDescriptors() throws {
        guard try inFreshChild("stream-thread-prepared") else { return }
        let pair = makePair(port: 9)
        XCTAssertNil(StreamThread.thread, "making a pair must not start the thread")
        let restore = tightenDescriptorLimit()
        XCTAssertEqual(open("/dev/null", O_RDONLY), -1, "a descriptor was still free")
        let runLoop = RunLoop.socketStreams
        XCTAssertEqual(StreamThread.waits.load(ordering: .relaxed), 0, "RunLoop.socketStreams had to wait")
        XCTAssertNotNil(StreamThread.thread)
        XCTAssertTrue(try RunLoop.startSocketStreams() === runLoop)
        var spare: [Int32] = []
        while case let fd = open("/dev/null", O_RDONLY), fd >= 0 { spare.append(fd) }
        XCTAssertLessThan(spare.count, 10, "the thread's reserve was not used at all")
        defer { spare.forEach { close($0) } }
        pair.input.schedule(in: runLoop, forMode: .default)
        pair.output.schedule(in: runLoop, forMode: .default)
        pair.input.open()
        pair.output.open()
        let status = pair.input.streamStatus
        restore()
        XCTAssertEqual(status, .error)
        assertPOSIXError(pair.input.streamError, [EMFILE])
        pair.input.close()
        pair.output.close()
    }

    /// With no thread to be had (`pthread_create` fails with EAGAIN: here the address space is capped
    /// below what a thread's stack needs), `RunLoop.startSocketStreams()` throws EAGAIN instead of
    /// waiting for good for a thread that never ran (Foundation's `Thread.start()` ignores the
    /// failure: this test hung there before), a pair on a dispatch queue fails with it instead of
    /// waiting for a reactor nobody drives, and once threads can be made again both work.
    func testNoThreadToBeHadThrowsAndALaterCallStartsIt() throws {
        guard try inFreshChild("no-thread", environment: Self.withoutFakeStacks) else { return }
        let queue = DispatchQueue(label: "no-thread")
        let listener = try RawSocket.listener(family: .v4, backlog: 2)
        defer { close(listener) }
        let early = makePair(port: RawSocket.boundPort(listener))
        let restore = try capAddressSpaceBelowAThread()
        var threadError: Error?
        do { _ = try RunLoop.startSocketStreams() } catch { threadError = error }
        CFWriteStreamSetDispatchQueue(early.output, queue)
        early.output.open()
        let status = early.output.streamStatus
        restore()
        assertPOSIXError(threadError, [EAGAIN])
        XCTAssertNil(StreamThread.thread)
        XCTAssertEqual(status, .error, "a pair on a queue with no thread to drive it")
        assertPOSIXError(early.output.streamError, [EAGAIN])
        early.output.close()

        // Threads can be had again: the stream thread starts and runs, and the queue's pairs work.
        let runLoop = try RunLoop.startSocketStreams()
        let ran = Signal()
        runLoop.perform { ran.raise() }
        if let known = StreamThread.knownRunLoop { CFRunLoopWakeUp(known.cfRunLoop) }
        XCTAssertTrue(ran.wait(timeout: shortTimeout), "the stream thread's run loop does not run")
        let pair = makePair(port: RawSocket.boundPort(listener))
        let opened = Signal()
        let recorder = QueueOpenRecorder(opened)
        pair.output.delegate = recorder
        CFWriteStreamSetDispatchQueue(pair.output, queue)
        pair.output.open()
        XCTAssertTrue(opened.wait(timeout: shortTimeout), "no event on the queue")
        pair.output.close()
    }

    /// The stream thread and a queue's thread of the package's run at the process's priority (its main
    /// thread's nice value), not at that of the thread that first needed them. A Linux thread starts
    /// with its maker's nice value and libdispatch runs its workers at nice values by QoS (a background
    /// task's at 10), so before, a stream thread first started from a background task served every
    /// connection at nice 10 for good. Here the process runs at nice 9 and the starting thread at 5:
    /// raising a nice value needs no privilege, so this runs as any user (before: both threads at 5).
    func testThePackagesThreadsTakeTheProcessPriorityNotTheirStarters() throws {
        guard try inFreshChild("thread-priority") else { return }
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        let listener = try RawSocket.listener(family: .v4, backlog: 2)
        defer { close(listener) }
        let port = RawSocket.boundPort(listener)
        let queue = DispatchQueue(label: "thread-priority")
        let go = Signal()
        let started = Signal()
        let checked = Signal()
        let closed = Signal()
        let starterNice = Locked<Int32?>(nil)
        let starter = Thread {
            guard go.wait(timeout: 30) else { return }
            setpriority(which, 0, 5)
            starterNice.value = getpriority(which, 0)
            _ = try? RunLoop.startSocketStreams()
            // A pair on a queue: the queue's reactor starts its thread. The pair stays open (and the
            // thread with it) until the main thread has looked.
            let pair = createStreamPair(host: "127.0.0.1", port: Int(port))
            CFWriteStreamSetDispatchQueue(pair.output, queue)
            pair.output.open()
            started.raise()
            _ = checked.wait(timeout: 30)
            queue.sync { pair.output.close() }
            closed.raise()
        }
        starter.start()
        XCTAssertEqual(setpriority(which, 0, 9), 0)  // the main thread's: the process's
        go.raise()
        XCTAssertTrue(started.wait(timeout: 30))
        // The queue's thread names itself first thing, after taking its priority.
        XCTAssertTrue(runUntil(timeout: 30) { !Self.niceValues(ofThreadsNamed: "SocketStreams q").isEmpty }, "no queue thread")
        let streamThread = Self.niceValues(ofThreadsNamed: "SocketStreams")
        let queueThreads = Self.niceValues(ofThreadsNamed: "SocketStreams q")
        checked.raise()
        XCTAssertTrue(closed.wait(timeout: 30))
        XCTAssertEqual(starterNice.value, 5)
        XCTAssertEqual(getpriority(which, id_t(getpid())), 9)
        XCTAssertEqual(streamThread, [9], "the stream thread's nice value")
        XCTAssertEqual(queueThreads, [9], "the queue's thread's nice value")
    }

    /// The nice values of this process's threads named `name` (`/proc/self/task/*/comm`).
    private static func niceValues(ofThreadsNamed name: String) -> [Int32] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task -> Int32? in
            guard let tid = id_t(task),
                let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8),
                comm.trimmingCharacters(in: .newlines) == name
            else { return nil }
            return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid)
        }
    }

    /// The environment, under Address Sanitizer, for a child that caps its address space: without
    /// ASan's fake stacks (`detect_stack_use_after_return=0`). Each thread has one, an 11 MB mapping
    /// made when the thread starts and unmapped when it ends, so the address space moves by more than
    /// the cap's margin while the cap holds: a thread that starts there (its stack fitting the margin,
    /// or the room another thread's ending freed) cannot map its fake stack, and ASan aborts (3 runs in
    /// 40 of `testNoThreadToBeHadThrowsAndALaterCallStartsIt` under `Scripts/sanitize address`; none in
    /// 40 without fake stacks). Every other check stays on; without ASan the option is ignored.
    private static var withoutFakeStacks: [String: String] {
        let options = ProcessInfo.processInfo.environment["ASAN_OPTIONS"].map { $0 + " " } ?? ""
        return ["ASAN_OPTIONS": options + "detect_stack_use_after_return=0"]
    }

    /// Caps the address space (RLIMIT_AS) at what is mapped now plus half a default thread stack, so
    /// that the next thread's stack cannot be mapped while small allocations still can; returns what
    /// puts the limit back.
    private func capAddressSpaceBelowAThread() throws -> () -> Void {
        var attributes = pthread_attr_t()
        XCTAssertEqual(pthread_attr_init(&attributes), 0)  // its stack size is the default one
        var stack = 0
        pthread_attr_getstacksize(&attributes, &stack)
        pthread_attr_destroy(&attributes)
        let statm = try String(contentsOfFile: "/proc/self/statm", encoding: .utf8)
        let pages = try XCTUnwrap(Int(statm.split(separator: " ")[0]))
        let mapped = pages * Int(sysconf(Int32(_SC_PAGESIZE)))
        var old = rlimit()
        getrlimit(RLIMIT_AS_VALUE, &old)
        var capped = old
        capped.rlim_cur = rlim_t(mapped + stack / 2)
        XCTAssertEqual(setrlimit(RLIMIT_AS_VALUE, &capped), 0, "setrlimit: errno \(errno)")
        return {
            var restored = old
            setrlimit(RLIMIT_AS_VALUE, &restored)
        }
    }
}

/// Raises `opened` on the first event.
private final class QueueOpenRecorder: NSObject, StreamDelegate, @unchecked Sendable {
    private let opened: Signal
    init(_ opened: Signal) { self.opened = opened }
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) { opened.raise() }
}

private let RLIMIT_AS_VALUE = __rlimit_resource_t(RLIMIT_AS.rawValue)
