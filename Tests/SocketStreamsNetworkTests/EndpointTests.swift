#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import XCTest

/// NWEndpoint, its Host and its Port as Network.framework code builds and prints them.
final class EndpointTests: XCTestCase {
    func testHostFromText() {
        XCTAssertEqual(NWEndpoint.Host("192.0.2.1"), .ipv4(IPv4Address("192.0.2.1")!))
        XCTAssertEqual(NWEndpoint.Host("::1"), .ipv6(.loopback))
        XCTAssertEqual(NWEndpoint.Host("::ffff:192.0.2.1"), .ipv4(IPv4Address("192.0.2.1")!), "an IPv4-mapped literal is IPv4")
        XCTAssertEqual(NWEndpoint.Host("example.com"), .name("example.com", nil))
        XCTAssertEqual(NWEndpoint.Host("256.1.1.1"), .name("256.1.1.1", nil))
        let literal: NWEndpoint.Host = "localhost"
        XCTAssertEqual(literal, .name("localhost", nil))
        XCTAssertNil(literal.interface)
    }

    func testPrintedForms() {
        let v4 = NWEndpoint.hostPort(host: "127.0.0.1", port: 8080)
        XCTAssertEqual("\(v4)", "127.0.0.1:8080")
        XCTAssertEqual(v4.debugDescription, "127.0.0.1:8080")
        XCTAssertEqual("\(NWEndpoint.hostPort(host: "example.com", port: .https))", "example.com:443")
        XCTAssertEqual("\(NWEndpoint.hostPort(host: "::1", port: 443))", "::1:443")
        XCTAssertEqual(NWEndpoint.Host.name("example.com", nil).debugDescription, "example.com")
        XCTAssertEqual(NWEndpoint.Port.http.debugDescription, "80")
        XCTAssertEqual("\(NWEndpoint.Port(rawValue: 65535)!)", "65535")
        XCTAssertEqual(NWEndpoint.unix(path: "/tmp/s.sock").debugDescription, "/tmp/s.sock")
        XCTAssertEqual(NWEndpoint.url(URL(string: "https://example.com/a")!).debugDescription, "https://example.com/a")
        XCTAssertEqual(
            NWEndpoint.service(name: "Printer", type: "_ipp._tcp", domain: "local.", interface: nil).debugDescription,
            "Printer._ipp._tcp.local.")
    }

    func testPorts() {
        XCTAssertEqual(NWEndpoint.Port("80"), .http)
        XCTAssertEqual(NWEndpoint.Port("0"), .any)
        XCTAssertEqual(NWEndpoint.Port("65535")?.rawValue, 65535)
        XCTAssertEqual(NWEndpoint.Port("0080")?.rawValue, 80)
        for invalid in ["65536", "-1", "", "http", "https", " 80", "80 ", "+80", "8 0", "0x50", "99999999999999999999"] {
            XCTAssertNil(NWEndpoint.Port(invalid), invalid.debugDescription)
        }
        XCTAssertEqual(NWEndpoint.Port(rawValue: 0), .any)
        XCTAssertEqual(NWEndpoint.Port(integerLiteral: 22), .ssh)
        let literal: NWEndpoint.Port = 1080
        XCTAssertEqual(literal, .socks)
        XCTAssertEqual(
            [NWEndpoint.Port.any, .ssh, .smtp, .http, .pop, .imap, .https, .imaps, .socks].map(\.rawValue),
            [0, 22, 25, 80, 110, 143, 443, 993, 1080])
    }

    func testEqualityAndHashing() {
        let a = NWEndpoint.hostPort(host: "127.0.0.1", port: 80)
        let b = NWEndpoint.hostPort(host: .ipv4(.loopback), port: .http)
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a, .hostPort(host: "127.0.0.1", port: 81))
        XCTAssertNotEqual(a, .hostPort(host: .name("127.0.0.1", nil), port: 80), "a name is not an address")
        let set: Set<NWEndpoint> = [a, b, .unix(path: "/x"), .unix(path: "/x"), .url(URL(string: "http://h")!)]
        XCTAssertEqual(set.count, 3)
        XCTAssertEqual(Set<NWEndpoint.Port>([80, .http, 443]).count, 2)
    }

    func testInterfaces() {
        let scoped = NWEndpoint.hostPort(host: "fe80::1%lo", port: 80)
        XCTAssertEqual(scoped.interface?.name, "lo")
        XCTAssertEqual(scoped.interface?.debugDescription, "lo")
        XCTAssertNil(NWEndpoint.hostPort(host: "127.0.0.1", port: 80).interface)
        XCTAssertNil(NWEndpoint.unix(path: "/x").interface)
    }
}
