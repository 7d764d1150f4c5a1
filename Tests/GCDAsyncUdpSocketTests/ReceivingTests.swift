import CocoaAsyncSocket
import TestPeers
import XCTest

/// Receiving: once or continuously, paused, filtered, and what an empty datagram does (nothing).
final class ReceivingTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    private func boundSocket() throws -> (GCDAsyncUdpSocket, Recorder) {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        return (socket, recorder)
    }

    /// Three datagrams wait in the kernel; each `receiveOnce()` delivers exactly one of them.
    func testReceiveOnceDeliversOneDatagramPerCall() throws {
        let (socket, recorder) = try boundSocket()
        let payloads = ["one", "two", "three"]
        let (peer, _) = try Peer.pythonUDPSender(to: "127.0.0.1", port: socket.localPort(), payloads: payloads)
        defer { peer.stop() }
        for delivered in 1...3 {
            try socket.receiveOnce()
            guard recorder.wait(for: "receive", count: delivered) else { return }
            recorder.expectNoMore("receive", than: delivered)
        }
        XCTAssertEqual(Set(recorder.received.map(\.text)), Set(payloads))
        XCTAssertEqual(recorder.count("close"), 0)
        closeAndWait(socket, recorder)
    }

    /// A socket receiving since its first send (over IPv4) sends to an IPv6 peer: the IPv6 socket that
    /// send makes receives too, so the reply arrives.
    func testASocketMadeWhileReceivingReceivesToo() throws {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        let (v4, port4) = try Peer.pythonUDPEcho(host: "127.0.0.1")
        defer { v4.stop() }
        let (v6, port6) = try Peer.pythonUDPEcho(host: "::1")
        defer { v6.stop() }
        socket.send(Data("four".utf8), toHost: "127.0.0.1", port: port4, withTimeout: 5, tag: 1)
        guard recorder.wait(for: "sent 1") else { return }
        try socket.beginReceiving()
        guard recorder.wait(for: "receive four") else { return }
        socket.send(Data("six".utf8), toHost: "::1", port: port6, withTimeout: 5, tag: 2)
        guard recorder.wait(for: "receive six") else { return }
        XCTAssertTrue(socket.isIPv4() && socket.isIPv6())
        closeAndWait(socket, recorder)
    }

    /// `pauseReceiving()` stops the deliveries; what arrives meanwhile stays in the kernel and is
    /// delivered by the next `beginReceiving()`.
    func testPauseReceivingLeavesDatagramsInTheKernel() throws {
        let (socket, recorder) = try boundSocket()
        try socket.beginReceiving()
        let senderRecorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: senderRecorder, delegateQueue: DispatchQueue(label: "sender"))
        sender.send(Data("before".utf8), toHost: "127.0.0.1", port: socket.localPort(), withTimeout: 5, tag: 1)
        guard recorder.wait(for: "receive before") else { return }

        socket.pauseReceiving()
        sender.send(Data("during 1".utf8), toHost: "127.0.0.1", port: socket.localPort(), withTimeout: 5, tag: 2)
        sender.send(Data("during 2".utf8), toHost: "127.0.0.1", port: socket.localPort(), withTimeout: 5, tag: 3)
        guard senderRecorder.wait(for: "sent 3") else { return }
        recorder.expectNoMore("receive", than: 1)

        try socket.beginReceiving()
        guard recorder.wait(for: "receive", count: 3) else { return }
        XCTAssertEqual(recorder.received.first?.text, "before")
        XCTAssertEqual(Set(recorder.received.dropFirst().map(\.text)), ["during 1", "during 2"])
        closeAndWait(sender, senderRecorder)
        closeAndWait(socket, recorder)
    }

    /// A receive filter drops what it refuses, silently, and what it lets through arrives with the
    /// context it stored.
    func testReceiveFilterDropsDatagramsAndPassesItsContext() throws {
        let (socket, recorder) = try boundSocket()
        socket.setReceiveFilter(
            { data, address, context in
                context.pointee = "ctx" as NSString
                return data.first != 0x78  // "x"
            }, with: DispatchQueue(label: "filter"))
        try socket.beginReceiving()
        let payloads = ["x1", "a1", "x2", "a2", "xx", "a3"]
        let (peer, _) = try Peer.pythonUDPSender(to: "127.0.0.1", port: socket.localPort(), payloads: payloads)
        defer { peer.stop() }
        guard recorder.wait(for: "receive a3") else { return }
        // The refused ones were sent earlier, from the same socket: had one come through, it would be here.
        XCTAssertEqual(Set(recorder.received.map(\.text)), ["a1", "a2", "a3"])
        for datagram in recorder.received {
            XCTAssertEqual(datagram.context.map { "\($0)" }, "ctx")
            XCTAssertEqual(datagram.host, "127.0.0.1")
        }
        XCTAssertEqual(recorder.count("close"), 0)
        closeAndWait(socket, recorder)
    }

    /// An empty datagram is not an end (UDP has none): the socket stays open and the next datagram
    /// arrives. (GCDAsyncUdpSocket drops empty datagrams; whether one is delivered is not asserted.)
    func testAnEmptyDatagramDoesNotCloseTheSocket() throws {
        let (socket, recorder) = try boundSocket()
        try socket.beginReceiving()
        let (peer, _) = try Peer.pythonUDPSender(to: "127.0.0.1", port: socket.localPort(), payloads: ["", "next"])
        defer { peer.stop() }
        guard recorder.wait(for: "receive next") else { return }
        XCTAssertEqual(recorder.count("close"), 0, "\(recorder.events)")
        XCTAssertFalse(socket.isClosed())
        XCTAssertEqual(recorder.received.filter { !$0.data.isEmpty }.map(\.text), ["next"])
        closeAndWait(socket, recorder)
        XCTAssertEqual(recorder.count("close"), 1)
    }

    /// Receiving needs a socket (bound, connected or used to send): before any exists, both calls
    /// refuse.
    func testReceivingBeforeAnySocketExistsIsABadConfiguration() throws {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertThrowsError(try socket.receiveOnce()) { XCTAssertEqual(describe($0), udpError(.badConfigError)) }
        XCTAssertThrowsError(try socket.beginReceiving()) { XCTAssertEqual(describe($0), udpError(.badConfigError)) }
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        XCTAssertNoThrow(try socket.receiveOnce())
        closeAndWait(socket, recorder)
    }
}
