#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Getting connected: address families, names, timeouts, the Apple entry point.
final class ConnectTests: SocketStreamsTestCase {

    /// Runs a delegate echo exchange on the main run loop and checks the echo.
    private func assertEchoExchange(
        _ pair: StreamPair, message: String = "echo me",
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: message))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == message },
            "no echo; trace: \(recorder.trace)", file: file, line: line)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "errors: \(recorder.snapshot.errors)", file: file, line: line)
    }

    func testIPv6LiteralConnectsToAnIPv6Peer() throws {
        let port = try startSocatEcho(.v6)
        let pair = makePair(host: "::1", port: port)
        assertEchoExchange(pair, message: "over IPv6")
        let fd = try XCTUnwrap(nativeHandle(of: pair.input), "no native handle once open")
        XCTAssertEqual(RawSocket.peerPort(fd), port)
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_DOMAIN), AF_INET6)
        XCTAssertEqual(pair.input.property(forKey: CFKey.remoteHostName) as? String, "::1")
    }

    func testIPv4LiteralConnectsToAnIPv4Peer() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(host: "127.0.0.1", port: port)
        assertEchoExchange(pair, message: "over IPv4")
        let fd = try XCTUnwrap(nativeHandle(of: pair.output))
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_DOMAIN), AF_INET)
    }

    /// "localhost" is resolved (here to 127.0.0.1 only).
    func testLocalhostNameConnects() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(host: "localhost", port: port)
        assertEchoExchange(pair, message: "via localhost")
        XCTAssertEqual(pair.input.property(forKey: CFKey.remoteHostName) as? String, "localhost")
    }

    /// connectTimeoutKey: against a listener whose backlog is full the connect hangs; with a 0.5 s
    /// timeout the pair fails with ETIMEDOUT on both streams once 0.5 s have passed, not before
    /// (the clock is advanced by hand).
    func testConnectTimeoutPropertyFailsAHangingConnect() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let pair = makePair(port: blackhole.port)
        let clock = ManualTime()
        pair.input.connection.someOptions.time = clock
        XCTAssertTrue(pair.input.setProperty(NSNumber(value: 0.5), forKey: .connectTimeoutKey))
        let recorder = startRecorder(pair)
        XCTAssertEqual(clock.pending, [0.5])

        clock.advance(by: 0.499)
        settle()
        XCTAssertEqual(recorder.snapshot.entries, [], recorder.trace)
        XCTAssertEqual(pair.input.streamStatus, .opening)

        clock.advance(by: 0.001)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "no timeout error; trace: \(recorder.trace)")
        XCTAssertFalse(recorder.has(.openCompleted, on: .input))
        for stream in [pair.input as Stream, pair.output as Stream] {
            XCTAssertEqual(stream.streamStatus, .error)
            let error = try XCTUnwrap(stream.streamError as NSError?)
            XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
            XCTAssertEqual(error.code, Int(ETIMEDOUT))
            XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorCodeKey"]), Int(ETIMEDOUT), "\(error.userInfo)")
            XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorDomainKey"]), 1, "\(error.userInfo)")
            XCTAssertEqual(error.localizedDescription, "Could not connect to 127.0.0.1 port \(blackhole.port): Connection timed out")
        }
        withExtendedLifetime(blackhole) {}
    }

    /// The same with the real clock (the reactor's timerfd), and with a blocking reader: the
    /// timeout still fires while the connect runs on the stream thread.
    func testConnectTimeoutWithTheSystemClock() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let pair = makePair(port: blackhole.port)
        XCTAssertTrue(pair.input.setProperty(0.2, forKey: .connectTimeoutKey))
        let result = callWithDeadline(shortTimeout) { () -> Int in
            pair.input.open()
            var byte: UInt8 = 0
            return pair.input.read(&byte, maxLength: 1)
        }
        XCTAssertEqual(result, -1)
        assertPOSIXError(pair.input.streamError, [ETIMEDOUT])
        withExtendedLifetime(blackhole) {}
    }

    /// Absurd timeouts (infinity, 1e308, NaN is refused) are no timeout in practice, never a crash.
    func testHugeConnectTimeoutsAreAccepted() throws {
        for value in [Double.infinity, 1e308, 1e11] {
            let blackhole = try BacklogFullListener(family: .v4)
            let pair = makePair(port: blackhole.port)
            XCTAssertTrue(pair.input.setProperty(value, forKey: .connectTimeoutKey), "\(value)")
            pair.input.open()
            XCTAssertEqual(pair.input.streamStatus, .opening)
            pair.input.close()
        }
        XCTAssertFalse(makePair(port: 1).input.setProperty(Double.nan, forKey: .connectTimeoutKey))
    }

    /// Without a timeout property a hanging connect just stays .opening: nothing is scheduled that
    /// could end it.
    func testHangingConnectStaysOpeningWithoutTimeout() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let pair = makePair(port: blackhole.port)
        let clock = ManualTime()
        pair.input.connection.someOptions.time = clock
        let recorder = startRecorder(pair)
        settle()
        XCTAssertEqual(clock.pending, [], "a timer that could end the open")
        XCTAssertEqual(recorder.snapshot.entries, [], "trace: \(recorder.trace)")
        XCTAssertEqual(pair.input.streamStatus, .opening)
        XCTAssertEqual(pair.output.streamStatus, .opening)
        pair.input.close()
        pair.output.close()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        withExtendedLifetime(blackhole) {}
    }

    /// `Stream.getStreamsToHost(withName:port:inputStream:outputStream:)` exactly as Apple code
    /// calls it, with `&` on optional locals.
    func testGetStreamsToHostWithInOutOptionals() throws {
        let port = try startSocatEcho(.v4)
        var inputStream: InputStream?
        var outputStream: OutputStream?
        Stream.getStreamsToHost(withName: "127.0.0.1", port: port, inputStream: &inputStream, outputStream: &outputStream)

        let input = try XCTUnwrap(inputStream as? SocketInputStream, "no socket input stream")
        let output = try XCTUnwrap(outputStream as? SocketOutputStream, "no socket output stream")
        XCTAssertEqual(input.streamStatus, .notOpen)
        XCTAssertEqual(output.streamStatus, .notOpen)
        closeAfterTest((input, output))
        assertEchoExchange((input, output), message: "via getStreamsToHost")
    }

    /// Only an input stream requested (nil output pointer): it works on its own, and closing
    /// it closes the socket.
    func testGetStreamsToHostWithOnlyAnInputStream() throws {
        let peerSawEOF = Signal()
        let server = try startRawServer { connection in
            try? connection.write("greeting")
            if let (_, eof) = try? connection.readToEOF(timeout: 10), eof { peerSawEOF.raise() }
        }
        var inputStream: InputStream?
        Stream.getStreamsToHost(withName: "127.0.0.1", port: server.port, inputStream: &inputStream, outputStream: nil)
        let input = try XCTUnwrap(inputStream)
        let outcome = callWithDeadline(10) { () -> Data in
            input.open()
            return readUpTo(input, count: 8).data
        }
        XCTAssertEqual(outcome, Data("greeting".utf8))
        input.close()
        XCTAssertTrue(peerSawEOF.wait(timeout: shortTimeout), "socket not closed with the only stream")
    }

    /// A loopback peer has answered by the time connect(2) returns (EINPROGRESS): the open sees it
    /// with one poll and the pair is live when `open()` returns. The stream thread, where an
    /// unscheduled pair's attempt would otherwise wait in epoll, is kept busy meanwhile, so that
    /// wait could not have completed. Up to three tries: under load the kernel may leave the
    /// handshake's softirq work for later, and the connect is then really in progress.
    func testLoopbackConnectCompletesInsideOpenWithoutTheStreamThread() throws {
        let server = try startRawServer(.v4) { connection in
            try? connection.write("x")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let hold = try StreamThreadHold()
        defer { hold.release() }
        XCTAssertTrue(hold.isHolding(timeout: shortTimeout), "the stream thread never ran the task")
        var live: StreamPair?
        for _ in 0..<3 where live == nil {
            let pair = makePair(port: server.port)
            pair.input.open()
            let connection = pair.input.connection
            if connection.lock.withLock({ connection.lifecycle.isLive }) { live = pair }
        }
        let pair = try XCTUnwrap(live, "no connect completed inside open()")
        XCTAssertEqual(pair.input.streamStatus, .open)
        hold.release()
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), 1)
        XCTAssertEqual(byte, UInt8(ascii: "x"))
    }

    /// The output opened once the input's open has made the pair live (a socket this pair connected,
    /// nothing written yet): `hasSpaceAvailable` follows `openCompleted` from the send-space bound,
    /// with no epoll wait for it (the output is not watching for space when `open()` returns).
    func testOutputOpenedOnALivePairHasSpaceWithoutWatching() throws {
        _ = try XCTUnwrap(SendSpace.freshlyConnected, "tcp_wmem unreadable or tcp_notsent_lowat set")
        let server = try startRawServer(.v4) { connection in
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder()
        recorder.schedule(pair)
        pair.input.open()
        let connection = pair.input.connection
        XCTAssertTrue(runUntil(timeout: shortTimeout) { connection.lock.withLock { connection.lifecycle.isLive } })
        pair.output.open()
        XCTAssertFalse(connection.lock.withLock { connection.halves[.output].watchingSpace }, "space left for epoll to report")
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.events(.output), [.openCompleted, .hasSpaceAvailable])
    }
}
