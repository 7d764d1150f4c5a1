import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Which delegate events arrive, on which stream, in which order, and when they are re-posted.
final class EventOrderTests: SocketStreamsTestCase {

    /// A peer that answers "ping" with "pong" and then closes (FIN).
    private func startPingPongServer() throws -> RawTCPServer {
        try startRawServer { connection in
            guard let request = try? connection.readExactly(4), request == Data("ping".utf8) else { return }
            try? connection.write("pong")
            connection.shutdownWrite()
            _ = try? connection.readToEOF(timeout: 5)
        }
    }

    func testOpenCompletedFirstThenSpaceBeforeAnyWriteAndEndOnlyOnInputAfterReadReturnedZero() throws {
        let server = try startPingPongServer()
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "ping"))

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) },
            "trace: \(recorder.trace)")
        // Deliver anything that would (wrongly) follow.
        settle()
        let snapshot = recorder.snapshot
        let trace = recorder.trace

        // openCompleted is the first event on each stream.
        XCTAssertEqual(snapshot.events(.input).first, .openCompleted, trace)
        XCTAssertEqual(snapshot.events(.output).first, .openCompleted, trace)
        XCTAssertEqual(snapshot.count(.openCompleted, on: .input), 1, trace)
        XCTAssertEqual(snapshot.count(.openCompleted, on: .output), 1, trace)

        // hasSpaceAvailable reached the output stream before anything was written, and the
        // first write was made in response to it.
        let firstSpace = try XCTUnwrap(snapshot.firstIndex { $0 == .event(.output, .hasSpaceAvailable) }, trace)
        let firstWrite = try XCTUnwrap(
            snapshot.firstIndex {
                if case .wrote = $0 { return true }
                return false
            }, trace)
        XCTAssertLessThan(firstSpace, firstWrite, trace)
        XCTAssertEqual(snapshot.entries[firstWrite], .wrote(4), trace)
        // Space/bytes events never go to the wrong stream.
        XCTAssertFalse(snapshot.has(.hasSpaceAvailable, on: .input), trace)
        XCTAssertFalse(snapshot.has(.hasBytesAvailable, on: .output), trace)

        // The reply arrived through hasBytesAvailable.
        XCTAssertEqual(snapshot.receivedString, "pong")
        let firstBytes = try XCTUnwrap(snapshot.firstIndex { $0 == .event(.input, .hasBytesAvailable) }, trace)

        // endEncountered: exactly once, input only, after a read that returned 0, nothing after.
        XCTAssertEqual(snapshot.count(.endEncountered, on: .input), 1, trace)
        XCTAssertFalse(snapshot.has(.endEncountered, on: .output), trace)
        XCTAssertFalse(snapshot.has(.errorOccurred, on: .input), trace)
        XCTAssertFalse(snapshot.has(.errorOccurred, on: .output), trace)
        let end = try XCTUnwrap(snapshot.firstIndex { $0 == .event(.input, .endEncountered) }, trace)
        XCTAssertLessThan(firstBytes, end, trace)
        let readsBeforeEnd = snapshot.entries[..<end].compactMap { entry -> Int? in
            if case let .read(n) = entry { return n }
            return nil
        }
        XCTAssertEqual(readsBeforeEnd.last, 0, "endEncountered must follow a read that returned 0: \(trace)")
        XCTAssertEqual(readsBeforeEnd.filter { $0 == 0 }.count, 1, trace)
        let inputAfterEnd = snapshot.entries[(end + 1)...].filter {
            if case .event(.input, _) = $0 { return true }
            return false
        }
        XCTAssertEqual(inputAfterEnd, [], "events after endEncountered + close: \(trace)")
        XCTAssertEqual(pair.input.streamStatus, .closed)
        // The output stream was not told about the peer's FIN.
        XCTAssertEqual(pair.output.streamStatus, .open)
    }

    /// After close() a stream gets no more events even though its peer keeps sending,
    /// and the other stream of the pair goes on working.
    func testNoEventsAfterCloseWhileTheOtherStreamKeepsWorking() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "first")
        recorder.readChunk = 2  // leave data unread when closing
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.hasBytesAvailable, on: .input) },
            "trace: \(recorder.trace)")
        recorder.close(pair.input)
        XCTAssertEqual(pair.input.streamStatus, .closed)
        let closeIndex = recorder.snapshot.entries.count - 1

        // More data for the (closed) input: echoed back by socat.
        recorder.send("second")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.bytesWritten == 11 },
            "output stopped working after the input was closed: \(recorder.trace)")
        // The echo is in the socket (what the input left of "first", and all of "second"),
        // readable: whatever the library would deliver for it, it delivers now.
        let fd = try XCTUnwrap(nativeHandle(of: pair.output))
        XCTAssertTrue(waitForKernelBytes(fd, atLeast: 11 - recorder.received.count), "socat did not echo")
        settle()
        let snapshot = recorder.snapshot
        let inputEvents = snapshot.entries[closeIndex...].filter {
            if case .event(.input, _) = $0 { return true }
            return false
        }
        XCTAssertEqual(inputEvents, [], "events after close: \(recorder.trace)")
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .open)

        // Closing the output too: no events for it afterwards.
        recorder.close(pair.output)
        let outputCloseIndex = recorder.snapshot.entries.count - 1
        settle()
        let outputAfterClose = recorder.snapshot.entries[outputCloseIndex...].filter {
            if case .event(.output, _) = $0 { return true }
            return false
        }
        XCTAssertEqual(outputAfterClose, [], "events after close: \(recorder.trace)")
    }

    /// hasBytesAvailable fires once; while the delegate does not read it is not re-posted,
    /// even though the peer sent far more than one read's worth. A read that leaves data
    /// behind makes it re-post at once.
    func testHasBytesAvailableIsRepostedOnlyAfterARead() throws {
        let sent = Signal()
        let total = 64 * 1024
        let server = try startRawServer { connection in
            try? connection.write(testPayload(total))
            sent.raise()
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder()
        recorder.readsOnHasBytes = false
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.hasBytesAvailable, on: .input) },
            "trace: \(recorder.trace)")
        XCTAssertTrue(sent.wait(timeout: shortTimeout), "server could not send its data")
        settle()
        XCTAssertEqual(
            recorder.count(.hasBytesAvailable, on: .input), 1,
            "re-posted without a read: \(recorder.trace)")

        // One read that leaves most of the 64 KiB behind.
        var buffer = [UInt8](repeating: 0, count: 1024)
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 1024), 1024)
        XCTAssertTrue(
            runUntil(timeout: 2) { recorder.count(.hasBytesAvailable, on: .input) >= 2 },
            "not re-posted after a read that left data: \(recorder.trace)")
        settle()
        XCTAssertEqual(recorder.count(.hasBytesAvailable, on: .input), 2, recorder.trace)

        // Draining one read per event delivers everything, in order.
        var received = Data(buffer)
        recorder.onEvent = { stream, event in
            guard event == .hasBytesAvailable, let input = stream as? InputStream else { return }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = input.read(&chunk, maxLength: chunk.count)
            if n > 0 { received.append(contentsOf: chunk[0..<n]) }
        }
        // The pending (second) event was already delivered and not answered: read once by hand
        // to restart the cycle, then let the events drive the rest.
        let n = pair.input.read(&buffer, maxLength: 1024)
        XCTAssertGreaterThan(n, 0)
        received.append(contentsOf: buffer[0..<max(n, 0)])
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { received.count >= total },
            "got \(received.count) of \(total): \(recorder.trace)")
        XCTAssertTrue(received == testPayload(total))
        recorder.onEvent = nil
    }

    /// hasSpaceAvailable fires once; with no write it is not re-posted; a write re-arms it.
    func testHasSpaceAvailableIsRepostedOnlyAfterAWrite() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        let recorder = startRecorder(pair)  // nothing to write yet

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) },
            "trace: \(recorder.trace)")
        settle()
        XCTAssertEqual(
            recorder.count(.hasSpaceAvailable, on: .output), 1,
            "re-posted without a write: \(recorder.trace)")

        let message = Data("x".utf8)
        let written = message.withUnsafeBytes { pair.output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: 1) }
        XCTAssertEqual(written, 1)
        XCTAssertTrue(
            runUntil(timeout: 2) { recorder.count(.hasSpaceAvailable, on: .output) >= 2 },
            "not re-posted after a write: \(recorder.trace)")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.received == message },
            "echo not received: \(recorder.trace)")
    }

    /// Scheduled before open, the usual sequence on a fresh host connection:
    /// openCompleted on both, then hasSpaceAvailable on the output, and nothing on the input
    /// until the peer sends.
    func testQuietPeerGivesOnlyOpenAndSpaceEvents() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) },
            "trace: \(recorder.trace)")
        settle()
        let snapshot = recorder.snapshot
        XCTAssertEqual(snapshot.events(.input), [.openCompleted], recorder.trace)
        XCTAssertEqual(snapshot.events(.output), [.openCompleted, .hasSpaceAvailable], recorder.trace)
        XCTAssertEqual(pair.input.streamStatus, .open)
        XCTAssertEqual(pair.output.streamStatus, .open)
    }
}
