import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// GCDAsyncSocket code as it is written on Apple platforms (only `import CocoaAsyncSocket`), against
/// socat, a plain POSIX listener and GCDAsyncSocket's own listener.
final class GCDAsyncSocketTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    /// An echo server made of GCDAsyncSocket's own listener: every accepted socket reads whatever
    /// arrives and writes it back.
    private func echoServer() throws -> (GCDAsyncSocket, Recorder) {
        let recorder = Recorder()
        recorder.onAccept = { socket in socket.readData(withTimeout: -1, tag: 100) }
        recorder.onRead = { socket, data, tag in
            guard tag == 100 else { return }
            socket.write(data, withTimeout: -1, tag: 100)
            socket.readData(withTimeout: -1, tag: 100)
        }
        let server = GCDAsyncSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "server"))
        try server.accept(onInterface: "127.0.0.1", port: 0)
        return (server, recorder)
    }

    func testEchoClientAndServer() throws {
        let (server, serverRecorder) = try echoServer()
        XCTAssertNotEqual(server.localPort, 0)
        XCTAssertEqual(server.localHost, "127.0.0.1")
        XCTAssertFalse(server.isConnected)
        XCTAssertFalse(server.isDisconnected)

        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertTrue(client.isDisconnected)
        try client.connect(toHost: "localhost", onPort: server.localPort, withTimeout: 5)
        client.write("hello\r\n".data(using: .utf8)!, withTimeout: 5, tag: 1)
        client.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, tag: 2)
        recorder.wait(for: "read 2")
        XCTAssertEqual(recorder.data(tag: 2), "hello\r\n".data(using: .utf8))
        XCTAssertEqual(Array(recorder.events.prefix(3)), ["connect 127.0.0.1 \(server.localPort)", "wrote 1", "read 2 hello\r\n"])
        XCTAssertTrue(client.isConnected)
        XCTAssertEqual(client.connectedHost, "127.0.0.1")
        XCTAssertEqual(client.connectedPort, server.localPort)
        XCTAssertEqual(client.localHost, "127.0.0.1")
        XCTAssertNotEqual(client.localPort, 0)
        XCTAssertTrue(client.isIPv4)
        XCTAssertFalse(client.isIPv6)

        serverRecorder.wait(for: "accept 127.0.0.1")
        let accepted = try XCTUnwrap(serverRecorder.accepted.first)
        XCTAssertTrue(accepted.isConnected)
        XCTAssertEqual(accepted.connectedPort, client.localPort)
        XCTAssertEqual(accepted.localPort, server.localPort)

        client.disconnect()
        XCTAssertTrue(client.isDisconnected)
        recorder.wait(for: "disconnect nil")
        serverRecorder.wait(for: "disconnect \(GCDAsyncSocketErrorDomain) 7")
        server.disconnect()
        serverRecorder.wait(for: "disconnect nil")
    }

    /// An IPv6 connection's addresses are kept apart from an IPv4 one's (issue 25): they come back
    /// whole, and a reconnect over IPv4 on the same socket reports only the new ones.
    func testIPv6AddressesThenIPv4OnTheSameSocket() throws {
        let recorder = Recorder()
        let server = GCDAsyncSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "server"))
        try server.accept(onInterface: "::1", port: 0)
        let clientRecorder = Recorder()
        let client = GCDAsyncSocket(delegate: clientRecorder, delegateQueue: queue)
        try client.connect(toHost: "::1", onPort: server.localPort, withTimeout: 5)
        clientRecorder.wait(for: "connect ::1 \(server.localPort)")
        XCTAssertEqual(client.connectedHost, "::1")
        XCTAssertEqual(client.connectedPort, server.localPort)
        XCTAssertEqual(client.localHost, "::1")
        XCTAssertNotEqual(client.localPort, 0)
        XCTAssertEqual(client.connectedAddress?.count, MemoryLayout<sockaddr_in6>.size)
        XCTAssertEqual(client.localAddress?.count, MemoryLayout<sockaddr_in6>.size)
        XCTAssertTrue(client.isIPv6)
        XCTAssertFalse(client.isIPv4)
        recorder.wait(for: "accept ::1")
        let accepted = try XCTUnwrap(recorder.accepted.first)
        XCTAssertEqual(accepted.connectedHost, "::1")
        XCTAssertEqual(accepted.connectedPort, client.localPort)
        XCTAssertTrue(accepted.isIPv6)
        client.disconnect()
        clientRecorder.wait(for: "disconnect nil")
        XCTAssertNil(client.connectedAddress)
        XCTAssertNil(client.localHost)
        XCTAssertFalse(client.isIPv6)

        let (echo, _) = try echoServer()
        try client.connect(toHost: "127.0.0.1", onPort: echo.localPort, withTimeout: 5)
        clientRecorder.wait(for: "connect 127.0.0.1 \(echo.localPort)")
        XCTAssertEqual(client.connectedHost, "127.0.0.1")
        XCTAssertEqual(client.connectedAddress?.count, MemoryLayout<sockaddr_in>.size)
        XCTAssertEqual(client.localHost, "127.0.0.1")
        XCTAssertTrue(client.isIPv4)
        XCTAssertFalse(client.isIPv6)
        client.disconnect()
        server.disconnect()
        echo.disconnect()
    }

    /// `socketFD()` is -1 before a connection and after it, and while connected the descriptor of that
    /// very connection: its peer is the server, its own address the socket's `localPort`.
    func testSocketFDIsTheConnectionsOwnDescriptor() throws {
        let (server, _) = try echoServer()
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertEqual(client.socketFD(), -1)
        try client.connect(toHost: "127.0.0.1", onPort: server.localPort, withTimeout: 5)
        recorder.wait(for: "connect 127.0.0.1")
        let fd = client.socketFD()
        XCTAssertGreaterThanOrEqual(fd, 0)
        func address(_ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> Data {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let result = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, &length) }
            }
            XCTAssertEqual(result, 0)
            return withUnsafeBytes(of: storage) { Data($0.prefix(Int(length))) }
        }
        XCTAssertEqual(GCDAsyncSocket.port(fromAddress: address(getpeername)), server.localPort)
        XCTAssertEqual(GCDAsyncSocket.port(fromAddress: address(getsockname)), client.localPort)
        XCTAssertEqual(client.connectedAddress, address(getpeername))
        client.disconnect()
        recorder.wait(for: "disconnect nil")
        XCTAssertEqual(client.socketFD(), -1)
        server.disconnect()
    }

    /// `newSocketQueueForConnection(fromAddress:on:)` is asked with the connecting peer's `sockaddr`,
    /// and the accepted socket then works on the queue it gave.
    func testTheNewSocketQueueIsAskedWithThePeersAddress() throws {
        let chooser = QueueChooser()
        let server = GCDAsyncSocket(delegate: chooser, delegateQueue: DispatchQueue(label: "server"))
        try server.accept(onInterface: "127.0.0.1", port: 0)
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: server.localPort, withTimeout: 5)
        recorder.wait(for: "connect 127.0.0.1")
        let (address, accepted) = try XCTUnwrap(chooser.waitForAccept())
        XCTAssertEqual(address.count, MemoryLayout<sockaddr_in>.size)
        XCTAssertEqual(GCDAsyncSocket.host(fromAddress: address), "127.0.0.1")
        XCTAssertEqual(GCDAsyncSocket.port(fromAddress: address), client.localPort)
        XCTAssertEqual(accepted.connectedPort, client.localPort)
        var ranOnChosenQueue = false
        accepted.perform { ranOnChosenQueue = DispatchQueue.getSpecific(key: QueueChooser.key) == true }
        XCTAssertTrue(ranOnChosenQueue)
        client.disconnect()
        accepted.disconnect()
        server.disconnect()
    }

    func testLineProtocolAgainstSocat() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        client.write("one\r\ntwo\r\nthree\r\n".data(using: .utf8)!, withTimeout: -1, tag: 0)
        for tag in 1...3 { client.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, tag: tag) }
        recorder.wait(for: "read 3")
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("read") }, ["read 1 one\r\n", "read 2 two\r\n", "read 3 three\r\n"])

        // To a length, into a caller's buffer at an offset.
        let buffer = NSMutableData(data: "ab".data(using: .utf8)!)
        client.write("0123456789".data(using: .utf8)!, withTimeout: -1, tag: 0)
        client.readData(toLength: 4, withTimeout: 5, buffer: buffer, bufferOffset: 2, tag: 4)
        client.readData(to: "9".data(using: .utf8)!, withTimeout: 5, maxLength: 6, tag: 5)
        recorder.wait(for: "read 5")
        XCTAssertEqual(recorder.data(tag: 4), "0123".data(using: .utf8))
        XCTAssertEqual(buffer as Data, "ab0123".data(using: .utf8))
        XCTAssertEqual(recorder.data(tag: 5), "456789".data(using: .utf8))
        client.disconnect()
        recorder.wait(for: "disconnect nil")
    }

    /// Thousands of reads and writes queued before the first completes (the socket's pending lists
    /// past their inline first element, compacted once 1,024 are done) complete in order, each with its
    /// own tag, and a read into a caller's buffer lands at its offset.
    func testThousandsOfQueuedReadsAndWritesCompleteInOrderWithTheirTags() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        let count = 2_500
        func message(_ i: Int) -> String { String(repeating: "0", count: 5 - String(i).count) + String(i) }
        let buffers = (0..<count).map { $0 % 100 == 0 ? NSMutableData(data: Data("#".utf8)) : nil }
        for i in 0..<count {
            client.write(Data(message(i).utf8), withTimeout: 10, tag: i)
            client.readData(toLength: 5, withTimeout: 10, buffer: buffers[i], bufferOffset: buffers[i] == nil ? 0 : 1, tag: i)
        }
        XCTAssertTrue(recorder.wait(for: "read ", count: count, timeout: 60))
        let events = recorder.events
        XCTAssertEqual(events.filter { $0.hasPrefix("wrote ") }, (0..<count).map { "wrote \($0)" })
        XCTAssertEqual(events.filter { $0.hasPrefix("read ") }, (0..<count).map { "read \($0) \(message($0))" })
        for i in stride(from: 0, to: count, by: 100) {
            XCTAssertEqual(buffers[i].map { $0 as Data }, Data("#\(message(i))".utf8), "read \(i)")
        }
        client.disconnect()
        recorder.wait(for: "disconnect nil")
    }

    func testReadMaxedOut() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        client.write(Data(repeating: 0x41, count: 20), withTimeout: -1, tag: 0)
        client.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, maxLength: 10, tag: 1)
        recorder.wait(for: "disconnect")
        let error = try XCTUnwrap(recorder.errors.first as? GCDAsyncSocketError)
        XCTAssertEqual(error.code, .readMaxedOutError)
        XCTAssertEqual((error as NSError).domain, GCDAsyncSocketErrorDomain)
        XCTAssertEqual((error as NSError).code, 6)
    }

    func testReadTimeoutExtendedThenTimingOut() throws {
        let listener = try CountingListener()  // never writes
        let recorder = Recorder()
        recorder.extensions = [0.2]
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: listener.port)
        recorder.wait(for: "connect")
        let start = Date()
        client.readData(withTimeout: 0.2, tag: 7)
        recorder.wait(for: "disconnect")
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 0.4)
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("timeout") }, ["timeout-read 7 0", "timeout-read 7 0"])
        XCTAssertEqual(recorder.events.last, "disconnect \(GCDAsyncSocketErrorDomain) 4")
        do {
            throw try XCTUnwrap(recorder.errors.last ?? nil)
        } catch GCDAsyncSocketError.readTimeoutError {
            // matched, as `catch GCDAsyncSocketError.readTimeoutError` does on Apple platforms
        } catch {
            XCTFail("unexpected \(error)")
        }
    }

    func testDisconnectAfterWritingSendsEverything() throws {
        let listener = try CountingListener()
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: listener.port)
        let payload = Data(repeating: 0x5A, count: 4 << 20)
        client.write(payload, withTimeout: 10, tag: 1)
        client.disconnectAfterWriting()
        client.write(Data([1]), withTimeout: -1, tag: 2)  // ignored: after disconnectAfterWriting
        XCTAssertEqual(listener.nextCount(), payload.count)
        recorder.wait(for: "disconnect")
        XCTAssertEqual(recorder.events, ["connect 127.0.0.1 \(listener.port)", "wrote 1", "disconnect nil"])
    }

    /// GCDAsyncSocket's disconnect sends what the kernel accepts at once of the writes queued before
    /// it, whichever thread calls it.
    func testWriteThenDisconnectFromAnotherThreadLosesNothing() throws {
        let listener = try CountingListener()
        let recorder = Recorder()
        let payload = Data(repeating: 0x42, count: 1000)
        var lost = 0
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        for attempt in 1...1000 {
            try client.connect(toHost: "127.0.0.1", onPort: listener.port)  // the same object each time
            guard recorder.wait(for: "connect", count: attempt) else { return }
            client.write(payload, withTimeout: -1, tag: attempt)
            client.disconnect()
            guard let count = listener.nextCount() else { return XCTFail("attempt \(attempt): the connection did not end") }
            if count != payload.count { lost += 1 }
        }
        recorder.wait(for: "disconnect", count: 1000)
        XCTAssertEqual(lost, 0, "tries whose bytes did not all arrive")
    }

    /// Each delegate call is its own block on the delegate queue: none runs before a block posted
    /// to that queue before the event happened.
    func testDelegateCallsNeverOvertakeEarlierBlocks() throws {
        for sameQueue in [false, true] {
            let (peer, port) = try Peer.socatEcho()
            defer { peer.stop() }
            let delegateQueue = DispatchQueue(label: "ordering")
            let recorder = Recorder()
            let marker = Marker()
            let done = DispatchSemaphore(value: 0)
            let overtakes = Marker()
            recorder.onRead = { _, _, tag in
                if marker.value != tag { overtakes.value += 1 }
                done.signal()
            }
            let client = GCDAsyncSocket(delegate: recorder, delegateQueue: delegateQueue, socketQueue: sameQueue ? delegateQueue : nil)
            try client.connect(toHost: "127.0.0.1", onPort: port)
            for round in 1...10_000 {
                delegateQueue.async { marker.value = round }
                client.write(Data([UInt8(truncatingIfNeeded: round)]), withTimeout: -1, tag: round)
                client.readData(toLength: 1, withTimeout: 10, tag: round)
                guard done.wait(timeout: .now() + 10) == .success else { return XCTFail("round \(round) got no read") }
            }
            XCTAssertEqual(overtakes.value, 0, "socket queue \(sameQueue ? "=" : "≠") delegate queue")
            client.disconnect()
        }
    }

    func testReconnectingAndChangingTheDelegateQueue() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        client.userData = "first"
        for round in 1...3 {
            if round == 2 { client.setDelegate(recorder, delegateQueue: DispatchQueue(label: "other")) }
            try client.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
            XCTAssertThrowsError(try client.connect(toHost: "127.0.0.1", onPort: port)) { error in
                XCTAssertEqual((error as NSError).domain, GCDAsyncSocketErrorDomain)
                XCTAssertEqual((error as NSError).code, GCDAsyncSocketError.Code.badConfigError.rawValue)
            }
            client.write("r\(round)\n".data(using: .utf8)!, withTimeout: -1, tag: round)
            client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: round)
            recorder.wait(for: "read \(round)")
            XCTAssertEqual(recorder.data(tag: round), "r\(round)\n".data(using: .utf8))
            client.disconnect()
            recorder.wait(for: "disconnect", count: round)
        }
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("connect") }.count, 3)
        XCTAssertEqual(client.userData as? String, "first")
    }

    func testPreconditionsAndPeerErrors() throws {
        let bare = GCDAsyncSocket()
        XCTAssertThrowsError(try bare.connect(toHost: "127.0.0.1", onPort: 1)) { error in
            guard case GCDAsyncSocketError.badConfigError = error else { return XCTFail("\(error)") }
        }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertThrowsError(try client.connect(toHost: "", onPort: 1)) { error in
            XCTAssertEqual((error as? GCDAsyncSocketError)?.code, .badParamError)
        }
        XCTAssertThrowsError(try client.connect(toAddress: Data([1, 2, 3]))) { error in
            XCTAssertEqual((error as? GCDAsyncSocketError)?.code, .badParamError)
        }
        // Refused: a port nobody listens on (a listener's, closed).
        let listener = try CountingListener()
        let port = listener.port
        listener.stop()
        client.readData(withTimeout: -1, tag: 1)  // before connect: dropped
        try client.connect(toHost: "127.0.0.1", onPort: port)
        recorder.wait(for: "disconnect")
        XCTAssertEqual(recorder.events, ["disconnect \(NSPOSIXErrorDomain) \(ECONNREFUSED)"])
        // In GCDAsyncSocket's shape (`errorWithErrno:reason:`): strerror, and the call that failed.
        let refused = try XCTUnwrap(recorder.errors.last as? NSError)
        XCTAssertEqual(refused.localizedDescription, String(cString: strerror(ECONNREFUSED)))
        XCTAssertEqual(refused.localizedFailureReason, "Error in connect() function")
    }

    func testPeerCloseAndHalfClose() throws {
        let (server, serverRecorder) = try echoServer()
        for auto in [true, false] {
            let recorder = Recorder()
            let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
            client.autoDisconnectOnClosedReadStream = auto
            try client.connect(toHost: "127.0.0.1", onPort: server.localPort)
            recorder.wait(for: "connect")
            serverRecorder.wait(for: "accept", count: auto ? 1 : 2)
            serverRecorder.accepted.last?.disconnect()
            client.readData(withTimeout: -1, tag: 1)
            if auto {
                recorder.wait(for: "disconnect")
                XCTAssertEqual(recorder.events.last, "disconnect \(GCDAsyncSocketErrorDomain) 7")
            } else {
                recorder.wait(for: "read-closed")
                XCTAssertTrue(client.isConnected)
                client.disconnect()
                recorder.wait(for: "disconnect nil")
            }
        }
        server.disconnect()
    }

    func testUnixDomain() throws {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "gcd-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock")
        defer { try? FileManager.default.removeItem(at: url) }
        let serverRecorder = Recorder()
        serverRecorder.onAccept = { socket in socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 9) }
        serverRecorder.onRead = { socket, data, _ in socket.write(data, withTimeout: -1, tag: 9) }
        let server = GCDAsyncSocket(delegate: serverRecorder, delegateQueue: DispatchQueue(label: "unix server"))
        try server.accept(on: url)
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(to: url, withTimeout: 5)
        client.write("unix\n".data(using: .utf8)!, withTimeout: -1, tag: 1)
        client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 2)
        recorder.wait(for: "read 2")
        XCTAssertEqual(recorder.events.first, "connect-url \(url.path)")
        XCTAssertEqual(client.connectedUrl, url)
        client.disconnect()
        server.disconnect()
    }

    func testRefusedTLSOptionIsOtherError() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        client.startTLS([kCFStreamSSLAllowsAnyRoot as String: NSNumber(value: true)])
        recorder.wait(for: "disconnect")
        let error = recorder.errors.first as? GCDAsyncSocketError
        XCTAssertEqual(error?.code, .otherError)
        XCTAssertEqual(error?.message, "Security option unavailable - kCFStreamSSLAllowsAnyRoot")
    }

    /// GCDAsyncSocket checks the TLS settings when the handshake's turn comes (`ssl_startTLS`, once the
    /// reads and writes queued before `startTLS` are done), so a bad dictionary disconnects after the
    /// socket connected and after what was queued before it: a STARTTLS command written first reaches
    /// the peer, and its reply is read.
    func testBadTLSSettingsDisconnectWhenTheHandshakeIsDueNotBefore() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        client.write("STARTTLS\n".data(using: .utf8)!, withTimeout: 5, tag: 1)
        client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 2)
        client.startTLS([kCFStreamSSLPeerName as String: NSNumber(value: 3)])
        client.write("after\n".data(using: .utf8)!, withTimeout: 5, tag: 3)
        recorder.wait(for: "disconnect")
        XCTAssertEqual(
            recorder.events,
            [
                "connect 127.0.0.1 \(port)", "wrote 1", "read 2 STARTTLS\n",
                "disconnect \(GCDAsyncSocketErrorDomain) \(GCDAsyncSocketError.Code.otherError.rawValue)",
            ])
        XCTAssertEqual((recorder.errors.first as? GCDAsyncSocketError)?.message, "Invalid value for kCFStreamSSLPeerName.")
    }

    /// `perform` runs its block on the socket queue: inline when called there (for any of the sockets
    /// sharing that queue, which a `sync` would deadlock on), else by a `sync` from another thread. The
    /// queue is marked with one key for every socket (issue 25: a key per socket made opening the n-th
    /// socket on a shared queue cost O(n)).
    func testPerformRunsOnTheSocketQueueFromAnywhere() {
        let shared = DispatchQueue(label: "shared socket queue")
        let first = GCDAsyncSocket(delegate: nil, delegateQueue: queue, socketQueue: shared)
        let second = GCDAsyncSocket(delegate: nil, delegateQueue: queue, socketQueue: shared)
        let own = GCDAsyncSocket(delegate: nil, delegateQueue: queue, socketQueue: DispatchQueue(label: "own socket queue"))
        let ran = Trail()
        first.perform { ran.append("from a test thread") }
        XCTAssertEqual(ran.values, ["from a test thread"])
        shared.sync {
            // On the shared queue: both sockets' blocks run inline (a sync here would deadlock).
            first.perform { ran.append("first, inline") }
            second.perform { ran.append("second, inline") }
            // Another socket's queue is not this one: its block goes there, and comes back.
            own.perform { ran.append("own, from the shared queue") }
        }
        XCTAssertEqual(ran.values, ["from a test thread", "first, inline", "second, inline", "own, from the shared queue"])
    }
}

/// Strings appended from any thread, in order.
// @unchecked Sendable: `stored` is reached only under `lock`.
final class Trail: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    var values: [String] { lock.withLock { stored } }
    func append(_ value: String) { lock.withLock { stored.append(value) } }
}

/// A value shared between the test and the delegate queue.
// @unchecked Sendable: `stored` is reached only under `lock`.
final class Marker: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = 0
    var value: Int {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

/// A listener's delegate that gives every connection a queue of its own and records the address it
/// was asked with.
// @unchecked Sendable: its fields are reached only under `condition`.
private final class QueueChooser: NSObject, GCDAsyncSocketDelegate, @unchecked Sendable {
    static let key = DispatchSpecificKey<Bool>()
    private let condition = NSCondition()
    private var address: Data?
    private var socket: GCDAsyncSocket?

    func newSocketQueueForConnection(fromAddress address: Data, on sock: GCDAsyncSocket) -> DispatchQueue? {
        condition.withLock { self.address = address }
        let queue = DispatchQueue(label: "accepted")
        queue.setSpecific(key: Self.key, value: true)
        return queue
    }

    func socket(_ sock: GCDAsyncSocket, didAcceptNewSocket newSocket: GCDAsyncSocket) {
        condition.withLock {
            socket = newSocket
            condition.broadcast()
        }
    }

    /// The address asked with and the accepted socket, once it is accepted (nil after 10 s).
    func waitForAccept() -> (Data, GCDAsyncSocket)? {
        let deadline = Date(timeIntervalSinceNow: 10)
        return condition.withLock {
            while socket == nil, condition.wait(until: deadline) {}
            guard let socket, let address else { return nil }
            return (address, socket)
        }
    }
}
