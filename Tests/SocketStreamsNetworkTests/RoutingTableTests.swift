import SocketStreamsNetwork
import XCTest

/// The routing table, its dumps, and the path computed from it, as plain values.
final class RoutingTableTests: XCTestCase {
    static let up: UInt32 = 0x1 | 0x40
    static let port: UInt32 = 777

    static func link(_ index: Int32, _ name: String, flags: UInt32 = up, kind: String? = nil, hardware: UInt16 = 1) -> LinkRecord {
        LinkRecord(index: index, name: name, hardwareType: hardware, flags: flags, kind: kind)
    }

    static func classify(_ link: LinkRecord) -> NWInterface.InterfaceType {
        link.hardwareType == 772 ? .loopback : link.kind == "veth" ? .wiredEthernet : link.name.hasPrefix("wl") ? .wifi : .other
    }

    /// lo (1, with 127.0.0.1 and ::1), eth0 (2, veth) with 192.0.2.10/24 and a default route via 192.0.2.1.
    static func table() -> RoutingTable {
        var table = RoutingTable()
        table.apply(.link(link(1, "lo", flags: up | 0x8, hardware: 772), removed: false), classify: classify)
        table.apply(.link(link(2, "eth0", kind: "veth"), removed: false), classify: classify)
        table.apply(
            .address(AddressRecord(family: 2, index: 1, prefixLength: 8, scope: 254, address: [127, 0, 0, 1]), removed: false),
            classify: classify)
        table.apply(
            .address(AddressRecord(family: 10, index: 1, prefixLength: 128, scope: 254, address: v6(1)), removed: false), classify: classify
        )
        table.apply(
            .address(AddressRecord(family: 2, index: 2, prefixLength: 24, address: [192, 0, 2, 10]), removed: false), classify: classify)
        table.apply(
            .route(RouteRecord(family: 2, priority: 100, nextHops: [.init(interface: 2, gateway: [192, 0, 2, 1])]), removed: false),
            classify: classify)
        return table
    }

    static func v6(_ last: UInt8, prefix: [UInt8] = []) -> [UInt8] {
        prefix + [UInt8](repeating: 0, count: 15 - prefix.count) + [last]
    }

    func path(_ table: RoutingTable, _ constraints: PathConstraints = PathConstraints(), dns: Bool = true) -> NWPath {
        NWPath(table: table, constraints: constraints, resolverConfigured: dns)
    }

    func testAnInterfaceWithAnAddressAndADefaultRouteSatisfies() {
        let path = path(Self.table())
        XCTAssertEqual(path.status, .satisfied)
        XCTAssertEqual(path.availableInterfaces.map(\.name), ["eth0"])
        XCTAssertEqual(path.availableInterfaces.first?.type, .wiredEthernet)
        XCTAssertTrue(path.usesInterfaceType(.wiredEthernet))
        XCTAssertFalse(path.usesInterfaceType(.loopback))
        XCTAssertTrue(path.supportsIPv4)
        XCTAssertFalse(path.supportsIPv6)
        XCTAssertTrue(path.supportsDNS)
        XCTAssertEqual(path.gateways, [.hostPort(host: .ipv4(IPv4Address("192.0.2.1")!), port: 0)])
        XCTAssertFalse(path.isExpensive)
        XCTAssertFalse(path.isConstrained)
        XCTAssertNil(path.localEndpoint)
        XCTAssertNil(path.remoteEndpoint)
        XCTAssertEqual(path.unsatisfiedReason, .notAvailable)
        XCTAssertEqual(path.debugDescription, "satisfied (Path is satisfied), interface: eth0, ipv4, dns")
        XCTAssertFalse(self.path(Self.table(), dns: false).supportsDNS)
    }

    /// Loopback alone, an address without a route, a route on a link that is down: unsatisfied.
    func testWhatDoesNotSatisfy() {
        var loopbackOnly = Self.table()
        loopbackOnly.apply(.link(Self.link(2, "eth0", kind: "veth"), removed: true), classify: Self.classify)
        XCTAssertEqual(path(loopbackOnly), NWPath(status: .unsatisfied))
        XCTAssertEqual(path(loopbackOnly).debugDescription, "unsatisfied (No network route)")

        var noRoute = Self.table()
        noRoute.defaultRoutes = []
        XCTAssertEqual(path(noRoute).status, .unsatisfied)

        var down = Self.table()
        down.apply(.link(Self.link(2, "eth0", flags: 0x1, kind: "veth"), removed: false), classify: Self.classify)
        XCTAssertEqual(path(down).status, .unsatisfied, "up but not running (no carrier)")

        var linkLocal = Self.table()
        linkLocal.addresses = linkLocal.addresses.filter { $0.value.index != 2 }
        linkLocal.insert(AddressRecord(family: 2, index: 2, prefixLength: 16, scope: 253, address: [169, 254, 1, 1]))
        XCTAssertEqual(path(linkLocal).status, .unsatisfied)

        var tentative = Self.table()
        tentative.insert(
            AddressRecord(family: 10, index: 2, prefixLength: 64, flags: 0x40, address: Self.v6(2, prefix: [0x20, 0x01, 0x0d, 0xb8])))
        tentative.defaultRoutes.insert(DefaultRoute(family: 10, priority: 1024, interface: 2, gateway: Self.v6(1, prefix: [0xfe, 0x80])))
        XCTAssertFalse(path(tentative).supportsIPv6, "a tentative address is not usable yet")

        var blackhole = Self.table()
        blackhole.defaultRoutes = []
        blackhole.apply(.route(RouteRecord(family: 2, type: 6, nextHops: [.init(interface: 2)]), removed: false), classify: Self.classify)
        blackhole.apply(
            .route(RouteRecord(family: 2, table: 100, nextHops: [.init(interface: 2)]), removed: false), classify: Self.classify)
        blackhole.apply(
            .route(RouteRecord(family: 2, destinationLength: 24, nextHops: [.init(interface: 2)]), removed: false), classify: Self.classify)
        XCTAssertEqual(path(blackhole).status, .unsatisfied, "blackhole, another table's and a non-default route are not kept")
        XCTAssertEqual(blackhole.defaultRoutes, [])
    }

    func testRequiredAndProhibitedTypes() {
        let table = Self.table()
        let loopback = path(table, PathConstraints(required: .loopback))
        XCTAssertEqual(loopback.status, .satisfied)
        XCTAssertEqual(loopback.availableInterfaces.map(\.name), ["lo"])
        XCTAssertTrue(loopback.supportsIPv4)
        XCTAssertTrue(loopback.supportsIPv6)
        XCTAssertTrue(loopback.usesInterfaceType(.loopback))
        XCTAssertEqual(loopback.gateways, [])
        XCTAssertEqual(path(table, PathConstraints(required: .wiredEthernet)).status, .satisfied)
        XCTAssertEqual(path(table, PathConstraints(required: .wifi)).status, .unsatisfied)
        XCTAssertEqual(path(table, PathConstraints(prohibited: [.wiredEthernet])).status, .unsatisfied)
        XCTAssertEqual(path(table, PathConstraints(prohibited: [.wifi])).status, .satisfied)
    }

    /// Two interfaces: the lower metric first; IPv6 with a link-local gateway scoped to its interface;
    /// cellular first is expensive.
    func testOrderGatewaysAndExpense() {
        var table = Self.table()
        table.apply(.link(Self.link(3, "wlan0"), removed: false), classify: Self.classify)
        table.insert(AddressRecord(family: 10, index: 3, prefixLength: 64, address: Self.v6(5, prefix: [0x20, 0x01, 0x0d, 0xb8])))
        table.defaultRoutes.insert(DefaultRoute(family: 10, priority: 50, interface: 3, gateway: Self.v6(1, prefix: [0xfe, 0x80])))
        let path = path(table)
        XCTAssertEqual(path.availableInterfaces.map(\.name), ["wlan0", "eth0"])
        XCTAssertTrue(path.usesInterfaceType(.wifi))
        XCTAssertTrue(path.supportsIPv4)
        XCTAssertTrue(path.supportsIPv6)
        let wlan = NWInterface(name: "wlan0", index: 3, type: .wifi)
        XCTAssertEqual(
            path.gateways,
            [
                .hostPort(host: .ipv6(IPv6Address(Data(Self.v6(1, prefix: [0xfe, 0x80])), wlan)!), port: 0),
                .hostPort(host: .ipv4(IPv4Address("192.0.2.1")!), port: 0),
            ])
        var cellular = table
        cellular.links[3]?.type = .cellular
        XCTAssertTrue(self.path(cellular).isExpensive)
    }

    func testTableUpdates() {
        var table = Self.table()
        // A protocol's view of a link updates its flags only, and a bridge's removal is not the link's.
        XCTAssertTrue(
            table.apply(
                .link(LinkRecord(index: 2, name: "", hardwareType: 1, flags: 0x1, family: 10), removed: false), classify: Self.classify))
        XCTAssertEqual(table.links[2]?.record.name, "eth0")
        XCTAssertEqual(table.links[2]?.record.kind, "veth")
        XCTAssertFalse(
            table.apply(
                .link(LinkRecord(index: 2, name: "eth0", hardwareType: 1, flags: 0, family: 7), removed: true), classify: Self.classify))
        XCTAssertNotNil(table.links[2])
        // A message without IFLA_LINKINFO keeps the kind known.
        table.apply(.link(Self.link(2, "eth0"), removed: false), classify: Self.classify)
        XCTAssertEqual(table.links[2]?.type, .wiredEthernet)
        // An IPv4 address removed asks for the routes again; an IPv6 one does not.
        XCTAssertTrue(
            table.apply(
                .address(AddressRecord(family: 2, index: 2, prefixLength: 24, address: [192, 0, 2, 10]), removed: true),
                classify: Self.classify))
        XCTAssertFalse(
            table.apply(
                .address(AddressRecord(family: 10, index: 1, prefixLength: 128, address: Self.v6(1)), removed: true),
                classify: Self.classify))
        // NLM_F_REPLACE takes the place of the route of that family and metric.
        table.apply(
            .route(RouteRecord(family: 2, priority: 100, nextHops: [.init(interface: 2, gateway: [192, 0, 2, 254])]), removed: false),
            flags: 0x100, classify: Self.classify)
        XCTAssertEqual(table.defaultRoutes, [DefaultRoute(family: 2, priority: 100, interface: 2, gateway: [192, 0, 2, 254])])
        table.apply(
            .route(RouteRecord(family: 2, priority: 100, nextHops: [.init(interface: 2, gateway: [192, 0, 2, 254])]), removed: true),
            classify: Self.classify)
        XCTAssertEqual(table.defaultRoutes, [])
        // A link's removal takes its addresses and routes.
        table = Self.table()
        XCTAssertTrue(table.apply(.link(Self.link(2, "eth0"), removed: true), classify: Self.classify))
        XCTAssertEqual(Set(table.addresses.values.map(\.index)), [1])
        XCTAssertEqual(table.defaultRoutes, [])
    }

    // MARK: dumps

    func feed(_ state: inout RoutingState, _ bytes: [UInt8]) -> DumpRequest? {
        state.handle(RoutingMessageParser.parse(bytes), classify: Self.classify)
    }

    func testTheFirstDumpsAndTheirAnswers() throws {
        var state = RoutingState(port: Self.port, firstSequence: 100)
        XCTAssertEqual(state.start(), DumpRequest(kind: .links, sequence: 101))
        XCTAssertFalse(state.isSynchronized)
        // A notification before the dump's answer applies too.
        XCTAssertNil(feed(&state, Wire.link(index: 9, name: "late", flags: Self.up, port: 0)))
        let links = Wire.link(index: 1, name: "lo", hardware: 772, flags: Self.up, sequence: 101, port: Self.port, headerFlags: 2)
        XCTAssertNil(feed(&state, links))
        XCTAssertEqual(feed(&state, Wire.done(sequence: 101, port: Self.port)), DumpRequest(kind: .addresses, sequence: 102))
        XCTAssertEqual(Set(state.table.links.keys), [1, 9], "the dump's links, and the notification's, which came during it")
        XCTAssertEqual(feed(&state, Wire.done(sequence: 102, port: Self.port)), DumpRequest(kind: .routes, sequence: 103))
        let route = Wire.route(family: 2, interface: 1, sequence: 103, port: Self.port, headerFlags: 2)
        XCTAssertNil(feed(&state, route + Wire.done(sequence: 103, port: Self.port)))
        XCTAssertTrue(state.isSynchronized)
        XCTAssertEqual(state.table.defaultRoutes, [DefaultRoute(family: 2, interface: 1)])
        XCTAssertEqual(state.errors, 0)
    }

    func synchronized() -> RoutingState {
        var state = RoutingState(port: Self.port, firstSequence: 0)
        _ = state.start()
        _ = feed(&state, Wire.link(index: 2, name: "eth0", flags: Self.up, kind: "veth", sequence: 1, port: Self.port, headerFlags: 2))
        _ = feed(&state, Wire.done(sequence: 1, port: Self.port))
        _ = feed(&state, Wire.address(family: 2, index: 2, prefix: 24, bytes: [192, 0, 2, 10], sequence: 2, port: Self.port))
        _ = feed(&state, Wire.done(sequence: 2, port: Self.port))
        _ = feed(&state, Wire.route(family: 2, interface: 2, gateway: [192, 0, 2, 1], sequence: 3, port: Self.port))
        _ = feed(&state, Wire.done(sequence: 3, port: Self.port))
        return state
    }

    /// A link going down makes the routes dumped again, and the table is not synchronized until then;
    /// the dump's answer replaces the routes (the kernel's silent removal is then seen).
    func testALinkGoingDownDumpsTheRoutes() {
        var state = synchronized()
        XCTAssertTrue(state.isSynchronized)
        XCTAssertEqual(path(state.table).status, .satisfied)
        XCTAssertEqual(feed(&state, Wire.link(index: 2, name: "eth0", flags: 0, kind: "veth")), DumpRequest(kind: .routes, sequence: 4))
        XCTAssertFalse(state.isSynchronized)
        XCTAssertNil(feed(&state, Wire.done(sequence: 4, port: Self.port)))
        XCTAssertTrue(state.isSynchronized)
        XCTAssertEqual(state.table.defaultRoutes, [])
    }

    /// An interrupted dump (NLM_F_DUMP_INTR) is made again; lost messages (ENOBUFS) make all three again;
    /// an error answer is retried a bounded number of times; a request not sent waits for `resume`.
    func testInterruptedLostAndFailedDumps() {
        var state = synchronized()
        XCTAssertEqual(state.lostMessages(), DumpRequest(kind: .links, sequence: 4))
        XCTAssertNil(
            feed(&state, Wire.link(index: 2, name: "eth0", flags: Self.up, kind: "veth", sequence: 4, port: Self.port, headerFlags: 0x12)))
        XCTAssertEqual(feed(&state, Wire.done(sequence: 4, port: Self.port)), DumpRequest(kind: .links, sequence: 5), "interrupted: again")
        XCTAssertEqual(feed(&state, Wire.done(sequence: 5, port: Self.port)), DumpRequest(kind: .addresses, sequence: 6))
        XCTAssertEqual(state.table.links, [:])
        let busy = Wire.message(type: 2, sequence: 6, port: Self.port, Wire.i32(-16) + [UInt8](repeating: 0, count: 16))
        XCTAssertEqual(feed(&state, busy), DumpRequest(kind: .addresses, sequence: 7))
        state.requestFailed()
        XCTAssertNil(state.dumping)
        XCTAssertEqual(state.resume(), DumpRequest(kind: .addresses, sequence: 8))
        XCTAssertEqual(feed(&state, busy.withSequence(8)), DumpRequest(kind: .addresses, sequence: 9))
        XCTAssertEqual(feed(&state, busy.withSequence(9)), DumpRequest(kind: .routes, sequence: 10), "third failure: given up")
        XCTAssertEqual(state.errors, 3)
        XCTAssertNil(feed(&state, Wire.done(sequence: 10, port: Self.port)))
        XCTAssertTrue(state.isSynchronized)
        // Another socket's answer with our sequence number is a notification, not our dump's.
        XCTAssertEqual(state.lostMessages(), DumpRequest(kind: .links, sequence: 11))
        XCTAssertNil(feed(&state, Wire.done(sequence: 11, port: Self.port + 1)))
        XCTAssertEqual(state.dumping, .links)
        // Malformed datagrams are counted.
        XCTAssertNil(feed(&state, [1, 2, 3]))
        XCTAssertEqual(state.errors, 4)
    }
}

extension [UInt8] {
    fileprivate func withSequence(_ sequence: UInt32) -> [UInt8] {
        var copy = self
        copy.replaceSubrange(8..<12, with: Wire.le32(sequence))
        return copy
    }
}
