import Foundation
import SocketStreams
@testable import StreamGetCore
import XCTest

/// `stream-get`'s proxy options and environment, as curl reads them (no network).
final class StreamGetProxyOptionTests: XCTestCase {
    let http = try! HTTPURL(parsing: "http://example.com/")
    let https = try! HTTPURL(parsing: "https://example.com/")

    func route(_ url: HTTPURL, _ arguments: [String], environment: [String: String]? = [:]) throws -> StreamGetProxyRoute? {
        let options = try StreamGetOptions(arguments: arguments + [url.description])
        return try StreamGetProxyRoute.route(
            for: url, proxy: options.proxy, proxyUser: options.proxyUser,
            noProxy: options.noProxy, environment: environment)
    }

    func testFlagsAndSchemes() throws {
        let cases: [([String], ProxyConfiguration, Bool)] = [
            (["--socks4", "127.0.0.1:1081"], .socks4(host: "127.0.0.1", port: 1081), true),
            (["--socks4a", "proxy"], .socks4(host: "proxy", port: 1080), false),
            (["--socks5", "[::1]:9050"], .socks5(host: "::1", port: 9050), true),
            (["--socks5-hostname", "proxy:1"], .socks5(host: "proxy", port: 1), false),
            (["-x", "proxy"], .httpConnect(host: "proxy", port: 1080), false),
            (["--proxy", "http://proxy:3128/"], .httpConnect(host: "proxy", port: 3128), false),
            (["-x", "socks5h://u%3Aa:p%40ss@proxy:1080"], .socks5(host: "proxy", port: 1080, username: "u:a", password: "p@ss"), false),
            (["-x", "socks4a://proxy", "-U", "id"], ProxyConfiguration(kind: .socks4, host: "proxy", port: 1080, username: "id"), false),
            (
                ["-x", "http://a:b@proxy:8080", "-U", "user:pa:ss"],
                .httpConnect(host: "proxy", port: 8080, username: "user", password: "pa:ss"), false
            ),
            (["--socks5", "a:1", "-x", "b:2"], .httpConnect(host: "b", port: 2), false),  // the last one wins
            (["-p", "-x", "proxy:80"], .httpConnect(host: "proxy", port: 80), false),
        ]
        for (arguments, configuration, local) in cases {
            let chosen = try XCTUnwrap(try route(http, arguments), "\(arguments)")
            XCTAssertEqual(chosen.configuration, configuration, "\(arguments)")
            XCTAssertEqual(chosen.resolvesLocally, local, "\(arguments)")
        }
        XCTAssertNil(try route(http, []))
    }

    func testUnusableProxies() {
        for proxy in [
            "https://proxy:443", "ftp://proxy", "proxy:99999", "proxy:65536", "http://proxy/path", "[::1", "a b", "socks5://%zz@p",
        ] {
            XCTAssertThrowsError(try route(http, ["-x", proxy]), proxy)
        }
        XCTAssertThrowsError(try StreamGetOptions(arguments: ["-x"]))
        XCTAssertThrowsError(try StreamGetOptions(arguments: ["-kx", "proxy"]))
    }

    func testEnvironmentAsCurlReadsIt() throws {
        XCTAssertEqual(try route(http, [], environment: ["http_proxy": "p1:1"])?.configuration.host, "p1")
        XCTAssertNil(try route(http, [], environment: ["HTTP_PROXY": "p1:1"]), "curl ignores upper-case HTTP_PROXY")
        XCTAssertEqual(try route(https, [], environment: ["HTTPS_PROXY": "p2:2", "http_proxy": "p1:1"])?.configuration.host, "p2")
        XCTAssertEqual(try route(https, [], environment: ["https_proxy": "p2:2"])?.configuration.host, "p2")
        XCTAssertEqual(try route(https, [], environment: ["ALL_PROXY": "socks5h://p3"])?.configuration, .socks5(host: "p3"))
        XCTAssertEqual(try route(http, [], environment: ["all_proxy": "p4", "ALL_PROXY": "p3"])?.configuration.host, "p4")
        XCTAssertEqual(try route(http, ["-x", "flag"], environment: ["http_proxy": "env"])?.configuration.host, "flag")
        XCTAssertNil(try route(http, [], environment: nil), "the built-in page ignores the environment")
        XCTAssertNil(try route(http, [], environment: ["http_proxy": ""]))
    }

    func testNoProxy() throws {
        let environment = ["ALL_PROXY": "p"]
        for list in ["*", "example.com", ".example.com", "other, example.com", "COM"] {
            XCTAssertNil(try route(http, [], environment: environment.merging(["NO_PROXY": list]) { $1 }), list)
        }
        for list in ["ample.com", "www.example.com", "", "example.co"] {
            XCTAssertNotNil(try route(http, [], environment: environment.merging(["no_proxy": list]) { $1 }), list)
        }
        XCTAssertNil(try route(http, ["-x", "p", "--noproxy", "example.com"]))
        XCTAssertNotNil(
            try route(http, ["--noproxy", "other"], environment: environment.merging(["NO_PROXY": "*"]) { $1 }),
            "--noproxy replaces NO_PROXY")
        let v6 = try HTTPURL(parsing: "http://[::1]:8080/")
        XCTAssertNil(try StreamGetProxyRoute.route(for: v6, proxy: "p", proxyUser: nil, noProxy: "[::1]", environment: nil))
    }
}
