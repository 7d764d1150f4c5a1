import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// Sending: by name, to a connected peer, and the failures that cost one datagram and leave the
/// socket open (`udpSocket(_:didNotSendDataWithTag:dueToError:)`, never `udpSocketDidClose`).
final class SendingTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    /// A receiver on 127.0.0.1 and its recorder.
    private func receiver() throws -> (GCDAsyncUdpSocket, Recorder) {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "receiver"))
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        try socket.beginReceiving()
        return (socket, recorder)
    }

    func testConnectedSocketSendsToItsPeerOnly() throws {
        let (peer, port) = try Peer.pythonUDPEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertFalse(socket.isConnected())
        try socket.connect(toHost: "127.0.0.1", onPort: port)
        guard recorder.wait(for: "connect") else { return }
        XCTAssertEqual(recorder.events, ["connect 127.0.0.1 \(port)"])
        XCTAssertTrue(socket.isConnected())
        XCTAssertEqual(socket.connectedPort(), port)
        XCTAssertEqual(socket.connectedHost(), "127.0.0.1")
        XCTAssertNotEqual(socket.localPort(), 0, "a connect binds")

        try socket.beginReceiving()
        socket.send(Data("one".utf8), withTimeout: 5, tag: 1)
        guard recorder.wait(for: "receive one") else { return }
        // A destination on a connected socket fails that datagram only.
        socket.send(Data("two".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: 2)
        guard recorder.wait(for: "not-sent 2") else { return }
        socket.send(Data("three".utf8), withTimeout: 5, tag: 3)
        guard recorder.wait(for: "receive three"), recorder.wait(for: "sent 3") else { return }
        XCTAssertEqual(
            recorder.events.filter { $0.hasPrefix("sent") || $0.hasPrefix("not-sent") },
            ["sent 1", "not-sent 2 \(udpError(.badConfigError))", "sent 3"])
        // python echoes in order: "two", had it gone out, would have come back before "three".
        XCTAssertEqual(recorder.received.map(\.text), ["one", "three"])
        XCTAssertEqual(Set(recorder.received.map(\.port)), [port])
        XCTAssertEqual(recorder.count("close"), 0)
        XCTAssertTrue(socket.isConnected())
        closeAndWait(socket, recorder)
    }

    /// A name that does not resolve fails the connect through the delegate (the call itself returns),
    /// with the resolver's error; the socket can then connect elsewhere.
    func testConnectingToAnUnresolvableNameFailsThenAConnectSucceeds() throws {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "nonexistent.invalid", onPort: 9)
        guard recorder.wait(for: "not-connect", timeout: 30) else { return }
        let event = try XCTUnwrap(recorder.events.first)
        XCTAssertTrue(event.hasPrefix("not-connect \(netDBDomain) "), event)
        XCTAssertNotEqual(event, "not-connect \(netDBDomain) 0")
        XCTAssertFalse(socket.isConnected())

        let (peer, port) = try Peer.pythonUDPEcho()
        defer { peer.stop() }
        try socket.connect(toHost: "127.0.0.1", onPort: port)
        guard recorder.wait(for: "connect 127.0.0.1 \(port)") else { return }
        XCTAssertTrue(socket.isConnected())
        XCTAssertEqual(socket.connectedPort(), port)
        closeAndWait(socket, recorder)
    }

    /// "localhost" resolves (to 127.0.0.1 first); an unresolvable name fails its datagram alone, in
    /// its place among the sends, and the socket goes on sending.
    func testSendingByNameAndToAnUnresolvableName() throws {
        let (receiver, receiverRecorder) = try receiver()
        let port = receiver.localPort()
        let recorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try sender.bind(toPort: 0, interface: "127.0.0.1")
        sender.send(Data("by name".utf8), toHost: "localhost", port: port, withTimeout: 5, tag: 1)
        sender.send(Data("lost".utf8), toHost: "nonexistent.invalid", port: port, withTimeout: 5, tag: 2)
        sender.send(Data("after".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: 3)
        guard recorder.wait(for: "sent 3", timeout: 30), receiverRecorder.wait(for: "receive after") else { return }
        let outcomes = recorder.events.filter { $0.hasPrefix("sent") || $0.hasPrefix("not-sent") }
        XCTAssertEqual(outcomes.count, 3, "\(outcomes)")
        XCTAssertEqual(outcomes.first, "sent 1")
        XCTAssertTrue(outcomes.dropFirst().first?.hasPrefix("not-sent 2 \(netDBDomain) ") == true, "\(outcomes)")
        XCTAssertEqual(outcomes.last, "sent 3")
        XCTAssertEqual(Set(receiverRecorder.received.map(\.text)), ["by name", "after"])
        XCTAssertEqual(Set(receiverRecorder.received.map(\.port)), [sender.localPort()])
        XCTAssertEqual(recorder.count("close"), 0)
        XCTAssertFalse(sender.isClosed())
        closeAndWait(sender, recorder)
        closeAndWait(receiver, receiverRecorder)
    }

    /// `send(_:withTimeout:tag:)` needs a connected socket: without one the datagram has nowhere to
    /// go and fails alone.
    func testSendingWithoutADestinationOnAnUnconnectedSocketFailsThatDatagram() throws {
        let (receiver, receiverRecorder) = try receiver()
        let recorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        sender.send(Data("nowhere".utf8), withTimeout: 5, tag: 1)
        sender.send(Data("somewhere".utf8), toHost: "127.0.0.1", port: receiver.localPort(), withTimeout: 5, tag: 2)
        guard recorder.wait(for: "sent 2"), receiverRecorder.wait(for: "receive somewhere") else { return }
        XCTAssertEqual(recorder.events, ["not-sent 1 \(udpError(.badConfigError))", "sent 2"])
        XCTAssertEqual(receiverRecorder.received.map(\.text), ["somewhere"])
        closeAndWait(sender, recorder)
        closeAndWait(receiver, receiverRecorder)
    }

    /// A datagram larger than UDP carries fails with EMSGSIZE, that datagram only (the header's word:
    /// "such as the data being too large"): the socket stays open and bound where it was.
    func testTooLargeADatagramFailsAloneWithEMSGSIZE() throws {
        let (receiver, receiverRecorder) = try receiver()
        let recorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try sender.bind(toPort: 0, interface: "127.0.0.1")
        let boundPort = sender.localPort()
        XCTAssertNotEqual(boundPort, 0)
        sender.send(Data(repeating: 0x61, count: 70_000), toHost: "127.0.0.1", port: receiver.localPort(), withTimeout: 5, tag: 1)
        sender.send(Data("small".utf8), toHost: "127.0.0.1", port: receiver.localPort(), withTimeout: 5, tag: 2)
        guard recorder.wait(for: "sent 2"), receiverRecorder.wait(for: "receive small") else { return }
        XCTAssertEqual(recorder.events, ["not-sent 1 \(posixError(EMSGSIZE))", "sent 2"])
        XCTAssertEqual(sender.localPort(), boundPort)
        XCTAssertFalse(sender.isClosed())
        XCTAssertEqual(receiverRecorder.received.map(\.text), ["small"])
        XCTAssertEqual(receiverRecorder.received.first?.port, boundPort)
        closeAndWait(sender, recorder)
        closeAndWait(receiver, receiverRecorder)
    }

    /// An unbound socket is bound by its first send: `localPort()` is 0 before, the port the peer saw
    /// after; receiving then works on it without a bind.
    func testTheFirstSendBindsAnUnboundSocket() throws {
        let (receiver, receiverRecorder) = try receiver()
        receiverRecorder.onReceive = { socket, data, address in
            socket.send(Data("reply".utf8), toAddress: address, withTimeout: 5, tag: 9)
        }
        let recorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertEqual(sender.localPort(), 0)
        XCTAssertNil(sender.localHost())
        XCTAssertTrue(sender.isClosed())
        sender.send(Data("first".utf8), toHost: "127.0.0.1", port: receiver.localPort(), withTimeout: 5, tag: 1)
        guard recorder.wait(for: "sent 1"), receiverRecorder.wait(for: "receive first") else { return }
        let port = sender.localPort()
        XCTAssertNotEqual(port, 0)
        XCTAssertFalse(sender.isClosed())
        XCTAssertEqual(receiverRecorder.received.first?.port, port)
        try sender.beginReceiving()  // the reply may already be waiting in the kernel
        guard recorder.wait(for: "receive reply") else { return }
        XCTAssertEqual(recorder.received.first?.port, receiver.localPort())
        closeAndWait(sender, recorder)
        closeAndWait(receiver, receiverRecorder)
    }
}
