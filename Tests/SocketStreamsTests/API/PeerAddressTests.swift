#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Accepted connections know their peer (issue 21, finding 6): an accepted `QueuedSocket`'s
/// `connectedHost`/`connectedPort` (already in `didAcceptNewSocket`), `localHost`/`localPort` on
/// connected sockets, "already connected" errors, and an accepted TLS pair's errors naming the peer.
final class PeerAddressTests: SocketStreamsTestCase {
    func testAcceptedQueuedSocketKnowsItsPeerInTheAcceptCallback() throws {
        for family in [IPFamily.v4, .v6] {
            let loopback = family == .v4 ? "127.0.0.1" : "::1"
            let recorder = QueuedRecorder()
            let seen = Guarded<(host: String?, port: Int, localHost: String?, localPort: Int)?>(nil)
            let acceptedOne = DispatchSemaphore(value: 0)
            recorder.onAccept = { socket in
                seen.withLock { $0 = (socket.connectedHost, socket.connectedPort, socket.localHost, socket.localPort) }
                acceptedOne.signal()
            }
            let server = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "server"))
            addCleanup { server.disconnect() }
            try server.accept(onInterface: loopback, port: 0)
            XCTAssertNotEqual(server.localPort, 0)
            XCTAssertEqual(server.localHost, loopback)
            XCTAssertNil(server.connectedHost, "a listener is connected to nobody")

            let client = try RawSocket.connectTo(family: family, port: server.localPort)
            defer { close(client) }
            XCTAssertEqual(acceptedOne.wait(timeout: .now() + shortTimeout), .success, "\(recorder.log)")
            let clientPort = RawSocket.boundPort(client)
            let values = try XCTUnwrap(seen.withLock { $0 })
            XCTAssertEqual(values.host, loopback)
            XCTAssertEqual(values.port, clientPort)
            XCTAssertEqual(values.localHost, loopback)
            XCTAssertEqual(values.localPort, server.localPort)
            let accepted = try XCTUnwrap(recorder.accepted.first)
            let streams = try XCTUnwrap(accepted.streams)
            XCTAssertEqual(
                streams.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemoteHostName as String)) as? String, loopback)
            XCTAssertEqual(
                (streams.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemotePortNumber as String)) as? NSNumber)?
                    .intValue, clientPort)
            XCTAssertNil(server.streams, "a listener has no pair")
            accepted.disconnect()
        }
    }

    /// A connecting socket's own address is its socket's (`getsockname`), as the server sees it.
    func testConnectedQueuedSocketKnowsItsLocalAddress() throws {
        let listener = try RawSocket.listener(family: .v4)
        defer { close(listener) }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "client"))
        XCTAssertNil(socket.localHost)
        XCTAssertEqual(socket.localPort, 0)
        try socket.connect(toHost: "127.0.0.1", onPort: RawSocket.boundPort(listener))
        XCTAssertTrue(recorder.waitFor("connect"), "\(recorder.log)")
        let server = try XCTUnwrap(try RawSocket.accept(listener, timeout: shortTimeout))
        defer { close(server) }
        XCTAssertEqual(socket.localHost, "127.0.0.1")
        XCTAssertEqual(socket.localPort, RawSocket.peerPort(server))
        XCTAssertEqual(socket.connectedHost, "127.0.0.1")
        XCTAssertEqual(socket.connectedPort, RawSocket.boundPort(listener))
        XCTAssertNil(socket.tlsInfo, "no TLS")
        socket.disconnect()
        XCTAssertTrue(recorder.wait { $0.contains { $0.hasPrefix("disconnect") } })
        XCTAssertEqual(socket.localPort, 0, "closed: no socket")
    }

    /// Connecting or accepting again: GCDAsyncSocket's "already connected" refusal, not "closed";
    /// after a disconnect, "closed" (a socket connects once). The refused attempt dials nothing.
    func testConnectingOrAcceptingTwiceSaysAlreadyConnected() throws {
        let server = try startStreamEchoServer()
        let other = try RawSocket.listener(family: .v4)
        defer { close(other) }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "twice"))
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertThrowsError(try socket.connect(toHost: "127.0.0.1", onPort: RawSocket.boundPort(other))) {
            XCTAssertEqual($0 as? StreamOperationError, .alreadyConnected)
            XCTAssertEqual(($0 as NSError).code, 8)
            XCTAssertEqual(
                $0.localizedDescription, "Attempting to connect while connected or accepting connections. Disconnect first.")
        }
        XCTAssertThrowsError(try socket.accept(onInterface: "127.0.0.1", port: 0)) {
            XCTAssertEqual($0 as? StreamOperationError, .alreadyConnected)
        }
        XCTAssertTrue(recorder.waitFor("connect"))
        XCTAssertNil(try RawSocket.accept(other, timeout: 0.2), "the refused connect dialled")
        socket.disconnect()
        XCTAssertTrue(recorder.wait { $0.contains { $0.hasPrefix("disconnect") } }, "\(recorder.log)")
        XCTAssertThrowsError(try socket.connect(toHost: "127.0.0.1", onPort: server.port)) {
            XCTAssertEqual($0 as? StreamOperationError, .closed)
        }

        let listening = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "listening"))
        try listening.accept(onInterface: "127.0.0.1", port: 0)
        for attempt in [
            { try listening.accept(onInterface: "127.0.0.1", port: 0) },
            { try listening.connect(toHost: "127.0.0.1", onPort: server.port) },
        ] {
            XCTAssertThrowsError(try attempt()) { XCTAssertEqual($0 as? StreamOperationError, .alreadyConnected) }
        }
        listening.disconnect()
        XCTAssertEqual(server.acceptedCount, 1, "only the first connect reached the server")
    }

    /// A TLS server pair from `StreamListener` names its peer in its errors ("127.0.0.1:54321"),
    /// not "native socket 18": here a plain-text client makes the handshake fail.
    func testTLSServerPairErrorsNameThePeer() throws {
        let pki = try self.pki
        let settings = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        let failure = Guarded<NSError?>(nil)
        let done = DispatchSemaphore(value: 0)
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let host = ListenerHost(listener) { pair in
            _ = pair.input.setProperty(settings, forKey: .tlsSettingsKey)
            pair.input.open()
            pair.output.open()
            var buffer = [UInt8](repeating: 0, count: 16)
            _ = pair.input.read(&buffer, maxLength: buffer.count)  // blocks through the handshake
            failure.withLock { $0 = pair.input.streamError as NSError? }
            pair.input.close()
            pair.output.close()
            done.signal()
        }
        addCleanup { host.stop() }
        let client = try RawSocket.connectTo(family: .v4, port: listener.port)
        defer { close(client) }
        try RawSocket.writeAll(client, Data("GET / HTTP/1.0\r\n\r\n".utf8))
        XCTAssertEqual(done.wait(timeout: .now() + shortTimeout), .success)
        let error = try XCTUnwrap(failure.withLock { $0 })
        let message = error.localizedDescription
        XCTAssertTrue(message.contains("127.0.0.1:\(RawSocket.boundPort(client))"), message)
        XCTAssertFalse(message.contains("native socket"), message)
    }

    /// Only pairs the package accepted carry a peer; a pair over a caller's own socket names the fd,
    /// and has no remote host or port, as CFNetwork's.
    func testNativeSocketPairStillNamesItsFd() throws {
        let (a, b) = try RawSocket.connectedTCPPair()
        defer { close(b) }
        let pair = createStreamPair(nativeSocket: a)
        XCTAssertTrue(pair.input.setProperty(true, forKey: Stream.PropertyKey(kCFStreamPropertyShouldCloseNativeSocket as String)))
        XCTAssertNil(pair.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemoteHostName as String)))
        XCTAssertNil(pair.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemotePortNumber as String)))
        XCTAssertEqual(MemoryLayout<Endpoint>.size, 25, "the peer made every Connection bigger")
        XCTAssertEqual(Endpoint.native(fd: a).label, "native socket \(a)")
        XCTAssertEqual(Endpoint.native(fd: a, peer: PeerAddress(try Posix.peerAddress(a))).label, "127.0.0.1:\(RawSocket.peerPort(a))")
        pair.input.close()
        pair.output.close()
    }
}
