import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// Binding: what `localPort()` and `localHost()` answer, the errors a bind throws, and sharing a
/// port with `enableReusePort(true)`.
final class BindingTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    func testLocalPortAndHostBeforeAndAfterBinding() throws {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertEqual(socket.localPort(), 0)
        XCTAssertNil(socket.localHost())
        XCTAssertNil(socket.localAddress())
        XCTAssertTrue(socket.isClosed())
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        let port = socket.localPort()
        XCTAssertNotEqual(port, 0)
        XCTAssertEqual(socket.localHost(), "127.0.0.1")
        let address = try XCTUnwrap(socket.localAddress())
        XCTAssertEqual(address.count, MemoryLayout<sockaddr_in>.size)
        XCTAssertEqual(GCDAsyncUdpSocket.host(fromAddress: address), "127.0.0.1")
        XCTAssertEqual(GCDAsyncUdpSocket.port(fromAddress: address), port)
        XCTAssertFalse(socket.isClosed())
        XCTAssertTrue(socket.isIPv4())
        XCTAssertEqual(recorder.events, [], "a bind reports nothing")
        closeAndWait(socket, recorder)
        XCTAssertTrue(socket.isClosed())
        XCTAssertEqual(recorder.events, ["close nil"])
    }

    func testBindingTwiceIsABadConfiguration() throws {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        let port = socket.localPort()
        XCTAssertThrowsError(try socket.bind(toPort: 0, interface: "127.0.0.1")) {
            XCTAssertEqual(describe($0), udpError(.badConfigError))
        }
        XCTAssertThrowsError(try socket.bind(toPort: 0)) { XCTAssertEqual(describe($0), udpError(.badConfigError)) }
        XCTAssertEqual(socket.localPort(), port, "the first bind stands")
        closeAndWait(socket, recorder)
    }

    /// A bind needs a delegate and a delegate queue, as every GCDAsyncUdpSocket operation that
    /// reports through them.
    func testBindingWithoutADelegateIsABadConfiguration() {
        let socket = GCDAsyncUdpSocket()
        XCTAssertThrowsError(try socket.bind(toPort: 0, interface: "127.0.0.1")) {
            XCTAssertEqual(describe($0), udpError(.badConfigError))
        }
        XCTAssertEqual(socket.localPort(), 0)
    }

    /// An interface that is neither a name nor an address of this host is a bad parameter, thrown
    /// before anything is bound: the socket then binds where it is told.
    func testAnUnknownInterfaceIsABadParameter() throws {
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertThrowsError(try socket.bind(toPort: 0, interface: "nosuchif0")) {
            XCTAssertEqual(describe($0), udpError(.badParamError))
        }
        XCTAssertEqual(socket.localPort(), 0)
        try socket.bind(toPort: 0, interface: "lo")  // by name: loopback's addresses
        XCTAssertNotEqual(socket.localPort(), 0)
        closeAndWait(socket, recorder)
    }

    /// A port another UDP socket holds, without reuse options on either side, is in use: a python
    /// socket's, and another GCDAsyncUdpSocket's (on Linux, SO_REUSEADDR would let a UDP socket
    /// share the port silently; GCDAsyncUdpSocket does not share unless told to, as on Darwin).
    func testBindingAPortAnotherSocketHoldsFailsWithEADDRINUSE() throws {
        let (peer, port) = try Peer.pythonUDPPortHolder()
        defer { peer.stop() }
        let recorder = Recorder()
        let socket = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertThrowsError(try socket.bind(toPort: port, interface: "127.0.0.1")) {
            XCTAssertEqual(describe($0), posixError(EADDRINUSE))
        }

        let holder = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try holder.bind(toPort: 0, interface: "127.0.0.1")
        let second = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertThrowsError(try second.bind(toPort: holder.localPort(), interface: "127.0.0.1")) {
            XCTAssertEqual(describe($0), posixError(EADDRINUSE))
        }
        holder.close()
        second.close()
        socket.close()
    }

    /// With `enableReusePort(true)` on both before they bind, two sockets bind one port, and a
    /// datagram sent there reaches one of them.
    func testReusePortLetsTwoSocketsBindOnePort() throws {
        let recorder = Recorder()  // the delegate of both: whichever gets the datagram records it
        let first = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try first.enableReusePort(true)
        try first.bind(toPort: 0, interface: "127.0.0.1")
        let port = first.localPort()
        XCTAssertNotEqual(port, 0)
        let second = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try second.enableReusePort(true)
        try second.bind(toPort: port, interface: "127.0.0.1")
        XCTAssertEqual(second.localPort(), port)
        try first.beginReceiving()
        try second.beginReceiving()
        let (peer, _) = try Peer.pythonUDPSender(to: "127.0.0.1", port: port, payloads: ["shared"])
        defer { peer.stop() }
        guard recorder.wait(for: "receive shared") else { return }
        first.close()
        second.close()
        recorder.wait(for: "close nil", count: 2)
    }
}
