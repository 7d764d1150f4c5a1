#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Pairs around an existing fd (CFStreamCreatePairWithSocket) and Unix-domain pairs.
final class NativeSocketTests: SocketStreamsTestCase {

    /// Exchanges data both ways between the pair (scheduled on the main run loop) and the raw
    /// fd at the other end of the connection.
    private func assertExchange(
        _ pair: StreamPair, otherEnd: Int32,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "stream -> fd"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.bytesWritten == 12 },
            "trace: \(recorder.trace)", file: file, line: line)
        XCTAssertEqual(
            try RawSocket.readExactly(otherEnd, count: 12, timeout: shortTimeout),
            Data("stream -> fd".utf8), file: file, line: line)
        XCTAssertNoThrow(try RawSocket.writeAll(otherEnd, Data("fd -> stream".utf8)), file: file, line: line)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "fd -> stream" },
            "trace: \(recorder.trace)", file: file, line: line)
        // A native pair opens synchronously: openCompleted is the first event on each stream.
        XCTAssertEqual(recorder.snapshot.events(.input).first, .openCompleted, file: file, line: line)
        XCTAssertEqual(recorder.snapshot.events(.output).first, .openCompleted, file: file, line: line)
    }

    func testSocketpairStreamsExchangeDataAndLeaveTheFdOpenByDefault() throws {
        let (mine, theirs) = try RawSocket.socketPair()
        defer { close(theirs) }
        let identity = try XCTUnwrap(RawSocket.identity(of: mine))
        let pair = createStreamPair(nativeSocket: mine)
        closeAfterTest(pair)

        let shouldClose = pair.input.property(forKey: CFKey.shouldCloseNativeSocket)
        XCTAssertEqual((shouldClose as? NSNumber)?.boolValue, false, "ShouldCloseNativeSocket must read back false")
        XCTAssertEqual(nativeHandle(of: pair.input), mine, "native handle before open")

        assertExchange(pair, otherEnd: theirs)
        XCTAssertEqual(nativeHandle(of: pair.output), mine)

        pair.input.close()
        pair.output.close()
        settle()
        XCTAssertTrue(RawSocket.isOpen(mine, sameAs: identity), "the library closed an fd it does not own")
        // Still a working socket: the other end sees no EOF, and data still flows.
        XCTAssertNoThrow(try RawSocket.writeAll(mine, Data("still mine".utf8)))
        XCTAssertEqual(try RawSocket.readExactly(theirs, count: 10, timeout: shortTimeout), Data("still mine".utf8))
        close(mine)
    }

    /// A connected TCP fd, with ShouldCloseNativeSocket set to true: closing both streams
    /// closes the fd, and the peer sees EOF.
    func testConnectedTCPFdIsClosedWhenShouldCloseNativeSocketIsTrue() throws {
        let (client, server) = try RawSocket.connectedTCPPair(family: .v4)
        defer { close(server) }
        let identity = try XCTUnwrap(RawSocket.identity(of: client))
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        XCTAssertTrue(pair.output.setProperty(NSNumber(value: true), forKey: CFKey.shouldCloseNativeSocket))
        XCTAssertEqual(
            (pair.input.property(forKey: CFKey.shouldCloseNativeSocket) as? NSNumber)?.boolValue, true,
            "the property is shared by both streams of the pair")

        assertExchange(pair, otherEnd: server)
        pair.input.close()
        XCTAssertTrue(RawSocket.isOpen(client, sameAs: identity), "closed after only one stream was closed")
        pair.output.close()
        let (_, eof) = try RawSocket.readToEOF(server, timeout: shortTimeout)
        XCTAssertTrue(eof, "peer saw no EOF after both streams were closed")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { !RawSocket.isOpen(client, sameAs: identity) },
            "fd still open although ShouldCloseNativeSocket is true")
    }

    /// A connected TCP fd with the default (do not close): exchange works, fd survives.
    func testConnectedTCPFdSurvivesByDefault() throws {
        let (client, server) = try RawSocket.connectedTCPPair(family: .v6)
        defer {
            close(client)
            close(server)
        }
        let identity = try XCTUnwrap(RawSocket.identity(of: client))
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        assertExchange(pair, otherEnd: server)
        pair.input.close()
        pair.output.close()
        settle()
        XCTAssertTrue(RawSocket.isOpen(client, sameAs: identity))
        XCTAssertFalse(try RawSocket.waitReadable(server, timeout: 0.1), "peer saw EOF/data although the fd stays open")
    }

    /// A native pair that is released without close() does not close a borrowed fd either.
    func testReleasedNativePairLeavesTheFdOpen() throws {
        let (mine, theirs) = try RawSocket.socketPair()
        defer {
            close(mine)
            close(theirs)
        }
        let identity = try XCTUnwrap(RawSocket.identity(of: mine))
        do {
            let pair = createStreamPair(nativeSocket: mine)
            pair.input.open()
            pair.output.open()
            XCTAssertEqual(pair.input.streamStatus, .open, "a native pair opens synchronously")
        }
        settle()
        XCTAssertTrue(RawSocket.isOpen(mine, sameAs: identity))
    }

    /// createStreamPair(unixSocketPath:) against socat UNIX-LISTEN echo.
    func testUnixSocketPairAgainstSocat() throws {
        let path = try startSocatUnixEcho()
        let pair = createStreamPair(unixSocketPath: path)
        closeAfterTest(pair)
        let message = String(repeating: "unix ", count: 2000)
        let recorder = DelegateRecorder(sending: message)
        recorder.readChunk = 4096
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.received.count >= message.utf8.count },
            "trace: \(recorder.trace)")
        XCTAssertEqual(recorder.snapshot.receivedString, message)
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_DOMAIN), AF_UNIX)
    }

    /// A Unix path nobody listens on fails like a refused TCP connection.
    func testUnixSocketPathWithoutListenerFails() throws {
        let directory = try makeTemporaryDirectory()
        let pair = createStreamPair(unixSocketPath: directory.appendingPathComponent("nobody.sock").path)
        closeAfterTest(pair)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "trace: \(recorder.trace)")
        assertPOSIXError(pair.input.streamError, [ENOENT, ECONNREFUSED])
        XCTAssertEqual(pair.input.streamStatus, .error)
    }

    /// The caller closes its native socket under an open pair (its bug, not ours): the next use
    /// reports EBADF as the streams' error (-1, then `errorOccurred` for a scheduled pair), never a
    /// trap, and closing the pair does not close the number again.
    func testNativeSocketClosedByTheCallerReportsEBADF() throws {
        for scheduled in [true, false] {
            var fds: [Int32] = [0, 0]
            XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
            defer { close(fds[1]) }
            let pair = createStreamPair(nativeSocket: fds[0])
            closeAfterTest(pair)
            let recorder = DelegateRecorder()
            if scheduled {
                recorder.start(pair)
            } else {
                pair.input.open()
                pair.output.open()
            }
            XCTAssertEqual(pair.output.write("x", maxLength: 1), 1)
            if scheduled {
                XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) }, recorder.trace)
            }
            XCTAssertEqual(close(fds[0]), 0, "the caller closes the fd it lent")
            // The kernel drops a closed file from every epoll set, so nothing is announced by itself;
            // the next use finds out.
            var byte: UInt8 = 0x79
            XCTAssertEqual(pair.input.read(&byte, maxLength: 1), -1)
            XCTAssertEqual(pair.output.write(&byte, maxLength: 1), -1)
            if scheduled {
                XCTAssertTrue(
                    runUntil(timeout: shortTimeout) {
                        recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
                    }, recorder.trace)
            }
            assertPOSIXError(pair.input.streamError, [EBADF])
            assertPOSIXError(pair.output.streamError, [EBADF])
            XCTAssertEqual(pair.input.streamStatus, .error)
            pair.input.close()
            pair.output.close()
        }
    }

    /// A pair around an fd that is not open fails its open with EBADF: an error, not a crash.
    func testInvalidNativeSocketFailsTheOpen() throws {
        let pair = createStreamPair(nativeSocket: -1)
        closeAfterTest(pair)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        assertPOSIXError(pair.input.streamError, [EBADF])
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), -1)
        XCTAssertEqual(pair.output.write(&byte, maxLength: 1), -1)
    }
}
