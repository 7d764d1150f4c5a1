import CocoaAsyncSocket
import TestPeers
import XCTest

// The README's GCDAsyncSocket example, word for word, and a test that runs it against socat.

final class LineClient: NSObject, GCDAsyncSocketDelegate {
    let socket = GCDAsyncSocket()
    let finished = DispatchSemaphore(value: 0)
    var lines: [String] = []

    func start(host: String, port: UInt16) throws {
        socket.setDelegate(self, delegateQueue: DispatchQueue(label: "line client"))
        try socket.connect(toHost: host, onPort: port, withTimeout: 5)
        socket.write("PING\r\n".data(using: .utf8)!, withTimeout: 5, tag: 1)
        socket.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, tag: 2)
    }

    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
        lines.append(String(decoding: data, as: UTF8.self))
        sock.disconnectAfterWriting()
    }

    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
        finished.signal()
    }
}

final class GCDAsyncSocketReadmeExampleTests: XCTestCase {
    func testLineClientAgainstSocat() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let client = LineClient()
        try client.start(host: "127.0.0.1", port: port)
        XCTAssertEqual(client.finished.wait(timeout: .now() + 10), .success, "no socketDidDisconnect")
        XCTAssertTrue(client.socket.isDisconnected)
        let lines = try XCTUnwrap(client.socket.delegateQueue).sync { client.lines }
        XCTAssertEqual(lines, ["PING\r\n"])
    }
}
