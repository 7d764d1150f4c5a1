#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import StreamGetCore
import XCTest
import TestPeers

/// `stream-get` through real proxies with curl's options and environment. The target is python's
/// http.server, whose log names the address each request came from: 127.0.0.2 for danted, microsocks
/// and tinyproxy, so the request went through the proxy.
final class StreamGetProxyTests: SocketStreamsTestCase {
    let body = "through a proxy\n"

    func runStreamGet(_ arguments: [String], environment: [String: String] = [:]) throws -> CommandResult {
        var base = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
        base.merge(environment) { $1 }
        return try runCommand(
            try streamGetExecutable().path, ["--timeout", "30"] + arguments, timeout: 60,
            environment: base)
    }

    /// python http.server on 127.0.0.1 with index.html.
    func startTarget() throws -> (peer: Peer, port: Int) {
        let directory = try makeTemporaryDirectory()
        try Data(body.utf8).write(to: directory.appendingPathComponent("index.html"))
        let target = try Peer.httpServer(family: .v4, directory: directory)
        addCleanup { target.peer.stop() }
        return target
    }

    /// The target logged a request from `address` (the log line can follow the response a moment later).
    func assertRequested(_ target: Peer, from address: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(
            target.waitForOutput(containing: "\(address) - - ", timeout: shortTimeout), "no request from \(address) in:\n\(target.printed)",
            file: file, line: line)
    }

    func testSOCKSOptions() throws {
        let (target, port) = try startTarget()
        let (dante, dantePort) = try Peer.dante(directory: try makeTemporaryDirectory())
        addCleanup { dante.stop() }
        for option in ["--socks5-hostname", "--socks5", "--socks4"] {
            let result = try runStreamGet([option, "127.0.0.1:\(dantePort)", "-v", "http://localhost:\(port)/index.html"])
            XCTAssertEqual(result.status, 0, "\(option): \(result.stderr)")
            XCTAssertEqual(result.stdoutText, body, option)
            XCTAssertTrue(
                result.stderr.contains("via SOCKS\(option.hasPrefix("--socks4") ? "4" : "5") proxy 127.0.0.1 port \(dantePort)"),
                result.stderr)
        }
        assertRequested(target, from: Peer.proxyEgressAddress)
        XCTAssertTrue(
            try runStreamGet(["--socks5", "127.0.0.1:\(dantePort)", "-v", "http://localhost:\(port)/"]).stderr
                .contains("connecting to 127.0.0.1 port \(port) via"), "--socks5 resolves the name here")

        let (ssh, sshPort) = try Peer.sshSOCKS(directory: try makeTemporaryDirectory())
        addCleanup { ssh.stop() }
        let socks4a = try runStreamGet(["-x", "socks4a://127.0.0.1:\(sshPort)", "-v", "http://localhost:\(port)/index.html"])
        XCTAssertEqual(socks4a.status, 0, socks4a.stderr)
        XCTAssertEqual(socks4a.stdoutText, body)
        XCTAssertTrue(socks4a.stderr.contains("connecting to localhost port \(port) via SOCKS4 proxy"), socks4a.stderr)
    }

    func testProxyUserAndEnvironment() throws {
        let (target, port) = try startTarget()
        let (microsocks, socksPort) = try Peer.microsocks(user: "msuser", password: "mspass")
        addCleanup { microsocks.stop() }
        let url = "http://127.0.0.1:\(port)/index.html"

        let flagged = try runStreamGet(["--socks5-hostname", "127.0.0.1:\(socksPort)", "-U", "msuser:mspass", url])
        XCTAssertEqual(flagged.status, 0, flagged.stderr)
        XCTAssertEqual(flagged.stdoutText, body)

        let environment = try runStreamGet([url], environment: ["ALL_PROXY": "socks5h://msuser:mspass@127.0.0.1:\(socksPort)"])
        XCTAssertEqual(environment.status, 0, environment.stderr)
        XCTAssertEqual(environment.stdoutText, body)
        assertRequested(target, from: Peer.proxyEgressAddress)

        let wrong = try runStreamGet([url], environment: ["all_proxy": "socks5h://msuser:nope@127.0.0.1:\(socksPort)"])
        XCTAssertEqual(wrong.status, 97, "curl's CURLE_PROXY")
        XCTAssertTrue(wrong.stderr.contains("rejected the username and password"), wrong.stderr)

        // NO_PROXY: straight to the target (the proxy would refuse: no credentials).
        let excluded = try runStreamGet([url], environment: ["ALL_PROXY": "socks5h://127.0.0.1:\(socksPort)", "NO_PROXY": "127.0.0.1"])
        XCTAssertEqual(excluded.status, 0, excluded.stderr)
        assertRequested(target, from: "127.0.0.1")
    }

    /// https:// through an HTTP CONNECT tunnel with Basic credentials in the proxy URL; the target's
    /// certificate is verified for its own name.
    func testHTTPSThroughCONNECT() throws {
        let pki = try self.pki
        let server = try BuiltInPageServer(
            runLoop: .socketStreams,
            tls: TLSSettings.server(
                identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey)))
        server.start()
        addCleanup { server.stop() }
        let (tinyproxy, proxyPort) = try Peer.tinyproxy(directory: try makeTemporaryDirectory(), user: "tpuser", password: "tppass")
        addCleanup { tinyproxy.stop() }
        let url = "https://localhost:\(server.port)/"
        let result = try runStreamGet([
            "-p", "-x", "http://tpuser:tppass@127.0.0.1:\(proxyPort)", "--cacert", pki.caCertificate,
            "-v", url,
        ])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.contains("Hello from SocketStreams"))
        XCTAssertTrue(result.stderr.contains("via HTTP proxy 127.0.0.1 port \(proxyPort) (TLS)"), result.stderr)

        let anonymous = try runStreamGet(["-x", "127.0.0.1:\(proxyPort)", "--cacert", pki.caCertificate, url])
        XCTAssertEqual(anonymous.status, 56, "curl's exit status for a 407 to CONNECT")
        XCTAssertTrue(anonymous.stderr.contains("requires authentication (407"), anonymous.stderr)
        let environment = try runStreamGet(
            ["--cacert", pki.caCertificate, url],
            environment: ["HTTPS_PROXY": "http://tpuser:tppass@127.0.0.1:\(proxyPort)"])
        XCTAssertEqual(environment.status, 0, environment.stderr)
    }

    func testUnusableProxyArguments() throws {
        let https = try runStreamGet(["-x", "https://127.0.0.1:1", "http://127.0.0.1:1/"])
        XCTAssertEqual(https.status, 5, "curl's exit status for a proxy it cannot use")
        XCTAssertTrue(https.stderr.contains("HTTPS proxies"), https.stderr)
        let refused = try runStreamGet(["--socks5-hostname", "127.0.0.1:\(try RawSocket.unusedPort())", "http://localhost:1/"])
        XCTAssertEqual(refused.status, 7)
        XCTAssertTrue(refused.stderr.contains("Could not connect to SOCKS5 proxy 127.0.0.1"), refused.stderr)
        let v6 = try runStreamGet(["--socks4a", "127.0.0.1:1", "http://[::1]:1/"])
        XCTAssertEqual(v6.status, 97)
        XCTAssertTrue(v6.stderr.contains("SOCKS4 has no IPv6"), v6.stderr)
    }
}
