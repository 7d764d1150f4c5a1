import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// A scheduled pair's connect runs on the run loop it is scheduled on. These check that a client
/// that then blocks or polls without running that run loop (on its thread or another) still gets connected.
final class OpenThreadTests: SocketStreamsTestCase {

    func testBlockingWriteAndReadFromAnotherThreadRightAfterOpen() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
        let message = Array("blocking on the scheduling thread".utf8)
        let written = callWithDeadline(5) { pair.output.write(message, maxLength: message.count) }
        XCTAssertEqual(written, message.count, "write never returned or failed: \(String(describing: pair.output.streamError))")
        let echoed = callWithDeadline(5) { readUpTo(pair.input, count: message.count).data }
        XCTAssertEqual(echoed.map { Array($0) }, message)
    }

    func testPollingStatusOnTheSchedulingThreadMakesProgress() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
        let deadline = Date(timeIntervalSinceNow: 5)
        while pair.output.streamStatus == .opening && Date() < deadline {}
        XCTAssertEqual(pair.output.streamStatus, .open)
        let spinDeadline = Date(timeIntervalSinceNow: 5)
        while !pair.output.hasSpaceAvailable && Date() < spinDeadline {}
        XCTAssertTrue(pair.output.hasSpaceAvailable)
    }

    /// The open completes on the scheduling thread itself, inside its run loop.
    func testOpenCompletesOnTheSchedulingRunLoop() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "here"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "here" }, recorder.trace)
        XCTAssertTrue(recorder.snapshot.eventThreads.allSatisfy { $0 === Thread.current })
    }
}
