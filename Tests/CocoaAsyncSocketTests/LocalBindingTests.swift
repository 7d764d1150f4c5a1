import CocoaAsyncSocket
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// Choosing the local end of outgoing connections: GCDAsyncSocket's viaInterface, and the pair
/// property under it.
final class LocalBindingTests: XCTestCase {
    let queue = DispatchQueue(label: "binding delegate")

    private func connected(via interface: String?, to port: UInt16) throws -> (GCDAsyncSocket, Recorder) {
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port, viaInterface: interface, withTimeout: 5)
        return (client, recorder)
    }

    func testViaInterfaceChoosesTheSourceAddressAndPort() throws {
        let listener = try CountingListener()
        // A loopback address other than the server's (all of 127/8 is local on Linux).
        let (first, firstRecorder) = try connected(via: "127.0.0.2", to: listener.port)
        firstRecorder.wait(for: "connect")
        XCTAssertEqual(first.localHost, "127.0.0.2")
        first.disconnect()

        // An interface name: loopback's first IPv4 address.
        let (second, secondRecorder) = try connected(via: "lo", to: listener.port)
        secondRecorder.wait(for: "connect")
        XCTAssertEqual(second.localHost, "127.0.0.1")
        second.disconnect()

        // Address and port: the port a closed probe socket had (free at once: it never connected).
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.3")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) == 0 ? getsockname(probe, $0, &length) : -1 }
        }
        let freePort = UInt16(bigEndian: address.sin_port)
        close(probe)
        let (third, thirdRecorder) = try connected(via: "127.0.0.3:\(freePort)", to: listener.port)
        thirdRecorder.wait(for: "connect")
        XCTAssertEqual(third.localHost, "127.0.0.3")
        XCTAssertEqual(third.localPort, freePort)
        third.disconnect()
    }

    func testUnknownInterfaceAndUnusableAddress() throws {
        let listener = try CountingListener()
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        XCTAssertThrowsError(try client.connect(toHost: "127.0.0.1", onPort: listener.port, viaInterface: "nosuch0", withTimeout: 5)) {
            XCTAssertEqual(($0 as? GCDAsyncSocketError)?.code, .badParamError)
        }
        XCTAssertThrowsError(try client.connect(toHost: "127.0.0.1", onPort: listener.port, viaInterface: "lo:http", withTimeout: 5)) {
            XCTAssertEqual(($0 as? GCDAsyncSocketError)?.code, .badParamError)
        }
        // A numeric address this host does not have: bind(2) fails, and the attempt with it.
        try client.connect(toHost: "127.0.0.1", onPort: listener.port, viaInterface: "192.0.2.1", withTimeout: 5)
        recorder.wait(for: "disconnect")
        XCTAssertEqual(recorder.events, ["disconnect \(NSPOSIXErrorDomain) \(EADDRNOTAVAIL)"])
    }

    func testPairPropertyBeforeOpenOnly() throws {
        let listener = try CountingListener()
        let pair = createStreamPair(host: "127.0.0.1", port: Int(listener.port))
        let binding = try XCTUnwrap(LocalBinding(address: "127.0.0.4"))
        XCTAssertNil(LocalBinding(address: "not-an-address"))
        XCTAssertNil(LocalBinding(address: nil, port: 70_000))
        XCTAssertTrue(pair.input.setProperty(binding as AnyObject, forKey: .localBindingKey))
        XCTAssertEqual(pair.output.property(forKey: .localBindingKey) as? LocalBinding, binding)
        pair.input.open()
        pair.output.open()
        defer {
            pair.input.close()
            pair.output.close()
        }
        waitForOpen(pair.input)
        XCTAssertEqual(pair.output.streamStatus, .open)
        XCTAssertFalse(pair.input.setProperty(LocalBinding(address: "127.0.0.5") as AnyObject, forKey: .localBindingKey), "after open")
        let handle = try XCTUnwrap(pair.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketNativeHandle as String)) as? Data)
        let fd = handle.withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        XCTAssertEqual(local.sin_addr.s_addr, inet_addr("127.0.0.4"))
        XCTAssertFalse(createStreamPair(unixSocketPath: "/tmp/x.sock").input.setProperty(binding as AnyObject, forKey: .localBindingKey))
    }
}
