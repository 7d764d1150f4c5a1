// WebSocket's protocol errors on real connections: a raw TCP peer (an NWConnection or NWListener without
// WebSocket, writing the frames itself) breaks the protocol, and the WebSocket side closes with the code
// RFC 6455 gives the violation, then fails with its error.

import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

final class WebSocketProtocolErrorTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "WebSocketProtocolErrorTests")

    /// Everything `connection` receives until the peer's end.
    private static func readToEnd(_ connection: NWConnection, into bytes: Locked<Data>, done: XCTestExpectation) {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, _, isComplete, error in
            if let data { bytes.mutate { $0.append(data) } }
            if isComplete || error != nil { return done.fulfill() }
            Self.readToEnd(connection, into: bytes, done: done)
        }
    }

    /// The frames after the HTTP head in `bytes`.
    private func frames(after bytes: Data, peerIsClient: Bool) -> [WebSocketFrameParser.Event] {
        let length = bytes.withUnsafeBytes { WebSocketHandshake.headLength(in: $0) } ?? 0
        var parser = WebSocketFrameParser(peerIsClient: peerIsClient)
        return bytes.dropFirst(length).withUnsafeBytes { parser.parse($0).events }
    }

    private func closeCode(_ events: [WebSocketFrameParser.Event]) -> UInt16? {
        for case .control(WebSocketFrame.close, let payload) in events where payload.count >= 2 {
            return UInt16(payload[payload.startIndex]) << 8 | UInt16(payload[payload.startIndex + 1])
        }
        return nil
    }

    /// A raw TCP server that answers the handshake with a valid 101 followed by `frame`, and records what
    /// the client sends until its end.
    private func rawServer(sending frame: Data, received: Locked<Data>, done: XCTestExpectation) throws -> NWListener {
        let listener = try NWListener(using: .tcp, on: .any)
        listener.newConnectionHandler = { [queue] incoming in
            incoming.start(queue: queue)
            incoming.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, _, _, _ in
                guard let data, let head = WebSocketHandshake.parseHead(data), let request = WebSocketHandshake.check(request: head) else {
                    return XCTFail("no handshake request")
                }
                let response = WebSocketHandshake.response(key: request.key, subprotocol: nil, additionalHeaders: [])
                incoming.send(content: response + frame, completion: .idempotent)
                Self.readToEnd(incoming, into: received, done: done)
            }
        }
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        return listener
    }

    private func webSocketClient(_ port: NWEndpoint.Port) -> NWConnection {
        let parameters = NWParameters.tcp
        parameters.defaultProtocolStack.applicationProtocols.insert(NWProtocolWebSocket.Options(), at: 0)
        return NWConnection(host: "127.0.0.1", port: port, using: parameters)
    }

    /// Starts `connection` and waits for `.failed`; returns its error.
    private func startUntilFailed(_ connection: NWConnection) -> NWError? {
        let failed = expectation(description: "failed")
        let error = Locked<NWError?>(nil)
        connection.stateUpdateHandler = { state in
            if case .failed(let reason) = state {
                error.value = reason
                failed.fulfill()
            }
        }
        connection.start(queue: queue)
        addCleanup { connection.cancel() }
        wait(for: [failed], timeout: shortTimeout)
        return error.value
    }

    func testAClientClosesWith1002OnAMaskedServerFrame() throws {
        let received = Locked(Data())
        let done = expectation(description: "client's end")
        let masked = WebSocketFrame.encode(opcode: WebSocketFrame.text, payload: Array("hi".utf8), mask: [1, 2, 3, 4])
        let listener = try rawServer(sending: masked, received: received, done: done)
        let connection = webSocketClient(try XCTUnwrap(listener.port))
        XCTAssertEqual(startUntilFailed(connection), .posix(.EPROTO))
        wait(for: [done], timeout: shortTimeout)
        XCTAssertEqual(closeCode(frames(after: received.value, peerIsClient: true)), 1002)
    }

    func testAClientClosesWith1007OnTextThatIsNotUTF8() throws {
        let received = Locked(Data())
        let done = expectation(description: "client's end")
        let listener = try rawServer(
            sending: WebSocketFrame.encode(opcode: WebSocketFrame.text, payload: [0xC3, 0x28]), received: received, done: done)
        let connection = webSocketClient(try XCTUnwrap(listener.port))
        XCTAssertEqual(startUntilFailed(connection), .posix(.EPROTO))
        wait(for: [done], timeout: shortTimeout)
        XCTAssertEqual(closeCode(frames(after: received.value, peerIsClient: true)), 1007)
    }

    /// A raw client's request and then `frame`, to a WebSocket listener; returns what the server sent
    /// until its end and the error its connection failed with.
    private func sendToServer(_ frame: Data) throws -> (Data, NWError?) {
        let parameters = NWParameters.tcp
        parameters.defaultProtocolStack.applicationProtocols.insert(NWProtocolWebSocket.Options(), at: 0)
        let listener = try NWListener(using: parameters, on: .any)
        let serverError = Locked<NWError?>(nil)
        let serverFailed = expectation(description: "server failed")
        listener.newConnectionHandler = { [queue] incoming in
            incoming.stateUpdateHandler = { state in
                if case .failed(let error) = state {
                    serverError.value = error
                    serverFailed.fulfill()
                }
            }
            incoming.start(queue: queue)
        }
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)

        let raw = NWConnection(host: "127.0.0.1", port: try XCTUnwrap(listener.port), using: .tcp)
        XCTAssertEqual(startAndSettle(raw, on: queue, timeout: shortTimeout).last, .ready)
        let key = WebSocketHandshake.randomKey()
        let request = WebSocketHandshake.request(host: "localhost", path: "/", key: key, subprotocols: [], additionalHeaders: [])
        raw.send(content: request + frame, completion: .idempotent)
        let received = Locked(Data())
        let done = expectation(description: "server's end")
        Self.readToEnd(raw, into: received, done: done)
        wait(for: [done, serverFailed], timeout: shortTimeout)
        return (received.value, serverError.value)
    }

    func testAServerClosesWith1002OnAnUnmaskedClientFrame() throws {
        let (received, error) = try sendToServer(WebSocketFrame.encode(opcode: WebSocketFrame.binary, payload: [1, 2, 3]))
        XCTAssertTrue(String(decoding: received.prefix(12), as: UTF8.self).hasPrefix("HTTP/1.1 101"))
        XCTAssertEqual(closeCode(frames(after: received, peerIsClient: false)), 1002)
        XCTAssertEqual(error, .posix(.EPROTO))
    }

    func testAServerClosesWith1002OnAFragmentedPing() throws {
        let ping = WebSocketFrame.encode(opcode: WebSocketFrame.ping, fin: false, payload: [1], mask: [9, 8, 7, 6])
        let (received, error) = try sendToServer(ping)
        XCTAssertEqual(closeCode(frames(after: received, peerIsClient: false)), 1002)
        XCTAssertEqual(error, .posix(.EPROTO))
    }

    func testAServerClosesWith1009OverItsMaximumMessageSizeAcross64BitLengths() throws {
        // A binary frame announcing 2^32 bytes: refused from its header, before any payload.
        var frame = Data([0x82, 0x80 | 127, 0, 0, 0, 1, 0, 0, 0, 0])
        frame.append(contentsOf: [1, 2, 3, 4])
        let parameters = NWParameters.tcp
        let options = NWProtocolWebSocket.Options()
        options.maximumMessageSize = 1 << 20
        parameters.defaultProtocolStack.applicationProtocols.insert(options, at: 0)
        let listener = try NWListener(using: parameters, on: .any)
        listener.newConnectionHandler = { [queue] incoming in incoming.start(queue: queue) }
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        let raw = NWConnection(host: "127.0.0.1", port: try XCTUnwrap(listener.port), using: .tcp)
        XCTAssertEqual(startAndSettle(raw, on: queue, timeout: shortTimeout).last, .ready)
        let request = WebSocketHandshake.request(
            host: "localhost", path: "/", key: WebSocketHandshake.randomKey(), subprotocols: [], additionalHeaders: [])
        raw.send(content: request + frame, completion: .idempotent)
        let received = Locked(Data())
        let done = expectation(description: "server's end")
        Self.readToEnd(raw, into: received, done: done)
        wait(for: [done], timeout: shortTimeout)
        XCTAssertEqual(closeCode(frames(after: received.value, peerIsClient: false)), 1009)
    }
}
