#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Status transitions, open/close rules, half-close, and when the socket really closes.
final class LifecycleTests: SocketStreamsTestCase {

    /// .notOpen → .opening/.open → .open → .atEnd (input, after read returned 0) → .closed.
    func testStatusTransitionsThroughAConnection() throws {
        let server = try startRawServer { connection in
            guard (try? connection.readExactly(1)) == Data("?".utf8) else { return }
            try? connection.write("answer")
            connection.shutdownWrite()
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = createStreamPair(host: "127.0.0.1", port: server.port)
        closeAfterTest(pair)
        XCTAssertEqual(pair.input.streamStatus, .notOpen)
        XCTAssertEqual(pair.output.streamStatus, .notOpen)
        XCTAssertEqual(server.acceptedCount, 0, "nothing may touch the network before open()")

        let recorder = DelegateRecorder(sending: "?")
        recorder.closesOnEnd = false
        var statusAtOpenCompleted: [StreamRole: Stream.Status] = [:]
        var statusAtEnd: Stream.Status?
        recorder.onEvent = { [unowned recorder] stream, event in
            if event == .openCompleted { statusAtOpenCompleted[recorder.role(of: stream)] = stream.streamStatus }
            if event == .endEncountered { statusAtEnd = stream.streamStatus }
        }
        recorder.schedule(pair)
        pair.input.open()
        XCTAssertTrue([.opening, .open].contains(pair.input.streamStatus), pair.input.streamStatus.name)
        XCTAssertEqual(pair.output.streamStatus, .notOpen, "only the opened stream changes status")
        pair.output.open()
        XCTAssertTrue([.opening, .open].contains(pair.output.streamStatus), pair.output.streamStatus.name)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) },
            "trace: \(recorder.trace)")
        XCTAssertEqual(statusAtOpenCompleted[.input], .open)
        XCTAssertEqual(statusAtOpenCompleted[.output], .open)
        XCTAssertEqual(statusAtEnd, .atEnd)
        XCTAssertEqual(recorder.snapshot.receivedString, "answer")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        XCTAssertEqual(pair.output.streamStatus, .open)
        var buffer = [UInt8](repeating: 0, count: 8)
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), 0, "read at end returns 0")

        pair.input.close()
        pair.output.close()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), -1, "read after close returns -1")
        XCTAssertEqual(pair.output.write(&buffer, maxLength: 8), -1, "write after close returns -1")
        pair.input.open()
        XCTAssertEqual(pair.input.streamStatus, .closed, "a closed stream cannot be reopened")
    }

    /// While the TCP connect is pending the status is .opening (deterministic: the peer is a
    /// backlog-full listener, so the connect cannot complete).
    func testStatusIsOpeningWhileTheConnectIsPending() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let pair = makePair(port: blackhole.port)
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(pair.input.streamStatus, .opening)
        XCTAssertEqual(pair.output.streamStatus, .opening)
        XCTAssertFalse(pair.output.hasSpaceAvailable, "no space while opening")
        XCTAssertFalse(pair.input.hasBytesAvailable, "no bytes while opening")
        pair.input.close()
        pair.output.close()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        withExtendedLifetime(blackhole) {}
    }

    func testReadAndWriteOnANotOpenStreamReturnMinusOne() throws {
        let pair = makePair(port: try RawSocket.unusedPort())
        var buffer = [UInt8](repeating: 0, count: 8)
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), -1)
        XCTAssertEqual(pair.output.write(&buffer, maxLength: 8), -1)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertEqual(pair.input.streamStatus, .notOpen)
        XCTAssertEqual(pair.output.streamStatus, .notOpen)
        pair.input.close()
        XCTAssertEqual(pair.input.streamStatus, .notOpen, "close() on a notOpen stream does nothing")
    }

    /// A second open() is a no-op: one connection, one openCompleted per stream.
    func testSecondOpenIsANoOp() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) },
            "trace: \(recorder.trace)")
        XCTAssertTrue(server.waitForAccepted(1, timeout: shortTimeout))
        // A connect would create a socket inside open() itself.
        let descriptors = RawSocket.openDescriptorCount()
        pair.input.open()
        pair.output.open()
        XCTAssertEqual(RawSocket.openDescriptorCount(), descriptors, "a second open must not connect again")
        settle()
        XCTAssertEqual(recorder.count(.openCompleted, on: .input), 1, recorder.trace)
        XCTAssertEqual(recorder.count(.openCompleted, on: .output), 1, recorder.trace)
        XCTAssertEqual(pair.input.streamStatus, .open)
        XCTAssertEqual(server.acceptedCount, 1)
    }

    /// Closing the output stream does not shut the socket down: the input keeps reading and
    /// the peer sees no EOF. Closing the input too closes the socket (peer sees EOF).
    func testClosingTheOutputKeepsTheInputWorking() throws {
        let peerSawEOFEarly = Locked(false)
        let peerSawEOF = Signal()
        let step = Signal()
        let server = try startRawServer { connection in
            guard (try? connection.readExactly(5)) == Data("hello".utf8) else { return }
            // The client has closed its output stream by now: no EOF may be visible.
            if let early = try? RawSocket.readSome(connection.fd, timeout: 0.3) {
                peerSawEOFEarly.value = early.isEmpty
            }
            try? connection.write("reply after output close")
            guard step.wait(timeout: 10) else { return }
            if let (_, eof) = try? connection.readToEOF(timeout: 5), eof { peerSawEOF.raise() }
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(sending: "hello")
        recorder.closesOutputAfterWriting = true
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.snapshot.receivedString == "reply after output close"
            }, "input stopped working after the output was closed; trace: \(recorder.trace)")
        XCTAssertEqual(pair.output.streamStatus, .closed)
        XCTAssertEqual(pair.input.streamStatus, .open)
        XCTAssertFalse(peerSawEOFEarly.value, "closing one stream shut the socket down")

        recorder.close(pair.input)
        step.raise()
        XCTAssertTrue(peerSawEOF.wait(timeout: shortTimeout), "socket not closed after both streams were closed")
    }

    /// A thread blocked in `read` (or `write`) returns -1 when another thread closes that stream,
    /// instead of staying in `poll` for ever on an fd number that may already belong to someone else;
    /// the socket is closed only once the blocked thread has left. Closing the other stream does not
    /// end a read.
    func testCloseFromAnotherThreadWakesABlockedReadAndWrite() throws {
        let release = Signal()
        let server = try startRawServer { _ in _ = release.wait(timeout: 30) }  // never sends, never reads
        defer { release.raise() }
        let pair = makePair(port: server.port)
        pair.input.open()
        pair.output.open()
        let handlesBefore = SocketHandle.openCount

        let reader = BlockedCall { () -> Int in
            var byte: UInt8 = 0
            return pair.input.read(&byte, maxLength: 1)
        }
        XCTAssertTrue(reader.waitUntilInPoll(timeout: shortTimeout), "the reader never blocked")
        pair.output.close()
        XCTAssertFalse(reader.finished(within: 0.2), "closing the output ended a read")
        pair.input.close()
        XCTAssertEqual(reader.result(timeout: shortTimeout), -1, "close did not wake the blocked read")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount < handlesBefore },
            "the socket was not closed after the reader left")

        let other = makePair(port: server.port)
        other.input.open()
        other.output.open()
        let chunk = [UInt8](repeating: 0x2A, count: 1 << 16)
        let writer = BlockedCall { () -> Int in
            while true {
                let n = other.output.write(chunk, maxLength: chunk.count)
                if n <= 0 { return n }
            }
        }
        XCTAssertTrue(writer.waitUntilInPoll(timeout: shortTimeout), "the writer never blocked")
        other.output.close()
        XCTAssertEqual(writer.result(timeout: shortTimeout), -1, "close did not wake the blocked write")
        other.input.close()
    }

    /// Closing the input stream first: the output keeps writing.
    func testClosingTheInputKeepsTheOutputWorking() throws {
        let received = Locked(Data())
        let server = try startRawServer { connection in
            if let (data, _) = try? connection.readToEOF(timeout: 10) { received.value = data }
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) },
            "trace: \(recorder.trace)")
        recorder.close(pair.input)
        let payload = testPayload(300_000, seed: 11)
        recorder.writeChunk = 16 * 1024
        recorder.send(payload)
        XCTAssertTrue(
            runUntil(timeout: 10) { recorder.snapshot.bytesWritten == payload.count },
            "wrote \(recorder.snapshot.bytesWritten) of \(payload.count)")
        recorder.close(pair.output)
        XCTAssertTrue(server.waitForFinished(1, timeout: shortTimeout), "peer saw no EOF after both closed")
        XCTAssertEqual(received.value.count, payload.count)
        XCTAssertTrue(received.value == payload)
    }

    /// The peer half-closes (shutdown SHUT_WR): the input reads to endEncountered while the
    /// output still writes successfully and the peer receives it.
    func testHalfCloseByPeerEndsInputButOutputStillWrites() throws {
        let afterShutdown = Locked(Data())
        let server = try startRawServer { connection in
            try? connection.write("last words")
            connection.shutdownWrite()
            if let (data, _) = try? connection.readToEOF(timeout: 10) { afterShutdown.value = data }
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) },
            "trace: \(recorder.trace)")
        XCTAssertEqual(recorder.snapshot.receivedString, "last words")
        XCTAssertEqual(pair.output.streamStatus, .open)

        recorder.send("written after the peer's FIN")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.bytesWritten == 28 },
            "trace: \(recorder.trace)")
        XCTAssertFalse(recorder.has(.errorOccurred, on: .output), recorder.trace)
        recorder.close(pair.output)
        XCTAssertTrue(server.waitForFinished(1, timeout: shortTimeout))
        XCTAssertEqual(String(decoding: afterShutdown.value, as: UTF8.self), "written after the peer's FIN")
    }

    /// Closing only the client's output stream sends no FIN: the peer, asked right after the
    /// close, finds no end of stream waiting, and the echo still reaches the open input.
    func testEchoStillArrivesAfterTheClientClosesItsOutput() throws {
        let message = "echo after close"
        let check = Signal()
        let peerSawEnd = Locked<Bool?>(nil)
        let server = try startRawServer { connection in
            guard let request = try? connection.readExactly(message.utf8.count) else { return }
            try? connection.write(request)
            guard check.wait(timeout: 10) else { return }
            var byte: UInt8 = 0
            let peeked = recv(connection.fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
            peerSawEnd.value = peeked >= 0  // 0: a FIN is waiting; EAGAIN (-1): nothing is
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(sending: message)
        recorder.closesOutputAfterWriting = true
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == message },
            "trace: \(recorder.trace)")
        XCTAssertEqual(pair.output.streamStatus, .closed)
        check.raise()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { peerSawEnd.value != nil })
        XCTAssertEqual(peerSawEnd.value, false, "closing the output stream sent a FIN")
        XCTAssertFalse(recorder.has(.endEncountered, on: .input))
        XCTAssertEqual(pair.input.streamStatus, .open)
    }

    /// A pair released without close(): the socket is closed (the peer sees EOF).
    func testReleasingAPairWithoutCloseClosesTheSocket() throws {
        let peerSawEOF = Signal()
        let server = try startRawServer { connection in
            try? connection.write("hi")
            if let (_, eof) = try? connection.readToEOF(timeout: 10), eof { peerSawEOF.raise() }
        }
        do {
            let pair = createStreamPair(host: "127.0.0.1", port: server.port)
            pair.input.open()
            pair.output.open()
            // Poll (never blocks), then read what is known to be there.
            let deadline = Date(timeIntervalSinceNow: shortTimeout)
            while !pair.input.hasBytesAvailable && Date() < deadline {
                Thread.sleep(forTimeInterval: 0.001)
            }
            var buffer = [UInt8](repeating: 0, count: 2)
            XCTAssertEqual(pair.input.hasBytesAvailable ? pair.input.read(&buffer, maxLength: 2) : -2, 2)
            // Both streams go out of scope here, open and unclosed.
        }
        XCTAssertTrue(peerSawEOF.wait(timeout: shortTimeout), "socket left open after the pair was released")
    }

    /// Pairs released on this thread while the stream thread delivers their events: a connection
    /// holds its streams unretained (`UnretainedReference`), so a stream whose last reference goes
    /// while its has-bytes event is being delivered must get no callout once its deinit has begun
    /// (Address Sanitizer, in `Scripts/sanitize`, would see a freed stream used), and every socket
    /// closes (the peer's writes fail and its handler returns).
    func testPairsReleasedWhileTheirEventsAreDelivered() throws {
        let server = try startRawServer { connection in
            let chunk = Data(repeating: 7, count: 16 * 1024)
            while (try? connection.write(chunk)) != nil {}
        }
        final class Reader: NSObject, StreamDelegate, @unchecked Sendable {
            // `@unchecked Sendable`: `events` is touched only on the stream thread, where its streams
            // deliver; `reached` is a semaphore.
            let reached = DispatchSemaphore(value: 0)
            let wanted: Int
            var events = 0
            var buffer = [UInt8](repeating: 0, count: 4096)
            init(wanted: Int) { self.wanted = wanted }
            func stream(_ stream: Stream, handle event: Stream.Event) {
                guard event == .hasBytesAvailable, let input = stream as? InputStream else { return }
                _ = input.read(&buffer, maxLength: buffer.count)
                events += 1
                if events == wanted { reached.signal() }
            }
        }
        let iterations = 100
        for iteration in 0..<iterations {
            let reader = Reader(wanted: 1 + iteration % 8)
            do {
                let pair = createStreamPair(host: "127.0.0.1", port: server.port)
                pair.input.delegate = reader
                pair.output.delegate = reader
                pair.input.schedule(in: .socketStreams, forMode: .default)
                pair.output.schedule(in: .socketStreams, forMode: .default)
                pair.input.open()
                pair.output.open()
                XCTAssertEqual(reader.reached.wait(timeout: .now() + shortTimeout), .success, "iteration \(iteration)")
                // Both streams are released here, with bytes still arriving.
            }
        }
        XCTAssertTrue(server.waitForFinished(iterations, timeout: shortTimeout), "\(server.finishedCount) of \(iterations) sockets closed")
    }
}

/// A call made on its own thread, which a test can watch block in `poll` (by its kernel state,
/// `/proc/self/task/TID/syscall`) and then collect.
final class BlockedCall<T: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var tid: Int32 = 0
    private var value: T?

    init(_ body: @escaping () -> T) {
        let box = UncheckedBox(body)
        let thread = Thread { [self] in
            // "/proc/thread-self" links to "PID/task/TID".
            let link = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")) ?? ""
            let id = Int32(link.split(separator: "/").last.map(String.init) ?? "") ?? 0
            condition.withLock { tid = id }
            let result = box.value()
            condition.withLock {
                value = result
                condition.broadcast()
            }
        }
        thread.start()
    }

    /// Waits until the thread sits in poll(2)/ppoll(2) (x86_64 syscall numbers 7 and 271).
    func waitUntilInPoll(timeout: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            let id = condition.withLock { tid }
            if id != 0, let line = try? String(contentsOfFile: "/proc/self/task/\(id)/syscall", encoding: .utf8) {
                let number = line.split(separator: " ").first.map(String.init) ?? ""
                if number == "7" || number == "271" { return true }
            }
            usleep(1_000)  // polling the kernel's view of the thread, not waiting for time to pass
        }
        return false
    }

    /// Whether the call returned within `seconds`.
    func finished(within seconds: TimeInterval) -> Bool {
        result(timeout: seconds) != nil
    }

    /// The call's result, or nil if it has not returned within `timeout`.
    func result(timeout: TimeInterval) -> T? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        return condition.withLock {
            while value == nil, condition.wait(until: deadline) {}
            return value
        }
    }
}
