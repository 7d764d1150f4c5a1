#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Every entry that takes a TCP port refuses one outside 0...65535 with `EINVAL` and dials nothing
/// (issue 21, finding 5). Each test listens on `port & 0xFFFF` (where a masked port would land), asks
/// for that port plus or minus 65536, checks the error, shows the listener saw no connection, and then
/// dials the listener's real port to show it would have seen one.
final class PortValidationTests: SocketStreamsTestCase {
    /// A loopback listener (closed after the test) and its port.
    private func makeListener() throws -> (fd: Int32, port: Int) {
        let fd = try RawSocket.listener(family: .v4)
        addCleanup { close(fd) }
        return (fd, RawSocket.boundPort(fd))
    }

    /// Ports that a 16-bit mask would turn into `port`.
    private func aliases(of port: Int) -> [Int] {
        [port + 65_536, port - 65_536, port + 3 * 65_536, Int.max - 65_535 + port]
    }

    /// The listener saw nothing; then a real connect to its port is seen, so the check could fail.
    private func assertNothingDialled(_ listener: (fd: Int32, port: Int), file: StaticString = #filePath, line: UInt = #line)
        throws
    {
        if let fd = try RawSocket.accept(listener.fd, timeout: 0.2) {
            close(fd)
            XCTFail("something connected to port \(listener.port)", file: file, line: line)
        }
        let control = try RawSocket.connectTo(family: .v4, port: listener.port)
        defer { close(control) }
        let seen = try RawSocket.accept(listener.fd, timeout: shortTimeout)
        XCTAssertNotNil(seen, "the control connection was not seen", file: file, line: line)
        if let seen { close(seen) }
    }

    private func assertPortError(_ error: Error?, port: Int, file: StaticString = #filePath, line: UInt = #line) {
        guard let error = error as NSError? else { return XCTFail("no error", file: file, line: line) }
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain, "\(error)", file: file, line: line)
        XCTAssertEqual(error.code, Int(EINVAL), "\(error)", file: file, line: line)
        XCTAssertTrue(
            error.localizedDescription.contains("port \(port) (not in 0...65535)"), error.localizedDescription, file: file, line: line)
    }

    func testHelperAcceptsExactlyTheSixteenBitPorts() throws {
        XCTAssertTrue(PortNumber.isValid(0))
        XCTAssertTrue(PortNumber.isValid(65_535))
        XCTAssertFalse(PortNumber.isValid(65_536))
        XCTAssertFalse(PortNumber.isValid(-1))
        XCTAssertFalse(PortNumber.isDialable(0))
        XCTAssertNil(SocketAddress(numericHost: "127.0.0.1", port: 74_636))
        XCTAssertThrowsError(try Resolver.resolve(host: "localhost", port: 74_636, family: AF_INET).get())
        XCTAssertThrowsError(try PortNumber.check(-56_436, "Could not connect to x")) { assertPortError($0, port: -56_436) }
    }

    func testCreateStreamPairFailsAtOpenAndDialsNothing() throws {
        let listener = try makeListener()
        for port in aliases(of: listener.port) {
            let pair = createStreamPair(host: "127.0.0.1", port: port)
            XCTAssertEqual(
                pair.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemotePortNumber as String)) as? NSNumber,
                NSNumber(value: port))
            pair.input.open()
            pair.output.open()
            XCTAssertEqual(pair.input.streamStatus, .error)
            XCTAssertEqual(pair.output.streamStatus, .error)
            assertPortError(pair.input.streamError, port: port)
            assertPortError(pair.output.streamError, port: port)
            pair.input.close()
            pair.output.close()
        }
        try assertNothingDialled(listener)
    }

    /// A host name, which would otherwise be resolved first: refused before the lookup.
    func testAHostNameIsRefusedBeforeItIsResolved() throws {
        let listener = try makeListener()
        let pair = createStreamPair(host: "localhost", port: listener.port + 65_536)
        pair.input.open()
        XCTAssertEqual(pair.input.streamStatus, .error)
        assertPortError(pair.input.streamError, port: listener.port + 65_536)
        pair.input.close()
        try assertNothingDialled(listener)
    }

    /// `getStreamsToHost` cannot throw: the streams report `errorOccurred` to their delegate.
    func testGetStreamsToHostReportsErrorOccurred() throws {
        let listener = try makeListener()
        var input: InputStream?
        var output: OutputStream?
        Stream.getStreamsToHost(withName: "127.0.0.1", port: listener.port - 65_536, inputStream: &input, outputStream: &output)
        let recorder = DelegateRecorder()
        recorder.attach(input: input, output: output)
        input!.delegate = recorder
        output!.delegate = recorder
        input!.schedule(in: .current, forMode: .default)
        output!.schedule(in: .current, forMode: .default)
        input!.open()
        output!.open()
        _ = runUntil(timeout: shortTimeout) {
            recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
        }
        XCTAssertTrue(recorder.has(.errorOccurred, on: .input), "\(recorder.snapshot)")
        XCTAssertTrue(recorder.has(.errorOccurred, on: .output), "\(recorder.snapshot)")
        XCTAssertFalse(recorder.has(.openCompleted, on: .input))
        assertPortError(input!.streamError, port: listener.port - 65_536)
        input!.close()
        output!.close()
        try assertNothingDialled(listener)
    }

    func testCFStreamCreatePairWithSocketToHostFailsAtOpen() throws {
        let listener = try makeListener()
        var read: Unmanaged<CFReadStream>?
        var write: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(kCFAllocatorDefault, "127.0.0.1" as CFString, UInt32(listener.port + 65_536), &read, &write)
        let input = read!.takeRetainedValue()
        let output = write!.takeRetainedValue()
        XCTAssertFalse(CFReadStreamOpen(input))
        XCTAssertFalse(CFWriteStreamOpen(output))
        XCTAssertEqual(CFReadStreamGetStatus(input), .error)
        assertPortError(CFReadStreamCopyError(input) as NSError?, port: listener.port + 65_536)
        CFReadStreamClose(input)
        CFWriteStreamClose(output)
        try assertNothingDialled(listener)
    }

    func testStreamListenerRefuses() throws {
        for port in [65_536, -1, 70_000] {
            XCTAssertThrowsError(try StreamListener(host: "127.0.0.1", port: port)) { assertPortError($0, port: port) }
        }
    }

    func testAsyncConnectionOpenThrows() async throws {
        let listener = try makeListener()
        let connection = AsyncConnection(host: "127.0.0.1", port: listener.port + 65_536)
        do {
            try await connection.open()
            XCTFail("open succeeded")
        } catch {
            assertPortError(error, port: listener.port + 65_536)
        }
        try assertNothingDialled(listener)
    }

    func testQueuedSocketConnectAndAcceptThrow() throws {
        let listener = try makeListener()
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "ports"))
        for port in aliases(of: listener.port) {
            XCTAssertThrowsError(try socket.connect(toHost: "127.0.0.1", onPort: port)) { assertPortError($0, port: port) }
            XCTAssertEqual(socket.connectedPort, 0)
            XCTAssertNil(socket.connectedHost)
        }
        XCTAssertThrowsError(try socket.accept(onInterface: "127.0.0.1", port: 74_636)) { assertPortError($0, port: 74_636) }
        XCTAssertEqual(socket.localPort, 0)
        try assertNothingDialled(listener)
        // The refusals left the socket unused: it still connects to the real port.
        try socket.connect(toHost: "127.0.0.1", onPort: listener.port)
        XCTAssertTrue(recorder.waitFor("connect"))
        XCTAssertEqual(socket.connectedPort, listener.port)
        socket.disconnect()
    }

    /// Proxy ports: the SOCKS and CONNECT dictionaries and the typed configuration are refused by
    /// `setProperty`; a pair whose own port is out of range takes no proxy and dials neither.
    func testProxySettingsRefusePortsOutside16Bits() throws {
        let proxy = try makeListener()
        let target = try makeListener()
        let badProxyPort = proxy.port + 65_536
        let pair = createStreamPair(host: "127.0.0.1", port: target.port)
        let socks: [String: Any] = [
            kCFStreamPropertySOCKSProxyHost as String: "127.0.0.1", kCFStreamPropertySOCKSProxyPort as String: badProxyPort,
        ]
        XCTAssertFalse(pair.input.setProperty(socks, forKey: .socksProxyConfigurationKey))
        let connect: [String: Any] = [
            kCFStreamPropertyCONNECTProxyHost as String: "127.0.0.1", kCFStreamPropertyCONNECTProxyPort as String: badProxyPort,
        ]
        XCTAssertFalse(pair.input.setProperty(connect, forKey: Stream.PropertyKey(kCFStreamPropertyCONNECTProxy as String)))
        for port in [badProxyPort, proxy.port - 65_536, 0] {
            XCTAssertFalse(pair.input.setProperty(ProxyConfiguration.socks5(host: "127.0.0.1", port: port), forKey: .proxyConfigurationKey))
            XCTAssertFalse(
                pair.input.setProperty(ProxyConfiguration.httpConnect(host: "127.0.0.1", port: port), forKey: .proxyConfigurationKey))
        }
        XCTAssertNil(pair.input.property(forKey: .proxyConfigurationKey))

        let outOfRange = createStreamPair(host: "127.0.0.1", port: target.port + 65_536)
        XCTAssertFalse(
            outOfRange.input.setProperty(ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy.port), forKey: .proxyConfigurationKey))
        outOfRange.input.open()
        assertPortError(outOfRange.input.streamError, port: target.port + 65_536)
        outOfRange.input.close()
        try assertNothingDialled(proxy)
        try assertNothingDialled(target)
    }
}
