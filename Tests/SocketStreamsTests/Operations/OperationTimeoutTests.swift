import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The operations engine's timers (issue 25): an operation that follows one with a timeout adopts the
/// timer already armed instead of a cancel and an arm per operation; the timer, firing before the
/// adopting operation's deadline, re-arms for the rest; a shorter timeout re-arms at once; a timer no
/// operation adopts is cancelled when the pump lets go; a timer the delegate extended is adopted or
/// replaced like any other. On a manual clock, through `QueuedSocket`.
final class OperationTimeoutTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "OperationTimeoutTests")

    /// A server that writes one byte each time `send` is raised, and reads until the end.
    private func byteServer(_ send: Signal, count: Int) throws -> RawTCPServer {
        let server = try startRawServer { connection in
            for _ in 0..<count {
                guard send.wait(timeout: 20) else { return }
                try? connection.write("x")
            }
            _ = try? connection.readToEOF(timeout: 20)
        }
        addCleanup { for _ in 0..<count { send.raise() } }
        return server
    }

    /// A connected socket on `clock`, with `recorder` as its delegate.
    private func socket(_ recorder: QueuedRecorder, clock: ManualTime, port: Int) throws -> QueuedSocket {
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.engine.time = clock
        try socket.connect(toHost: "127.0.0.1", onPort: port)
        XCTAssertTrue(recorder.waitFor("connect"))
        return socket
    }

    /// Read 1 (timeout 5) and read 2 (`timeout`) queued; read 1 times out at 5 and the delegate extends
    /// it by 10 (due at 15); a byte at 7 completes read 1, and read 2 is first from then on.
    private func secondReadAfterAnExtension(
        timeout: Double
    ) throws -> (ManualTime, QueuedRecorder, (QueuedSocket, RawTCPServer)) {
        let send = Signal()
        let server = try byteServer(send, count: 1)
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        recorder.timeoutAnswers = [10]
        let socket = try socket(recorder, clock: clock, port: server.port)
        socket.read(toLength: 1, timeout: 5, tag: 1)
        socket.read(toLength: 1, timeout: timeout, tag: 2)
        XCTAssertTrue(clock.waitForTimers { $0 == [5] }, "\(clock.pending)")
        clock.advance(by: 5)
        XCTAssertTrue(recorder.waitFor("timeout read 1 5.0 0"), "\(recorder.log)")
        XCTAssertTrue(clock.waitForTimers { $0 == [10] }, "the extension was not armed: \(clock.pending)")
        clock.advance(by: 2)
        send.raise()
        XCTAssertTrue(recorder.waitFor("read 1 x"), "\(recorder.log)")
        return (clock, recorder, (socket, server))
    }

    /// The delegate was asked about read 2 (`after` seconds elapsed, nothing read), did not extend it,
    /// and the socket disconnected with its timeout.
    private func assertSecondReadTimedOut(
        _ recorder: QueuedRecorder, after elapsed: String, file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertTrue(recorder.waitFor("timeout read 2 \(elapsed) 0"), "\(recorder.log)", file: file, line: line)
        XCTAssertTrue(recorder.wait { $0.last?.hasPrefix("disconnect") == true }, "\(recorder.log)", file: file, line: line)
        XCTAssertEqual(recorder.disconnectError as? StreamOperationError, .readTimedOut(tag: 2), file: file, line: line)
    }

    /// The second read (same timeout) keeps the first one's timer, which fires early, re-arms for the
    /// rest of the second read's time, and then asks the delegate with the second read's elapsed time.
    func testTheNextOperationAdoptsTheTimerAndItFiresAtItsOwnDeadline() throws {
        let send = Signal()
        let server = try byteServer(send, count: 1)
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        let socket = try socket(recorder, clock: clock, port: server.port)
        socket.read(toLength: 1, timeout: 5, tag: 1)
        socket.read(toLength: 1, timeout: 5, tag: 2)
        XCTAssertTrue(clock.waitForTimers { $0 == [5] }, "\(clock.pending)")
        clock.advance(by: 2)
        send.raise()
        XCTAssertTrue(recorder.waitFor("read 1 x"), "\(recorder.log)")
        queue.sync {}
        // Read 2 (deadline 7) kept read 1's timer (due at 5): no cancel, no new timer.
        XCTAssertEqual(clock.pending, [3])
        clock.advance(by: 3)
        XCTAssertTrue(clock.waitForTimers { $0 == [2] }, "the early firing did not re-arm for the rest: \(clock.pending)")
        queue.sync {}
        XCTAssertFalse(recorder.log.contains { $0.hasPrefix("timeout") }, "\(recorder.log)")
        clock.advance(by: 2)
        assertSecondReadTimedOut(recorder, after: "5.0")
    }

    /// A next operation with a shorter timeout cannot wait for the armed timer: it is cancelled and
    /// one armed for the new deadline.
    func testAShorterTimeoutReplacesTheArmedTimer() throws {
        let send = Signal()
        let server = try byteServer(send, count: 1)
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        let socket = try socket(recorder, clock: clock, port: server.port)
        socket.read(toLength: 1, timeout: 5, tag: 1)
        socket.read(toLength: 1, timeout: 1, tag: 2)
        XCTAssertTrue(clock.waitForTimers { $0 == [5] }, "\(clock.pending)")
        send.raise()
        XCTAssertTrue(recorder.waitFor("read 1 x"), "\(recorder.log)")
        XCTAssertTrue(clock.waitForTimers { $0 == [1] }, "\(clock.pending)")
        clock.advance(by: 1)
        assertSecondReadTimedOut(recorder, after: "1.0")
    }

    /// A timer the delegate extended is adopted like any other: the next read, whose deadline is later
    /// than the extension's, keeps it, and the early firing re-arms for that read's own deadline (the
    /// extension belonged to the read before it).
    func testAnExtendedTimerIsAdoptedForTheNextReadsOwnDeadline() throws {
        let (clock, recorder, kept) = try secondReadAfterAnExtension(timeout: 20)
        defer { withExtendedLifetime(kept) {} }
        queue.sync {}
        // Read 2 (first at 7, deadline 27) kept the extended timer (due at 15).
        XCTAssertEqual(clock.pending, [8])
        clock.advance(by: 8)
        XCTAssertTrue(clock.waitForTimers { $0 == [12] }, "the early firing did not re-arm for read 2's deadline: \(clock.pending)")
        queue.sync {}
        XCTAssertEqual(recorder.log.filter { $0.hasPrefix("timeout") }, ["timeout read 1 5.0 0"])
        clock.advance(by: 12)
        assertSecondReadTimedOut(recorder, after: "20.0")
    }

    /// The next read's deadline comes before the extended timer's: that timer is cancelled and one
    /// armed for the read's own deadline.
    func testAnExtendedTimerIsReplacedForAShorterTimeout() throws {
        let (clock, recorder, kept) = try secondReadAfterAnExtension(timeout: 3)
        defer { withExtendedLifetime(kept) {} }
        XCTAssertTrue(clock.waitForTimers { $0 == [3] }, "\(clock.pending)")
        clock.advance(by: 3)
        assertSecondReadTimedOut(recorder, after: "3.0")
    }

    /// A read with no timeout after one with a timeout adopts nothing: the timer is cancelled when the
    /// pump lets go, and nothing fires for the read that waits.
    func testATimerNoOperationAdoptsIsCancelled() throws {
        let send = Signal()
        let server = try byteServer(send, count: 1)
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        let socket = try socket(recorder, clock: clock, port: server.port)
        socket.read(toLength: 1, timeout: 5, tag: 1)
        socket.read(toLength: 1, tag: 2)
        XCTAssertTrue(clock.waitForTimers { $0 == [5] }, "\(clock.pending)")
        send.raise()
        XCTAssertTrue(recorder.waitFor("read 1 x"), "\(recorder.log)")
        XCTAssertTrue(clock.waitForTimers { $0.isEmpty }, "\(clock.pending)")
        clock.advance(by: 10)
        queue.sync {}
        XCTAssertEqual(recorder.log, ["connect", "read 1 x"])
        socket.disconnect()
        XCTAssertTrue(recorder.waitFor("disconnect nil"))
    }

    /// Writes with timeouts, one after another: when the last is done its timer goes, and the read's
    /// timer (the other direction) is untouched throughout.
    func testWritesAdoptTheirOwnTimer() throws {
        let send = Signal()
        let server = try byteServer(send, count: 0)
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        let socket = try socket(recorder, clock: clock, port: server.port)
        socket.read(toLength: 1, timeout: 9, tag: 1)
        XCTAssertTrue(clock.waitForTimers { $0 == [9] }, "\(clock.pending)")
        socket.write(Array("w".utf8), timeout: 4, tag: 1)
        socket.write(Array("w".utf8), timeout: 4, tag: 2)
        socket.write(Array("w".utf8), timeout: 4, tag: 3)
        XCTAssertTrue(recorder.waitFor("wrote 3"), "\(recorder.log)")
        XCTAssertTrue(clock.waitForTimers { $0 == [9] }, "\(clock.pending)")
        socket.disconnect()
        XCTAssertTrue(recorder.waitFor("disconnect nil"))
    }
}
