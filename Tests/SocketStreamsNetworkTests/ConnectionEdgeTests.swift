// NWConnection and NWListener misused and at their edges, as Apple-platform code can meet them: absurd
// receive lengths, endpoints Linux cannot reach (Bonjour), stacks not there yet, a forced cancel, the
// listener's connection limit.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

final class ConnectionEdgeTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "ConnectionEdgeTests")

    /// Starts `connection` and returns the states it reports until one matches `end`.
    private func states(of connection: NWConnection, until end: @escaping @Sendable (NWConnection.State) -> Bool) -> [NWConnection.State] {
        let seen = Locked<[NWConnection.State]>([])
        let done = expectation(description: "settled")
        let fulfilled = Locked(false)
        connection.stateUpdateHandler = { state in
            seen.mutate { $0.append(state) }
            if end(state),
                fulfilled.mutate({ was in
                    defer { was = true }
                    return !was
                })
            {
                done.fulfill()
            }
        }
        connection.start(queue: queue)
        addCleanup { connection.cancel() }
        wait(for: [done], timeout: shortTimeout)
        return seen.value
    }

    private static func isFailed(_ state: NWConnection.State) -> Bool {
        if case .failed = state { return true }
        return false
    }

    func testABonjourServiceFailsClearly() {
        let connection = NWConnection(to: .service(name: "printer", type: "_ipp._tcp", domain: "local.", interface: nil), using: .tcp)
        XCTAssertEqual(states(of: connection, until: Self.isFailed), [.preparing, .failed(.dns(-65544))])
    }

    /// UDP works (`DatagramConnectionTests`); DTLS over it is refused until it is there.
    func testDTLSIsRefusedUntilItIsThere() {
        let connection = NWConnection(host: "127.0.0.1", port: 9, using: NWParameters(dtls: NWProtocolTLS.Options()))
        XCTAssertEqual(states(of: connection, until: Self.isFailed), [.preparing, .failed(.posix(.EPROTONOSUPPORT))])
        XCTAssertThrowsError(try NWListener(using: NWParameters(dtls: NWProtocolTLS.Options()), on: .any))
    }

    func testAURLEndpointConnectsToItsHostAndPort() throws {
        let port = try startSocatEcho()
        let connection = NWConnection(to: .url(URL(string: "http://127.0.0.1:\(port)/index.html")!), using: .tcp)
        XCTAssertEqual(states(of: connection, until: { $0 == .ready }), [.preparing, .ready])
    }

    func testAbsurdReceiveLengths() throws {
        let port = try startSocatEcho()
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .tcp)
        _ = states(of: connection, until: { $0 == .ready })
        let refused = expectation(description: "maximumLength 0")
        connection.receive(minimumIncompleteLength: 0, maximumLength: 0) { data, _, _, error in
            XCTAssertNil(data)
            XCTAssertEqual(error, .posix(.EINVAL))
            refused.fulfill()
        }
        wait(for: [refused], timeout: shortTimeout)
        // A minimum above the maximum is the maximum; a negative minimum is 0: both complete with data.
        connection.send(content: Data("abcdef".utf8), completion: .idempotent)
        let clamped = expectation(description: "clamped")
        connection.receive(minimumIncompleteLength: 1_000, maximumLength: 3) { data, _, _, error in
            XCTAssertNil(error)
            XCTAssertEqual(data, Data("abc".utf8))
            connection.receive(minimumIncompleteLength: -5, maximumLength: .max) { data, _, _, error in
                XCTAssertNil(error)
                XCTAssertEqual(data, Data("def".utf8))
                clamped.fulfill()
            }
        }
        wait(for: [clamped], timeout: shortTimeout)
    }

    /// `forceCancel()` resets: the peer reads ECONNRESET, not an end of stream.
    func testForceCancelResets() throws {
        let outcome = Locked<String>("")
        let peerDone = Signal()
        let server = try startRawServer { connection in
            var byte: UInt8 = 0
            _ = read(connection.fd, &byte, 1)
            let count = read(connection.fd, &byte, 1)
            outcome.value = count < 0 ? "error \(errno)" : "read \(count)"
            peerDone.raise()
        }
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(server.port))!, using: .tcp)
        _ = states(of: connection, until: { $0 == .ready })
        let sent = expectation(description: "sent")
        connection.send(content: Data("x".utf8), completion: .contentProcessed { _ in sent.fulfill() })
        wait(for: [sent], timeout: shortTimeout)
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = { if $0 == .cancelled { cancelled.fulfill() } }
        connection.forceCancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertTrue(peerDone.wait(timeout: shortTimeout))
        XCTAssertEqual(outcome.value, "error \(ECONNRESET)")
    }

    /// `newConnectionLimit`: at 0 connections wait, accepted but not delivered, until it is raised; each
    /// delivered one lowers it.
    func testTheListenersConnectionLimit() throws {
        let listener = try NWListener(using: .tcp, on: .any)
        XCTAssertEqual(listener.newConnectionLimit, NWListener.InfiniteConnectionLimit)
        listener.newConnectionLimit = 1
        let queue = self.queue
        let delivered = Locked<[NWConnection]>([])
        let first = expectation(description: "first")
        let second = expectation(description: "second")
        listener.newConnectionHandler = { connection in
            let count = delivered.mutate { list -> Int in
                list.append(connection)
                return list.count
            }
            connection.start(queue: queue)
            if count == 1 { first.fulfill() } else { second.fulfill() }
        }
        let ready = expectation(description: "ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup {
            listener.cancel()
            delivered.value.forEach { $0.cancel() }
        }
        wait(for: [ready], timeout: shortTimeout)
        let port = try XCTUnwrap(listener.port)
        var clients: [NWConnection] = []
        for _ in 0..<2 {
            let client = NWConnection(host: "127.0.0.1", port: port, using: .tcp)
            client.start(queue: queue)
            clients.append(client)
        }
        addCleanup { clients.forEach { $0.cancel() } }
        wait(for: [first], timeout: shortTimeout)
        XCTAssertEqual(listener.newConnectionLimit, 0)
        // The second is held: delivered only once the limit is raised (checked on the queue, behind
        // the listener's own turns for it).
        let drained = expectation(description: "drained")
        queue.async { drained.fulfill() }
        wait(for: [drained], timeout: shortTimeout)
        XCTAssertEqual(delivered.value.count, 1)
        listener.newConnectionLimit = 5
        wait(for: [second], timeout: shortTimeout)
        XCTAssertEqual(listener.newConnectionLimit, 4)
    }

    func testAListenerWithABonjourServiceFailsClearly() throws {
        let listener = try NWListener(using: .tcp, on: .any)
        listener.service = NWListener.Service(type: "_http._tcp")
        let failed = expectation(description: "failed")
        listener.stateUpdateHandler = { if $0 == .failed(.dns(-65544)) { failed.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [failed], timeout: shortTimeout)
    }
}
