import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A socket given no socket queue works on its delegate queue: a send made in a delegate call leaves
/// before the call returns, every call still waits behind the blocks queued before it (as separate
/// blocks would), and a synchronous filter on that queue runs instead of waiting for itself.
final class DelegateQueueTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    /// A bound, receiving socket on `queue` with no socket queue.
    private func receivingSocket() throws -> (GCDAsyncUdpSocket, Recorder) {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        try socket.beginReceiving()
        return (socket, recorder)
    }

    /// A plain UDP socket of the test's.
    private func rawSocket() -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        return fd
    }

    /// A plain UDP socket of the test's that has sent `text` to `port` (set the delegate's reactions
    /// first).
    private func rawSocket(sending text: String, to port: UInt16) throws -> Int32 {
        let fd = rawSocket()
        send(text, from: fd, to: port)
        return fd
    }

    /// `sendto(2)` from `fd` to 127.0.0.1 `port`.
    private func send(_ text: String, from fd: Int32, to port: UInt16, file: StaticString = #filePath, line: UInt = #line) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                Array(text.utf8).withUnsafeBytes {
                    sendto(fd, $0.baseAddress, $0.count, 0, address, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        XCTAssertEqual(sent, text.utf8.count, file: file, line: line)
    }

    /// The reply a send made inside `didReceive` is waiting in the peer's socket when the call
    /// returns: the socket's work ran right there, on the delegate queue, not on another thread.
    func testASendMadeInADelegateCallLeavesBeforeTheCallReturns() throws {
        let (socket, recorder) = try receivingSocket()
        let peer = rawSocket()
        defer { close(peer) }
        recorder.onReceive = { socket, _, address in
            socket.send(Data("pong".utf8), toAddress: address, withTimeout: 5, tag: 1)
            var buffer = [UInt8](repeating: 0, count: 16)
            let count = buffer.withUnsafeMutableBytes { recv(peer, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            recorder.note(
                count < 0 ? "peer has nothing (errno \(errno))" : "peer has \(String(decoding: buffer[0..<count], as: UTF8.self))")
        }
        send("ping", from: peer, to: socket.localPort())  // once the delegate is ready for it
        guard recorder.wait(for: "sent 1") else { return }
        XCTAssertEqual(recorder.events.filter { $0.hasPrefix("peer") }, ["peer has pong"])
        closeAndWait(socket, recorder)
    }

    /// A block the delegate queues during one call runs before the socket's next call (here the send
    /// made in that call completing), as it would if each call were a block of its own.
    func testABlockQueuedInADelegateCallRunsBeforeTheNextCall() throws {
        let (socket, recorder) = try receivingSocket()
        let queue = self.queue
        recorder.onReceive = { socket, _, address in
            socket.send(Data("pong".utf8), toAddress: address, withTimeout: 5, tag: 1)
            queue.async { recorder.note("block") }
        }
        let peer = try rawSocket(sending: "ping", to: socket.localPort())
        defer { close(peer) }
        guard recorder.wait(for: "sent 1") else { return }
        XCTAssertEqual(Array(recorder.events.dropFirst()), ["block", "sent 1"])
        closeAndWait(socket, recorder)
    }

    /// Many calls in a row (a burst of datagrams each answered, and the sends' outcomes) keep their
    /// order, each behind the block the one before it queued.
    func testEveryCallOfABurstComesAfterTheBlockTheOneBeforeQueued() throws {
        let (socket, recorder) = try receivingSocket()
        let queue = self.queue
        let count = 50
        recorder.onReceive = { socket, data, address in
            let text = String(decoding: data, as: UTF8.self)
            socket.send(Data("re \(text)".utf8), toAddress: address, withTimeout: 5, tag: Int(text) ?? -1)
            queue.async { recorder.note("block \(text)") }
        }
        let peer = try rawSocket(sending: "0", to: socket.localPort())
        defer { close(peer) }
        for index in 1..<count { send("\(index)", from: peer, to: socket.localPort()) }
        guard recorder.wait(for: "sent", count: count) else { return }
        let events = recorder.events
        for index in 0..<count {
            guard let block = events.firstIndex(of: "block \(index)"), let sent = events.firstIndex(of: "sent \(index)") else {
                return XCTFail("datagram \(index) was not answered: \(events)")
            }
            guard block < sent else { return XCTFail("the outcome of send \(index) overtook the block queued before it: \(events)") }
        }
        closeAndWait(socket, recorder)
    }

    /// A synchronous receive filter whose queue is the delegate queue runs (inline), where waiting for
    /// that queue from its own work would never end.
    func testASynchronousReceiveFilterOnTheDelegateQueueRuns() throws {
        let (socket, recorder) = try receivingSocket()
        socket.setReceiveFilter(
            { data, _, context in
                context.pointee = "filtered" as NSString
                return !data.isEmpty
            }, with: queue, isAsynchronous: false)
        let peer = try rawSocket(sending: "hello", to: socket.localPort())
        defer { close(peer) }
        guard recorder.wait(for: "receive hello") else { return }
        XCTAssertTrue(recorder.events.first?.hasSuffix("context filtered") ?? false, "\(recorder.events)")
        closeAndWait(socket, recorder)
    }

    /// A send made in a block on the delegate queue, through a synchronous send filter on that queue,
    /// is filtered and sent.
    func testASynchronousSendFilterOnTheDelegateQueueRunsForASendMadeThere() throws {
        let (socket, recorder) = try receivingSocket()
        let (echo, port) = try Peer.pythonUDPEcho()
        defer { echo.stop() }
        socket.setSendFilter({ data, _, _ in data.first != UInt8(ascii: "x") }, with: queue, isAsynchronous: false)
        queue.async {
            socket.send(Data("xdropped".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: 1)
            socket.send(Data("kept".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: 2)
        }
        guard recorder.wait(for: "receive kept") else { return }
        XCTAssertEqual(recorder.count("receive"), 1)
        XCTAssertEqual(recorder.count("sent"), 2)
        closeAndWait(socket, recorder)
    }
}
