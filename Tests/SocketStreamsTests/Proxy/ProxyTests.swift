#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest
import TestPeers

/// Pairs through real proxies (Support/ProxyPeers.swift): danted (SOCKS4, SOCKS5), ssh -D (SOCKS4a,
/// SOCKS5 with names and IPv6), microsocks (SOCKS5 username/password), tinyproxy (HTTP CONNECT with
/// Basic authentication). Every exchange proves it went through the proxy: the target tells the
/// address its connection came from, which is never the pair's own socket (danted, microsocks and
/// tinyproxy connect from 127.0.0.2), and the pair's socket is connected to the proxy's port.
final class ProxyTests: SocketStreamsTestCase {

    // MARK: - targets

    /// A target on 127.0.0.1 and ::1 (the same port, so a name either family resolves to works): it
    /// greets each connection with "FROM address port", then echoes.
    func startTarget() throws -> Int {
        let handler: @Sendable (RawConnection) -> Void = { connection in
            let (host, port) = RawSocket.address(connection.fd, peer: true)
            try? connection.write("FROM \(host) \(port)\n")
            while let data = try? RawSocket.readSome(connection.fd, timeout: 10), !data.isEmpty {
                try? connection.write(data)
            }
        }
        for _ in 0..<5 {
            let v4 = try startRawServer(.v4, handler: handler)
            if let v6 = try? RawTCPServer(family: .v6, port: v4.port, handler: handler) {
                addCleanup { v6.stop() }
                return v4.port
            }
            v4.stop()
        }
        throw TestSetupError("no port free on both 127.0.0.1 and ::1")
    }

    /// What one exchange through a proxy showed.
    struct Exchange {
        /// The address and port the target saw the connection come from.
        var targetSaw: (host: String, port: Int)
        /// The pair's own socket: its local address, and the port it is connected to.
        var local: (host: String, port: Int)
        var remotePort: Int
    }

    /// Opens `pair` (a proxy set), sends a line and waits for the target's greeting and the echo.
    func exchange(_ pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) throws -> Exchange {
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "PING\n"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.snapshot.receivedString.hasSuffix("PING\n") || recorder.has(.errorOccurred, on: .input)
            }, recorder.trace, file: file, line: line)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)", file: file, line: line)
        XCTAssertEqual(recorder.snapshot.events(.output).first, .openCompleted, file: file, line: line)
        let lines = recorder.snapshot.receivedString.split(separator: "\n")
        let greeting = try XCTUnwrap(lines.first, "no greeting", file: file, line: line).split(separator: " ")
        XCTAssertEqual(lines.last, "PING", file: file, line: line)
        let fd = try XCTUnwrap(nativeHandle(of: pair.input), file: file, line: line)
        let exchange = Exchange(
            targetSaw: (String(greeting[1]), Int(greeting[2]) ?? -1),
            local: RawSocket.address(fd, peer: false), remotePort: RawSocket.peerPort(fd))
        pair.input.close()
        pair.output.close()
        return exchange
    }

    /// The target's connection was not the pair's socket, and the pair's socket went to the proxy.
    func assertThroughProxy(
        _ exchange: Exchange, proxyPort: Int, egress: String? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(exchange.remotePort, proxyPort, "the pair dialled the proxy", file: file, line: line)
        XCTAssertFalse(
            exchange.targetSaw.host == exchange.local.host && exchange.targetSaw.port == exchange.local.port,
            "the target saw the pair's own socket \(exchange.local)", file: file, line: line)
        if let egress {
            XCTAssertEqual(exchange.targetSaw.host, egress, "the proxy connects from \(egress)", file: file, line: line)
        }
    }

    /// The egress the proxies with a `Bind`/`external` address show for an IPv4 target.
    let egress = Peer.proxyEgressAddress

    func proxiedPair(
        _ host: String, _ port: Int, _ value: Any, key: Stream.PropertyKey = .proxyConfigurationKey,
        file: StaticString = #filePath, line: UInt = #line
    ) -> StreamPair {
        let pair = makePair(host: host, port: port)
        XCTAssertTrue(pair.input.setProperty(value, forKey: key), "setProperty(\(value))", file: file, line: line)
        return pair
    }

    /// Waits for both streams to fail; returns the error.
    func failure(_ pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) -> NSError? {
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "PING\n"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace, file: file, line: line)
        XCTAssertFalse(recorder.has(.hasSpaceAvailable, on: .output), recorder.trace, file: file, line: line)
        return pair.output.streamError as NSError?
    }

    // MARK: - danted: SOCKS4 and SOCKS5, no authentication

    func startDante() throws -> Int {
        let (peer, port) = try Peer.dante(directory: try makeTemporaryDirectory())
        addCleanup { peer.stop() }
        return port
    }

    /// Apple's dictionary, unchanged (SOCKS5 by default); the proxy resolves the name.
    func testSOCKS5ThroughDanteWithAppleDictionary() throws {
        let target = try startTarget()
        let proxy = try startDante()
        let socks: [StreamSOCKSProxyConfiguration: Any] = [.hostKey: "127.0.0.1", .portKey: proxy]
        let exchange = try exchange(proxiedPair("localhost", target, socks, key: .socksProxyConfigurationKey))
        assertThroughProxy(exchange, proxyPort: proxy, egress: exchange.targetSaw.host.contains(":") ? "::1" : egress)
    }

    func testSOCKS5AddressTargetsThroughDante() throws {
        let target = try startTarget()
        let proxy = try startDante()
        assertThroughProxy(
            try exchange(proxiedPair("127.0.0.1", target, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy))),
            proxyPort: proxy, egress: egress)
        assertThroughProxy(
            try exchange(proxiedPair("::1", target, ProxyConfiguration.socks5(host: "::1", port: proxy))),
            proxyPort: proxy, egress: "::1")
    }

    func testSOCKS4ThroughDante() throws {
        let target = try startTarget()
        let proxy = try startDante()
        let socks: [String: Any] = [
            "SOCKSProxy": "127.0.0.1", "SOCKSPort": proxy,
            kCFStreamPropertySOCKSVersion as String: (kCFStreamSocketSOCKSVersion4 as String),
        ]
        assertThroughProxy(
            try exchange(proxiedPair("127.0.0.1", target, socks, key: .socksProxyConfigurationKey)),
            proxyPort: proxy, egress: egress)
    }

    /// The proxy's reply code surfaces: a refused target (SOCKS5 reply 5, SOCKS4 91) and a target its
    /// rules forbid (reply 2).
    func testRefusalsThroughDante() throws {
        let proxy = try startDante()
        let closed = try RawSocket.unusedPort()
        let refused = failure(proxiedPair("127.0.0.1", closed, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy)))
        XCTAssertEqual(refused?.domain, "kCFErrorDomainCFNetwork")
        XCTAssertEqual(refused?.code, 120)
        XCTAssertEqual(refused?.userInfo[kCFSOCKSStatusCodeKey as String] as? String, "5")
        XCTAssertEqual(
            refused?.localizedDescription,
            "SOCKS5 proxy 127.0.0.1 port \(proxy) refused the connection to "
                + "127.0.0.1 port \(closed): connection refused by destination host (reply 5)")

        let forbidden = failure(proxiedPair("192.0.2.1", 80, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy)))
        XCTAssertEqual(forbidden?.code, 120)
        XCTAssertEqual(forbidden?.userInfo[kCFSOCKSStatusCodeKey as String] as? String, "2")

        let socks4 = failure(proxiedPair("127.0.0.1", closed, ProxyConfiguration.socks4(host: "127.0.0.1", port: proxy)))
        XCTAssertEqual(socks4?.code, 110)
        XCTAssertEqual(socks4?.userInfo[kCFSOCKSStatusCodeKey as String] as? String, "91")
    }

    // MARK: - ssh -D: SOCKS4a, SOCKS5 names and IPv6

    func startSSH() throws -> Int {
        let (peer, port) = try Peer.sshSOCKS(directory: try makeTemporaryDirectory())
        addCleanup { peer.stop() }
        return port
    }

    func testSOCKS4aAndSOCKS5ThroughSSH() throws {
        let target = try startTarget()
        let proxy = try startSSH()
        // SOCKS4 with a name: SOCKS4a, the proxy resolves it.
        assertThroughProxy(
            try exchange(proxiedPair("localhost", target, ProxyConfiguration.socks4(host: "127.0.0.1", port: proxy))),
            proxyPort: proxy)
        assertThroughProxy(
            try exchange(proxiedPair("localhost", target, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy))),
            proxyPort: proxy)
        let v6 = try exchange(proxiedPair("::1", target, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy)))
        assertThroughProxy(v6, proxyPort: proxy, egress: "::1")
    }

    /// ssh closes a SOCKS connection it will not forward without a reply.
    func testSSHClosingWithoutAReply() throws {
        let proxy = try startSSH()
        let closed = try RawSocket.unusedPort()
        let error = failure(proxiedPair("127.0.0.1", closed, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy)))
        assertPOSIXError(error, [ENOTCONN])
        XCTAssertEqual(
            error?.localizedDescription,
            "SOCKS5 proxy 127.0.0.1 port \(proxy) closed the connection before it "
                + "had connected 127.0.0.1 port \(closed)")
    }

    // MARK: - microsocks: SOCKS5 with username and password

    func testSOCKS5UsernamePasswordThroughMicrosocks() throws {
        let target = try startTarget()
        let (peer, proxy) = try Peer.microsocks(user: "msuser", password: "mspass")
        addCleanup { peer.stop() }
        let socks: [StreamSOCKSProxyConfiguration: Any] = [
            .hostKey: "127.0.0.1", .portKey: proxy,
            .versionKey: StreamSOCKSProxyVersion.version5,
            .userKey: "msuser", .passwordKey: "mspass",
        ]
        assertThroughProxy(
            try exchange(proxiedPair("127.0.0.1", target, socks, key: .socksProxyConfigurationKey)),
            proxyPort: proxy, egress: egress)

        let wrong = failure(
            proxiedPair(
                "127.0.0.1", target,
                ProxyConfiguration.socks5(
                    host: "127.0.0.1", port: proxy, username: "msuser", password: "wrong")))
        XCTAssertEqual(wrong?.domain, "kCFErrorDomainCFNetwork")
        XCTAssertEqual(wrong?.code, 122)
        XCTAssertTrue(
            wrong?.localizedDescription.hasPrefix(
                "SOCKS5 proxy 127.0.0.1 port \(proxy) rejected the username and password") == true, wrong?.localizedDescription ?? "")

        let none = failure(proxiedPair("127.0.0.1", target, ProxyConfiguration.socks5(host: "127.0.0.1", port: proxy)))
        XCTAssertEqual(none?.code, 124)
        XCTAssertEqual(none?.userInfo[kCFSOCKSStatusCodeKey as String] as? String, "255")
    }

    // MARK: - tinyproxy: HTTP CONNECT with Basic authentication

    func startTinyproxy() throws -> Int {
        let (peer, port) = try Peer.tinyproxy(directory: try makeTemporaryDirectory(), user: "tpuser", password: "tppass")
        addCleanup { peer.stop() }
        return port
    }

    func testHTTPConnectThroughTinyproxy() throws {
        let target = try startTarget()
        let proxy = try startTinyproxy()
        let typed = ProxyConfiguration.httpConnect(host: "127.0.0.1", port: proxy, username: "tpuser", password: "tppass")
        assertThroughProxy(try exchange(proxiedPair("127.0.0.1", target, typed)), proxyPort: proxy, egress: egress)
        // CFNetwork's CONNECT SPI dictionary, authenticating with an additional header.
        let dictionary: [String: Any] = [
            kCFStreamPropertyCONNECTProxyHost as String: "127.0.0.1", kCFStreamPropertyCONNECTProxyPort as String: proxy,
            kCFStreamPropertyCONNECTAdditionalHeaders as String: ["Proxy-Authorization": "Basic dHB1c2VyOnRwcGFzcw=="],
        ]
        assertThroughProxy(
            try exchange(proxiedPair("localhost", target, dictionary, key: Stream.PropertyKey(kCFStreamPropertyCONNECTProxy as String))),
            proxyPort: proxy)
    }

    func testHTTPConnectRefusalsThroughTinyproxy() throws {
        let target = try startTarget()
        let proxy = try startTinyproxy()
        let anonymous = failure(proxiedPair("127.0.0.1", target, ProxyConfiguration.httpConnect(host: "127.0.0.1", port: proxy)))
        XCTAssertEqual(anonymous?.code, 307)
        XCTAssertEqual(intValue(anonymous?.userInfo[ProxyConfiguration.errorHTTPStatusCodeKey]), 407)
        XCTAssertEqual(
            anonymous?.localizedDescription,
            "HTTP proxy 127.0.0.1 port \(proxy) requires authentication (407 Proxy Authentication Required)")

        let wrong = failure(
            proxiedPair(
                "127.0.0.1", target,
                ProxyConfiguration.httpConnect(
                    host: "127.0.0.1", port: proxy, username: "tpuser", password: "nope")))
        XCTAssertEqual(wrong?.code, 307, wrong?.localizedDescription ?? "")
        XCTAssertTrue(wrong?.localizedDescription.contains("rejected the credentials") == true, wrong?.localizedDescription ?? "")

        let authenticated = ProxyConfiguration.httpConnect(host: "127.0.0.1", port: proxy, username: "tpuser", password: "tppass")
        let filtered = failure(proxiedPair("192.0.2.1", 443, authenticated))
        XCTAssertEqual(filtered?.code, 311)
        XCTAssertEqual(intValue(filtered?.userInfo[ProxyConfiguration.errorHTTPStatusCodeKey]), 403)

        let closed = try RawSocket.unusedPort()
        let refused = failure(proxiedPair("127.0.0.1", closed, authenticated))
        XCTAssertEqual(refused?.code, 311)
        XCTAssertTrue(
            refused?.localizedDescription.hasPrefix(
                "HTTP proxy 127.0.0.1 port \(proxy) refused the tunnel to 127.0.0.1 port \(closed): ") == true,
            refused?.localizedDescription ?? "")
    }

    // MARK: - TLS to the target through the tunnel

    /// TLS runs after the proxy's handshake, to the target, verifying the target's name (the pair's
    /// host), never the proxy's: through SOCKS5 (danted) and through CONNECT (tinyproxy).
    func testTLSThroughSOCKS5AndCONNECTVerifiesTheTargetName() throws {
        let pki = try self.pki
        let server = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        let v4 = try startStreamEchoServer(host: "127.0.0.1", tls: server)
        if let v6 = try? StreamEchoServer(listener: StreamListener(host: "::1", port: v4.port), tls: server) {
            addCleanup { v6.stop() }
        }
        var client = TLSSettings()
        client.trustRoots = [.pemFile(pki.caCertificate)]
        let dante = try startDante()
        let tinyproxy = try startTinyproxy()
        let proxies: [ProxyConfiguration] = [
            .socks5(host: "127.0.0.1", port: dante),
            .httpConnect(host: "127.0.0.1", port: tinyproxy, username: "tpuser", password: "tppass"),
        ]
        for proxy in proxies {
            let pair = proxiedPair("localhost", v4.port, proxy)
            XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey))
            let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "over TLS through \(proxy)"))
            XCTAssertTrue(
                runUntil(timeout: shortTimeout) {
                    recorder.snapshot.receivedString == "over TLS through \(proxy)" || recorder.has(.errorOccurred, on: .input)
                }, "\(proxy): \(recorder.trace)")
            let info = pair.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
            XCTAssertEqual(info?.protocolVersion, "TLSv1.3", "\(proxy)")
            XCTAssertEqual(RawSocket.peerPort(try XCTUnwrap(nativeHandle(of: pair.input))), proxy.port)
            pair.input.close()
            pair.output.close()

            // The proxy's name is not what is verified: a name the certificate lacks fails as it would directly.
            var wrongName = client
            wrongName.peerName = .name("not-localhost.example")
            let mismatch = proxiedPair("localhost", v4.port, proxy)
            XCTAssertTrue(mismatch.input.setProperty(wrongName, forKey: .tlsSettingsKey))
            let error = failure(mismatch)
            XCTAssertEqual(error?.domain, NSOSStatusErrorDomain, "\(proxy)")
            XCTAssertEqual(error?.code, -9843, "\(proxy): \(error?.localizedDescription ?? "")")
        }
    }
}
