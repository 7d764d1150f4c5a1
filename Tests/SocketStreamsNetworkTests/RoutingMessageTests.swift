import SocketStreamsNetwork
import XCTest

/// Builds rtnetlink messages as the kernel lays them out (host byte order, 4-byte padding).
enum Wire {
    static func attribute(_ type: UInt16, _ value: [UInt8]) -> [UInt8] {
        var bytes = le16(UInt16(4 + value.count)) + le16(type) + value
        while bytes.count % 4 != 0 { bytes.append(0) }
        return bytes
    }

    static func string(_ type: UInt16, _ text: String) -> [UInt8] { attribute(type, Array(text.utf8) + [0]) }
    static func le16(_ value: UInt16) -> [UInt8] { withUnsafeBytes(of: value) { Array($0) } }
    static func le32(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value) { Array($0) } }
    static func i32(_ value: Int32) -> [UInt8] { le32(UInt32(bitPattern: value)) }

    static func message(type: UInt16, flags: UInt16 = 0, sequence: UInt32 = 0, port: UInt32 = 0, _ payload: [UInt8]) -> [UInt8] {
        var bytes = le32(UInt32(16 + payload.count)) + le16(type) + le16(flags) + le32(sequence) + le32(port) + payload
        while bytes.count % 4 != 0 { bytes.append(0) }
        return bytes
    }

    static func link(
        index: Int32, name: String, hardware: UInt16 = 1, flags: UInt32, kind: String? = nil, family: UInt8 = 0, removed: Bool = false,
        sequence: UInt32 = 0, port: UInt32 = 0, headerFlags: UInt16 = 0
    ) -> [UInt8] {
        var payload = [family, 0] + le16(hardware) + i32(index) + le32(flags) + le32(0xFFFF_FFFF)
        payload += string(3, name)
        if let kind { payload += attribute(18 | 0x8000, string(1, kind)) }
        return message(type: removed ? 17 : 16, flags: headerFlags, sequence: sequence, port: port, payload)
    }

    static func address(
        family: UInt8, index: Int32, prefix: UInt8, scope: UInt8 = 0, flags: UInt32 = 0, bytes: [UInt8], removed: Bool = false,
        sequence: UInt32 = 0, port: UInt32 = 0, headerFlags: UInt16 = 0
    ) -> [UInt8] {
        var payload = [family, prefix, UInt8(truncatingIfNeeded: flags), scope] + le32(UInt32(bitPattern: index))
        payload += attribute(1, bytes)
        if family == 2 { payload += attribute(2, bytes) }
        payload += attribute(8, le32(flags))
        return message(type: removed ? 21 : 20, flags: headerFlags, sequence: sequence, port: port, payload)
    }

    static func route(
        family: UInt8, destinationLength: UInt8 = 0, table: UInt8 = 254, type: UInt8 = 1, interface: Int32, gateway: [UInt8]? = nil,
        priority: UInt32? = nil, removed: Bool = false, sequence: UInt32 = 0, port: UInt32 = 0, headerFlags: UInt16 = 0
    ) -> [UInt8] {
        var payload: [UInt8] = [family, destinationLength, 0, 0, table, 4, 0, type] + le32(0)
        payload += attribute(15, le32(UInt32(table)))
        if destinationLength > 0 { payload += attribute(1, [UInt8](repeating: 10, count: family == 2 ? 4 : 16)) }
        if let priority { payload += attribute(6, le32(priority)) }
        if let gateway { payload += attribute(5, gateway) }
        payload += attribute(4, i32(interface))
        return message(type: removed ? 25 : 24, flags: headerFlags, sequence: sequence, port: port, payload)
    }

    static func done(sequence: UInt32, port: UInt32) -> [UInt8] { message(type: 3, flags: 2, sequence: sequence, port: port, i32(0)) }
}

/// The rtnetlink parser on byte buffers: each message type, every cut of a datagram, malformed and
/// fuzzed input (never a crash, always a counted skip).
final class RoutingMessageTests: XCTestCase {
    let dummy = Wire.link(index: 3, name: "dummy0", flags: 0x1 | 0x40 | 0x10000, kind: "dummy")

    func testALinkAnAddressAndARoute() {
        let datagram =
            dummy + Wire.address(family: 2, index: 3, prefix: 24, bytes: [10, 9, 0, 2])
            + Wire.route(family: 2, interface: 3, gateway: [10, 9, 0, 1], priority: 100)
        let parsed = RoutingMessageParser.parse(datagram)
        XCTAssertEqual(parsed.malformed, 0)
        XCTAssertEqual(
            parsed.messages.map(\.body),
            [
                .link(LinkRecord(index: 3, name: "dummy0", hardwareType: 1, flags: 0x10041, kind: "dummy"), removed: false),
                .address(AddressRecord(family: 2, index: 3, prefixLength: 24, address: [10, 9, 0, 2]), removed: false),
                .route(
                    RouteRecord(family: 2, priority: 100, nextHops: [RouteRecord.NextHop(interface: 3, gateway: [10, 9, 0, 1])]),
                    removed: false),
            ])
        XCTAssertEqual(parsed.messages[0].header, NetlinkHeader(type: Netlink.newLink))
    }

    func testRemovalsDoneAndErrors() {
        let datagram =
            Wire.link(index: 3, name: "dummy0", flags: 0, removed: true)
            + Wire.address(
                family: 10, index: 3, prefix: 64, scope: 253, flags: 0x40, bytes: [0xFE, 0x80] + [UInt8](repeating: 0, count: 14),
                removed: true)
            + Wire.route(family: 10, interface: 3, removed: true) + Wire.done(sequence: 7, port: 99)
            + Wire.message(type: 2, sequence: 8, port: 99, Wire.i32(-16) + [UInt8](repeating: 0, count: 16)) + Wire.message(type: 1, [])
        let parsed = RoutingMessageParser.parse(datagram)
        XCTAssertEqual(parsed.malformed, 0)
        XCTAssertEqual(parsed.messages.count, 6)
        XCTAssertEqual(
            parsed.messages[1].body,
            .address(
                AddressRecord(
                    family: 10, index: 3, prefixLength: 64, scope: 253, flags: 0x40,
                    address: [0xFE, 0x80] + [UInt8](repeating: 0, count: 14)),
                removed: true))
        XCTAssertEqual(parsed.messages[3], RoutingMessage(header: NetlinkHeader(type: 3, flags: 2, sequence: 7, port: 99), body: .done))
        XCTAssertEqual(parsed.messages[4].body, .error(code: -16))
        XCTAssertEqual(parsed.messages[5].body, .other)
    }

    func testMultipathNextHops() {
        func hop(_ index: Int32, _ gateway: [UInt8]) -> [UInt8] {
            let attributes = Wire.attribute(5, gateway)
            return Wire.le16(UInt16(8 + attributes.count)) + [0, 0] + Wire.i32(index) + attributes
        }
        let payload: [UInt8] =
            [2, 0, 0, 0, 254, 4, 0, 1] + Wire.le32(0) + Wire.attribute(9, hop(3, [10, 0, 0, 1]) + hop(4, [10, 1, 0, 1]))
        let parsed = RoutingMessageParser.parse(Wire.message(type: 24, payload))
        XCTAssertEqual(
            parsed.messages.map(\.body),
            [
                .route(
                    RouteRecord(
                        family: 2, nextHops: [.init(interface: 3, gateway: [10, 0, 0, 1]), .init(interface: 4, gateway: [10, 1, 0, 1])]),
                    removed: false)
            ])
    }

    /// A datagram cut at every byte: the whole messages before the cut are kept, a cut inside one counts
    /// one error, and nothing else comes out.
    func testEveryCutOfADatagram() {
        let messages = [dummy, Wire.address(family: 2, index: 3, prefix: 24, bytes: [10, 9, 0, 2]), Wire.route(family: 2, interface: 3)]
        let datagram = messages.flatMap { $0 }
        let whole = RoutingMessageParser.parse(datagram).messages
        var ends: [Int] = []
        var end = 0
        for message in messages {
            end += message.count
            ends.append(end)
        }
        for cut in 0...datagram.count {
            let parsed = RoutingMessageParser.parse(Array(datagram[0..<cut]))
            let complete = ends.filter { $0 <= cut }.count
            XCTAssertEqual(parsed.messages, Array(whole.prefix(complete)), "cut at \(cut)")
            XCTAssertEqual(parsed.malformed, ends.contains(cut) || cut == 0 ? 0 : 1, "cut at \(cut)")
        }
    }

    /// Impossible lengths end the datagram; a body too short or an attribute that does not fit skips its
    /// message only.
    func testMalformedMessagesAreSkippedAndCounted() {
        var shortLength = dummy
        shortLength.replaceSubrange(0..<4, with: Wire.le32(8))
        XCTAssertEqual(RoutingMessageParser.parse(shortLength + dummy), ParsedDatagram(messages: [], malformed: 1))
        var longLength = dummy
        longLength.replaceSubrange(0..<4, with: Wire.le32(10_000))
        XCTAssertEqual(RoutingMessageParser.parse(dummy + longLength).messages.count, 1)
        XCTAssertEqual(RoutingMessageParser.parse(dummy + longLength).malformed, 1)
        let shortBody = Wire.message(type: 16, [0, 0, 1, 0])
        XCTAssertEqual(RoutingMessageParser.parse(shortBody + dummy).messages.count, 1)
        XCTAssertEqual(RoutingMessageParser.parse(shortBody + dummy).malformed, 1)
        let badAttribute = Wire.message(type: 20, [2, 24, 0, 0] + Wire.le32(3) + Wire.le16(200) + Wire.le16(1) + [10, 9, 0, 2])
        XCTAssertEqual(RoutingMessageParser.parse(badAttribute + dummy).malformed, 1)
        let wrongAddressSize = Wire.message(type: 20, [2, 24, 0, 0] + Wire.le32(3) + Wire.attribute(1, [10, 9, 0]))
        XCTAssertEqual(RoutingMessageParser.parse(wrongAddressSize).malformed, 1)
        let noAddress = Wire.message(type: 20, [2, 24, 0, 0] + Wire.le32(3))
        XCTAssertEqual(RoutingMessageParser.parse(noAddress).malformed, 1)
        let zeroAttribute = Wire.message(type: 24, [2, 0, 0, 0, 254, 4, 0, 1] + Wire.le32(0) + Wire.le16(0) + Wire.le16(4))
        XCTAssertEqual(RoutingMessageParser.parse(zeroAttribute).malformed, 1)
        XCTAssertEqual(RoutingMessageParser.parse([]), ParsedDatagram())
    }

    /// Random mutations of real messages (bytes flipped, lengths changed, cut, spliced): the parser never
    /// crashes, never reports more messages than could fit, and counts at most one error a message.
    func testFuzzedDatagramsNeverCrash() {
        var random = SystemRandomNumberGenerator()
        let seeds = [
            dummy, Wire.address(family: 10, index: 3, prefix: 64, bytes: [UInt8](repeating: 0x20, count: 16)),
            Wire.route(family: 2, interface: 3, gateway: [10, 9, 0, 1], priority: 5), Wire.done(sequence: 1, port: 1),
        ]
        for _ in 0..<20_000 {
            var datagram: [UInt8] = []
            for _ in 0..<Int.random(in: 1...4, using: &random) { datagram += seeds.randomElement(using: &random)! }
            for _ in 0..<Int.random(in: 0...6, using: &random) {
                let index = Int.random(in: 0..<datagram.count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0: datagram[index] = UInt8.random(in: 0...255, using: &random)
                case 1: datagram[index] ^= 1 << UInt8.random(in: 0...7, using: &random)
                case 2: datagram = Array(datagram[0..<index])
                default: datagram.insert(UInt8.random(in: 0...255, using: &random), at: index)
                }
                if datagram.isEmpty { break }
            }
            let parsed = RoutingMessageParser.parse(datagram)
            XCTAssertLessThanOrEqual(parsed.messages.count + parsed.malformed, datagram.count / 16 + 1)
        }
    }

    func testDumpRequests() {
        let request = RoutingMessageParser.dumpRequest(type: Netlink.getRoute, sequence: 42)
        XCTAssertEqual(
            request, Wire.le32(28) + Wire.le16(26) + Wire.le16(0x301) + Wire.le32(42) + Wire.le32(0) + [UInt8](repeating: 0, count: 12))
        XCTAssertEqual(RoutingMessageParser.dumpRequest(type: Netlink.getLink, sequence: 1).count, 32)
        XCTAssertEqual(RoutingMessageParser.dumpRequest(type: Netlink.getAddress, sequence: 1).count, 24)
    }
}
