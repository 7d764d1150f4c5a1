import CocoaAsyncSocket
import TestPeers
import XCTest

/// Closing: after the queued sends, or at once from another thread while datagrams flow; either way
/// `udpSocketDidClose` comes once, and last.
final class ClosingTests: XCTestCase {
    /// `closeAfterSending()` lets the queued datagrams go first (each send resolves its host on its
    /// own, so most are still waiting for it when the call is made), then closes, once.
    func testCloseAfterSendingSendsEverythingQueuedThenClosesOnce() throws {
        let (peer, port) = try Peer.pythonUDPReceiver()
        defer { peer.stop() }
        let recorder = Recorder()
        let delegateQueue = DispatchQueue(label: "delegate")
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: delegateQueue)
        let count = 50
        for tag in 0..<count { socket.send(Data("queued \(tag)".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: tag) }
        socket.closeAfterSending()
        guard recorder.wait(for: "close") else { return }
        XCTAssertTrue(
            peer.waitForOutput(containing: "received \(count) ", timeout: 10), "the peer got fewer than \(count): \(peer.printed)")
        XCTAssertEqual(Set(peer.receivedPayloads), Set((0..<count).map { "queued \($0)" }))
        delegateQueue.sync {}  // whatever the socket posted before now has run
        XCTAssertEqual(recorder.events, (0..<count).map { "sent \($0)" } + ["close nil"])
        XCTAssertTrue(socket.isClosed())
    }

    /// `close()` from another thread while both directions carry datagrams (sends queued on the
    /// socket, a peer sending to it): no crash, one `udpSocketDidClose(nil)`, and nothing after it.
    /// Only sends queued before the close: a send after it would reopen the socket, by design.
    func testCloseFromAnotherThreadWhileDatagramsFlowBothWays() throws {
        let payload = Data(repeating: 0x2a, count: 512)
        for iteration in 0..<200 {
            let recorder = Recorder()
            let delegateQueue = DispatchQueue(label: "closing")
            let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: delegateQueue)
            let peerRecorder = Recorder()
            let peer = GCDAsyncUdpSocket(delegate: peerRecorder, delegateQueue: DispatchQueue(label: "peer"))
            try socket.bind(toPort: 0, interface: "127.0.0.1")
            try socket.beginReceiving()
            try peer.bind(toPort: 0, interface: "127.0.0.1")
            try peer.beginReceiving()
            let socketAddress = try XCTUnwrap(socket.localAddress())
            let peerAddress = try XCTUnwrap(peer.localAddress())
            for tag in 0..<20 {
                socket.send(payload, toAddress: peerAddress, withTimeout: 5, tag: tag)
                peer.send(payload, toAddress: socketAddress, withTimeout: 5, tag: tag)
            }
            // Close after 0 to 3 datagrams arrived, from a thread of its own, while the peer keeps sending.
            guard recorder.wait(for: "receive", count: iteration % 4) else { return }
            let handed = Handed(socket)
            let closed = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                handed.socket.close()
                closed.signal()
            }
            for tag in 20..<40 { peer.send(payload, toAddress: socketAddress, withTimeout: 5, tag: tag) }
            XCTAssertEqual(closed.wait(timeout: .now() + 10), .success, "close() did not return")
            guard recorder.wait(for: "close") else { return }
            closeAndWait(peer, peerRecorder)
            delegateQueue.sync {}  // whatever the socket posted before now has run
            XCTAssertEqual(recorder.count("close"), 1, "iteration \(iteration): \(recorder.events)")
            XCTAssertEqual(recorder.errors.count, 1)
            XCTAssertEqual(recorder.eventsAfterFirstClose, [], "iteration \(iteration): callbacks after udpSocketDidClose")
            XCTAssertEqual(recorder.events.last, "close nil")
            XCTAssertTrue(socket.isClosed())
            if recorder.count("close") != 1 || !recorder.eventsAfterFirstClose.isEmpty { return }
        }
    }
}
