// NWConnection and NWListener with `NWProtocolWebSocket` in their stacks, written as Apple-platform code
// writes them: an echo server on a listener, clients on `ws://` URLs, text, binary and the default
// message, a message sent in parts, pings with pong handlers, close codes both ways, a 16 MiB message,
// `maximumMessageSize`, subprotocols and headers through the server's request handler, a rejected
// handshake, and the same over TLS with the test PKI.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

/// What one `receiveMessage` completed with.
struct WebSocketReceived {
    let data: Data?
    let metadata: NWProtocolWebSocket.Metadata?
    let isComplete: Bool
    let error: NWError?
}

extension NWConnection {
    /// Sends `content` as one WebSocket message of `opcode`.
    func sendWebSocket(
        _ content: Data?, opcode: NWProtocolWebSocket.Opcode, isComplete: Bool = true, metadata: NWProtocolWebSocket.Metadata? = nil
    ) {
        let context = NWConnection.ContentContext(identifier: "send", metadata: [metadata ?? NWProtocolWebSocket.Metadata(opcode: opcode)])
        send(content: content, contentContext: context, isComplete: isComplete, completion: .contentProcessed { _ in })
    }

    /// Echoes every text and binary message it receives, until a close or an error: the test servers'
    /// side. `closes` records the close codes received.
    func echoWebSocketMessages(closes: Locked<[NWProtocolWebSocket.CloseCode]>? = nil) {
        receiveMessage { data, context, _, error in
            guard error == nil else { return }
            guard let metadata = context?.protocolMetadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
            else {
                return
            }
            switch metadata.opcode {
            case .text, .binary: self.sendWebSocket(data, opcode: metadata.opcode)
            case .close:
                closes?.mutate { $0.append(metadata.closeCode) }
                return
            default: break
            }
            self.echoWebSocketMessages(closes: closes)
        }
    }
}

extension SocketStreamsTestCase {
    /// Parameters with WebSocket on top of `parameters`' stack.
    func webSocketParameters(_ parameters: NWParameters = .tcp, _ configure: (NWProtocolWebSocket.Options) -> Void = { _ in })
        -> NWParameters
    {
        let options = NWProtocolWebSocket.Options()
        configure(options)
        parameters.defaultProtocolStack.applicationProtocols.insert(options, at: 0)
        return parameters
    }

    /// Waits for one `receiveMessage`.
    func receiveWebSocketMessage(_ connection: NWConnection, timeout: TimeInterval = 5) -> WebSocketReceived? {
        let done = expectation(description: "message")
        let received = Locked<WebSocketReceived?>(nil)
        connection.receiveMessage { data, context, isComplete, error in
            let metadata = context?.protocolMetadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
            received.value = WebSocketReceived(data: data, metadata: metadata, isComplete: isComplete, error: error)
            done.fulfill()
        }
        wait(for: [done], timeout: timeout)
        return received.value
    }

    /// Starts `connection` and waits for its first state after `.preparing` (ready, waiting, failed).
    func startAndSettleOrWait(_ connection: NWConnection, on queue: DispatchQueue) -> NWConnection.State? {
        let settled = expectation(description: "settled")
        let first = Locked<NWConnection.State?>(nil)
        connection.stateUpdateHandler = { state in
            switch state {
            case .ready, .failed, .waiting:
                let isFirst = first.mutate { value -> Bool in
                    defer { if value == nil { value = state } }
                    return value == nil
                }
                if isFirst { settled.fulfill() }
            default: break
            }
        }
        connection.start(queue: queue)
        addCleanup { connection.cancel() }
        wait(for: [settled], timeout: shortTimeout)
        return first.value
    }
}

final class WebSocketConnectionTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "WebSocketConnectionTests")
    private let serverQueue = DispatchQueue(label: "WebSocketConnectionTests.server")

    /// A WebSocket echo listener (ready), its connections recording the close codes they receive.
    private func echoListener(
        _ parameters: NWParameters = .tcp, closes: Locked<[NWProtocolWebSocket.CloseCode]>? = nil,
        _ configure: (NWProtocolWebSocket.Options) -> Void = { $0.autoReplyPing = true }
    ) throws -> NWListener {
        let listener = try NWListener(using: webSocketParameters(parameters, configure), on: .any)
        listener.newConnectionHandler = { [serverQueue] incoming in
            incoming.start(queue: serverQueue)
            incoming.echoWebSocketMessages(closes: closes)
        }
        startAndAwaitReady(listener, on: queue)
        return listener
    }

    private func client(
        _ listener: NWListener, path: String = "/echo", _ parameters: NWParameters = .tcp, scheme: String = "ws",
        _ configure: (NWProtocolWebSocket.Options) -> Void = { _ in }
    ) throws -> NWConnection {
        let port = try XCTUnwrap(listener.port).rawValue
        let url = try XCTUnwrap(URL(string: "\(scheme)://localhost:\(port)\(path)"))
        return NWConnection(to: .url(url), using: webSocketParameters(parameters, configure))
    }

    private func echo(_ connection: NWConnection, _ content: Data?, opcode: NWProtocolWebSocket.Opcode) -> WebSocketReceived? {
        connection.sendWebSocket(content, opcode: opcode)
        return receiveWebSocketMessage(connection, timeout: 20)
    }

    /// Guides/NetworkFramework.md's example, word for word.
    func testTheGuidesExample() throws {
        let port = try XCTUnwrap(try echoListener().port).rawValue
        let received = expectation(description: "reply")
        let reply = Locked<(Data?, NWProtocolWebSocket.Opcode?)>((nil, nil))
        let parameters = NWParameters.tcp  // or NWParameters(tls: ...) for wss://
        let options = NWProtocolWebSocket.Options()
        options.autoReplyPing = true
        parameters.defaultProtocolStack.applicationProtocols.insert(options, at: 0)
        let connection = NWConnection(to: .url(URL(string: "ws://localhost:\(port)/echo")!), using: parameters)
        connection.start(queue: queue)

        let text = NWConnection.ContentContext(identifier: "text", metadata: [NWProtocolWebSocket.Metadata(opcode: .text)])
        connection.send(content: Data("hello".utf8), contentContext: text, isComplete: true, completion: .idempotent)
        connection.receiveMessage { content, context, isComplete, error in
            let metadata = context?.protocolMetadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
            // metadata?.opcode: .text, .binary, .ping, .pong or .close (with metadata?.closeCode)
            reply.value = (content, metadata?.opcode)
            received.fulfill()
        }
        addCleanup { connection.cancel() }
        wait(for: [received], timeout: shortTimeout)
        XCTAssertEqual(reply.value.0, Data("hello".utf8))
        XCTAssertEqual(reply.value.1, .text)
    }

    func testTextBinaryAndTheDefaultMessageEcho() throws {
        let connection = try client(try echoListener())
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        let text = echo(connection, Data("hello, wörld".utf8), opcode: .text)
        XCTAssertEqual(text?.data, Data("hello, wörld".utf8))
        XCTAssertEqual(text?.metadata?.opcode, .text)
        XCTAssertEqual(text?.isComplete, true)
        let binary = echo(connection, Data([0, 1, 2, 255]), opcode: .binary)
        XCTAssertEqual(binary?.data, Data([0, 1, 2, 255]))
        XCTAssertEqual(binary?.metadata?.opcode, .binary)
        // `.defaultMessage` (no WebSocket metadata) sends binary.
        connection.send(content: Data("plain".utf8), completion: .contentProcessed { XCTAssertNil($0) })
        let plain = receiveWebSocketMessage(connection)
        XCTAssertEqual(plain?.metadata?.opcode, .binary)
        XCTAssertEqual(plain?.data, Data("plain".utf8))
        XCTAssertEqual(echo(connection, Data(), opcode: .text)?.metadata?.opcode, .text, "an empty message")
    }

    func testAMessageSentInPartsArrivesAsOne() throws {
        let connection = try client(try echoListener())
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        connection.sendWebSocket(Data("frag".utf8), opcode: .text, isComplete: false)
        connection.sendWebSocket(Data("men".utf8), opcode: .text, isComplete: false)
        connection.sendWebSocket(Data("ted".utf8), opcode: .text)
        let whole = receiveWebSocketMessage(connection)
        XCTAssertEqual(whole?.data, Data("fragmented".utf8))
        XCTAssertEqual(whole?.metadata?.opcode, .text)
    }

    func testAPingsPongHandlerIsCalledWhenThePeerAutoReplies() throws {
        let connection = try client(try echoListener())
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        let ponged = expectation(description: "pong")
        let metadata = NWProtocolWebSocket.Metadata(opcode: .ping)
        metadata.setPongHandler(queue) { error in
            XCTAssertNil(error)
            ponged.fulfill()
        }
        connection.sendWebSocket(Data("ping?".utf8), opcode: .ping, metadata: metadata)
        wait(for: [ponged], timeout: shortTimeout)
    }

    func testPingsAreDeliveredWithoutAutoReply() throws {
        // The server echoes the ping's payload in a text message; the client sees its own ping answered.
        let listener = try NWListener(using: webSocketParameters(), on: .any)
        listener.newConnectionHandler = { [serverQueue] incoming in
            incoming.start(queue: serverQueue)
            incoming.receiveMessage { data, context, _, _ in
                let metadata = context?.protocolMetadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
                XCTAssertEqual(metadata?.opcode, .ping)
                incoming.sendWebSocket(data, opcode: .pong)
                incoming.sendWebSocket(data, opcode: .text)
            }
        }
        startAndAwaitReady(listener, on: queue)
        let connection = try client(listener)
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        connection.sendWebSocket(Data("p1".utf8), opcode: .ping)
        let pong = receiveWebSocketMessage(connection)
        XCTAssertEqual(pong?.metadata?.opcode, .pong, "a pong no handler waits for is delivered")
        XCTAssertEqual(pong?.data, Data("p1".utf8))
        XCTAssertEqual(receiveWebSocketMessage(connection)?.data, Data("p1".utf8))
    }

    func testCloseCodesGoBothWays() throws {
        let closes = Locked<[NWProtocolWebSocket.CloseCode]>([])
        let connection = try client(try echoListener(closes: closes))
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        let metadata = NWProtocolWebSocket.Metadata(opcode: .close)
        metadata.closeCode = .privateCode(4321)
        connection.sendWebSocket(Data("bye".utf8), opcode: .close, metadata: metadata)
        let echoed = receiveWebSocketMessage(connection)
        XCTAssertEqual(echoed?.metadata?.opcode, .close)
        XCTAssertEqual(echoed?.metadata?.closeCode, .privateCode(4321), "the server echoes the code")
        XCTAssertEqual(closes.value, [.privateCode(4321)])
        // Then the server's end: the input completes.
        let end = receiveWebSocketMessage(connection)
        XCTAssertEqual(end?.data, nil)
        XCTAssertEqual(end?.isComplete, true)
    }

    func test16MiBMessageEchoes() throws {
        let connection = try client(try echoListener())
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        let pattern = Data((0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) })
        // Under a sanitizer (Scripts/sanitize sets SOCKETSTREAMS_SANITIZER) masking and copying 16 MiB
        // twice in a debug build takes longer than the echo's 20 s: 4 MiB there, still a 64-bit length
        // and hundreds of reads each way.
        let sanitized = ProcessInfo.processInfo.environment["SOCKETSTREAMS_SANITIZER"] != nil
        let chunks = sanitized ? 64 : 256
        var big = Data(capacity: chunks << 16)
        for _ in 0..<chunks { big.append(pattern) }
        let echoed = echo(connection, big, opcode: .binary)
        XCTAssertEqual(echoed?.data?.count, big.count)
        XCTAssertTrue(echoed?.data == big)
    }

    func testSkipHandshakeFramesFromTheStart() throws {
        let listener = try echoListener { $0.skipHandshake = true }
        let connection = try client(listener) { $0.skipHandshake = true }
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        XCTAssertEqual(echo(connection, Data("no upgrade".utf8), opcode: .text)?.data, Data("no upgrade".utf8))
    }

    func testAReceiveWithinBoundsGetsALargeMessageInParts() throws {
        let connection = try client(try echoListener())
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        let message = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0) })
        connection.sendWebSocket(message, opcode: .binary)
        var received = Data()
        var parts = 0
        while received.count < message.count {
            let done = expectation(description: "part")
            let part = Locked<(Data?, Bool, NWProtocolWebSocket.Opcode?)>((nil, false, nil))
            connection.receive(minimumIncompleteLength: 1, maximumLength: 100_000) { data, context, isComplete, _ in
                let metadata = context?.protocolMetadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
                part.value = (data, isComplete, metadata?.opcode)
                done.fulfill()
            }
            wait(for: [done], timeout: shortTimeout)
            let (data, isComplete, opcode) = part.value
            XCTAssertLessThanOrEqual(data?.count ?? 0, 100_000)
            XCTAssertEqual(opcode, .binary)
            received.append(data ?? Data())
            parts += 1
            XCTAssertEqual(isComplete, received.count == message.count)
            if data == nil { break }
        }
        XCTAssertTrue(received == message)
        XCTAssertGreaterThanOrEqual(parts, 3)
    }

    func testAMessageOverTheMaximumSizeClosesWith1009() throws {
        let listener = try echoListener { $0.maximumMessageSize = 1000 }
        let connection = try client(listener)
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        XCTAssertEqual(echo(connection, Data(count: 1000), opcode: .binary)?.data?.count, 1000)
        connection.sendWebSocket(Data(count: 1001), opcode: .binary)
        let close = receiveWebSocketMessage(connection)
        XCTAssertEqual(close?.metadata?.opcode, .close)
        XCTAssertEqual(close?.metadata?.closeCode, .protocolCode(.messageTooBig))
    }

    func testSubprotocolsAndHeadersGoThroughTheRequestHandler() throws {
        let seen = Locked<([String], [String])?>(nil)
        let listener = try echoListener { options in
            options.setClientRequestHandler(self.serverQueue) { subprotocols, headers in
                seen.value = (subprotocols, headers.map { "\($0.name)=\($0.value)" })
                return NWProtocolWebSocket.Response(status: .accept, subprotocol: "v2", additionalHeaders: [("X-Server", "yes")])
            }
        }
        let connection = try client(listener) { options in
            options.setSubprotocols(["v1", "v2"])
            options.setAdditionalHeaders([("X-Token", "abc")])
        }
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        XCTAssertEqual(seen.value?.0, ["v1", "v2"])
        XCTAssertEqual(seen.value?.1, ["X-Token=abc"])
        let metadata = connection.metadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
        XCTAssertEqual(metadata?.additionalServerHeaders?.map { "\($0.0)=\($0.1)" }, ["X-Server=yes"])
        let message = echo(connection, Data("x".utf8), opcode: .text)
        XCTAssertEqual(message?.metadata?.additionalServerHeaders?.first?.0, "X-Server")
    }

    func testARejectedHandshakeEndsTheConnectionWithECONNABORTED() throws {
        let listener = try echoListener { options in
            options.setClientRequestHandler(self.serverQueue) { _, _ in NWProtocolWebSocket.Response(status: .reject, subprotocol: nil) }
        }
        let connection = try client(listener)
        let state = startAndSettleOrWait(connection, on: queue)
        XCTAssertEqual(state, .waiting(.posix(.ECONNABORTED)))
    }

    func testAClientAgainstAPlainTCPServerFailsTheHandshake() throws {
        let listener = try NWListener(using: .tcp, on: .any)
        listener.newConnectionHandler = { [serverQueue] incoming in
            incoming.start(queue: serverQueue)
            incoming.send(content: Data("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".utf8), completion: .idempotent)
        }
        startAndAwaitReady(listener, on: queue)
        let connection = try client(listener)
        XCTAssertEqual(startAndSettleOrWait(connection, on: queue), .waiting(.posix(.ECONNABORTED)))
    }

    // MARK: permessage-deflate

    private static let deflateOffer = [(name: "Sec-WebSocket-Extensions", value: "permessage-deflate; client_max_window_bits")]

    func testPermessageDeflateBetweenOurClientAndOurListener() throws {
        let listener = try echoListener()
        let connection = try client(listener) { $0.setAdditionalHeaders(Self.deflateOffer) }
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        let text = Data(String(repeating: "compressible ", count: 10_000).utf8)
        let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 ^ ($0 >> 8)) })
        for (message, opcode) in [
            (text, NWProtocolWebSocket.Opcode.text), (Data(), .binary), (big, .binary), (text, .text), (big, .binary),
        ] {
            let echoed = echo(connection, message, opcode: opcode)
            XCTAssertEqual(echoed?.metadata?.opcode, opcode)
            XCTAssertTrue(echoed?.data ?? Data() == message, "\(message.count) bytes")
        }
        connection.sendWebSocket(Data("a".utf8), opcode: .text, isComplete: false)
        connection.sendWebSocket(Data(), opcode: .cont, isComplete: false)
        connection.sendWebSocket(Data("b".utf8), opcode: .cont)
        XCTAssertEqual(receiveWebSocketMessage(connection)?.data, Data("ab".utf8))
    }

    func testACompressedMessageInflatingOverTheMaximumClosesWith1009() throws {
        let listener = try echoListener { $0.maximumMessageSize = 1 << 20 }
        let connection = try client(listener) { $0.setAdditionalHeaders(Self.deflateOffer) }
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        XCTAssertEqual(echo(connection, Data(count: 1 << 20), opcode: .binary)?.data?.count, 1 << 20)
        // 64 MiB of zeros: about 64 KiB on the wire, stopped at the listener's 1 MiB.
        connection.sendWebSocket(Data(count: 64 << 20), opcode: .binary)
        let close = receiveWebSocketMessage(connection, timeout: 20)
        XCTAssertEqual(close?.metadata?.opcode, .close)
        XCTAssertEqual(close?.metadata?.closeCode, .protocolCode(.messageTooBig))
    }

    func testAnExtensionTheClientDidNotOfferFailsTheHandshake() throws {
        let listener = try echoListener { options in
            options.setClientRequestHandler(self.serverQueue) { _, _ in
                NWProtocolWebSocket.Response(
                    status: .accept, subprotocol: nil, additionalHeaders: [("Sec-WebSocket-Extensions", "permessage-deflate")])
            }
        }
        XCTAssertEqual(startAndSettleOrWait(try client(listener), on: queue), .waiting(.posix(.ECONNABORTED)))
    }

    // MARK: TLS

    private func identity(_ archivePath: String) throws -> sec_identity_t {
        var items: CFArray?
        let archive = try Data(contentsOf: URL(fileURLWithPath: archivePath))
        let options = [kSecImportExportPassphrase as String: TestPKI.pkcs12Password] as CFDictionary
        XCTAssertEqual(SecPKCS12Import(archive as CFData, options, &items), errSecSuccess)
        let item = try XCTUnwrap((items as? [[String: Any]])?.first)
        let secIdentity = try XCTUnwrap(item[kSecImportItemIdentity as String] as? SecIdentity)
        return try XCTUnwrap(sec_identity_create(secIdentity))
    }

    func testOverTLSWithTheTestPKI() throws {
        let serverTLS = NWProtocolTLS.Options()
        sec_protocol_options_set_local_identity(serverTLS.securityProtocolOptions, try identity(try pki.serverPKCS12))
        let listener = try echoListener(NWParameters(tls: serverTLS))
        let der = try runCommand("openssl", ["x509", "-in", try pki.caCertificate, "-outform", "DER"]).stdout
        let anchor = try XCTUnwrap(SecCertificateCreateWithData(nil, der as CFData))
        let clientTLS = NWProtocolTLS.Options()
        sec_protocol_options_set_verify_block(
            clientTLS.securityProtocolOptions,
            { _, trust, complete in
                let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
                SecTrustSetAnchorCertificates(secTrust, [anchor] as CFArray)
                SecTrustSetAnchorCertificatesOnly(secTrust, true)
                complete(SecTrustEvaluateWithError(secTrust, nil))
            }, queue)
        let connection = try client(listener, NWParameters(tls: clientTLS), scheme: "wss")
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)
        XCTAssertEqual(echo(connection, Data("secure".utf8), opcode: .text)?.data, Data("secure".utf8))
        let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0) })
        XCTAssertTrue(echo(connection, big, opcode: .binary)?.data == big)
    }
}
