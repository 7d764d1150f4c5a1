#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The proxy properties as Apple code spells them: what `setProperty` accepts and refuses, and what
/// reads back. No network is needed: nothing is opened unless a test says so.
final class ProxyPropertyTests: SocketStreamsTestCase {
    let socksKey = Stream.PropertyKey.socksProxyConfigurationKey

    func pair(_ host: String = "example.com", port: Int = 443) -> StreamPair { makePair(host: host, port: port) }

    func proxy(of pair: StreamPair) -> ProxyConfiguration? {
        pair.input.property(forKey: .proxyConfigurationKey) as? ProxyConfiguration
    }

    /// Foundation's own key type and version constants, as Apple sample code writes them.
    func testFoundationSpelling() {
        let pair = self.pair()
        let settings: [StreamSOCKSProxyConfiguration: Any] = [
            .hostKey: "127.0.0.1", .portKey: 1081, .versionKey: StreamSOCKSProxyVersion.version4,
            .userKey: "me", .passwordKey: "unused",
        ]
        XCTAssertTrue(pair.output.setProperty(settings, forKey: socksKey))
        XCTAssertEqual(
            proxy(of: pair), ProxyConfiguration(kind: .socks4, host: "127.0.0.1", port: 1081, username: "me", password: "unused"))
        // Reads back as set, from either stream, password included (as CFNetwork does).
        let back = pair.input.property(forKey: socksKey) as? [StreamSOCKSProxyConfiguration: Any]
        XCTAssertEqual(back?[.hostKey] as? String, "127.0.0.1")
        XCTAssertEqual(back?[.passwordKey] as? String, "unused")
        XCTAssertEqual(back?[.versionKey] as? StreamSOCKSProxyVersion, .version4)
    }

    /// CoreFoundation's raw key strings (Darwin's `SOCKSProxy`/`SOCKSPort`), as a `[String: Any]`;
    /// version 5 and port 1080 are the defaults.
    func testCoreFoundationRawStrings() {
        let pair = self.pair()
        XCTAssertTrue(pair.input.setProperty(["SOCKSProxy": "proxy.example"] as [String: Any], forKey: socksKey))
        XCTAssertEqual(proxy(of: pair), .socks5(host: "proxy.example", port: 1080))
        let full: [String: Any] = [
            kCFStreamPropertySOCKSProxyHost as String: "::1", kCFStreamPropertySOCKSProxyPort as String: NSNumber(value: 9050),
            kCFStreamPropertySOCKSVersion as String: (kCFStreamSocketSOCKSVersion5 as String), kCFStreamPropertySOCKSUser as String: "u",
            kCFStreamPropertySOCKSPassword as String: "p", "SOCKSEnable": 1, "SomethingElse": "ignored",
        ]
        XCTAssertTrue(pair.input.setProperty(full as NSDictionary, forKey: socksKey))
        XCTAssertEqual(proxy(of: pair), .socks5(host: "::1", port: 9050, username: "u", password: "p"))
        XCTAssertEqual((pair.output.property(forKey: socksKey) as? NSDictionary)?["SOCKSPort"] as? Int, 9050)
        // The same through the CF-named string key.
        XCTAssertTrue(
            pair.input.setProperty(
                ["NSStreamSOCKSProxyKey": "h", "NSStreamSOCKSPortKey": 1] as [String: Any],
                forKey: Stream.PropertyKey(kCFStreamPropertySOCKSProxy as String)))
        XCTAssertEqual(proxy(of: pair), .socks5(host: "h", port: 1))
    }

    /// SystemConfiguration's extra keys, as CFNetwork reads them.
    func testSystemConfigurationKeys() {
        let pair = self.pair("db.internal.example")
        XCTAssertTrue(pair.input.setProperty(["SOCKSProxy": "p", "SOCKSEnable": 0] as [String: Any], forKey: socksKey))
        XCTAssertNil(proxy(of: pair), "SOCKSEnable 0 means no proxy")
        XCTAssertFalse(
            pair.input.setProperty(["SOCKSProxy": "p", "ExceptionsList": ["*.example"]] as [String: Any], forKey: socksKey),
            "an excluded target refuses the proxy")
        XCTAssertTrue(pair.input.setProperty(["SOCKSProxy": "p", "ExceptionsList": ["other.example"]] as [String: Any], forKey: socksKey))
        let simple = self.pair("printer")
        XCTAssertFalse(simple.input.setProperty(["SOCKSProxy": "p", "ExcludeSimpleHostnames": 1] as [String: Any], forKey: socksKey))
    }

    /// Every value that cannot be honoured is `false`, and leaves the proxy as it was.
    func testRefusedValues() {
        let pair = self.pair()
        XCTAssertTrue(pair.input.setProperty(ProxyConfiguration.socks5(host: "good", port: 1), forKey: .proxyConfigurationKey))
        let refused: [(String, Any)] = [
            ("not a dictionary", "SOCKSProxy"),
            ("no host", ["SOCKSPort": 1080]),
            ("empty host", ["SOCKSProxy": ""]),
            ("host not a string", ["SOCKSProxy": 12]),
            ("port 0", ["SOCKSProxy": "h", "SOCKSPort": 0]),
            ("port 65536", ["SOCKSProxy": "h", "SOCKSPort": 65536]),
            ("port negative", ["SOCKSProxy": "h", "SOCKSPort": -1]),
            ("port fractional", ["SOCKSProxy": "h", "SOCKSPort": 1080.5]),
            ("port a string", ["SOCKSProxy": "h", "SOCKSPort": "1080"]),
            ("port a Bool", ["SOCKSProxy": "h", "SOCKSPort": true]),
            ("version 6", ["SOCKSProxy": "h", kCFStreamPropertySOCKSVersion as String: "kCFStreamSocketSOCKSVersion6"]),
            ("version a number", ["SOCKSProxy": "h", kCFStreamPropertySOCKSVersion as String: 5]),
            (
                "user too long",
                [
                    "SOCKSProxy": "h", kCFStreamPropertySOCKSUser as String: String(repeating: "u", count: 256),
                    kCFStreamPropertySOCKSPassword as String: "p",
                ]
            ),
            (
                "password too long",
                [
                    "SOCKSProxy": "h", kCFStreamPropertySOCKSUser as String: "u",
                    kCFStreamPropertySOCKSPassword as String: String(repeating: "p", count: 256),
                ]
            ),
            ("user not a string", ["SOCKSProxy": "h", kCFStreamPropertySOCKSUser as String: 7]),
            ("host with a space", ["SOCKSProxy": "a b"]),
        ]
        for (what, value) in refused {
            XCTAssertFalse(pair.input.setProperty(value, forKey: socksKey), what)
            XCTAssertEqual(proxy(of: pair), .socks5(host: "good", port: 1), what)
        }
        XCTAssertFalse(pair.input.setProperty("socks5://h", forKey: .proxyConfigurationKey), "a URL string is not a configuration")
        XCTAssertFalse(
            pair.input.setProperty(
                ProxyConfiguration.httpConnect(host: "h", port: 3128, username: "a:b"),
                forKey: .proxyConfigurationKey), "a colon in a Basic user-id")
        XCTAssertFalse(
            pair.input.setProperty(
                ProxyConfiguration.httpConnect(
                    host: "h", port: 3128,
                    additionalHeaders: [("X-Evil", "a\r\nInjected: 1")]),
                forKey: .proxyConfigurationKey), "CRLF in a header value")
        XCTAssertFalse(
            pair.input.setProperty(
                ProxyConfiguration.httpConnect(
                    host: "h", port: 3128,
                    additionalHeaders: [("Bad Name", "v")]),
                forKey: .proxyConfigurationKey), "a header name that is not a token")
        XCTAssertFalse(pair.input.setProperty(ProxyConfiguration.socks4(host: "h", userID: "a\u{0}b"), forKey: .proxyConfigurationKey))
    }

    /// Targets a proxy cannot be asked for refuse the proxy: names that would break the request, names
    /// longer than SOCKS5 allows, IPv6 through SOCKS4.
    func testTargetsAProxyCannotCarry() {
        XCTAssertFalse(
            pair("evil.example\r\nX-Injected: 1").input.setProperty(
                ProxyConfiguration.httpConnect(host: "h", port: 3128), forKey: .proxyConfigurationKey))
        XCTAssertFalse(pair("a b").input.setProperty(["SOCKSProxy": "h"] as [String: Any], forKey: socksKey))
        let long = String(repeating: "a", count: 256)
        XCTAssertFalse(pair(long).input.setProperty(["SOCKSProxy": "h"] as [String: Any], forKey: socksKey))
        XCTAssertTrue(
            pair(long).input.setProperty(ProxyConfiguration.socks4(host: "h"), forKey: .proxyConfigurationKey),
            "SOCKS4a names have no length byte")
        XCTAssertFalse(pair("::1").input.setProperty(ProxyConfiguration.socks4(host: "h"), forKey: .proxyConfigurationKey))
        XCTAssertTrue(pair("::1").input.setProperty(ProxyConfiguration.socks5(host: "h"), forKey: .proxyConfigurationKey))
    }

    /// nil or NSNull removes the proxy; so does an equivalent through another key.
    func testRemoving() {
        let pair = self.pair()
        XCTAssertTrue(pair.input.setProperty(["SOCKSProxy": "h"] as [String: Any], forKey: socksKey))
        XCTAssertTrue(pair.input.setProperty(nil, forKey: socksKey))
        XCTAssertNil(proxy(of: pair))
        XCTAssertNil(pair.input.property(forKey: socksKey))
        XCTAssertTrue(pair.input.setProperty(ProxyConfiguration.httpConnect(host: "h", port: 1), forKey: .proxyConfigurationKey))
        XCTAssertTrue(pair.input.setProperty(NSNull(), forKey: .proxyConfigurationKey))
        XCTAssertNil(proxy(of: pair))
    }

    /// The CONNECT SPI dictionary: host and port required, additional headers sent in name order.
    func testCONNECTDictionary() {
        let pair = self.pair()
        let key = Stream.PropertyKey(kCFStreamPropertyCONNECTProxy as String)
        XCTAssertFalse(pair.input.setProperty([kCFStreamPropertyCONNECTProxyHost as String: "h"] as [String: Any], forKey: key))
        XCTAssertTrue(
            pair.input.setProperty(
                [
                    kCFStreamPropertyCONNECTProxyHost as String: "h", kCFStreamPropertyCONNECTProxyPort as String: 3128,
                    kCFStreamPropertyCONNECTAdditionalHeaders as String: ["User-Agent": "x", "Proxy-Authorization": "Bearer t"],
                ] as [String: Any], forKey: key))
        let configured = proxy(of: pair)
        XCTAssertEqual(configured?.kind, .httpConnect)
        XCTAssertEqual(configured?.additionalHeaders.map(\.name), ["Proxy-Authorization", "User-Agent"])
        XCTAssertNotNil(pair.input.property(forKey: key) as? [String: Any])
        XCTAssertNil(pair.input.property(forKey: socksKey), "only the key that was set reads back")
    }

    /// Not after open, not on native-socket or Unix pairs (CFNetwork refuses these too).
    func testOnlyBeforeOpenAndOnlyForHostPairs() throws {
        let server = try startRawServer { connection in _ = try? connection.readToEOF() }
        let opened = makePair(port: server.port)
        opened.input.open()
        XCTAssertFalse(opened.input.setProperty(["SOCKSProxy": "h"] as [String: Any], forKey: socksKey))
        XCTAssertFalse(opened.input.setProperty(nil, forKey: socksKey))

        let (a, b) = try RawSocket.socketPair()
        defer { Glibc.close(b) }
        let native = createStreamPair(nativeSocket: a)
        closeAfterTest(native)
        XCTAssertFalse(native.input.setProperty(["SOCKSProxy": "h"] as [String: Any], forKey: socksKey))
        native.input.setProperty(true, forKey: Stream.PropertyKey(kCFStreamPropertyShouldCloseNativeSocket as String))

        let unix = createStreamPair(unixSocketPath: "/tmp/none.sock")
        closeAfterTest(unix)
        XCTAssertFalse(unix.input.setProperty(ProxyConfiguration.socks5(host: "h"), forKey: .proxyConfigurationKey))
    }

    func testDescriptionNeverShowsThePassword() {
        let configuration = ProxyConfiguration.socks5(host: "127.0.0.1", port: 1080, username: "u", password: "hunter2")
        XCTAssertEqual(configuration.description, "SOCKS5 proxy 127.0.0.1 port 1080")
        XCTAssertFalse("\(configuration)".contains("hunter2"))
    }
}
