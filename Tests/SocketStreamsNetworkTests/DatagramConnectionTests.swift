// UDP through Network.framework's API, as Apple-platform code uses it: `NWConnection(… using: .udp)` as
// one flow, `NWListener(using: .udp)` handing out one connection per remote, against the listener itself,
// socat's UDP echo and raw datagram sockets on loopback. No sleeps: every wait is for an event.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class DatagramConnectionTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "DatagramConnectionTests")

    // MARK: helpers

    /// A UDP listener on an ephemeral loopback port whose connections echo every datagram; `.ready`.
    private func startEchoListener(
        made: Locked<[NWConnection]> = Locked([]), parameters: NWParameters? = nil
    ) throws -> (NWListener, UInt16) {
        let listener = try parameters.map { try NWListener(using: $0) } ?? NWListener(using: .udp, on: .any)
        let queue = self.queue
        listener.newConnectionHandler = { connection in
            made.mutate { $0.append(connection) }
            connection.start(queue: queue)
            Self.echo(connection)
        }
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { state in if state == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { listener.cancel() }
        return (listener, try XCTUnwrap(listener.port?.rawValue))
    }

    /// Echoes each datagram `connection` receives, one receive at a time, until an error.
    private static func echo(_ connection: NWConnection) {
        connection.receiveMessage { data, _, _, error in
            guard error == nil else { return }
            connection.send(content: data ?? Data(), completion: .idempotent)
            echo(connection)
        }
    }

    /// A UDP connection to 127.0.0.1:`port`, started and `.ready`.
    private func readyConnection(port: UInt16, record: ConnectionRecord = ConnectionRecord(), on queue: DispatchQueue? = nil)
        -> NWConnection
    {
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: port)!, using: .udp)
        let ready = expectation(description: "ready")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: ready) { $0 == .ready }
        connection.start(queue: queue ?? self.queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { connection.cancel() }
        return connection
    }

    /// Sends `data` and waits for its completion; returns the completion's error.
    @discardableResult
    private func send(_ connection: NWConnection, _ data: Data) -> NWError? {
        let sent = expectation(description: "sent")
        let result = Locked<NWError?>(nil)
        connection.send(
            content: data,
            completion: .contentProcessed { error in
                result.value = error
                sent.fulfill()
            })
        wait(for: [sent], timeout: shortTimeout)
        return result.value
    }

    /// One `receiveMessage`: the content, whether complete, the context's finality, the error.
    private func receiveMessage(_ connection: NWConnection) -> (data: Data?, complete: Bool, final: Bool?, error: NWError?) {
        let done = expectation(description: "received")
        let result = Locked<(Data?, Bool, Bool?, NWError?)>((nil, false, nil, nil))
        connection.receiveMessage { data, context, isComplete, error in
            result.value = (data, isComplete, context?.isFinal, error)
            done.fulfill()
        }
        wait(for: [done], timeout: shortTimeout)
        return result.value
    }

    /// Waits until every turn queued on `queue`'s reactor before this call has run: a UDP connection on the
    /// same queue is cancelled, and its `.cancelled` comes in a turn behind them.
    private func drainTurns(on queue: DispatchQueue) {
        let probe = NWConnection(host: "127.0.0.1", port: 9, using: .udp)
        let ready = expectation(description: "probe ready")
        let cancelled = expectation(description: "probe cancelled")
        probe.stateUpdateHandler = { state in
            if state == .ready { ready.fulfill() }
            if state == .cancelled { cancelled.fulfill() }
        }
        probe.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        probe.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
    }

    /// A datagram of `size` bytes whose content names `client` and `index`.
    private static func datagram(client: Int, index: Int, size: Int) -> Data {
        Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ client &* 7 &+ index) })
    }

    /// Waits (up to the short timeout) until the process has `count` sockets open. Sockets, not every
    /// descriptor: a reactor the registry's idle cache lets go of while the test runs (the cache is
    /// full of earlier tests' queues' reactors) closes its epoll and event descriptors, which failed the
    /// count by 2 about one run in three.
    private func waitForDescriptorCount(_ count: Int) -> Int {
        let deadline = Date().addingTimeInterval(shortTimeout)
        var now = RawSocket.openSocketCount()
        while now != count, Date() < deadline {
            // Waiting for the owner's teardown to close the sockets: a bounded poll of a condition.
            usleep(2_000)
            now = RawSocket.openSocketCount()
        }
        return now
    }

    // MARK: NWConnection over UDP

    /// Many clients of one UDP listener, concurrently: each gets its own echoes, byte for byte, in order,
    /// datagram boundaries kept (sizes from 0 to 9,000 bytes), over the listener's one port. (The largest
    /// datagram is `testTheLargestDatagramGoesThroughWhole`'s: eight clients' 64 KiB datagrams at once are
    /// more than a socket's default receive buffer holds, and UDP drops what does not fit.)
    func testManyClientsEchoThroughOneUDPListener() throws {
        let made = Locked<[NWConnection]>([])
        let (_, port) = try startEchoListener(made: made)
        let clients = 8
        let rounds = 12
        let sizes = [0, 1, 2, 100, 1_400, 1_500, 9_000, 4_096, 3, 0, 512, 7]
        let failures = Locked<[String]>([])
        let progress = Locked([Int](repeating: 0, count: clients))
        let finished = expectation(description: "every client done")
        finished.expectedFulfillmentCount = clients
        var connections: [NWConnection] = []
        for client in 0..<clients {
            let connection = readyConnection(port: port, on: DispatchQueue(label: "client \(client)"))
            connections.append(connection)
            @Sendable func round(_ index: Int) {
                progress.mutate { $0[client] = index }
                guard index < rounds else { return finished.fulfill() }
                let sent = Self.datagram(client: client, index: index, size: sizes[index])
                connection.send(
                    content: sent,
                    completion: .contentProcessed { error in
                        if let error { failures.mutate { $0.append("client \(client) send \(index): \(error)") } }
                    })
                connection.receiveMessage { data, context, isComplete, error in
                    if data != sent || !isComplete || error != nil || context?.isFinal != false {
                        failures.mutate {
                            $0.append(
                                "client \(client) round \(index): \(data?.count ?? -1) bytes, complete \(isComplete), \(String(describing: error))"
                            )
                        }
                    }
                    round(index + 1)
                }
            }
            round(0)
        }
        wait(for: [finished], timeout: 20)
        XCTAssertEqual(failures.value, [], "rounds done by each client: \(progress.value)")
        XCTAssertEqual(made.value.count, clients, "one connection per remote endpoint")
        let localPorts = Set(
            connections.compactMap { connection -> UInt16? in
                guard case .hostPort(_, let port)? = connection.currentPath?.localEndpoint else { return nil }
                return port.rawValue
            })
        XCTAssertEqual(localPorts.count, clients)
        let remotes = Set(
            made.value.compactMap { connection -> UInt16? in
                guard case .hostPort(_, let port) = connection.endpoint else { return nil }
                return port.rawValue
            })
        XCTAssertEqual(remotes, localPorts, "each listener connection's endpoint is its client's address")
    }

    /// A datagram of `maximumDatagramSize` bytes goes there and back whole.
    func testTheLargestDatagramGoesThroughWhole() throws {
        let (_, port) = try startEchoListener()
        let connection = readyConnection(port: port)
        let largest = Self.datagram(client: 3, index: 3, size: connection.maximumDatagramSize)
        XCTAssertNil(send(connection, largest))
        XCTAssertEqual(receiveMessage(connection).data, largest)
    }

    /// A ping-pong with socat's UDP echo (`UDP4-LISTEN`, a peer that is not this package).
    func testEchoAgainstSocat() throws {
        let socat = try Peer.locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let peer = Peer(name: "socat udp echo", executable: socat, arguments: ["-d", "-d", "UDP4-LISTEN:0,bind=127.0.0.1", "PIPE"])
        let printed = try peer.start(readyPattern: #"listening on UDP AF=2 .*:(\d+)\s*$"#)
        addCleanup { peer.stop() }
        let port = try XCTUnwrap(UInt16(printed))
        let connection = readyConnection(port: port)
        for index in 0..<20 {
            let sent = Self.datagram(client: 1, index: index, size: 1 + index * 97)
            XCTAssertNil(send(connection, sent))
            let (data, complete, final, error) = receiveMessage(connection)
            XCTAssertEqual(data, sent, "round \(index)")
            XCTAssertTrue(complete)
            XCTAssertEqual(final, false, "a datagram is not the end of a stream")
            XCTAssertNil(error)
        }
        XCTAssertEqual(connection.state, .ready)
    }

    /// A zero-length datagram is a datagram: received as empty content, complete, not an end; the flow goes on.
    func testAZeroLengthDatagramIsADatagram() throws {
        let (_, port) = try startEchoListener()
        let connection = readyConnection(port: port)
        XCTAssertNil(send(connection, Data()))
        let empty = receiveMessage(connection)
        XCTAssertEqual(empty.data, Data())
        XCTAssertTrue(empty.complete)
        XCTAssertEqual(empty.final, false)
        XCTAssertNil(empty.error)
        XCTAssertNil(send(connection, Data("after".utf8)))
        XCTAssertEqual(receiveMessage(connection).data, Data("after".utf8))
    }

    /// A datagram larger than `maximumDatagramSize` fails its own send with EMSGSIZE; the sends around it
    /// go through and the connection stays ready.
    func testAnOversizedDatagramFailsOnlyItsOwnSend() throws {
        let (_, port) = try startEchoListener()
        let record = ConnectionRecord()
        let connection = readyConnection(port: port, record: record)
        XCTAssertEqual(connection.maximumDatagramSize, 65_507)
        let results = Locked<[String]>([])
        let done = expectation(description: "three sends")
        done.expectedFulfillmentCount = 3
        for (name, size) in [("before", 10), ("oversized", connection.maximumDatagramSize + 1), ("after", 20)] {
            connection.send(
                content: Data(count: size),
                completion: .contentProcessed { error in
                    results.mutate { $0.append("\(name) \(error.map(String.init(describing:)) ?? "ok")") }
                    done.fulfill()
                })
        }
        wait(for: [done], timeout: shortTimeout)
        XCTAssertEqual(results.value, ["before ok", "oversized \(NWError.posix(.EMSGSIZE))", "after ok"])
        XCTAssertEqual(receiveMessage(connection).data?.count, 10)
        XCTAssertEqual(receiveMessage(connection).data?.count, 20)
        XCTAssertEqual(connection.state, .ready)
        XCTAssertEqual(record.events.value, ["state preparing", "state ready"])
    }

    /// Datagrams to a port nobody listens on: the ICMP port unreachable each draws shows, at most, as
    /// ECONNREFUSED on one send's completion (the kernel reports it to the next call on the socket, a send
    /// or a read); the connection stays ready, and an outstanding receive is not failed by it.
    func testPortUnreachableFailsAtMostASendNeverTheFlow() throws {
        let closed = try RawUDPPeer()
        let port = UInt16(closed.port)
        closed.close()
        let record = ConnectionRecord()
        let connection = readyConnection(port: port, record: record)
        connection.receiveMessage { _, _, _, error in record.add("receive \(String(describing: error))") }
        var errors: [NWError?] = []
        for index in 0..<6 { errors.append(send(connection, Data("to nobody \(index)".utf8))) }
        XCTAssertTrue(errors.allSatisfy { $0 == nil || $0 == .posix(.ECONNREFUSED) }, "\(errors)")
        XCTAssertEqual(connection.state, .ready)
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: cancelled) { $0 == .cancelled }
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertEqual(
            record.events.value, ["state preparing", "state ready", "receive Optional(\(NWError.posix(.ECANCELED)))", "state cancelled"])
    }

    /// A receive and a send made before `start` are held and carried out once ready (`.idempotent` too).
    func testSendAndReceiveBeforeReady() throws {
        let (_, port) = try startEchoListener()
        let connection = NWConnection(to: .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: port)!), using: .udp)
        addCleanup { connection.cancel() }
        let received = expectation(description: "echo")
        let result = Locked<[Data]>([])
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, _, isComplete, error in
            XCTAssertTrue(isComplete)
            XCTAssertNil(error)
            result.mutate { $0.append(data ?? Data("nil".utf8)) }
            received.fulfill()
        }
        connection.send(content: Data("early".utf8), completion: .idempotent)
        XCTAssertEqual(connection.state, .setup)
        connection.start(queue: queue)
        wait(for: [received], timeout: shortTimeout)
        XCTAssertEqual(result.value, [Data("early".utf8)])
    }

    /// `receive` with a `maximumLength` below the datagram's size: its beginning, not complete, then the rest,
    /// complete; the next datagram stays whole.
    func testAShortReceiveTakesADatagramInParts() throws {
        let (_, port) = try startEchoListener()
        let connection = readyConnection(port: port)
        send(connection, Data("abcdefgh".utf8))
        send(connection, Data("next".utf8))
        let parts = Locked<[String]>([])
        let done = expectation(description: "three receives")
        done.expectedFulfillmentCount = 3
        for maximum in [5, 100, 100] {
            connection.receive(minimumIncompleteLength: 1, maximumLength: maximum) { data, _, isComplete, _ in
                parts.mutate { $0.append("\(String(decoding: data ?? Data(), as: UTF8.self)) \(isComplete)") }
                done.fulfill()
            }
        }
        wait(for: [done], timeout: shortTimeout)
        XCTAssertEqual(parts.value, ["abcde false", "fgh true", "next true"])
    }

    /// Cancel with receives and a send outstanding: each completes once, with ECANCELED, then `.cancelled`,
    /// last; a send and a receive after it are never called.
    func testCancelCompletesPendingReceivesOnceThenReportsCancelled() throws {
        let (_, port) = try startEchoListener()
        let record = ConnectionRecord()
        let connection = readyConnection(port: port, record: record)
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: cancelled) { $0 == .cancelled }
        for index in 0..<3 {
            connection.receiveMessage { _, _, _, error in record.add("receive \(index) \(String(describing: error))") }
        }
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        connection.receiveMessage { _, _, _, _ in record.add("a receive after cancelled was called") }
        connection.send(content: Data("x".utf8), completion: .contentProcessed { _ in record.add("a send after cancelled was called") })
        drainTurns(on: queue)
        let error = String(describing: NWError.posix(.ECANCELED))
        XCTAssertEqual(
            record.events.value,
            [
                "state preparing", "state ready", "receive 0 Optional(\(error))", "receive 1 Optional(\(error))",
                "receive 2 Optional(\(error))", "state cancelled",
            ])
        XCTAssertEqual(connection.state, .cancelled)
    }

    /// A cancel before the flow is connected (its look-up on the way) ends it: `.cancelled`, and the
    /// held receive completes with ECANCELED.
    func testCancelWhileLookingUp() throws {
        let connection = NWConnection(host: "udp-cancel-test.invalid", port: 9, using: .udp)
        let record = ConnectionRecord()
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = record.stateHandler(fulfilling: cancelled) { $0 == .cancelled }
        connection.receiveMessage { _, _, _, error in record.add("receive \(String(describing: error))") }
        connection.start(queue: queue)
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertEqual(record.events.value.last, "state cancelled")
        XCTAssertTrue(record.events.value.contains("receive Optional(\(NWError.posix(.ECANCELED)))"), "\(record.events.value)")
    }

    /// A name that does not resolve waits, as a TCP connection's would, with DNS-SD's no-such-record.
    func testAFailedLookupWaits() throws {
        let connection = NWConnection(host: "udp-lookup-test.invalid", port: 9, using: .udp)
        addCleanup { connection.cancel() }
        let waiting = expectation(description: "waiting")
        connection.stateUpdateHandler = { state in if case .waiting(.dns) = state { waiting.fulfill() } }
        connection.start(queue: queue)
        wait(for: [waiting], timeout: 10)
    }

    /// Every descriptor comes back: a listener, its connections and their clients, all cancelled.
    func testDescriptorsComeBackAfterCancel() throws {
        drainTurns(on: queue)  // the queue's reactor made before the count
        let baseline = RawSocket.openSocketCount()
        do {
            let made = Locked<[NWConnection]>([])
            let (listener, port) = try startEchoListener(made: made)
            var clients: [NWConnection] = []
            for index in 0..<10 {
                let client = readyConnection(port: port)
                send(client, Data("fd \(index)".utf8))
                XCTAssertEqual(receiveMessage(client).data, Data("fd \(index)".utf8))
                clients.append(client)
            }
            let cancelled = expectation(description: "all cancelled")
            cancelled.expectedFulfillmentCount = clients.count + made.value.count + 1
            for connection in clients + made.value {
                connection.stateUpdateHandler = { state in if state == .cancelled { cancelled.fulfill() } }
            }
            listener.stateUpdateHandler = { state in if state == .cancelled { cancelled.fulfill() } }
            for client in clients { client.cancel() }
            listener.cancel()
            wait(for: [cancelled], timeout: shortTimeout)
        }
        XCTAssertEqual(waitForDescriptorCount(baseline), baseline)
    }

    /// Bad endpoints for UDP are defined errors, never a crash: a Unix path, a Bonjour service, DTLS.
    func testEndpointsUDPCannotServeFail() throws {
        let cases: [(NWConnection, NWError)] = [
            (NWConnection(to: .unix(path: "/tmp/none"), using: .udp), .posix(.EAFNOSUPPORT)),
            (NWConnection(to: .service(name: "x", type: "_x._udp", domain: "local.", interface: nil), using: .udp), .dns(-65544)),
            (NWConnection(host: "127.0.0.1", port: 9, using: NWParameters(dtls: NWProtocolTLS.Options())), .posix(.EPROTONOSUPPORT)),
        ]
        for (connection, expected) in cases {
            let failed = expectation(description: "failed \(expected)")
            connection.stateUpdateHandler = { state in if state == .failed(expected) { failed.fulfill() } }
            connection.start(queue: queue)
            wait(for: [failed], timeout: shortTimeout)
            connection.cancel()
        }
    }

    /// A received datagram's context carries UDP's metadata; the connection names itself udp.
    func testReceivedContextCarriesUDPMetadata() throws {
        let (_, port) = try startEchoListener()
        let connection = readyConnection(port: port)
        XCTAssertTrue(connection.debugDescription.contains("udp"), connection.debugDescription)
        XCTAssertTrue(connection.metadata(definition: NWProtocolUDP.definition) is NWProtocolUDP.Metadata)
        XCTAssertNil(connection.metadata(definition: NWProtocolTCP.definition))
        send(connection, Data("m".utf8))
        let done = expectation(description: "received")
        let found = Locked(false)
        connection.receiveMessage { _, context, _, _ in
            found.value = context?.protocolMetadata(definition: NWProtocolUDP.definition) is NWProtocolUDP.Metadata
            done.fulfill()
        }
        wait(for: [done], timeout: shortTimeout)
        XCTAssertTrue(found.value)
    }

    /// Receives asked for from another thread while datagrams stream in, and the connection's reading
    /// paused and resumed between them: every datagram reaches a receive, in order, none is stranded
    /// behind a paused socket.
    func testReceivesFromAnotherThreadWhileDatagramsStreamIn() throws {
        let peer = try RawUDPPeer()
        addCleanup { peer.close() }
        let connection = readyConnection(port: UInt16(peer.port))
        guard case .hostPort(_, let local)? = connection.currentPath?.localEndpoint else { return XCTFail("no local endpoint") }
        let count = 200
        let received = Locked<[Int]>([])
        let all = expectation(description: "every datagram")
        all.expectedFulfillmentCount = count
        let asking = Thread {
            for _ in 0..<count {
                connection.receiveMessage { data, _, _, _ in
                    let value = data.map { Int(String(decoding: $0, as: UTF8.self)) ?? -1 } ?? -2
                    received.mutate { $0.append(value) }
                    all.fulfill()
                }
            }
        }
        asking.start()
        for index in 0..<count { try peer.send(Data("\(index)".utf8), to: local.rawValue) }
        wait(for: [all], timeout: 10)
        XCTAssertEqual(received.value, Array(0..<count))
    }

    /// Over IPv6: a client to ::1 reaches the listener's dual-stack socket; its datagrams carry up to
    /// 65,527 bytes.
    func testAnIPv6FlowThroughTheDualStackListener() throws {
        let made = Locked<[NWConnection]>([])
        let (_, port) = try startEchoListener(made: made)
        let connection = NWConnection(host: "::1", port: NWEndpoint.Port(rawValue: port)!, using: .udp)
        let ready = expectation(description: "ready")
        connection.stateUpdateHandler = { state in if state == .ready { ready.fulfill() } }
        connection.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { connection.cancel() }
        XCTAssertEqual(connection.maximumDatagramSize, 65_527)
        let largest = Self.datagram(client: 6, index: 6, size: connection.maximumDatagramSize)
        XCTAssertNil(send(connection, largest))
        XCTAssertEqual(receiveMessage(connection).data, largest)
        guard case .hostPort(let host, _)? = made.value.first?.endpoint else { return XCTFail("no listener connection") }
        XCTAssertEqual(host, .ipv6(.loopback))
        XCTAssertEqual(made.value.first?.maximumDatagramSize, 65_527)
    }

    /// `requiredLocalEndpoint` binds a client flow's source port, and a listener's address.
    func testRequiredLocalEndpointsBindTheSockets() throws {
        let listenerParameters = NWParameters.udp
        listenerParameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
        let made = Locked<[NWConnection]>([])
        let (_, rawPort) = try startEchoListener(made: made, parameters: listenerParameters)
        let port = try XCTUnwrap(NWEndpoint.Port(rawValue: rawPort))

        let spare = try RawUDPPeer()
        let source = UInt16(spare.port)
        spare.close()
        let clientParameters = NWParameters.udp
        clientParameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: source)!)
        let connection = NWConnection(host: "127.0.0.1", port: port, using: clientParameters)
        let connected = expectation(description: "ready")
        connection.stateUpdateHandler = { state in if state == .ready { connected.fulfill() } }
        connection.start(queue: queue)
        wait(for: [connected], timeout: shortTimeout)
        addCleanup { connection.cancel() }
        XCTAssertNil(send(connection, Data("bound".utf8)))
        XCTAssertEqual(receiveMessage(connection).data, Data("bound".utf8))
        guard case .hostPort(_, let remote)? = made.value.first?.endpoint else { return XCTFail("no listener connection") }
        XCTAssertEqual(remote.rawValue, source)
    }

    // MARK: NWListener over UDP

    /// Datagrams that come before a listener's connection is started are kept for it, in order; the
    /// connection answers from the listener's port; cancelled, it leaves the demultiplexing, and the
    /// remote's next datagram makes a new connection.
    func testListenerKeepsEarlyDatagramsAndRemakesACancelledFlow() throws {
        let listener = try NWListener(using: .udp, on: .any)
        let offered = Locked<[NWConnection]>([])
        let firstOffer = expectation(description: "first connection")
        let secondOffer = expectation(description: "second connection")
        listener.newConnectionHandler = { connection in
            let count = offered.mutate { list -> Int in
                list.append(connection)
                return list.count
            }
            if count == 1 { firstOffer.fulfill() } else { secondOffer.fulfill() }
        }
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { state in if state == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { listener.cancel() }
        let port = try XCTUnwrap(listener.port?.rawValue)

        let peer = try RawUDPPeer()
        addCleanup { peer.close() }
        for text in ["one", "two", "three"] { try peer.send(Data(text.utf8), to: port) }
        wait(for: [firstOffer], timeout: shortTimeout)
        let connection = offered.value[0]
        XCTAssertEqual(connection.state, .setup, "handed out unstarted")
        guard case .hostPort(_, let remotePort) = connection.endpoint else { return XCTFail("\(connection.endpoint)") }
        XCTAssertEqual(Int(remotePort.rawValue), peer.port)
        connection.start(queue: queue)
        for text in ["one", "two", "three"] { XCTAssertEqual(receiveMessage(connection).data, Data(text.utf8)) }

        XCTAssertNil(send(connection, Data("reply".utf8)))
        let (reply, from) = try peer.receive()
        XCTAssertEqual(reply, Data("reply".utf8))
        XCTAssertEqual(from, Int(port), "sent from the listener's port")

        let cancelled = expectation(description: "connection cancelled")
        connection.stateUpdateHandler = { state in if state == .cancelled { cancelled.fulfill() } }
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        try peer.send(Data("again".utf8), to: port)
        wait(for: [secondOffer], timeout: shortTimeout)
        let second = offered.value[1]
        XCTAssertFalse(second === connection)
        second.start(queue: queue)
        XCTAssertEqual(receiveMessage(second).data, Data("again".utf8))
    }

    /// Cancelling the listener ends its connections (they share its socket), each with `.cancelled`.
    func testCancellingTheListenerEndsItsConnections() throws {
        let made = Locked<[NWConnection]>([])
        let (listener, port) = try startEchoListener(made: made)
        let client = readyConnection(port: port)
        send(client, Data("hello".utf8))
        XCTAssertEqual(receiveMessage(client).data, Data("hello".utf8))
        let accepted = try XCTUnwrap(made.value.first)
        let ended = expectation(description: "ended")
        ended.expectedFulfillmentCount = 2
        accepted.stateUpdateHandler = { state in if state == .cancelled { ended.fulfill() } }
        listener.stateUpdateHandler = { state in if state == .cancelled { ended.fulfill() } }
        listener.cancel()
        wait(for: [ended], timeout: shortTimeout)
        XCTAssertEqual(client.state, .ready, "the client is a flow of its own")
    }

    /// A port already taken by another UDP socket fails the listener with EADDRINUSE.
    func testAPortInUseFailsTheListener() throws {
        let peer = try RawUDPPeer()
        addCleanup { peer.close() }
        let listener = try NWListener(using: .udp, on: NWEndpoint.Port(rawValue: UInt16(peer.port))!)
        let failed = expectation(description: "failed")
        listener.stateUpdateHandler = { state in if state == .failed(.posix(.EADDRINUSE)) { failed.fulfill() } }
        listener.start(queue: queue)
        wait(for: [failed], timeout: shortTimeout)
        listener.cancel()
    }

    /// DTLS has no listener here: refused at `init`, as before.
    func testADTLSListenerIsRefused() {
        XCTAssertThrowsError(try NWListener(using: NWParameters(dtls: NWProtocolTLS.Options()), on: .any)) { error in
            XCTAssertEqual(error as? NWError, .posix(.EINVAL))
        }
    }
}

/// A plain UDP socket on 127.0.0.1, blocking with a timeout: a peer that is not this package.
final class RawUDPPeer {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw NWError.posix(.EMFILE) }
        self.fd = fd
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            _ = Glibc.close(fd)
            throw NWError.posix(.EADDRINUSE)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    func send(_ data: Data, to port: UInt16) throws {
        var address = Self.loopback(port: port)
        let sent = data.withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        guard sent == data.count else { throw NWError.posix(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    /// One datagram and the port it came from (fails after 5 s).
    func receive() throws -> (Data, Int) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let count = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, &buffer, buffer.count, 0, $0, &length) }
        }
        guard count >= 0 else { throw NWError.posix(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return (Data(buffer[0..<count]), Int(UInt16(bigEndian: address.sin_port)))
    }

    func close() { _ = Glibc.close(fd) }
}
