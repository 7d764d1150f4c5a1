import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

/// What NWParameters and NWProtocolTCP.Options do to a ready connection's socket, read back with
/// `getsockopt(2)`.
final class ConnectionOptionsTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "ConnectionOptionsTests")

    /// A ready connection to a socat echo with `parameters`, and its socket.
    private func readySocket(_ parameters: NWParameters) throws -> (NWConnection, Int32) {
        let port = try startSocatEcho()
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: parameters)
        let ready = expectation(description: "ready")
        connection.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        connection.start(queue: queue)
        addCleanup { connection.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        let fd = try XCTUnwrap(connection.shared.withLock { $0.engine?.streams?.input.socketDescriptor })
        return (connection, fd)
    }

    private func option(_ fd: Int32, _ level: Int32, _ name: Int32) -> Int32 {
        var value: Int32 = -1
        var length = socklen_t(MemoryLayout<Int32>.size)
        XCTAssertEqual(getsockopt(fd, level, name, &value, &length), 0)
        return value
    }

    func testTCPOptionsReachTheSocket() throws {
        let tcp = NWProtocolTCP.Options()
        tcp.noDelay = true
        tcp.enableKeepalive = true
        tcp.keepaliveIdle = 17
        tcp.keepaliveInterval = 3
        tcp.keepaliveCount = 4
        tcp.connectionDropTime = 9
        let (_, fd) = try readySocket(NWParameters(tls: nil, tcp: tcp))
        XCTAssertEqual(option(fd, Int32(IPPROTO_TCP), TCP_NODELAY), 1)
        XCTAssertEqual(option(fd, SOL_SOCKET, SO_KEEPALIVE), 1)
        XCTAssertEqual(option(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE), 17)
        XCTAssertEqual(option(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL), 3)
        XCTAssertEqual(option(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT), 4)
        XCTAssertEqual(option(fd, Int32(IPPROTO_TCP), TCP_USER_TIMEOUT), 9_000)
    }

    func testTheDefaultsLeaveTheSystemsChoice() throws {
        let (_, fd) = try readySocket(.tcp)
        XCTAssertEqual(option(fd, Int32(IPPROTO_TCP), TCP_NODELAY), 0)
        XCTAssertEqual(option(fd, SOL_SOCKET, SO_KEEPALIVE), 0)
        XCTAssertEqual(option(fd, Int32(IPPROTO_IP), IP_TOS), 0)
    }

    /// A service class marks the traffic as CFNetwork's network service types do (DSCP, priority).
    func testAServiceClassMarksTheTraffic() throws {
        let parameters = NWParameters.tcp
        parameters.serviceClass = .interactiveVoice
        let (_, fd) = try readySocket(parameters)
        XCTAssertEqual(option(fd, Int32(IPPROTO_IP), IP_TOS) >> 2, 46, "DSCP EF")
        XCTAssertEqual(option(fd, SOL_SOCKET, SO_PRIORITY), 6)
    }

    /// `requiredLocalEndpoint` binds the connection's source: its path shows that address and port.
    func testARequiredLocalEndpointIsTheSource() throws {
        let localPort = try RawSocket.unusedPort()
        let parameters = NWParameters.tcp
        parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(localPort))!)
        let (connection, _) = try readySocket(parameters)
        XCTAssertEqual(
            connection.currentPath?.localEndpoint, .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(localPort))!))
    }
}
