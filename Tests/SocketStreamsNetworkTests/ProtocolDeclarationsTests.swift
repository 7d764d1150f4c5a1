// NWProtocolWebSocket and NWProtocolQUIC as code that offers them among other endpoints uses them (an
// MQTT client with tcp, tls, ws, wss and quic endpoints): they build and keep what is set, and a
// connection asking for a stack this package cannot run (QUIC; WebSocket below TLS) fails with
// EPROTONOSUPPORT against a real loopback peer instead of quietly running plain TCP.

/// A stack the package refuses: WebSocket below TLS (WebSocket itself runs above TLS or TCP).
func webSocketBelowTLS() -> NWParameters {
    let parameters = NWParameters.tls
    parameters.defaultProtocolStack.applicationProtocols.append(NWProtocolWebSocket.Options())
    return parameters
}

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

final class ProtocolDeclarationsTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "ProtocolDeclarationsTests")

    func testWebSocketOptionsKeepWhatIsSet() throws {
        let options = NWProtocolWebSocket.Options()
        XCTAssertFalse(options.autoReplyPing)
        XCTAssertFalse(options.skipHandshake)
        options.autoReplyPing = true
        options.skipHandshake = true
        options.maximumMessageSize = 1 << 20
        options.setSubprotocols(["mqtt"])
        options.setAdditionalHeaders([(name: "Origin", value: "https://example.com")])
        XCTAssertTrue(options.autoReplyPing)
        XCTAssertTrue(options.skipHandshake)
        XCTAssertEqual(options.maximumMessageSize, 1 << 20)

        let parameters = NWParameters.tls
        parameters.defaultProtocolStack.applicationProtocols.insert(options, at: 0)
        XCTAssertEqual(parameters.debugDescription, "websocket, tls, tcp, ip")
        let copy = try XCTUnwrap(parameters.copy().defaultProtocolStack.applicationProtocols.first as? NWProtocolWebSocket.Options)
        copy.autoReplyPing = false
        XCTAssertTrue(options.autoReplyPing, "a copy of the parameters has options of its own")

        let metadata = NWProtocolWebSocket.Metadata(opcode: .binary)
        XCTAssertEqual(metadata.opcode, .binary)
        let context = NWConnection.ContentContext(identifier: "message", metadata: [metadata])
        XCTAssertTrue(context.protocolMetadata.first === metadata)
        XCTAssertEqual(NWProtocolWebSocket.definition.name, "websocket")
    }

    func testQUICParameters() throws {
        let options = NWProtocolQUIC.Options(alpn: ["mqtt"])
        XCTAssertEqual(options.alpn, ["mqtt"])
        XCTAssertEqual(NWProtocolQUIC.Options().alpn, [])
        options.idleTimeout = 90_000
        XCTAssertEqual(options.idleTimeout, 90_000)
        sec_protocol_options_set_min_tls_protocol_version(options.securityProtocolOptions, .TLSv13)
        sec_protocol_options_set_peer_authentication_required(options.securityProtocolOptions, false)

        let parameters = NWParameters(quic: options)
        XCTAssertTrue(parameters.defaultProtocolStack.transportProtocol === options)
        XCTAssertTrue(parameters.defaultProtocolStack.applicationProtocols.isEmpty)
        XCTAssertEqual(parameters.debugDescription, "quic, ip")
        let byALPN = try XCTUnwrap(NWParameters.quic(alpn: ["h3"]).defaultProtocolStack.transportProtocol as? NWProtocolQUIC.Options)
        XCTAssertEqual(byALPN.alpn, ["h3"])
        let copied = try XCTUnwrap(parameters.copy().defaultProtocolStack.transportProtocol as? NWProtocolQUIC.Options)
        copied.alpn = ["other"]
        XCTAssertEqual(options.alpn, ["mqtt"])
        XCTAssertEqual(NWProtocolQUIC.definition.name, "quic")
    }

    /// WebSocket below TLS, to a listening peer, fails at once; nothing connects.
    func testAWebSocketBelowTLSFailsInsteadOfRunningTCP() throws {
        try assertRefusedWithoutConnecting(webSocketBelowTLS())
    }

    /// QUIC fails at once; it does not fall back to a TCP connection to the same port.
    func testAQUICConnectionFailsInsteadOfRunningTCP() throws {
        try assertRefusedWithoutConnecting(NWParameters(quic: NWProtocolQUIC.Options(alpn: ["mqtt"])))
    }

    func testListenersRefuseWebSocketBelowTLSAndQUIC() {
        XCTAssertThrowsError(try NWListener(using: webSocketBelowTLS(), on: .any))
        XCTAssertThrowsError(try NWListener(using: NWParameters(quic: NWProtocolQUIC.Options()), on: .any))
    }

    private func assertRefusedWithoutConnecting(_ parameters: NWParameters, file: StaticString = #filePath, line: UInt = #line) throws {
        let server = try RawTCPServer { connection in _ = try? connection.readToEOF() }
        defer { server.stop() }
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(server.port))!, using: parameters)
        let states = Locked<[NWConnection.State]>([])
        let failed = expectation(description: "failed")
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = { state in
            states.mutate { $0.append(state) }
            if case .failed = state { failed.fulfill() }
            if state == .cancelled { cancelled.fulfill() }
        }
        connection.start(queue: queue)
        wait(for: [failed], timeout: shortTimeout)
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertEqual(states.value.last, .cancelled, file: file, line: line)
        XCTAssertTrue(states.value.contains(.failed(.posix(.EPROTONOSUPPORT))), "\(states.value)", file: file, line: line)
        XCTAssertFalse(states.value.contains(.ready), file: file, line: line)
        XCTAssertEqual(server.acceptedCount, 0, file: file, line: line)
    }
}

/// What a connection refused at start does with what was asked of it before: the held send and receive
/// complete with the error, once each, whether the client cancels from its own queue as soon as the
/// receive reports (as an MQTT client does) or not at all; `.cancelled` comes last.
final class RefusedStackCompletionTests: SocketStreamsTestCase {
    func testHeldSendAndReceiveCompleteWhenTheStackIsRefused() throws {
        let server = try RawTCPServer { connection in _ = try? connection.readToEOF() }
        defer { server.stop() }
        for round in 0..<40 {
            let queue = DispatchQueue(label: "connection \(round)")
            let clientQueue = DispatchQueue(label: "client \(round)")
            let parameters = webSocketBelowTLS()
            let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(server.port))!, using: parameters)
            let events = Locked<[String]>([])
            let sent = expectation(description: "send \(round)")
            let received = expectation(description: "receive \(round)")
            let cancelled = expectation(description: "cancelled \(round)")
            connection.stateUpdateHandler = { state in
                events.mutate { $0.append("state \(state)") }
                if state == .cancelled { cancelled.fulfill() }
            }
            connection.start(queue: queue)
            connection.send(
                content: Data("CONNECT".utf8),
                completion: .contentProcessed { error in
                    events.mutate { $0.append("send \(String(describing: error))") }
                    sent.fulfill()
                })
            connection.receiveMessage { _, _, _, error in
                events.mutate { $0.append("receive \(String(describing: error))") }
                received.fulfill()
                if round % 2 == 0 { clientQueue.async { connection.cancel() } }
            }
            wait(for: [sent, received], timeout: shortTimeout)
            if round % 2 == 1 { connection.cancel() }
            wait(for: [cancelled], timeout: shortTimeout)
            let log = events.value
            XCTAssertEqual(log.last, "state cancelled", "round \(round): \(log)")
            XCTAssertEqual(log.filter { $0.hasPrefix("send") }.count, 1, "round \(round): \(log)")
            XCTAssertEqual(log.filter { $0.hasPrefix("receive") }.count, 1, "round \(round): \(log)")
        }
        XCTAssertEqual(server.acceptedCount, 0)
    }
    /// A send and a receive asked of a connection that has already failed complete at once with its
    /// error (before `cancel()`).
    func testSendAndReceiveAfterTheFailureComplete() throws {
        let queue = DispatchQueue(label: "after failure")
        let parameters = webSocketBelowTLS()
        let connection = NWConnection(host: "127.0.0.1", port: 9, using: parameters)
        let failed = expectation(description: "failed")
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = { state in
            if case .failed = state { failed.fulfill() }
            if state == .cancelled { cancelled.fulfill() }
        }
        connection.start(queue: queue)
        wait(for: [failed], timeout: shortTimeout)
        let errors = Locked<[String]>([])
        let sent = expectation(description: "sent")
        let received = expectation(description: "received")
        connection.send(
            content: Data("x".utf8),
            completion: .contentProcessed { error in
                errors.mutate { $0.append("send \(String(describing: error))") }
                sent.fulfill()
            })
        connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { _, _, _, error in
            errors.mutate { $0.append("receive \(String(describing: error))") }
            received.fulfill()
        }
        wait(for: [sent, received], timeout: shortTimeout)
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertEqual(
            errors.value,
            ["send Optional(\(NWError.posix(.EPROTONOSUPPORT)))", "receive Optional(\(NWError.posix(.EPROTONOSUPPORT)))"])
    }
    /// A send and a receive asked of a failed connection complete, with its error, before `.cancelled`
    /// even when `cancel()` follows at once from the same thread (swift-mqtt's ws endpoint when WebSocket
    /// was refused: its CONNECT went out as the failure came, and its close cancelled right after).
    func testSendAndReceiveOnAFailedConnectionCompleteBeforeAnImmediateCancel() throws {
        for round in 0..<20 {
            let queue = DispatchQueue(label: "failed then cancelled \(round)")
            let parameters = webSocketBelowTLS()
            let connection = NWConnection(host: "127.0.0.1", port: 9, using: parameters)
            let events = Locked<[String]>([])
            let failed = expectation(description: "failed \(round)")
            let cancelled = expectation(description: "cancelled \(round)")
            connection.stateUpdateHandler = { state in
                events.mutate { $0.append("state \(state)") }
                if case .failed = state { failed.fulfill() }
                if state == .cancelled { cancelled.fulfill() }
            }
            connection.start(queue: queue)
            wait(for: [failed], timeout: shortTimeout)
            connection.send(
                content: Data("x".utf8),
                completion: .contentProcessed { error in events.mutate { $0.append("send \(String(describing: error))") } })
            connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { _, _, _, error in
                events.mutate { $0.append("receive \(String(describing: error))") }
            }
            connection.cancel()
            wait(for: [cancelled], timeout: shortTimeout)
            let error = String(describing: NWError.posix(.EPROTONOSUPPORT))
            XCTAssertEqual(
                events.value,
                ["state preparing", "state failed(\(error))", "send Optional(\(error))", "receive Optional(\(error))", "state cancelled"],
                "round \(round)")
        }
    }
}
