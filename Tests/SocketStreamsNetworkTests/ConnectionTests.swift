// NWConnection and NWListener as Apple-platform code uses them, against real peers on loopback (socat,
// raw sockets, the package's own listener). The peers come from the suite's support module; the code
// under test sees only the import switch.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

/// What a connection reported, in order, as text: "state ready", "receive 5 bytes complete=false"….
final class ConnectionRecord: Sendable {
    let events = Locked<[String]>([])
    let states = Locked<[NWConnection.State]>([])

    func add(_ event: String) { events.mutate { $0.append(event) } }

    /// A state handler that records each state and fulfils `expectation` on the first that matches.
    func stateHandler(
        fulfilling expectation: XCTestExpectation? = nil, when match: @escaping @Sendable (NWConnection.State) -> Bool = { _ in false }
    )
        -> @Sendable (NWConnection.State) -> Void
    {
        let fulfilled = Locked(false)
        return { [self] state in
            states.mutate { $0.append(state) }
            add("state \(state)")
            if match(state),
                fulfilled.mutate({ done in
                    defer { done = true }
                    return !done
                })
            {
                expectation?.fulfill()
            }
        }
    }
}

final class ConnectionTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "ConnectionTests")

    /// A connection to 127.0.0.1:`port`, started, and ready (or the test fails).
    private func readyConnection(port: Int, using parameters: NWParameters = .tcp, record: ConnectionRecord = ConnectionRecord())
        -> NWConnection
    {
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: parameters)
        let ready = expectation(description: "ready")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: ready) { $0 == .ready }
        connection.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { connection.cancel() }
        return connection
    }

    /// Receives exactly `count` bytes with min == max == count.
    private func receive(_ connection: NWConnection, exactly count: Int) -> (Data?, Bool, NWError?) {
        let done = expectation(description: "receive \(count)")
        let result = Locked<(Data?, Bool, NWError?)>((nil, false, nil))
        connection.receive(minimumIncompleteLength: count, maximumLength: count) { data, _, isComplete, error in
            result.value = (data, isComplete, error)
            done.fulfill()
        }
        wait(for: [done], timeout: shortTimeout)
        return result.value
    }

    private func send(_ connection: NWConnection, _ text: String, context: NWConnection.ContentContext = .defaultMessage) {
        let sent = expectation(description: "sent")
        connection.send(
            content: Data(text.utf8), contentContext: context, isComplete: true,
            completion: .contentProcessed { error in
                XCTAssertNil(error)
                sent.fulfill()
            })
        wait(for: [sent], timeout: shortTimeout)
    }

    func testEchoAgainstSocat() throws {
        let port = try startSocatEcho()
        let connection = readyConnection(port: port)
        XCTAssertTrue(connection.queue === queue)
        XCTAssertEqual(connection.state, .ready)
        send(connection, "hello, network")
        let (data, isComplete, error) = receive(connection, exactly: 14)
        XCTAssertEqual(data, Data("hello, network".utf8))
        XCTAssertFalse(isComplete)
        XCTAssertNil(error)
    }

    func testAUnixEndpointConnects() throws {
        let path = try startSocatUnixEcho()
        let connection = NWConnection(to: .unix(path: path), using: .tcp)
        let ready = expectation(description: "ready")
        let record = ConnectionRecord()
        connection.stateUpdateHandler = record.stateHandler(fulfilling: ready) { $0 == .ready }
        connection.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { connection.cancel() }
        send(connection, "unix")
        XCTAssertEqual(receive(connection, exactly: 4).0, Data("unix".utf8))
    }

    /// min == max == n yields exactly n bytes across writes of one byte each (`TCP_NODELAY`), at every
    /// boundary.
    func testExactLengthReceivesAcrossSegmentedWrites() throws {
        let message = Data((0..<64).map { UInt8($0) })
        let server = try startRawServer { connection in
            var one: Int32 = 1
            _ = setsockopt(connection.fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            for byte in message { try? connection.write(Data([byte])) }
            _ = try? connection.readToEOF()
        }
        let connection = readyConnection(port: server.port)
        var received = Data()
        for size in [1, 2, 3, 5, 8, 13, 32] {
            let (data, _, error) = receive(connection, exactly: size)
            XCTAssertNil(error)
            XCTAssertEqual(data?.count, size)
            received += data ?? Data()
        }
        XCTAssertEqual(received, message)
    }

    /// `receive(minimumIncompleteLength: 1024, …)` against a 300-byte reply and FIN: one completion
    /// with the 300 bytes, complete; a later receive completes at once, complete, with nothing.
    func testAShortReplyAndFINCompleteOneReceive() throws {
        let reply = Data(repeating: 0x41, count: 300)
        let server = try startRawServer { connection in
            try? connection.write(reply)
            connection.shutdownWrite()
            _ = try? connection.readToEOF()
        }
        let connection = readyConnection(port: server.port)
        let first = expectation(description: "first")
        let record = ConnectionRecord()
        connection.receive(minimumIncompleteLength: 1024, maximumLength: 65_536) { data, context, isComplete, error in
            record.add("\(data?.count ?? -1) final=\(context?.isFinal ?? false) complete=\(isComplete) error=\(String(describing: error))")
            first.fulfill()
        }
        wait(for: [first], timeout: shortTimeout)
        let again = expectation(description: "again")
        connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { data, context, isComplete, error in
            record.add("\(data?.count ?? -1) final=\(context?.isFinal ?? false) complete=\(isComplete) error=\(String(describing: error))")
            again.fulfill()
        }
        wait(for: [again], timeout: shortTimeout)
        XCTAssertEqual(record.events.value, ["300 final=true complete=true error=nil", "-1 final=true complete=true error=nil"])
        XCTAssertEqual(connection.state, .ready, "a peer's FIN leaves the connection ready")
    }

    /// `receiveMessage` on a byte stream is the whole stream, at the peer's end.
    func testReceiveMessageIsTheWholeStream() throws {
        let body = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let server = try startRawServer { connection in
            for start in stride(from: 0, to: body.count, by: 10_000) { try? connection.write(body[start..<(start + 10_000)]) }
            connection.shutdownWrite()
            _ = try? connection.readToEOF()
        }
        let connection = readyConnection(port: server.port)
        let done = expectation(description: "message")
        let result = Locked<(Data?, Bool)>((nil, false))
        connection.receiveMessage { data, _, isComplete, error in
            XCTAssertNil(error)
            result.value = (data, isComplete)
            done.fulfill()
        }
        wait(for: [done], timeout: shortTimeout)
        XCTAssertEqual(result.value.0, body)
        XCTAssertTrue(result.value.1)
    }

    /// `.finalMessage` closes the sending side (the peer sees its end) and receives go on.
    func testFinalMessageHalfClosesAndReadsGoOn() throws {
        let server = try startRawServer { connection in
            guard let (data, sawEOF) = try? connection.readToEOF(), sawEOF else { return }
            try? connection.write(Data("got \(data.count)".utf8))
        }
        let connection = readyConnection(port: server.port)
        send(connection, "last words", context: .finalMessage)
        XCTAssertEqual(receive(connection, exactly: 6).0, Data("got 10".utf8))
        let refused = expectation(description: "a send after the final message fails")
        connection.send(
            content: Data("more".utf8),
            completion: .contentProcessed { error in
                XCTAssertEqual(error, .posix(.EPIPE))
                refused.fulfill()
            })
        wait(for: [refused], timeout: shortTimeout)
    }

    /// Sends (processed and idempotent) and a receive made before `.ready` are held and carried out once
    /// ready, in order.
    func testSendsAndReceivesBeforeReadyAreHeld() throws {
        let port = try startSocatEcho()
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .tcp)
        addCleanup { connection.cancel() }
        let record = ConnectionRecord()
        connection.stateUpdateHandler = record.stateHandler()
        connection.send(content: Data("one,".utf8), completion: .idempotent)
        let sent = expectation(description: "sent")
        connection.send(
            content: Data("two".utf8),
            completion: .contentProcessed { error in
                XCTAssertNil(error)
                record.add("sent")
                sent.fulfill()
            })
        let received = expectation(description: "received")
        connection.receive(minimumIncompleteLength: 7, maximumLength: 7) { data, _, _, error in
            XCTAssertNil(error)
            record.add("received \(String(decoding: data ?? Data(), as: UTF8.self))")
            received.fulfill()
        }
        XCTAssertEqual(connection.state, .setup)
        XCTAssertNil(connection.queue)
        connection.start(queue: queue)
        wait(for: [sent, received], timeout: shortTimeout)
        XCTAssertEqual(record.events.value, ["state preparing", "state ready", "sent", "received one,two"])
    }

    /// A refused connect waits with ECONNREFUSED, and stays waiting; `restart()` once a listener is
    /// there makes it ready. (Apple: refused is retryable, not `.failed`.)
    func testRefusedWaitsUntilRestartFindsAListener() throws {
        let port = try RawSocket.unusedPort()
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .tcp)
        addCleanup { connection.cancel() }
        let record = ConnectionRecord()
        let waiting = expectation(description: "waiting")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: waiting) { $0 == .waiting(.posix(.ECONNREFUSED)) }
        connection.start(queue: queue)
        wait(for: [waiting], timeout: shortTimeout)
        // It stays waiting: a restart with nothing listening waits again, and nothing fails it.
        let waitingAgain = expectation(description: "waiting again")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: waitingAgain) { $0 == .waiting(.posix(.ECONNREFUSED)) }
        connection.restart()
        wait(for: [waitingAgain], timeout: shortTimeout)

        let listener = try NWListener(using: .tcp, on: NWEndpoint.Port(rawValue: UInt16(port))!)
        let listening = expectation(description: "listening")
        listener.stateUpdateHandler = { if $0 == .ready { listening.fulfill() } }
        listener.newConnectionHandler = { incoming in incoming.start(queue: .global()) }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [listening], timeout: shortTimeout)

        let ready = expectation(description: "ready")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: ready) { $0 == .ready }
        connection.restart()
        wait(for: [ready], timeout: shortTimeout)
        XCTAssertEqual(
            record.events.value,
            [
                "state preparing", "state waiting(\(NWError.posix(.ECONNREFUSED)))", "state preparing",
                "state waiting(\(NWError.posix(.ECONNREFUSED)))", "state preparing", "state ready",
            ])
    }

    /// A name that does not resolve waits with a DNS error.
    func testAFailedLookupWaitsWithADNSError() {
        let connection = NWConnection(host: "no-such-host.invalid", port: 80, using: .tcp)
        addCleanup { connection.cancel() }
        let waiting = expectation(description: "waiting")
        let record = ConnectionRecord()
        connection.stateUpdateHandler = record.stateHandler(fulfilling: waiting) {
            if case .waiting(.dns) = $0 { return true }
            return false
        }
        connection.start(queue: queue)
        wait(for: [waiting], timeout: 30)
    }

    /// Cancel with a receive and a send outstanding: each completes with ECANCELED, then `.cancelled`,
    /// last; nothing after it.
    func testCancelCompletesOutstandingOperationsThenReportsCancelledLast() throws {
        let server = try startRawServer { connection in _ = try? connection.readToEOF() }
        let record = ConnectionRecord()
        let connection = readyConnection(port: server.port, record: record)
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: cancelled) { $0 == .cancelled }
        connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { _, _, _, error in
            record.add("receive \(String(describing: error))")
        }
        // 64 MiB: more than the kernel takes at once, so it is outstanding at the cancel.
        connection.send(
            content: Data(count: 64 << 20), completion: .contentProcessed { error in record.add("send \(String(describing: error))") })
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { _, _, _, _ in record.add("a receive after cancelled was called")
        }
        connection.send(content: Data("x".utf8), completion: .contentProcessed { _ in record.add("a send after cancelled was called") })
        // A block behind anything the connection could still post.
        let drained = expectation(description: "drained")
        queue.asyncAfter(deadline: .now() + 0.2) { drained.fulfill() }
        wait(for: [drained], timeout: shortTimeout)
        let cancelledError = String(describing: NWError.posix(.ECANCELED))
        XCTAssertEqual(
            record.events.value,
            [
                "state preparing", "state ready", "receive Optional(\(cancelledError))", "send Optional(\(cancelledError))",
                "state cancelled",
            ])
        XCTAssertEqual(connection.state, .cancelled)
    }

    /// A reset while ready fails the connection with ECONNRESET, and the outstanding receive gets it.
    func testAResetWhileReadyFails() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readExactly(1)
            try? connection.resetOnClose()
        }
        let record = ConnectionRecord()
        let connection = readyConnection(port: server.port, record: record)
        let failed = expectation(description: "failed")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: failed) { $0 == .failed(.posix(.ECONNRESET)) }
        connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { _, _, _, error in
            record.add("receive \(String(describing: error))")
        }
        connection.send(content: Data("x".utf8), completion: .idempotent)
        wait(for: [failed], timeout: shortTimeout)
        XCTAssertEqual(
            record.events.value.suffix(2),
            ["receive Optional(\(NWError.posix(.ECONNRESET)))", "state failed(\(NWError.posix(.ECONNRESET)))"])
    }

    func testTLSToAnUntrustedServerFailsWithATLSError() throws {
        let pki = try self.pki
        let (port, _) = try startOpenSSLServer(["-www", "-cert", pki.serverCertificate, "-key", pki.serverKey])
        let connection = NWConnection(host: "localhost", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .tls)
        addCleanup { connection.cancel() }
        let failed = expectation(description: "failed")
        let record = ConnectionRecord()
        connection.stateUpdateHandler = record.stateHandler(fulfilling: failed) {
            if case .failed(.tls) = $0 { return true }
            return false
        }
        connection.start(queue: queue)
        wait(for: [failed], timeout: shortTimeout)
    }

    // MARK: NWListener

    /// A listener on `.any` reports `.ready` with its port; connections arrive unstarted and echo
    /// once started.
    func testListenerEchoesThroughItsOwnConnections() throws {
        let listener = try NWListener(using: .tcp, on: .any)
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        let serverQueue = DispatchQueue(label: "server")
        listener.newConnectionHandler = { incoming in
            XCTAssertEqual(incoming.state, .setup)
            incoming.startEchoing(on: serverQueue)
        }
        XCTAssertNil(listener.port)
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        let port = try XCTUnwrap(listener.port)
        XCTAssertNotEqual(port, .any)
        for round in 0..<3 {
            let connection = readyConnection(port: Int(port.rawValue))
            send(connection, "round \(round)")
            XCTAssertEqual(receive(connection, exactly: 7).0, Data("round \(round)".utf8))
            connection.cancel()
        }
    }

    func testAListenerOnAPortInUseFails() throws {
        let first = try NWListener(using: .tcp, on: .any)
        let ready = expectation(description: "ready")
        first.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        first.start(queue: queue)
        addCleanup { first.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        let second = try NWListener(using: .tcp, on: XCTUnwrap(first.port))
        let failed = expectation(description: "failed")
        second.stateUpdateHandler = { if $0 == .failed(.posix(.EADDRINUSE)) { failed.fulfill() } }
        second.start(queue: queue)
        wait(for: [failed], timeout: shortTimeout)
        let cancelled = expectation(description: "cancelled")
        second.stateUpdateHandler = { if $0 == .cancelled { cancelled.fulfill() } }
        second.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
    }

    /// Connections accepted without a handler are refused: the client sees its end.
    func testAListenerWithoutAHandlerRefusesConnections() throws {
        let listener = try NWListener(using: .tcp, on: .any)
        let ready = expectation(description: "ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        let connection = readyConnection(port: Int(try XCTUnwrap(listener.port).rawValue))
        let (data, isComplete, _) = receive(connection, exactly: 1)
        XCTAssertNil(data)
        XCTAssertTrue(isComplete)
    }
}
