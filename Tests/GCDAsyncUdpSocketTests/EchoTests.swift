import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// GCDAsyncUdpSocket code as it is written on Apple platforms (only `import CocoaAsyncSocket`),
/// exchanging datagrams with GCDAsyncUdpSocket itself, socat and python, over IPv4 and IPv6 loopback.
final class EchoTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    func testEchoClientAndServer() throws {
        let (server, serverRecorder) = try echoServer(on: "127.0.0.1")
        XCTAssertEqual(server.localHost(), "127.0.0.1")
        XCTAssertFalse(server.isConnected())
        let recorder = Recorder()
        let client = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try client.bind(toPort: 0, interface: "127.0.0.1")
        try client.beginReceiving()
        XCTAssertNotEqual(client.localPort(), 0)
        XCTAssertNotEqual(client.localPort(), server.localPort())

        let count = 20
        for tag in 1...count {
            client.send(Data("datagram \(tag)".utf8), toHost: "127.0.0.1", port: server.localPort(), withTimeout: 5, tag: tag)
        }
        guard recorder.wait(for: "receive", count: count), recorder.wait(for: "sent", count: count) else { return }
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("sent") }, (1...count).map { "sent \($0)" })
        // Loopback keeps the order in practice, but nothing promises it: compared as sets.
        XCTAssertEqual(Set(recorder.received.map(\.text)), Set((1...count).map { "datagram \($0)" }))
        for datagram in recorder.received {
            XCTAssertEqual(datagram.host, "127.0.0.1")
            XCTAssertEqual(datagram.port, server.localPort())
            XCTAssertEqual(datagram.address.count, MemoryLayout<sockaddr_in>.size)
            XCTAssertNil(datagram.context, "no receive filter, no context")
        }
        // The server saw the client's own address, and every echo it sent was reported.
        XCTAssertEqual(serverRecorder.received.count, count)
        for datagram in serverRecorder.received {
            XCTAssertEqual(datagram.host, "127.0.0.1")
            XCTAssertEqual(datagram.port, client.localPort())
        }
        serverRecorder.wait(for: "sent", count: count)
        XCTAssertEqual(recorder.count("close") + serverRecorder.count("close"), 0)

        closeAndWait(client, recorder)
        closeAndWait(server, serverRecorder)
        XCTAssertEqual(recorder.events.last, "close nil")
        XCTAssertEqual(recorder.count("close"), 1)
    }

    /// socat's echo answers from the port it listens on; it talks to the first peer only, and its pipe
    /// may join datagrams that arrive together, so each datagram waits for the previous echo.
    func testPingPongWithSocat() throws {
        let (peer, port) = try Peer.socatUDPEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try client.bind(toPort: 0, interface: "127.0.0.1")
        try client.beginReceiving()
        for round in 1...5 {
            client.send(Data("ping \(round)".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: round)
            guard recorder.wait(for: "receive", count: round) else { return }
        }
        guard recorder.wait(for: "sent", count: 5) else { return }
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("receive") }, (1...5).map { "receive ping \($0) from 127.0.0.1 \(port)" })
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("sent") }, (1...5).map { "sent \($0)" })
        closeAndWait(client, recorder)
    }

    /// python's echo sends each datagram back on its own, so a burst can be queued at once; the
    /// socket's sends are reported in their order, whatever the resolver's timing.
    func testBurstAgainstPython() throws {
        let (peer, port) = try Peer.pythonUDPEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try client.bind(toPort: 0, interface: "127.0.0.1")
        try client.beginReceiving()
        let payloads = (1...50).map { "burst \($0)" }
        for (tag, payload) in payloads.enumerated() {
            client.send(Data(payload.utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: tag)
        }
        guard recorder.wait(for: "receive", count: payloads.count), recorder.wait(for: "sent", count: payloads.count) else { return }
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("sent") }, payloads.indices.map { "sent \($0)" })
        XCTAssertEqual(Set(recorder.received.map(\.text)), Set(payloads))
        XCTAssertEqual(Set(recorder.received.map(\.port)), [port])
        closeAndWait(client, recorder)
    }

    /// Over ::1: a socket bound to it reports it, and exchanges datagrams with socat and python there.
    func testIPv6WithSocatAndPython() throws {
        let recorder = Recorder()
        let client = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try client.bind(toPort: 0, interface: "::1")
        try client.beginReceiving()
        XCTAssertEqual(client.localHost(), "::1")
        XCTAssertNotEqual(client.localPort(), 0)
        XCTAssertEqual(client.localAddress()?.count, MemoryLayout<sockaddr_in6>.size)
        XCTAssertTrue(client.isIPv6())

        let (socat, socatPort) = try Peer.socatUDPEcho(ipv6: true)
        defer { socat.stop() }
        for round in 1...3 {
            client.send(Data("six \(round)".utf8), toHost: "::1", port: socatPort, withTimeout: 5, tag: round)
            guard recorder.wait(for: "receive", count: round) else { return }
        }
        let (python, pythonPort) = try Peer.pythonUDPEcho(host: "::1")
        defer { python.stop() }
        for tag in 4...6 { client.send(Data("python \(tag)".utf8), toHost: "::1", port: pythonPort, withTimeout: 5, tag: tag) }
        guard recorder.wait(for: "receive", count: 6), recorder.wait(for: "sent", count: 6) else { return }
        let received = recorder.received
        XCTAssertEqual(received.prefix(3).map(\.text), ["six 1", "six 2", "six 3"])
        XCTAssertEqual(Set(received.prefix(3).map(\.port)), [socatPort])
        XCTAssertEqual(Set(received.dropFirst(3).map(\.text)), ["python 4", "python 5", "python 6"])
        XCTAssertEqual(Set(received.dropFirst(3).map(\.port)), [pythonPort])
        for datagram in received {
            XCTAssertEqual(datagram.host, "::1")
            XCTAssertEqual(datagram.address.count, MemoryLayout<sockaddr_in6>.size)
        }
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("sent") }, (1...6).map { "sent \($0)" })
        closeAndWait(client, recorder)
    }

    /// 65,507 bytes, the most an IPv4 datagram carries, go out and come back whole and in one piece.
    func testTheLargestIPv4DatagramRoundTripsWhole() throws {
        try roundTrip(on: "127.0.0.1", count: 65_507)
    }

    /// 65,527 bytes, the most an IPv6 datagram carries without a jumbo option, the same.
    func testTheLargestIPv6DatagramRoundTripsWhole() throws {
        try roundTrip(on: "::1", count: 65_527)
    }

    private func roundTrip(on interface: String, count: Int, file: StaticString = #filePath, line: UInt = #line) throws {
        let (server, serverRecorder) = try echoServer(on: interface)
        let recorder = Recorder()
        let client = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try client.bind(toPort: 0, interface: interface)
        try client.beginReceiving()
        let payload = Data((0..<count).map { UInt8(truncatingIfNeeded: $0 % 251) })
        client.send(payload, toHost: interface, port: server.localPort(), withTimeout: 5, tag: 1)
        guard recorder.wait(for: "receive", file: file, line: line), recorder.wait(for: "sent 1", file: file, line: line) else { return }
        XCTAssertEqual(serverRecorder.received.first?.data.count, count, file: file, line: line)
        XCTAssertEqual(recorder.received.count, 1, file: file, line: line)
        XCTAssertEqual(recorder.received.first?.data.count, count, file: file, line: line)
        XCTAssertTrue(recorder.received.first?.data == payload, "the echo differs from what was sent", file: file, line: line)
        closeAndWait(client, recorder, file: file, line: line)
        closeAndWait(server, serverRecorder, file: file, line: line)
    }
}
