#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// StreamListener: the accept side hands over unopened pairs.
final class ListenerTests: SocketStreamsTestCase {

    private func assertClientEcho(
        host: String, port: Int, message: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        let pair = makePair(host: host, port: port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: message))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == message },
            "no echo from \(host):\(port); trace: \(recorder.trace)", file: file, line: line)
        pair.input.close()
        pair.output.close()
    }

    /// A pair refused unopened (closed, or only released, in the accept handler) hands its socket
    /// back: the client sees the end of the stream, and the fd is gone. It used to stay open: the
    /// socket was adopted only by `open()`.
    func testAnAcceptedPairRefusedUnopenedClosesItsSocket() throws {
        for closesStreams in [true, false] {
            let listener = try StreamListener(host: "127.0.0.1", port: 0)
            addCleanup { listener.close() }
            let descriptor = Locked<Int32>(-1)
            listener.start(in: try RunLoop.startSocketStreams()) { input, output in
                descriptor.value = input.socketDescriptor ?? -1
                if closesStreams {
                    input.close()
                    output.close()
                }
            }
            let client = try RawSocket.connectTo(family: .v4, port: listener.port)
            defer { close(client) }
            let (data, sawEOF) = try RawSocket.readToEOF(client, timeout: shortTimeout)
            XCTAssertTrue(data.isEmpty)
            XCTAssertTrue(sawEOF, "closes the streams: \(closesStreams)")
            XCTAssertEqual(fcntl(descriptor.value, F_GETFD), -1, "the accepted fd is closed (closes the streams: \(closesStreams))")
        }
    }

    func testListenerOnIPv4Loopback() throws {
        let server = try startStreamEchoServer(host: "127.0.0.1")
        XCTAssertGreaterThan(server.port, 0)
        assertClientEcho(host: "127.0.0.1", port: server.port, message: "v4 listener")
        XCTAssertEqual(server.acceptedCount, 1)
        // Not reachable over IPv6.
        XCTAssertThrowsError(try RawSocket.connectTo(family: .v6, port: server.port))
    }

    func testListenerOnIPv6Loopback() throws {
        let server = try startStreamEchoServer(host: "::1")
        XCTAssertGreaterThan(server.port, 0)
        assertClientEcho(host: "::1", port: server.port, message: "v6 listener")
        XCTAssertEqual(server.acceptedCount, 1)
    }

    /// host nil: all interfaces, both families, one port.
    func testListenerOnAllInterfacesAcceptsBothFamilies() throws {
        let server = try startStreamEchoServer(host: nil)
        XCTAssertGreaterThan(server.port, 0)
        assertClientEcho(host: "127.0.0.1", port: server.port, message: "all interfaces, v4")
        assertClientEcho(host: "::1", port: server.port, message: "all interfaces, v6")
        XCTAssertEqual(server.acceptedCount, 2)
    }

    func testUnixSocketListenerWithUnixSocketPair() throws {
        let directory = try makeTemporaryDirectory()
        let path = directory.appendingPathComponent("listener.sock").path
        let server = try StreamEchoServer(unixSocketPath: path)
        addCleanup { server.stop() }

        let pair = createStreamPair(unixSocketPath: path)
        closeAfterTest(pair)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "over a unix socket"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "over a unix socket" },
            "trace: \(recorder.trace)")
        XCTAssertEqual(recorder.snapshot.events(.input).first, .openCompleted)
        XCTAssertEqual(server.acceptedCount, 1)
    }

    /// The accepted pair is unopened; once scheduled and opened it completes at once
    /// (openCompleted on both, status .open right after open()), and talks to the client.
    func testAcceptedPairIsUnopenedAndOpensAtOnce() throws {
        let serverRecorder = DelegateRecorder(sending: "from the accept side")
        let statuses = Locked<[Stream.Status]>([])
        let acceptedPairs = Locked<[StreamPair]>([])  // the app owns accepted pairs, not the delegate
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let host = ListenerHost(listener) { pair in
            acceptedPairs.mutate { $0.append(pair) }
            statuses.mutate { $0 += [pair.input.streamStatus, pair.output.streamStatus] }
            serverRecorder.start(pair, on: .current, mode: .default)
            statuses.mutate { $0 += [pair.input.streamStatus, pair.output.streamStatus] }
        }
        addCleanup { host.stop() }

        let pair = makePair(port: host.port)
        let clientRecorder = startRecorder(pair, recorder: DelegateRecorder(sending: "from the client"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                clientRecorder.snapshot.receivedString == "from the accept side"
            }, "client trace: \(clientRecorder.trace)")
        XCTAssertTrue(
            serverRecorder.wait(timeout: shortTimeout) { $0.receivedString == "from the client" },
            "server trace: \(serverRecorder.trace)")
        XCTAssertEqual(statuses.value, [.notOpen, .notOpen, .open, .open])
        let server = serverRecorder.snapshot
        XCTAssertEqual(server.events(.input).first, .openCompleted, serverRecorder.trace)
        XCTAssertEqual(server.events(.output).first, .openCompleted, serverRecorder.trace)
        XCTAssertTrue(server.eventThreads.allSatisfy { $0 === host.loop.thread })
        host.loop.sync {
            for pair in acceptedPairs.value {
                pair.input.close()
                pair.output.close()
            }
        }
    }

    /// The accept closure runs on the given run loop only while it runs the given mode.
    func testAcceptRunsOnTheGivenRunLoopAndMode() throws {
        let customMode = RunLoop.Mode("SocketStreamsTests.AcceptMode")
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        addCleanup { listener.close() }
        let acceptedPairs = UncheckedBox<[StreamPair]>([])
        let threads = UncheckedBox<[Thread]>([])
        listener.start(in: .current, forMode: customMode) { input, output in
            acceptedPairs.value.append((input, output))
            threads.value.append(Thread.current)
        }
        var accepted: [StreamPair] { acceptedPairs.value }
        var acceptThreads: [Thread] { threads.value }
        let client = try RawSocket.connectTo(family: .v4, port: listener.port)
        defer { close(client) }
        settle(mode: .default)  // the connection is queued: a wrong-mode accept would run now
        XCTAssertEqual(accepted.count, 0, "accept ran while the run loop ran another mode")
        XCTAssertTrue(runUntil(timeout: shortTimeout, mode: customMode) { accepted.count == 1 })
        XCTAssertTrue(acceptThreads.allSatisfy(isMainThread))
        for pair in accepted {
            XCTAssertEqual(pair.input.streamStatus, .notOpen)
            pair.input.close()
            pair.output.close()
        }
    }

    /// After close() the port no longer accepts.
    func testClosedListenerRefusesConnections() throws {
        let server = try startStreamEchoServer(host: "127.0.0.1")
        let port = server.port
        assertClientEcho(host: "127.0.0.1", port: port, message: "before close")
        server.stop()
        XCTAssertThrowsError(try RawSocket.connectTo(family: .v4, port: port)) { error in
            XCTAssertEqual((error as? SystemCallError)?.code, ECONNREFUSED)
        }
    }

    /// Binding a port that is taken throws.
    func testListenerOnABusyPortThrows() throws {
        let busy = try RawSocket.listener(family: .v4)
        defer { close(busy) }
        XCTAssertThrowsError(try StreamListener(host: "127.0.0.1", port: RawSocket.boundPort(busy)))
    }

    /// A port outside 0...65535 is refused with EINVAL naming the port, never cut to 16 bits
    /// (65536 would bind a kernel-picked port, 70000 port 4464), whatever the host.
    func testPortOutsideTheTCPRangeIsRefused() throws {
        for host in ["127.0.0.1", "localhost", nil] as [String?] {
            for port in [65536, 70000, -1, Int.max, Int.min] {
                XCTAssertThrowsError(try StreamListener(host: host, port: port), "\(host ?? "nil") port \(port)") { error in
                    assertPOSIXError(error, [EINVAL], "port \(port)")
                    XCTAssertTrue(
                        (error as NSError).localizedDescription.contains("port \(port)"),
                        "the message names the port: \(error.localizedDescription)")
                }
            }
        }
    }
    // MARK: Unix-domain socket files

    private func unixSocketPath(_ name: String) throws -> String {
        try makeTemporaryDirectory().appendingPathComponent(name).path
    }

    private func assertUnixEcho(path: String, message: String, file: StaticString = #filePath, line: UInt = #line) {
        let pair = createStreamPair(unixSocketPath: path)
        closeAfterTest(pair)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: message))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == message },
            "no echo on \(path); trace: \(recorder.trace)", file: file, line: line)
        pair.input.close()
        pair.output.close()
    }

    /// A second listener on the path of a live one is refused with EADDRINUSE: it neither takes the
    /// path over nor deletes it, and the first listener goes on accepting there.
    func testUnixPathOfALiveListenerIsRefused() throws {
        let path = try unixSocketPath("live.sock")
        let server = try StreamEchoServer(unixSocketPath: path)
        addCleanup { server.stop() }
        XCTAssertThrowsError(try StreamListener(unixSocketPath: path)) { error in
            assertPOSIXError(error, [EADDRINUSE])
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: path), "the live listener's socket file was deleted")
        assertUnixEcho(path: path, message: "still the first listener")
    }

    /// A live listener whose backlog is full (the probing connect would block) is live all the same.
    func testUnixPathOfALiveListenerWithAFullBacklogIsRefused() throws {
        let path = try unixSocketPath("full.sock")
        let listener = try StreamListener(unixSocketPath: path, backlog: 0)  // never started: nothing is accepted
        addCleanup { listener.close() }
        let queued = try RawSocket.connectTo(unixPath: path)  // backlog 0 still queues one
        defer { close(queued) }
        XCTAssertThrowsError(try StreamListener(unixSocketPath: path)) { error in
            assertPOSIXError(error, [EADDRINUSE])
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
    }

    /// A stale socket file (its listener closed without unlinking it, as after a crash) is replaced;
    /// closing the new listener removes the file.
    func testStaleUnixSocketFileIsReplaced() throws {
        let path = try unixSocketPath("stale.sock")
        close(try RawSocket.unixListener(path: path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: path), "the stale socket file is there")
        XCTAssertThrowsError(try RawSocket.connectTo(unixPath: path)) { error in
            XCTAssertEqual((error as? SystemCallError)?.code, ECONNREFUSED)
        }
        let server = try StreamEchoServer(unixSocketPath: path)
        assertUnixEcho(path: path, message: "over the replaced socket file")
        server.stop()
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "close() leaves the socket file behind")
    }

    /// close() removes the socket file only while it is still the one the listener created: one that
    /// another listener has put at the path since (after the first was removed) stays, and works.
    func testClosingAListenerKeepsASocketFileItDidNotCreate() throws {
        let path = try unixSocketPath("replaced.sock")
        let first = try StreamListener(unixSocketPath: path)
        try FileManager.default.removeItem(atPath: path)
        let second = try StreamEchoServer(unixSocketPath: path)
        addCleanup { second.stop() }
        first.close()
        XCTAssertTrue(FileManager.default.fileExists(atPath: path), "closing the first listener deleted the second's file")
        assertUnixEcho(path: path, message: "the second listener's file")
    }

    /// A path that holds something other than a socket is never deleted: EADDRINUSE, the file intact.
    func testUnixPathOfARegularFileIsRefusedAndKept() throws {
        let path = try unixSocketPath("data.txt")
        let contents = Data("not a socket".utf8)
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: contents))
        XCTAssertThrowsError(try StreamListener(unixSocketPath: path)) { error in
            assertPOSIXError(error, [EADDRINUSE])
        }
        XCTAssertEqual(FileManager.default.contents(atPath: path), contents)
    }
}
