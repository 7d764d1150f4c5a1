#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Failures: their events, statuses and NSError shapes.
final class ErrorTests: SocketStreamsTestCase {

    func testRefusedConnectionReportsECONNREFUSEDOnBothStreams() throws {
        let port = try RawSocket.unusedPort()
        let pair = makePair(host: "127.0.0.1", port: port)
        let recorder = startRecorder(pair)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "trace: \(recorder.trace)")
        settle()
        let snapshot = recorder.snapshot
        XCTAssertFalse(snapshot.has(.openCompleted, on: .input), recorder.trace)
        XCTAssertFalse(snapshot.has(.openCompleted, on: .output), recorder.trace)
        XCTAssertFalse(snapshot.has(.hasSpaceAvailable, on: .output), recorder.trace)
        XCTAssertFalse(snapshot.has(.endEncountered, on: .input), recorder.trace)
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .input), 1, recorder.trace)
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .output), 1, recorder.trace)

        for stream in [pair.input as Stream, pair.output as Stream] {
            XCTAssertEqual(stream.streamStatus, .error)
            let error = try XCTUnwrap(stream.streamError as NSError?)
            XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
            XCTAssertEqual(error.code, Int(ECONNREFUSED))
            XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorCodeKey"]), Int(ECONNREFUSED), "\(error.userInfo)")
            XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorDomainKey"]), 1, "\(error.userInfo)")
            XCTAssertTrue(error.localizedDescription.contains("127.0.0.1"), error.localizedDescription)
            XCTAssertTrue(error.localizedDescription.contains(String(port)), error.localizedDescription)
        }
        // The delegate saw the same error.
        XCTAssertEqual(snapshot.errors[.input]?.code, Int(ECONNREFUSED))
        XCTAssertEqual(snapshot.errors[.output]?.code, Int(ECONNREFUSED))

        // .error is terminal: close() keeps it, I/O fails.
        pair.input.close()
        pair.output.close()
        XCTAssertEqual(pair.input.streamStatus, .error)
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual((pair.input.streamError as NSError?)?.code, Int(ECONNREFUSED))
        var buffer = [UInt8](repeating: 0, count: 4)
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 4), -1)
        XCTAssertEqual(pair.output.write(&buffer, maxLength: 4), -1)
        pair.input.open()
        XCTAssertEqual(pair.input.streamStatus, .error, "an errored stream cannot be reopened")
    }

    /// Blocking style: a write on a refused, unscheduled pair returns -1 with the error.
    func testRefusedConnectionInBlockingStyle() throws {
        let port = try RawSocket.unusedPort()
        let pair = makePair(port: port)
        let outcome = callWithDeadline(10) { () -> (Int, Int) in
            pair.input.open()
            pair.output.open()
            var byte: UInt8 = 1
            let written = pair.output.write(&byte, maxLength: 1)
            let read = pair.input.read(&byte, maxLength: 1)
            return (written, read)
        }
        let (written, read) = try XCTUnwrap(outcome, "blocked for more than 10 s")
        XCTAssertEqual(written, -1)
        XCTAssertEqual(read, -1)
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual(pair.input.streamStatus, .error)
        assertPOSIXError(pair.output.streamError, [ECONNREFUSED])
        assertPOSIXError(pair.input.streamError, [ECONNREFUSED])
    }

    /// A name that cannot be resolved: kCFErrorDomainCFNetwork code 2 (kCFHostErrorUnknown)
    /// carrying the getaddrinfo code.
    func testUnresolvableNameReportsGetAddrInfoFailure() throws {
        guard requireLoopbackOnlyNetwork() else { return }
        let host = "nonexistent.invalid"
        let expectedCode = RawSocket.getaddrinfoCode(host: host)
        XCTAssertNotEqual(expectedCode, 0, "\(host) unexpectedly resolves on this machine")
        let pair = makePair(host: host, port: 80)
        let recorder = startRecorder(pair)

        XCTAssertTrue(
            runUntil(timeout: 10) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "trace: \(recorder.trace)")
        XCTAssertFalse(recorder.has(.openCompleted, on: .input))
        for stream in [pair.input as Stream, pair.output as Stream] {
            XCTAssertEqual(stream.streamStatus, .error)
            let error = try XCTUnwrap(stream.streamError as NSError?)
            XCTAssertEqual(error.domain, "kCFErrorDomainCFNetwork")
            XCTAssertEqual(error.code, 2)
            XCTAssertEqual(intValue(error.userInfo["kCFGetAddrInfoFailureKey"]), Int(expectedCode), "\(error.userInfo)")
            XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorDomainKey"]), 12, "\(error.userInfo)")
            XCTAssertTrue(error.localizedDescription.contains(host), error.localizedDescription)
        }
    }

    /// A port beyond 16 bits is refused, not masked as CFNetwork masks it (65536 + P would connect to
    /// P): EINVAL on both streams, and the message and the remote-port property name the port as given
    /// (PortValidationTests covers every entry that takes a port).
    func testPortBeyondSixteenBitsIsRefusedAndTheMessageNamesIt() throws {
        let port = try RawSocket.unusedPort()
        let pair = makePair(host: "127.0.0.1", port: 65_536 + port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) }, recorder.trace)
        assertPOSIXError(pair.input.streamError, [EINVAL])
        let message = try XCTUnwrap(pair.input.streamError as NSError?).localizedDescription
        XCTAssertTrue(message.contains("port \(65_536 + port) (not in 0...65535)"), message)
        XCTAssertEqual(
            (pair.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemotePortNumber as String)) as? NSNumber)?.intValue,
            65_536 + port)
    }

    /// A host name with a NUL (or another control byte) is refused, not cut at the NUL: getaddrinfo
    /// and inet_pton would read "127.0.0.1\0junk" as 127.0.0.1 and connect to a host the caller did
    /// not name. Both streams fail as an unresolvable name does, and nothing reaches the server.
    func testHostNameWithANulOrControlByteIsRefused() throws {
        let server = try startStreamEchoServer()
        for host in ["127.0.0.1\u{0}junk", "localhost\u{0}", "\u{0}", "127.0.0.1\r\n", "local\u{7F}host"] {
            let pair = makePair(host: host, port: Int(server.port))
            let recorder = startRecorder(pair)
            XCTAssertTrue(
                runUntil(timeout: 10) {
                    recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
                }, "\(host.debugDescription): \(recorder.trace)")
            XCTAssertFalse(recorder.has(.openCompleted, on: .input), host.debugDescription)
            let error = try XCTUnwrap(pair.input.streamError as NSError?)
            XCTAssertEqual(error.domain, "kCFErrorDomainCFNetwork")
            XCTAssertEqual(error.code, 2)
            XCTAssertEqual(intValue(error.userInfo["kCFGetAddrInfoFailureKey"]), Int(EAI_NONAME), "\(error.userInfo)")
            XCTAssertTrue(error.localizedDescription.contains("control character"), error.localizedDescription)
            XCTAssertFalse(error.localizedDescription.contains("\u{0}"), "the message escapes the name")
        }
        XCTAssertEqual(server.acceptedCount, 0, "a refused name must not connect anywhere")
    }

    /// The peer resets the connection after sending N bytes. The server side is our own
    /// StreamListener: it writes N bytes, waits for a 1-byte ack (so the client has read
    /// everything and Linux cannot discard unread data on RST), sets SO_LINGER {1,0} on the
    /// accepted pair's native handle and closes both server streams. The client reads all N
    /// bytes, then gets errorOccurred (ECONNRESET), never endEncountered.
    func testPeerResetAfterDataDeliversTheDataThenAnError() throws {
        let total = 48 * 1024
        let payload = testPayload(total, seed: 5)
        let serverOutcome = Locked<String?>(nil)
        let serverDone = Signal()
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let host = ListenerHost(listener) { pair in
            let box = UncheckedBox(pair)
            let serverThread = Thread {
                let (input, output) = box.value
                input.open()
                output.open()
                var outcome = "ok"
                if !writeAll(output, payload) {
                    outcome = "server write failed"
                } else {
                    var ack: UInt8 = 0
                    if input.read(&ack, maxLength: 1) != 1 {
                        outcome = "no ack"
                    } else if let fd = nativeHandle(of: input) {
                        do { try RawSocket.setResetOnClose(fd) } catch { outcome = "\(error)" }
                    } else {
                        outcome = "no native handle on the accepted pair"
                    }
                }
                input.close()
                output.close()
                serverOutcome.value = outcome
                serverDone.raise()
            }
            serverThread.start()
        }
        addCleanup { host.stop() }

        let pair = makePair(port: host.port)
        let recorder = DelegateRecorder()
        recorder.readChunk = 8192
        var acked = false
        recorder.onEvent = { [unowned recorder] _, _ in
            if !acked && recorder.received.count == total {
                acked = true
                recorder.send("!")
            }
        }
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) },
            "no error after the reset; trace: \(recorder.trace)")
        XCTAssertTrue(serverDone.wait(timeout: shortTimeout))
        XCTAssertEqual(serverOutcome.value, "ok")
        XCTAssertTrue(
            runUntil(timeout: 2) { recorder.has(.errorOccurred, on: .output) },
            "the error must reach the output stream too: \(recorder.trace)")

        let snapshot = recorder.snapshot
        XCTAssertEqual(snapshot.received.count, total)
        XCTAssertTrue(snapshot.received == payload)
        XCTAssertFalse(snapshot.has(.endEncountered, on: .input), "a reset is not an end: \(recorder.trace)")
        XCTAssertFalse(snapshot.has(.endEncountered, on: .output), recorder.trace)
        XCTAssertFalse(snapshot.entries.contains(.read(0)), "read must not return 0 for a reset: \(recorder.trace)")
        XCTAssertEqual(pair.input.streamStatus, .error)
        XCTAssertEqual(pair.output.streamStatus, .error)
        assertPOSIXError(pair.input.streamError, [ECONNRESET])
    }

    /// Writing to a peer that has gone away never raises SIGPIPE: the write returns -1 (or the
    /// error arrives as errorOccurred) with EPIPE / ECONNRESET, and the process lives on.
    /// SIGPIPE is set to its default action (terminate) for the duration, so a library that
    /// let it through would kill the test run.
    func testWritingToAClosedPeerDoesNotRaiseSIGPIPE() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }

        let server = try startRawServer { connection in
            connection.close()
        }
        let pair = makePair(port: server.port)
        let outcome = callWithDeadline(10) { () -> (Int, Int) in
            pair.input.open()
            pair.output.open()
            let chunk = testPayload(64 * 1024)
            var attempts = 0
            while attempts < 200 {
                attempts += 1
                let written = chunk.withUnsafeBytes {
                    pair.output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: chunk.count)
                }
                if written < 0 { return (written, attempts) }
            }
            return (0, attempts)
        }
        let (last, attempts) = try XCTUnwrap(outcome, "writes to a closed peer blocked for more than 10 s")
        XCTAssertEqual(last, -1, "200 writes of 64 KiB to a closed peer all succeeded")
        XCTAssertLessThan(attempts, 200)
        XCTAssertEqual(pair.output.streamStatus, .error)
        assertPOSIXError(pair.output.streamError, [EPIPE, ECONNRESET])
        XCTAssertEqual(pair.input.streamStatus, .error, "a write error reaches the input stream too")
    }

    /// The same through delegate events.
    func testWritingToAClosedPeerWithADelegateReportsErrorOccurred() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }

        let server = try startRawServer { connection in
            connection.close()
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(outgoing: testPayload(8 << 20))
        recorder.writeChunk = 64 * 1024
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(
            runUntil(timeout: 10) { recorder.has(.errorOccurred, on: .output) },
            "no error while writing to a closed peer; wrote \(recorder.snapshot.bytesWritten)")
        assertPOSIXError(recorder.snapshot.errors[.output], [EPIPE, ECONNRESET])
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertFalse(recorder.has(.endEncountered, on: .output))
    }

    /// A write fails (the peer has gone) while bytes it sent earlier are still unread: a delegate
    /// client still gets hasBytesAvailable for every one of them, and the error only after them.
    /// (Regression: the socket left the epoll set on the write error, so the rest never arrived.)
    func testWriteErrorStillDeliversUnreadBytesToADelegate() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        // Small enough to be in our receive buffer at once (bytes still in the server's send buffer
        // when it resets would be dropped by its kernel, beyond anyone's reach).
        let payload = testPayload(32 * 1024, seed: 7)
        let server = try startRawServer { connection in
            try? connection.write(payload)
            _ = try? connection.readExactly(1)  // our writes have begun: closing now sends a RST
            connection.close()
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(outgoing: testPayload(8 << 20))
        recorder.readChunk = 512  // slow reader: most of the payload is still unread...
        recorder.writeChunk = 64 * 1024  // ...when the writes start failing
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: 10) { recorder.has(.errorOccurred, on: .output) }, recorder.trace)
        XCTAssertTrue(
            runUntil(timeout: 10) {
                recorder.has(.errorOccurred, on: .input) || recorder.has(.endEncountered, on: .input)
            }, "input never finished; received \(recorder.snapshot.received.count) of \(payload.count)")
        XCTAssertEqual(recorder.snapshot.received, payload, "bytes lost: \(recorder.snapshot.received.count) of \(payload.count)")
    }
}
