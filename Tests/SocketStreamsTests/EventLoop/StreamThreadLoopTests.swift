import CoreFoundation
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The stream thread waits in its own reactor's epoll set, with CoreFoundation's port set for the
/// default mode inside it (issue 25): a socket event costs one `epoll_wait` and no run-loop pass, and
/// what clients put on `RunLoop.socketStreams` (timers, blocks with a wake-up) still runs there.
final class StreamThreadLoopTests: SocketStreamsTestCase {
    /// Where CoreFoundation's port set cannot be found (no `/proc`), the thread runs its run loop with
    /// the reactor as a run-loop source, as any run loop does: blocks run, and a pair scheduled there
    /// exchanges. In a child process, where the thread has not started yet.
    func testWithoutTheDrivenReactorTheThreadRunsItsRunLoop() throws {
        guard Self.childScenario == "stream-thread-not-driven" else {
            return try runInChild(
                "SocketStreamsTests.StreamThreadLoopTests/testWithoutTheDrivenReactorTheThreadRunsItsRunLoop",
                scenario: "stream-thread-not-driven")
        }
        XCTAssertNil(StreamThread.thread, "something started the thread already")
        StreamThread.drivesItsReactor.store(false, ordering: .relaxed)
        let reactor = try StreamThread.reactor()
        XCTAssertFalse(reactor.isDriven)
        let cfRunLoop = try XCTUnwrap(StreamThread.knownRunLoop?.cfRunLoop)
        let ran = Signal()
        CFRunLoopPerformBlock(cfRunLoop, kCFRunLoopDefaultMode) { ran.raise() }
        CFRunLoopWakeUp(cfRunLoop)
        XCTAssertTrue(ran.wait(timeout: shortTimeout), "a block with a wake-up did not run on the stream thread")

        let body = testPayload(100_000, seed: 26)
        let port = try startHTTPServer(.v4, files: ["data.bin": body])
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "GET /data.bin HTTP/1.0\r\n\r\n")
        recorder.schedule(pair, on: .socketStreams)
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(recorder.wait(timeout: 20) { $0.has(.endEncountered, on: .input) }, "trace: \(recorder.trace)")
        XCTAssertEqual(try XCTUnwrap(HTTPReply(recorder.snapshot.received)).body, body)
        let thread = try XCTUnwrap(StreamThread.thread)
        XCTAssertTrue(recorder.snapshot.eventThreads.allSatisfy { $0 === thread }, "a callback ran off the stream thread")
        XCTAssertTrue(ReactorRegistry.shared.existing(cfRunLoop: cfRunLoop, mode: RunLoop.Mode.default.rawValue) === reactor)
    }

    /// The thread found CoreFoundation's port set and drives its reactor, and that reactor is the one
    /// streams scheduled on `RunLoop.socketStreams` in the default mode get.
    func testTheStreamThreadDrivesTheReactorItsStreamsUse() throws {
        let reactor = try StreamThread.reactor()
        XCTAssertTrue(reactor.isDriven, "the stream thread's reactor is a run-loop source: CoreFoundation's port set was not found")
        _ = RunLoop.socketStreams
        let cfRunLoop = try XCTUnwrap(StreamThread.knownRunLoop?.cfRunLoop)
        XCTAssertTrue(ReactorRegistry.shared.existing(cfRunLoop: cfRunLoop, mode: RunLoop.Mode.default.rawValue) === reactor)
        let shared = try ReactorRegistry.shared.acquire(cfRunLoop: cfRunLoop, mode: RunLoop.Mode.default.rawValue)
        XCTAssertTrue(shared === reactor, "a stream scheduled on the stream thread would get another reactor")
        ReactorRegistry.shared.release(shared)
        XCTAssertGreaterThanOrEqual(ReactorRegistry.shared.useCount(of: reactor), 1, "the thread's own use was given back")
    }

    /// A `Timer` added from another thread fires on the stream thread, in order with a later one; a block
    /// with a wake-up runs there too.
    func testTimersAndBlocksRunOnTheStreamThread() throws {
        let runLoop = RunLoop.socketStreams
        let cfRunLoop = try XCTUnwrap(StreamThread.knownRunLoop?.cfRunLoop)
        let order = Locked<[String]>([])
        let threads = Locked<[Thread]>([])
        let done = Signal()
        let second = Timer(fire: Date(timeIntervalSinceNow: 0.05), interval: 0, repeats: false) { _ in
            order.value.append("later")
            threads.value.append(Thread.current)
            done.raise()
        }
        let first = Timer(fire: Date(), interval: 0, repeats: false) { _ in
            order.value.append("now")
            threads.value.append(Thread.current)
        }
        runLoop.add(second, forMode: .default)
        runLoop.add(first, forMode: .default)
        XCTAssertTrue(done.wait(timeout: shortTimeout), "a timer on the stream thread never fired: \(order.value)")
        XCTAssertEqual(order.value, ["now", "later"])
        let thread = try XCTUnwrap(StreamThread.thread)
        XCTAssertTrue(threads.value.allSatisfy { $0 === thread }, "a timer fired off the stream thread")

        let ran = Signal()
        CFRunLoopPerformBlock(cfRunLoop, kCFRunLoopDefaultMode) { ran.raise() }
        CFRunLoopWakeUp(cfRunLoop)
        XCTAssertTrue(ran.wait(timeout: shortTimeout), "a block with a wake-up did not run on the stream thread")
    }

    /// The thread runs the run loop only when the run loop has work: a transfer over a pair on the stream
    /// thread, thousands of wake-ups, adds (almost) no run-loop turns. A port the run loop left ready would
    /// make the thread run it again on every wake-up.
    func testTheRunLoopRunsOnlyWhenItHasWork() throws {
        // Give the run loop something to do first, so a port it leaves ready would show below.
        let fired = Signal()
        RunLoop.socketStreams.add(Timer(fire: Date(), interval: 0, repeats: false) { _ in fired.raise() }, forMode: .default)
        XCTAssertTrue(fired.wait(timeout: shortTimeout))
        let before = StreamThread.runLoopTurns.load(ordering: .relaxed)

        let body = testPayload(2_000_000, seed: 25)
        let port = try startHTTPServer(.v4, files: ["data.bin": body])
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "GET /data.bin HTTP/1.0\r\n\r\n")
        recorder.readChunk = 1024
        recorder.schedule(pair, on: .socketStreams)
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(recorder.wait(timeout: 20) { $0.has(.endEncountered, on: .input) }, "trace: \(recorder.trace)")
        XCTAssertEqual(try XCTUnwrap(HTTPReply(recorder.snapshot.received)).body, body)
        let events = recorder.snapshot.events(.input).count
        XCTAssertGreaterThan(events, 1_000, "too few events to tell")
        let turns = StreamThread.runLoopTurns.load(ordering: .relaxed) - before
        XCTAssertLessThan(turns, 20, "the run loop ran \(turns) times during \(events) stream events")
    }
}
