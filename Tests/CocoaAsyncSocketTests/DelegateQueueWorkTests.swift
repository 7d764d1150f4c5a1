import CocoaAsyncSocket
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A socket given no socket queue works on its delegate's queue (issue 48): a write made in a
/// delegate call is in the peer's socket before the call returns, and every call still waits behind
/// the blocks queued before it, as separate blocks would (GCDAsyncSocket's ordering promise). The peer
/// is a plain TCP socket of the test's, read without blocking, so that what it holds at a moment is
/// what the socket had written by then.
final class DelegateQueueWorkTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    /// A connected client on `queue` (no socket queue) and the test's end of the connection.
    private func connectedPair(_ recorder: Recorder, on queue: DispatchQueue? = nil) throws -> (GCDAsyncSocket, Int32) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(listener, 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(listener, address, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, address, &length) == 0
            }
        }
        XCTAssertTrue(bound, "the test's listener: errno \(errno)")
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue ?? self.queue)
        try client.connect(toHost: "127.0.0.1", onPort: UInt16(bigEndian: address.sin_port), withTimeout: 5)
        let peer = accept(listener, nil, nil)
        XCTAssertGreaterThanOrEqual(peer, 0, "accept: errno \(errno)")
        recorder.wait(for: "connect")
        return (client, peer)
    }

    private func send(_ text: String, to fd: Int32) {
        let sent = Array(text.utf8).withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        XCTAssertEqual(sent, text.utf8.count)
    }

    /// What `fd` holds now, without waiting.
    private static func available(_ fd: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        return count < 0 ? "nothing (errno \(errno))" : String(decoding: buffer[0..<count], as: UTF8.self)
    }

    /// The reply a write made inside `didRead` is waiting in the peer's socket when the call returns:
    /// the socket's work ran right there, on the delegate queue, not on another thread.
    func testAWriteMadeInADelegateCallLeavesBeforeTheCallReturns() throws {
        let recorder = Recorder()
        let peerHolds = Trail()
        let (client, peer) = try connectedPair(recorder)
        defer { close(peer) }
        recorder.onRead = { socket, _, tag in
            socket.write(Data("pong \(tag)\n".utf8), withTimeout: 5, tag: tag)
            peerHolds.append(Self.available(peer))
        }
        client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 1)
        send("ping\n", to: peer)
        recorder.wait(for: "wrote 1")
        XCTAssertEqual(peerHolds.values, ["pong 1\n"])
        client.disconnect()
        recorder.wait(for: "disconnect")
    }

    /// Many calls in a row (a burst of lines, each read, answered and queued a block) keep their order,
    /// each behind the block the one before it queued: read n, block n, wrote n, in that order.
    func testEveryCallOfABurstComesAfterTheBlockTheOneBeforeQueued() throws {
        let recorder = Recorder()
        let trail = Trail()
        let (client, peer) = try connectedPair(recorder)
        defer { close(peer) }
        let queue = self.queue
        let count = 50
        recorder.onRead = { socket, _, tag in
            trail.append("read \(tag)")
            socket.write(Data("re \(tag)\n".utf8), withTimeout: 5, tag: tag)
            queue.async { trail.append("block \(tag)") }
            if tag + 1 < count { socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: tag + 1) }
        }
        recorder.onWrite = { _, tag in trail.append("wrote \(tag)") }
        client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 0)
        send((0..<count).map { "\($0)\n" }.joined(), to: peer)
        recorder.wait(for: "wrote", count: count)
        let events = trail.values
        for tag in 0..<count {
            guard let read = events.firstIndex(of: "read \(tag)"), let block = events.firstIndex(of: "block \(tag)"),
                let wrote = events.firstIndex(of: "wrote \(tag)")
            else { return XCTFail("line \(tag) was not answered: \(events)") }
            XCTAssertTrue(read < block && block < wrote, "line \(tag): the write's call overtook the block queued before it: \(events)")
        }
        client.disconnect()
        recorder.wait(for: "disconnect")
    }

    /// `socketDidDisconnect` for a peer's close comes after every read of that connection and after the
    /// block the last read queued, also when the reactor that carried the calls is let go of at once (the
    /// connection was its last user).
    func testTheDisconnectComesLastWhenThePeerCloses() throws {
        // One connection per delegate queue, each queue's reactor used by it alone.
        for round in 0..<20 {
            let own = DispatchQueue(label: "own delegate \(round)")
            let recorder = Recorder()
            let trail = Trail()
            recorder.onRead = { socket, _, tag in
                own.async { trail.append("block \(tag)") }
                socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: tag + 1)
            }
            recorder.onDisconnect = { _ in trail.append("disconnect") }
            let (client, peer) = try connectedPair(recorder, on: own)
            client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 0)
            send("a\nb\nc\n", to: peer)
            recorder.wait(for: "read", count: 3)
            close(peer)
            recorder.wait(for: "disconnect")
            own.sync {}
            XCTAssertEqual(trail.values.last, "disconnect", "round \(round): \(trail.values)")
            XCTAssertEqual(trail.values.filter { $0.hasPrefix("block") }, ["block 0", "block 1", "block 2"], "round \(round)")
        }
    }
}
