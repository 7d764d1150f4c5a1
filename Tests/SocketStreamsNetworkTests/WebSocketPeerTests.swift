// NWProtocolWebSocket against an independent implementation, Debian's Python `websockets` 10.4
// (python3-websockets, which Scripts/test installs): our client against its server, its client against
// our NWListener. The Python side prints its port (or its results) when it is ready, each line in one
// write (print's arguments are written one by one): the pattern waits for the line's end; nothing sleeps.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import TestPeers
import XCTest

final class WebSocketPeerTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "WebSocketPeerTests")

    /// Debian's python3, which has python3-websockets; the test fails (never skips) without it.
    private func python() throws -> String {
        let python =
            FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : try Peer.locate("python3", hint: "")
        let check = try runCommand(python, ["-c", "import websockets; print(websockets.version.version)"])
        XCTAssertEqual(check.status, 0, "python3-websockets is missing (Scripts/test installs it): \(check.stderr)")
        return python
    }

    /// Writes `source` to a temporary script and returns its path.
    private func script(_ source: String) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("ws-peer-\(UUID().uuidString).py")
        try Data(source.utf8).write(to: url)
        addCleanup { try? FileManager.default.removeItem(at: url) }
        return url.path
    }

    private static let echoServer = """
        import asyncio, websockets

        async def echo(ws):
            try:
                async for message in ws:
                    await ws.send(message)
            except websockets.ConnectionClosed:
                pass

        async def main():
            async with websockets.serve(echo, "127.0.0.1", 0, max_size=None) as server:
                print("LISTENING %d" % server.sockets[0].getsockname()[1], flush=True)
                await asyncio.Future()

        asyncio.run(main())
        """

    func testOurClientAgainstAPythonWebsocketsServer() throws {
        let peer = Peer(name: "python websockets server", executable: try python(), arguments: ["-u", try script(Self.echoServer)])
        addCleanup { peer.stop() }
        let port = try XCTUnwrap(Int(try peer.start(readyPattern: #"^LISTENING (\d+)\n"#)))
        let url = try XCTUnwrap(URL(string: "ws://127.0.0.1:\(port)/chat?room=1"))
        let connection = NWConnection(to: .url(url), using: webSocketParameters())
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)

        connection.sendWebSocket(Data("héllo".utf8), opcode: .text)
        let text = receiveWebSocketMessage(connection)
        XCTAssertEqual(text?.metadata?.opcode, .text)
        XCTAssertEqual(text?.data, Data("héllo".utf8))

        let big = Data((0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        connection.sendWebSocket(big, opcode: .binary)
        let binary = receiveWebSocketMessage(connection, timeout: 20)
        XCTAssertEqual(binary?.metadata?.opcode, .binary)
        XCTAssertTrue(binary?.data == big)

        connection.sendWebSocket(Data("in ".utf8), opcode: .text, isComplete: false)
        connection.sendWebSocket(Data("parts".utf8), opcode: .text)
        XCTAssertEqual(receiveWebSocketMessage(connection)?.data, Data("in parts".utf8), "websockets reassembles our fragments")

        let ponged = expectation(description: "pong")
        let ping = NWProtocolWebSocket.Metadata(opcode: .ping)
        ping.setPongHandler(queue) { error in
            XCTAssertNil(error)
            ponged.fulfill()
        }
        connection.sendWebSocket(Data("are you there".utf8), opcode: .ping, metadata: ping)
        wait(for: [ponged], timeout: shortTimeout)

        let close = NWProtocolWebSocket.Metadata(opcode: .close)
        close.closeCode = .applicationCode(3003)
        connection.sendWebSocket(Data("done".utf8), opcode: .close, metadata: close)
        let echoed = receiveWebSocketMessage(connection)
        XCTAssertEqual(echoed?.metadata?.opcode, .close)
        XCTAssertEqual(echoed?.metadata?.closeCode, .applicationCode(3003))
        let end = receiveWebSocketMessage(connection)
        XCTAssertEqual(end?.isComplete, true, "the server closes TCP after the close handshake")
        XCTAssertNil(end?.data)
    }

    private static let client = """
        import asyncio, sys, websockets

        async def main():
            uri = "ws://127.0.0.1:%s/py?x=1" % sys.argv[1]
            async with websockets.connect(uri, max_size=None, subprotocols=["v1", "v2"], extra_headers={"X-Peer": "python"}) as ws:
                results = ["subprotocol=%s" % ws.subprotocol]
                await ws.send("héllo")
                results.append("text=%s" % (await ws.recv() == "héllo"))
                big = bytes(range(256)) * 8192
                await ws.send(big)
                results.append("binary=%s" % (await ws.recv() == big))
                await ws.send(["frag", "men", "ted"])
                results.append("fragments=%s" % (await ws.recv() == "fragmented"))
                pong = await ws.ping(b"ping?")
                await asyncio.wait_for(pong, 5)
                results.append("pong=True")
                await ws.close(code=4001, reason="done")
                results.append("close=%s" % ws.close_code)
            print("RESULTS " + " ".join(results), flush=True)

        asyncio.run(main())
        """

    func testAPythonWebsocketsClientAgainstOurListener() throws {
        let closes = Locked<[NWProtocolWebSocket.CloseCode]>([])
        let requests = Locked<[String]>([])
        let serverQueue = DispatchQueue(label: "WebSocketPeerTests.server")
        let parameters = webSocketParameters { options in
            options.autoReplyPing = true
            options.setClientRequestHandler(serverQueue) { subprotocols, headers in
                requests.mutate { $0.append(subprotocols.joined(separator: ",")) }
                requests.mutate { $0 += headers.filter { $0.name == "X-Peer" }.map(\.value) }
                return NWProtocolWebSocket.Response(status: .accept, subprotocol: subprotocols.last)
            }
        }
        let listener = try NWListener(using: parameters, on: .any)
        listener.newConnectionHandler = { incoming in
            incoming.start(queue: serverQueue)
            incoming.echoWebSocketMessages(closes: closes)
        }
        startAndAwaitReady(listener, on: queue)

        let port = try XCTUnwrap(listener.port).rawValue
        let peer = Peer(name: "python websockets client", executable: try python(), arguments: ["-u", try script(Self.client), "\(port)"])
        addCleanup { peer.stop() }
        let results = try peer.start(readyPattern: #"^RESULTS (.*)\n"#, timeout: 30)
        XCTAssertEqual(results, "subprotocol=v2 text=True binary=True fragments=True pong=True close=4001")
        XCTAssertEqual(requests.value, ["v1,v2", "python"])
        XCTAssertEqual(closes.value, [.privateCode(4001)])
    }
}

/// permessage-deflate against Python `websockets`, which negotiates it by default as a server and as a
/// client: each side reports the extension it agreed to, and messages of several sizes round-trip.
extension WebSocketPeerTests {
    private static let deflateServer = """
        import asyncio, sys, websockets
        from websockets.extensions import permessage_deflate

        # Counts the compressed (RSV1) frames received: our client's messages were compressed.
        compressed = [0]
        decode = permessage_deflate.PerMessageDeflate.decode
        def counting(self, frame, **kwargs):
            compressed[0] += 1 if frame.rsv1 else 0
            return decode(self, frame, **kwargs)
        permessage_deflate.PerMessageDeflate.decode = counting

        async def echo(ws):
            try:
                async for message in ws:
                    if message == "compressed?":
                        await ws.send("%d" % compressed[0])
                    elif message == "extensions?":
                        await ws.send(";".join("%s %r" % (e.name, sorted(vars(e).items())) for e in ws.extensions))
                    else:
                        await ws.send(message)
            except websockets.ConnectionClosed:
                pass

        async def main():
            if sys.argv[1] == "limited":
                factory = permessage_deflate.ServerPerMessageDeflateFactory(
                    server_no_context_takeover=True, client_no_context_takeover=True,
                    server_max_window_bits=10, client_max_window_bits=9)
                extensions = [factory]
            else:
                extensions = None
            async with websockets.serve(echo, "127.0.0.1", 0, max_size=None, extensions=extensions) as server:
                print("LISTENING %d" % server.sockets[0].getsockname()[1], flush=True)
                await asyncio.Future()

        asyncio.run(main())
        """

    private func runOurDeflateClient(serverMode: String) throws -> String {
        let peer = Peer(
            name: "python websockets server (\(serverMode))", executable: try python(),
            arguments: ["-u", try script(Self.deflateServer), serverMode])
        addCleanup { peer.stop() }
        let port = try XCTUnwrap(Int(try peer.start(readyPattern: #"^LISTENING (\d+)\n"#)))
        let url = try XCTUnwrap(URL(string: "ws://127.0.0.1:\(port)/"))
        let parameters = webSocketParameters { options in
            options.setAdditionalHeaders([("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")])
        }
        let connection = NWConnection(to: .url(url), using: parameters)
        XCTAssertEqual(startAndSettle(connection, on: queue, timeout: shortTimeout).last, .ready)

        connection.sendWebSocket(Data("extensions?".utf8), opcode: .text)
        let extensions = String(decoding: receiveWebSocketMessage(connection)?.data ?? Data(), as: UTF8.self)
        let text = Data(String(repeating: "héllo, compressed world ", count: 500).utf8)
        let random = Data((0..<70_000).map { _ in UInt8.random(in: 0...255) })
        let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 7) ^ ($0 >> 12)) })
        for (message, opcode) in [
            (Data("x".utf8), NWProtocolWebSocket.Opcode.text), (Data(), .binary), (text, .text), (text, .text), (random, .binary),
            (big, .binary), (big, .binary),
        ] {
            connection.sendWebSocket(message, opcode: opcode)
            let echoed = receiveWebSocketMessage(connection, timeout: 20)
            XCTAssertEqual(echoed?.metadata?.opcode, opcode)
            XCTAssertTrue(echoed?.data ?? Data() == message, "\(message.count) bytes")
        }
        connection.sendWebSocket(Data("in ".utf8), opcode: .text, isComplete: false)
        connection.sendWebSocket(Data("compressed ".utf8), opcode: .cont, isComplete: false)
        connection.sendWebSocket(Data("parts".utf8), opcode: .cont)
        XCTAssertEqual(receiveWebSocketMessage(connection)?.data, Data("in compressed parts".utf8))
        // Every message after "extensions?" was compressed, that one too (9 in all), and "compressed?".
        connection.sendWebSocket(Data("compressed?".utf8), opcode: .text)
        XCTAssertEqual(receiveWebSocketMessage(connection)?.data, Data("10".utf8))
        let close = NWProtocolWebSocket.Metadata(opcode: .close)
        close.closeCode = .protocolCode(.normalClosure)
        connection.sendWebSocket(Data(), opcode: .close, metadata: close)
        XCTAssertEqual(receiveWebSocketMessage(connection)?.metadata?.closeCode, .protocolCode(.normalClosure))
        connection.cancel()
        return extensions
    }

    func testOurDeflateClientAgainstAPythonWebsocketsServer() throws {
        let extensions = try runOurDeflateClient(serverMode: "default")
        XCTAssertTrue(extensions.hasPrefix("permessage-deflate "), extensions)
        XCTAssertTrue(extensions.contains("('local_no_context_takeover', False)"), extensions)
    }

    func testOurDeflateClientAgainstAServerThatLimitsEverything() throws {
        let extensions = try runOurDeflateClient(serverMode: "limited")
        XCTAssertTrue(extensions.hasPrefix("permessage-deflate "), extensions)
        XCTAssertTrue(extensions.contains("('local_no_context_takeover', True)"), extensions)
        XCTAssertTrue(extensions.contains("('remote_no_context_takeover', True)"), extensions)
        XCTAssertTrue(extensions.contains("('remote_max_window_bits', 9)"), extensions)
    }

    private static let deflateClient = """
        import asyncio, sys, websockets
        from websockets.extensions import permessage_deflate

        async def main():
            uri = "ws://127.0.0.1:%s/" % sys.argv[1]
            if sys.argv[2] == "limited":
                extensions = [permessage_deflate.ClientPerMessageDeflateFactory(
                    server_no_context_takeover=True, client_no_context_takeover=True,
                    server_max_window_bits=9, client_max_window_bits=11)]
            else:
                extensions = None
            compressed = [0]
            decode = permessage_deflate.PerMessageDeflate.decode
            def counting(self, frame, **kwargs):
                compressed[0] += 1 if frame.rsv1 else 0
                return decode(self, frame, **kwargs)
            permessage_deflate.PerMessageDeflate.decode = counting
            async with websockets.connect(uri, max_size=None, extensions=extensions) as ws:
                results = ["header=%s" % ws.response_headers.get("Sec-WebSocket-Extensions")]
                results.append("extensions=%s" % ",".join(e.name for e in ws.extensions))
                ok = True
                text = "héllo " * 3000
                for message in ["x", "", b"", text, text, bytes(range(256)) * 4096, bytes(range(256)) * 4096, b"\\x00" * 3000000]:
                    await ws.send(message)
                    ok = ok and (await ws.recv() == message)
                results.append("messages=%s" % ok)
                await ws.send(["frag", "men", "ted"])
                results.append("fragments=%s" % (await ws.recv() == "fragmented"))
                results.append("compressed=%d" % compressed[0])
                await ws.close(code=1000)
            print("RESULTS " + " ".join(results), flush=True)

        asyncio.run(main())
        """

    private func runPythonDeflateClient(_ mode: String) throws -> String {
        let serverQueue = DispatchQueue(label: "WebSocketPeerTests.deflate")
        let listener = try NWListener(using: webSocketParameters(), on: .any)
        listener.newConnectionHandler = { incoming in
            incoming.start(queue: serverQueue)
            incoming.echoWebSocketMessages()
        }
        startAndAwaitReady(listener, on: queue)
        let port = try XCTUnwrap(listener.port).rawValue
        let peer = Peer(
            name: "python websockets deflate client", executable: try python(),
            arguments: ["-u", try script(Self.deflateClient), "\(port)", mode])
        addCleanup { peer.stop() }
        return try peer.start(readyPattern: #"^RESULTS (.*)\n"#, timeout: 60)
    }

    func testAPythonWebsocketsDeflateClientAgainstOurListener() throws {
        XCTAssertEqual(
            try runPythonDeflateClient("default"),
            "header=permessage-deflate extensions=permessage-deflate messages=True fragments=True compressed=9")
    }

    func testAPythonDeflateClientLimitingEverythingAgainstOurListener() throws {
        XCTAssertEqual(
            try runPythonDeflateClient("limited"),
            "header=permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9;"
                + " client_max_window_bits=11 extensions=permessage-deflate messages=True fragments=True compressed=9")
    }
}
