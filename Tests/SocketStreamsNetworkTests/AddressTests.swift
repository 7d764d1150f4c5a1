#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// IPv4Address and IPv6Address as Network.framework code uses them: text in, bytes and text out.
final class AddressTests: XCTestCase {
    func testIPv4TextForms() throws {
        let address = try XCTUnwrap(IPv4Address("192.0.2.1"))
        XCTAssertEqual(address.rawValue, Data([192, 0, 2, 1]))
        XCTAssertEqual(address.debugDescription, "192.0.2.1")
        XCTAssertNil(address.interface)
        for invalid in [
            "", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", " 1.2.3.4", "1.2.3.4 ", "1.2.3.4\0", "::1", "a.b.c.d", "1.2.3.-4",
        ] {
            XCTAssertNil(IPv4Address(invalid), invalid.debugDescription)
        }
        XCTAssertEqual(IPv4Address("0.0.0.0"), .any)
        XCTAssertEqual(IPv4Address("255.255.255.255"), .broadcast)
        XCTAssertEqual(IPv4Address("127.0.0.1"), .loopback)
        XCTAssertEqual(IPv4Address.mdnsGroup.debugDescription, "224.0.0.251")
        XCTAssertEqual(IPv4Address.allReportsGroup.debugDescription, "224.0.0.22")
    }

    func testIPv4Properties() {
        XCTAssertTrue(IPv4Address("127.8.9.10")!.isLoopback)
        XCTAssertFalse(IPv4Address("128.0.0.1")!.isLoopback)
        XCTAssertTrue(IPv4Address("169.254.3.4")!.isLinkLocal)
        XCTAssertFalse(IPv4Address("169.255.3.4")!.isLinkLocal)
        XCTAssertTrue(IPv4Address("239.255.255.250")!.isMulticast)
        XCTAssertFalse(IPv4Address("240.0.0.1")!.isMulticast)
        XCTAssertTrue(IPv4Address.allHostsGroup.isMulticast)
    }

    func testRawValues() throws {
        XCTAssertNil(IPv4Address(Data([1, 2, 3])))
        XCTAssertNil(IPv4Address(Data(count: 16)))
        XCTAssertEqual(IPv4Address(Data([10, 0, 0, 1]))?.debugDescription, "10.0.0.1")
        XCTAssertNil(IPv6Address(Data(count: 4)))
        let v6 = try XCTUnwrap(IPv6Address(Data([0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [1])))
        XCTAssertEqual(v6.debugDescription, "fe80::1")
        XCTAssertEqual(v6.rawValue.count, 16)
    }

    func testIPv6TextForms() throws {
        XCTAssertEqual(IPv6Address("::1"), .loopback)
        XCTAssertEqual(IPv6Address("::"), .any)
        XCTAssertEqual(IPv6Address.broadcast, .any, "Apple's IPv6Address.broadcast is ::")
        XCTAssertEqual(IPv6Address("2001:DB8:0:0:0:0:0:1")?.debugDescription, "2001:db8::1")
        XCTAssertEqual(IPv6Address("::ffff:192.0.2.1")?.debugDescription, "::ffff:192.0.2.1")
        XCTAssertEqual(IPv6Address.linkLocalRouters.debugDescription, "ff02::2")
        for invalid in ["", ":", "1::2::3", "12345::", "fe80::1%", "fe80::1%no-such-interface", "::1\0", "[::1]", "127.0.0.1", "g::1"] {
            XCTAssertNil(IPv6Address(invalid), invalid.debugDescription)
        }
    }

    func testScopedIPv6() throws {
        let scoped = try XCTUnwrap(IPv6Address("fe80::1%lo"))
        let interface = try XCTUnwrap(scoped.interface)
        XCTAssertEqual(interface.name, "lo")
        XCTAssertEqual(interface.type, .loopback)
        XCTAssertEqual(interface.index, Int(if_nametoindex("lo")))
        XCTAssertEqual(scoped.debugDescription, "fe80::1%lo")
        XCTAssertEqual(IPv6Address("fe80::1%\(interface.index)"), scoped, "a numeric scope names the same interface")
        XCTAssertNotEqual(IPv6Address("fe80::1"), scoped, "the scope is part of the value")
        XCTAssertEqual(scoped.rawValue, IPv6Address("fe80::1")?.rawValue)
        XCTAssertEqual(NWEndpoint.Host("fe80::1%lo").interface, interface)
        XCTAssertEqual(NWEndpoint.Host("fe80::1%lo").debugDescription, "fe80::1%lo")
    }

    func testIPv6Properties() throws {
        let mapped = try XCTUnwrap(IPv6Address("::ffff:10.1.2.3"))
        XCTAssertTrue(mapped.isIPv4Mapped)
        XCTAssertFalse(mapped.isIPv4Compatabile)
        XCTAssertEqual(mapped.asIPv4, IPv4Address("10.1.2.3"))
        let compatible = try XCTUnwrap(IPv6Address("::10.1.2.3"))
        XCTAssertTrue(compatible.isIPv4Compatabile)
        XCTAssertEqual(compatible.asIPv4, IPv4Address("10.1.2.3"))
        XCTAssertFalse(IPv6Address.loopback.isIPv4Compatabile)
        XCTAssertFalse(IPv6Address.any.isIPv4Compatabile)
        XCTAssertNil(IPv6Address("2001:db8::1")!.asIPv4)
        XCTAssertTrue(IPv6Address.any.isAny)
        XCTAssertTrue(IPv6Address.loopback.isLoopback)
        XCTAssertFalse(IPv6Address.any.isLoopback)
        XCTAssertTrue(IPv6Address("febf::1")!.isLinkLocal)
        XCTAssertFalse(IPv6Address("fec0::1")!.isLinkLocal)
        XCTAssertTrue(IPv6Address("2002:c000:0201::1")!.is6to4)
        XCTAssertTrue(IPv6Address("fd00::1")!.isUniqueLocal)
        XCTAssertFalse(IPv6Address("fe00::1")!.isUniqueLocal)
        XCTAssertTrue(IPv6Address.linkLocalNodes.isMulticast)
        XCTAssertEqual(IPv6Address.nodeLocalNodes.multicastScope, .nodeLocal)
        XCTAssertEqual(IPv6Address.linkLocalNodes.multicastScope, .linkLocal)
        XCTAssertEqual(IPv6Address("ff0e::1")!.multicastScope, .global)
        XCTAssertEqual(IPv6Address("ff05::1")!.multicastScope?.rawValue, 5)
        XCTAssertNil(IPv6Address("ff03::1")!.multicastScope, "scope 3 is unassigned")
        XCTAssertNil(IPv6Address.loopback.multicastScope)
    }

    func testHashing() {
        let set: Set<IPv4Address> = [IPv4Address("10.0.0.1")!, IPv4Address(Data([10, 0, 0, 1]))!, .loopback]
        XCTAssertEqual(set.count, 2)
        let v6: Set<IPv6Address> = [IPv6Address("::1")!, .loopback, IPv6Address("fe80::1")!, IPv6Address("fe80::1%lo")!]
        XCTAssertEqual(v6.count, 3)
    }

    // MARK: - Against glibc

    /// glibc's own answer for `text`: the bytes, or nil.
    private func pton(_ family: Int32, _ text: String) -> Data? {
        var bytes = [UInt8](repeating: 0, count: family == AF_INET ? 4 : 16)
        let parsed = bytes.withUnsafeMutableBytes { inet_pton(family, text, $0.baseAddress) }
        return parsed == 1 ? Data(bytes) : nil
    }

    private func assertAgreesWithGlibc(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(IPv4Address(text)?.rawValue, pton(AF_INET, text), "IPv4 \(text.debugDescription)", file: file, line: line)
        if !text.contains("%") {
            XCTAssertEqual(IPv6Address(text)?.rawValue, pton(AF_INET6, text), "IPv6 \(text.debugDescription)", file: file, line: line)
        }
    }

    /// Every prefix, every suffix and every one-byte deletion of valid addresses parses exactly as
    /// `inet_pton` does.
    func testEveryByteBoundaryAgreesWithGlibc() {
        let samples = [
            "192.168.100.200", "0.0.0.0", "255.255.255.255", "1.2.3.4", "2001:db8:85a3::8a2e:370:7334", "::ffff:192.0.2.128",
            "fe80::1", "::", "::1", "1:2:3:4:5:6:7:8", "1::8", "::2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4",
        ]
        for sample in samples {
            let bytes = Array(sample.utf8)
            for cut in 0...bytes.count {
                assertAgreesWithGlibc(String(decoding: bytes[..<cut], as: UTF8.self))
                assertAgreesWithGlibc(String(decoding: bytes[cut...], as: UTF8.self))
                if cut < bytes.count {
                    var dropped = bytes
                    dropped.remove(at: cut)
                    assertAgreesWithGlibc(String(decoding: dropped, as: UTF8.self))
                }
            }
        }
    }

    /// Random strings over the characters addresses are made of agree with `inet_pton` too.
    func testRandomStringsAgreeWithGlibc() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let alphabet = Array("0123456789abcdefABCDEF:.:.:. x%")
        var accepted = 0
        for _ in 0..<20_000 {
            let length = Int(next() % 24)
            let text = String((0..<length).map { _ in alphabet[Int(next() % UInt64(alphabet.count))] })
            if IPv4Address(text) != nil || IPv6Address(text) != nil { accepted += 1 }
            assertAgreesWithGlibc(text)
        }
        XCTAssertGreaterThan(accepted, 0, "the random strings include some valid addresses")
    }
}
