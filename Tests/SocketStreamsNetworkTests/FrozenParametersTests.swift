@testable import SocketStreamsNetwork
import XCTest

/// What a connection keeps of its parameters: a copy nothing changes, shared between connections made
/// with parameters of the same plain values, never with TLS options (which hold blocks and identities).
final class FrozenParametersTests: XCTestCase {
    func testConnectionsWithTheSameValuesShareOneFrozenCopy() {
        let first = NWConnection(host: "127.0.0.1", port: 9, using: .tcp)
        let second = NWConnection(host: "127.0.0.1", port: 9, using: .tcp)
        XCTAssertTrue(first.frozenParameters === second.frozenParameters)
        let tcp = NWProtocolTCP.Options()
        tcp.noDelay = true
        let other = NWConnection(host: "127.0.0.1", port: 9, using: NWParameters(tls: nil, tcp: tcp))
        XCTAssertFalse(other.frozenParameters === first.frozenParameters, "other values, another copy")
        let tls = [NWConnection(host: "localhost", port: 9, using: .tls), NWConnection(host: "localhost", port: 9, using: .tls)]
        XCTAssertFalse(tls[0].frozenParameters === tls[1].frozenParameters, "TLS options are never shared")
    }

    func testChangingTheGivenParametersOrTheOnesReadBackChangesNothing() throws {
        let parameters = NWParameters.tcp
        let connection = NWConnection(host: "127.0.0.1", port: 9, using: parameters)
        let sharing = NWConnection(host: "127.0.0.1", port: 9, using: .tcp)
        parameters.requiredInterfaceType = .loopback
        (parameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)?.noDelay = true
        let readBack = connection.parameters
        XCTAssertEqual(readBack.requiredInterfaceType, .other)
        XCTAssertEqual((readBack.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)?.noDelay, false)
        readBack.prohibitExpensivePaths = true
        (readBack.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)?.connectionTimeout = 3
        XCTAssertFalse(connection.parameters.prohibitExpensivePaths, "each read is a copy")
        XCTAssertFalse(sharing.parameters.prohibitExpensivePaths)
        XCTAssertEqual((sharing.parameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)?.connectionTimeout, 0)
        XCTAssertFalse(readBack === connection.parameters)
    }
}
