#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The handshake-stage plumbing, with a toy stage against real loopback peers: what TLS and proxies
/// will ride on. Events are gated, the deadline covers the stage, failures reach both streams,
/// bytes read past the stage's reply stay readable, and a stage can start on a live pair.
final class StageTests: SocketStreamsTestCase {

    /// openCompleted comes at TCP up, then nothing until the stage is done; then hasSpaceAvailable,
    /// and the exchange works through the stage's transport. The stage runs on the open's home run
    /// loop (here the main one), never on another thread.
    func testHasEventsWaitForTheStageAndItRunsOnTheHomeRunLoop() throws {
        let mayAnswer = Signal()
        let server = try startRawServer { connection in
            guard let hello = try? connection.readExactly(ToyStage.greeting.count), hello == Data(ToyStage.greeting) else { return }
            _ = mayAnswer.wait(timeout: 10)
            try? connection.write("OK\n")
            connection.echoUntilEnd()
        }
        let pair = makePair(port: server.port)
        let stage = ToyStage()
        XCTAssertTrue(pair.input.connection.addStage(stage))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "after the handshake"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.openCompleted, on: .input) && recorder.has(.openCompleted, on: .output) && !stage.threads.value.isEmpty
            }, recorder.trace)
        settle()
        XCTAssertEqual(recorder.snapshot.events(.input), [.openCompleted], recorder.trace)
        XCTAssertEqual(
            recorder.snapshot.events(.output), [.openCompleted], "hasSpaceAvailable before the stage finished: \(recorder.trace)")
        XCTAssertEqual(recorder.snapshot.bytesWritten, 0)

        mayAnswer.raise()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "after the handshake" }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.events(.output).prefix(2), [.openCompleted, .hasSpaceAvailable], recorder.trace)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        XCTAssertTrue(stage.threads.value.allSatisfy(isMainThread), "the stage ran off the home run loop")
    }

    /// A stage's failure is errorOccurred on both streams, in the stage's own domain and code, with
    /// a message naming the stage and the target; no has-event ever comes.
    func testStageFailureReachesBothStreams() throws {
        let server = try startRawServer { connection in
            _ = connection.answerToyHandshake("NO\n")
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        XCTAssertTrue(pair.input.connection.addStage(ToyStage()))
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        settle()
        for role in [StreamRole.input, .output] {
            XCTAssertEqual(recorder.snapshot.events(role), [.openCompleted, .errorOccurred], recorder.trace)
        }
        for stream in [pair.input as Stream, pair.output as Stream] {
            XCTAssertEqual(stream.streamStatus, .error)
            let error = try XCTUnwrap(stream.streamError as NSError?)
            XCTAssertEqual(error.domain, ToyStage.errorDomain)
            XCTAssertEqual(error.code, 7)
            XCTAssertEqual(error.userInfo["ToyReply"] as? String, "NO")
            XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorCodeKey"]), 7)
            XCTAssertEqual(error.localizedDescription, "toy handshake with 127.0.0.1 port \(server.port) failed: the peer said NO")
        }
    }

    /// The peer closing mid-handshake fails the stage (ECONNRESET here), on both streams.
    func testPeerClosingDuringTheStageFailsIt() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readExactly(ToyStage.greeting.count)
        }
        let pair = makePair(port: server.port)
        XCTAssertTrue(pair.input.connection.addStage(ToyStage()))
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        assertPOSIXError(pair.input.streamError, [ECONNRESET])
        assertPOSIXError(pair.output.streamError, [ECONNRESET])
    }

    /// connectTimeoutKey bounds the whole open: a stage still waiting when it expires fails with
    /// ETIMEDOUT on both streams, not a moment before (time is advanced by hand).
    func testOpenDeadlineCoversTheStage() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readToEOF(timeout: 10)  // reads the greeting, never answers
        }
        let pair = makePair(port: server.port)
        let clock = ManualTime()
        pair.input.connection.someOptions.time = clock
        XCTAssertTrue(pair.input.setProperty(2.0, forKey: .connectTimeoutKey))
        XCTAssertTrue(pair.input.connection.addStage(ToyStage()))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.openCompleted, on: .output) }, recorder.trace)
        XCTAssertEqual(clock.pending, [2.0], "the open's deadline is the only timer")

        clock.advance(by: 1.999)
        settle()
        XCTAssertFalse(recorder.has(.errorOccurred, on: .input), recorder.trace)
        XCTAssertEqual(pair.output.streamStatus, .open)

        clock.advance(by: 0.001)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        let error = try XCTUnwrap(pair.output.streamError as NSError?)
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
        XCTAssertEqual(error.code, Int(ETIMEDOUT))
        XCTAssertTrue(error.localizedDescription.hasPrefix("toy handshake with 127.0.0.1"), error.localizedDescription)
        XCTAssertFalse(recorder.has(.hasSpaceAvailable, on: .output), recorder.trace)
        XCTAssertEqual(clock.pending, [])
    }

    /// Bytes that came in the same segment as the stage's reply are the stream's: the transport holds
    /// them, the fd is no longer readable, yet hasBytesAvailable keeps coming (one 1-byte read per
    /// event here) until every one is read.
    func testBytesReadPastTheReplyAreReSignalledUntilRead() throws {
        let server = try startRawServer { connection in
            _ = connection.answerToyHandshake("OK\nearly bytes")
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        XCTAssertTrue(pair.input.connection.addStage(ToyStage()))
        let recorder = DelegateRecorder()
        recorder.readChunk = 1
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "early bytes" }, recorder.trace)
        settle()
        XCTAssertEqual(recorder.count(.hasBytesAvailable, on: .input), 11, recorder.trace)
        XCTAssertEqual(
            nativeHandle(of: pair.input).map { Posix.bytesAvailable($0) }, 0, "the bytes came from the transport, not the kernel")
        XCTAssertFalse(pair.input.hasBytesAvailable)
    }

    /// A stage added to a live pair (the STARTTLS case): the plain exchange before it, the stage's
    /// own exchange, then live again with hasSpaceAvailable, and bytes the peer sent right behind its
    /// reply are not lost.
    func testStageAddedToALivePair() throws {
        let server = try startRawServer { connection in
            guard let plain = try? connection.readExactly(6), plain == Data("plain\n".utf8) else { return }
            try? connection.write("plain\n")
            _ = connection.answerToyHandshake("OK\nbehind the reply|")
            connection.echoUntilEnd()
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "plain\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "plain\n" }, recorder.trace)
        let spaceBefore = recorder.count(.hasSpaceAvailable, on: .output)

        let stage = ToyStage()
        XCTAssertTrue(pair.input.connection.addStage(stage))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "plain\nbehind the reply|" }, recorder.trace)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.count(.hasSpaceAvailable, on: .output) > spaceBefore }, recorder.trace)
        recorder.send("secured")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "plain\nbehind the reply|secured" },
            recorder.trace)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        XCTAssertEqual(pair.input.streamStatus, .open)
    }

    /// An unscheduled pair read in blocking style: read() waits through the stage, which runs on the
    /// stream thread, and returns the bytes behind the reply.
    func testBlockingReadWaitsForTheStageOnTheStreamThread() throws {
        let server = try startRawServer { connection in
            _ = connection.answerToyHandshake("OK\nhello")
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let stage = ToyStage()
        XCTAssertTrue(pair.input.connection.addStage(stage))
        let outcome = callWithDeadline(shortTimeout) { () -> Data in
            pair.input.open()
            pair.output.open()
            return readUpTo(pair.input, count: 5).data
        }
        XCTAssertEqual(outcome, Data("hello".utf8))
        XCTAssertFalse(stage.threads.value.isEmpty)
        XCTAssertTrue(stage.threads.value.allSatisfy { $0 === StreamThread.thread }, "the stage ran off the stream thread")
    }

    /// Scheduled in a mode nobody runs, the pair still gets through its stage when the client polls
    /// its status and hasSpaceAvailable (the stage moves to the stream thread), as a polling client
    /// of CFNetwork would.
    func testStatusPollsDuringTheStageMoveItToTheStreamThread() throws {
        let server = try startRawServer { connection in
            _ = connection.answerToyHandshake()
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let stage = ToyStage()
        XCTAssertTrue(pair.input.connection.addStage(stage))
        let idleMode = RunLoop.Mode("SocketStreamsTests.NobodyRunsThis")
        for stream in [pair.input as Stream, pair.output as Stream] { stream.schedule(in: .current, forMode: idleMode) }
        pair.input.open()
        pair.output.open()
        let ready = callWithDeadline(shortTimeout) { () -> Bool in
            while pair.output.streamStatus == .opening || !pair.output.hasSpaceAvailable {
                if pair.output.streamStatus == .error { return false }
            }
            return true
        }
        XCTAssertEqual(ready, true, "\(String(describing: pair.output.streamError))")
        XCTAssertTrue(stage.threads.value.contains { $0 === StreamThread.thread }, "the stage never ran on the stream thread")
    }

    /// Stages cannot be added to a failed or closed pair.
    func testNoStageOnAFailedOrClosedPair() throws {
        let refused = makePair(port: try RawSocket.unusedPort())
        let recorder = startRecorder(refused)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) })
        XCTAssertFalse(refused.input.connection.addStage(ToyStage()))

        let server = try startRawServer { connection in _ = try? connection.readToEOF(timeout: 10) }
        let closed = makePair(port: server.port)
        closed.input.open()
        closed.output.open()
        closed.input.close()
        closed.output.close()
        XCTAssertFalse(closed.input.connection.addStage(ToyStage()))
    }
}

extension Connection {
    /// The tests' way in for a stage of their own (the package adds its stages from its settings).
    func addStage(_ stage: any HandshakeStage) -> Bool {
        lock.withLock { queueStage(stage) }
    }
}
