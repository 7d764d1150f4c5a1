#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import XCTest

/// NWParameters, its protocol stack and the options classes, as client code reads and sets them.
final class ParametersTests: XCTestCase {
    func testTCPStack() throws {
        let parameters = NWParameters.tcp
        let stack = parameters.defaultProtocolStack
        XCTAssertTrue(stack.transportProtocol is NWProtocolTCP.Options)
        XCTAssertTrue(stack.internetProtocol is NWProtocolIP.Options)
        XCTAssertTrue(stack.applicationProtocols.isEmpty)
        XCTAssertTrue(NWParameters.tls.defaultProtocolStack.applicationProtocols.first is NWProtocolTLS.Options)
        XCTAssertTrue(NWParameters.tls.defaultProtocolStack.transportProtocol is NWProtocolTCP.Options)
        XCTAssertTrue(NWParameters.udp.defaultProtocolStack.transportProtocol is NWProtocolUDP.Options)
        XCTAssertTrue(NWParameters.dtls.defaultProtocolStack.applicationProtocols.first is NWProtocolTLS.Options)
        XCTAssertNil(NWParameters().defaultProtocolStack.transportProtocol)
        XCTAssertFalse(NWParameters.tcp === NWParameters.tcp, "each class var is a new object")
    }

    func testTheStackIsTheParametersOwn() throws {
        let parameters = NWParameters.tcp
        let tcp = try XCTUnwrap(parameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)
        tcp.noDelay = true
        XCTAssertEqual((parameters.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)?.noDelay, true)
        parameters.defaultProtocolStack.applicationProtocols.insert(NWProtocolTLS.Options(), at: 0)
        XCTAssertEqual(parameters.defaultProtocolStack.applicationProtocols.count, 1)
    }

    func testInitialisers() {
        let tcp = NWProtocolTCP.Options()
        tcp.connectionTimeout = 5
        let parameters = NWParameters(tls: nil, tcp: tcp)
        XCTAssertTrue(parameters.defaultProtocolStack.transportProtocol === tcp)
        XCTAssertTrue(parameters.defaultProtocolStack.applicationProtocols.isEmpty)
        let tls = NWProtocolTLS.Options()
        let secure = NWParameters(tls: tls)
        XCTAssertTrue(secure.defaultProtocolStack.applicationProtocols.first === tls)
        XCTAssertTrue(secure.defaultProtocolStack.transportProtocol is NWProtocolTCP.Options)
        let udp = NWProtocolUDP.Options()
        XCTAssertTrue(NWParameters(dtls: nil, udp: udp).defaultProtocolStack.transportProtocol === udp)
        XCTAssertTrue(NWParameters(dtls: nil).defaultProtocolStack.transportProtocol is NWProtocolUDP.Options)
    }

    func testParameterDefaults() {
        let p = NWParameters.tcp
        XCTAssertNil(p.requiredInterface)
        XCTAssertEqual(p.requiredInterfaceType, .other)
        XCTAssertNil(p.prohibitedInterfaces)
        XCTAssertNil(p.prohibitedInterfaceTypes)
        XCTAssertNil(p.requiredLocalEndpoint)
        XCTAssertFalse(p.prohibitExpensivePaths)
        XCTAssertFalse(p.prohibitConstrainedPaths)
        XCTAssertFalse(p.allowLocalEndpointReuse)
        XCTAssertFalse(p.acceptLocalOnly)
        XCTAssertFalse(p.allowFastOpen)
        XCTAssertFalse(p.preferNoProxies)
        XCTAssertFalse(p.includePeerToPeer)
        XCTAssertEqual(p.serviceClass, .bestEffort)
        XCTAssertEqual(p.multipathServiceType, .disabled)
        XCTAssertEqual(p.expiredDNSBehavior, .systemDefault)
    }

    func testOptionDefaults() throws {
        let tcp = NWProtocolTCP.Options()
        XCTAssertEqual(
            [
                tcp.noDelay, tcp.noPush, tcp.noOptions, tcp.enableKeepalive, tcp.retransmitFinDrop, tcp.disableAckStretching,
                tcp.enableFastOpen, tcp.disableECN,
            ],
            Array(repeating: false, count: 8))
        XCTAssertEqual(
            [
                tcp.keepaliveCount, tcp.keepaliveIdle, tcp.keepaliveInterval, tcp.maximumSegmentSize, tcp.connectionTimeout,
                tcp.persistTimeout, tcp.connectionDropTime,
            ],
            Array(repeating: 0, count: 7))
        XCTAssertFalse(NWProtocolUDP.Options().preferNoChecksum)
        let ip = try XCTUnwrap(NWParameters.tcp.defaultProtocolStack.internetProtocol as? NWProtocolIP.Options)
        XCTAssertEqual(ip.version, .any)
        XCTAssertEqual(ip.hopLimit, 0)
        XCTAssertFalse(ip.useMinimumMTU)
        XCTAssertFalse(ip.disableFragmentation)
        XCTAssertFalse(ip.shouldCalculateReceiveTime)
        XCTAssertFalse(ip.disableMulticastLoopback)
        XCTAssertEqual(ip.localAddressPreference, .default)
        _ = NWProtocolTLS.Options().securityProtocolOptions
    }

    func testOptionsKeepWhatIsSet() {
        let tcp = NWProtocolTCP.Options()
        tcp.enableKeepalive = true
        tcp.keepaliveIdle = 30
        tcp.keepaliveInterval = 5
        tcp.keepaliveCount = 3
        tcp.connectionDropTime = 20
        tcp.maximumSegmentSize = 1200
        XCTAssertEqual(
            [tcp.keepaliveIdle, tcp.keepaliveInterval, tcp.keepaliveCount, tcp.connectionDropTime, tcp.maximumSegmentSize],
            [30, 5, 3, 20, 1200])
        XCTAssertTrue(tcp.enableKeepalive)
    }

    func testCopyIsIndependent() throws {
        let original = NWParameters.tls
        original.allowLocalEndpointReuse = true
        original.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: 0)
        original.prohibitedInterfaceTypes = [.cellular]
        let tcp = try XCTUnwrap(original.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)
        tcp.noDelay = true
        let copy = original.copy()
        XCTAssertFalse(copy === original)
        XCTAssertTrue(copy.allowLocalEndpointReuse)
        XCTAssertEqual(copy.requiredLocalEndpoint, .hostPort(host: "127.0.0.1", port: 0))
        XCTAssertEqual(copy.prohibitedInterfaceTypes, [.cellular])
        let copiedTCP = try XCTUnwrap(copy.defaultProtocolStack.transportProtocol as? NWProtocolTCP.Options)
        XCTAssertFalse(copiedTCP === tcp, "a deep copy")
        XCTAssertTrue(copiedTCP.noDelay)
        XCTAssertTrue(copy.defaultProtocolStack.applicationProtocols.first is NWProtocolTLS.Options)
        XCTAssertFalse(copy.defaultProtocolStack.applicationProtocols.first === original.defaultProtocolStack.applicationProtocols.first)
        copy.allowLocalEndpointReuse = false
        copiedTCP.noDelay = false
        copy.defaultProtocolStack.applicationProtocols = []
        XCTAssertTrue(original.allowLocalEndpointReuse)
        XCTAssertTrue(tcp.noDelay)
        XCTAssertEqual(original.defaultProtocolStack.applicationProtocols.count, 1)
    }

    func testDefinitions() {
        XCTAssertEqual(NWProtocolTCP.definition.name, "tcp")
        XCTAssertEqual(NWProtocolUDP.definition.name, "udp")
        XCTAssertEqual(NWProtocolIP.definition.name, "ip")
        XCTAssertEqual(NWProtocolTLS.definition.name, "tls")
        XCTAssertEqual(NWProtocolTCP.definition, NWProtocolTCP.definition)
        XCTAssertNotEqual(NWProtocolTCP.definition, NWProtocolUDP.definition)
        XCTAssertEqual(NWParameters.tls.debugDescription, "tls, tcp, ip")
    }
}
