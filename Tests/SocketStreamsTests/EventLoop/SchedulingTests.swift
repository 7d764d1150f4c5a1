import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Where and when delegate events are delivered: the scheduled run loop, in the scheduled mode.
final class SchedulingTests: SocketStreamsTestCase {

    /// Streams scheduled on a background thread's run loop (set up on that thread, as an
    /// app's network thread would): every callback runs on that thread.
    func testEventsArriveOnABackgroundThreadsRunLoop() throws {
        let port = try startSocatEcho(.v4)
        let worker = RunLoopThread(name: "test.network-thread")
        addCleanup { worker.stop() }
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "ping from a background run loop")

        XCTAssertNotNil(worker.sync { recorder.start(pair, on: .current, mode: .default) })
        XCTAssertTrue(
            recorder.wait(timeout: shortTimeout) { $0.receivedString == "ping from a background run loop" },
            "trace: \(recorder.trace)")

        let snapshot = recorder.snapshot
        XCTAssertFalse(snapshot.eventThreads.isEmpty)
        XCTAssertTrue(
            snapshot.eventThreads.allSatisfy { $0 === worker.thread },
            "a callback ran off the scheduled thread")
        XCTAssertEqual(snapshot.events(.input).first, .openCompleted)
        XCTAssertEqual(snapshot.events(.output).first, .openCompleted)
        worker.sync {
            pair.input.close()
            pair.output.close()
        }
    }

    /// Streams scheduled from the main thread on another thread's run loop (not the current one, so
    /// the library finds its CFRunLoop by reflection): every callback runs on that thread.
    func testSchedulingOnAnotherThreadsRunLoopFromThisThread() throws {
        try assertDeliveryOnAWorkerScheduledFromMain()
    }

    /// The same when reflection cannot find the CFRunLoop (a Foundation that renamed its field):
    /// the documented fallback completes the schedule on the worker's own thread, and the events
    /// raised meanwhile (openCompleted among them) wait for it instead of being lost.
    func testSchedulingFallbackWithoutReflection() throws {
        RunLoopDirectory.shared.reflectionEnabled.store(false, ordering: .relaxed)
        addCleanup { RunLoopDirectory.shared.reflectionEnabled.store(true, ordering: .relaxed) }
        try assertDeliveryOnAWorkerScheduledFromMain()
    }

    private func assertDeliveryOnAWorkerScheduledFromMain(file: StaticString = #filePath, line: UInt = #line) throws {
        let port = try startSocatEcho(.v4)
        let worker = RunLoopThread(name: "test.scheduled-from-main")
        addCleanup { worker.stop() }
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "scheduled from main")
        recorder.start(pair, on: worker.runLoop, mode: .default)
        XCTAssertTrue(
            recorder.wait(timeout: shortTimeout) { $0.receivedString == "scheduled from main" },
            "trace: \(recorder.trace)", file: file, line: line)
        let snapshot = recorder.snapshot
        XCTAssertTrue(snapshot.eventThreads.allSatisfy { $0 === worker.thread }, "a callback ran off the worker", file: file, line: line)
        XCTAssertEqual(snapshot.events(.input).first, .openCompleted, recorder.trace, file: file, line: line)
        XCTAssertEqual(snapshot.events(.output).first, .openCompleted, recorder.trace, file: file, line: line)
        // Unscheduling from here finds the same run loop.
        for stream in [pair.input as Stream, pair.output as Stream] { stream.remove(from: worker.runLoop, forMode: .default) }
        XCTAssertTrue(
            worker.sync {
                pair.input.connection.lock.withLock {
                    [Half.input, .output].allSatisfy { pair.input.connection.halves[$0].reactors.isEmpty }
                }
            }
                ?? false,
            "still scheduled after remove(from:forMode:)", file: file, line: line)
        worker.sync {
            pair.input.close()
            pair.output.close()
        }
    }

    /// Scheduled only in a custom mode: running the default mode delivers nothing, even once
    /// the peer has accepted and sent data; running the custom mode then delivers the events.
    func testEventsArriveOnlyWhileTheScheduledModeRuns() throws {
        let customMode = RunLoop.Mode("SocketStreamsTests.CustomMode")
        let greeted = Signal()
        let server = try startRawServer { connection in
            try? connection.write("greeting")
            greeted.raise()
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(sending: "hi")
        _ = startRecorder(pair, recorder: recorder, mode: customMode)

        // Default mode: whatever the connection does meanwhile, no callback may run.
        XCTAssertTrue(greeted.wait(timeout: shortTimeout))
        settle()
        XCTAssertEqual(recorder.snapshot.entries, [], "events delivered in the wrong mode: \(recorder.trace)")

        // The custom mode delivers them.
        XCTAssertTrue(
            runUntil(timeout: shortTimeout, mode: customMode) {
                recorder.snapshot.receivedString == "greeting" && recorder.snapshot.bytesWritten == 2
            }, "trace: \(recorder.trace)")
        XCTAssertEqual(recorder.snapshot.events(.input).first, .openCompleted)
        XCTAssertEqual(recorder.snapshot.events(.output).first, .openCompleted)
        XCTAssertTrue(recorder.snapshot.eventThreads.allSatisfy(isMainThread))
    }

    /// Scheduled on the package's own stream thread (RunLoop.socketStreams): the client never
    /// runs a run loop; callbacks arrive on that thread.
    func testEventsArriveOnTheSocketStreamsRunLoop() throws {
        let body = testPayload(20_000, seed: 9)
        let port = try startHTTPServer(.v4, files: ["data.bin": body])
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "GET /data.bin HTTP/1.0\r\n\r\n")
        recorder.writeChunk = 4096
        recorder.readChunk = 4096
        recorder.schedule(pair, on: .socketStreams)
        pair.input.open()
        pair.output.open()

        XCTAssertTrue(
            recorder.wait(timeout: 10) { $0.has(.endEncountered, on: .input) },
            "trace: \(recorder.trace)")
        let snapshot = recorder.snapshot
        XCTAssertEqual(try XCTUnwrap(HTTPReply(snapshot.received)).body, body)
        XCTAssertFalse(snapshot.eventThreads.contains(where: isMainThread), "a callback ran on the main thread")
        let first = try XCTUnwrap(snapshot.eventThreads.first)
        XCTAssertTrue(snapshot.eventThreads.allSatisfy { $0 === first }, "callbacks ran on several threads")
        XCTAssertTrue(RunLoop.socketStreams === RunLoop.socketStreams, "socketStreams must be one run loop")
        // The stream thread carries a kernel name, so tools (and CFStreamTests) can count it.
        let names = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").map {
            try String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8)
        }
        XCTAssertEqual(names.filter { $0 == "SocketStreams\n" }.count, 1, "\(names)")
    }

    /// remove(from:forMode:) stops delivery; scheduling again re-derives readiness, so data
    /// that arrived while unscheduled is announced once the stream is scheduled again.
    func testUnscheduleStopsDeliveryAndRescheduleAnnouncesPendingData() throws {
        let go = Signal()
        let server = try startRawServer { connection in
            guard go.wait(timeout: 10) else { return }
            try? connection.write("while unscheduled")
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.openCompleted, on: .input) && recorder.has(.hasSpaceAvailable, on: .output)
            }, "trace: \(recorder.trace)")

        pair.input.remove(from: .current, forMode: .default)
        go.raise()
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertTrue(waitForKernelBytes(fd, atLeast: 17), "the server did not send")
        settle()
        XCTAssertFalse(
            recorder.has(.hasBytesAvailable, on: .input),
            "event delivered to an unscheduled stream: \(recorder.trace)")

        pair.input.schedule(in: .current, forMode: .default)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.received == Data("while unscheduled".utf8) },
            "pending data not announced after re-scheduling: \(recorder.trace)")
    }

    /// The Apple guide calls remove(from:forMode:) right after close(): harmless.
    func testRemoveAfterCloseIsHarmless() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.openCompleted, on: .input) })
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.close()
            stream.remove(from: .current, forMode: .default)
            stream.remove(from: .current, forMode: .default)
        }
        settle()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
    }

    /// `.common` (kCFRunLoopCommonModes) is just another mode name: a pair scheduled there gets its
    /// events while the run loop runs in the default mode, one of the common modes.
    func testCommonModesDeliverWhileRunningTheDefaultMode() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "common modes"), mode: .common)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout, mode: .default) { recorder.snapshot.receivedString == "common modes" },
            recorder.trace)
        XCTAssertEqual(recorder.snapshot.events(.input).first, .openCompleted)
    }

    /// Scheduled in two modes at once (two run-loop sources, the socket in two epoll sets): events
    /// arrive whichever of the two runs, and each event is delivered once.
    func testScheduledInTwoModesAtOnce() throws {
        let port = try startSocatEcho()
        let custom = RunLoop.Mode("SocketStreamsTests.Second")
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "two modes")
        recorder.attach(pair)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = recorder
            stream.schedule(in: .current, forMode: .default)
            stream.schedule(in: .current, forMode: custom)
        }
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(
            runUntil(timeout: shortTimeout, mode: custom) { recorder.snapshot.receivedString == "two modes" },
            recorder.trace)
        XCTAssertEqual(recorder.snapshot.events(.input).filter { $0 == .openCompleted }.count, 1)
        XCTAssertEqual(recorder.snapshot.events(.output).filter { $0 == .openCompleted }.count, 1)
        // Dropping one mode keeps the other working.
        for stream in [pair.input as Stream, pair.output as Stream] { stream.remove(from: .current, forMode: custom) }
        XCTAssertTrue(writeAll(pair.output, Data(" again".utf8)))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout, mode: .default) { recorder.snapshot.receivedString == "two modes again" },
            recorder.trace)
    }
}
