#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import StreamGetCore
import XCTest

/// `stream-get https://…` with curl's TLS options, against our TLS listener with the test PKI.
final class StreamGetTLSTests: SocketStreamsTestCase {
    private func runStreamGet(_ arguments: [String]) throws -> CommandResult {
        try runCommand(try streamGetExecutable().path, ["--timeout", "30"] + arguments, timeout: 60)
    }

    private func startTLSPageServer(_ mutate: (inout TLSSettings) -> Void = { _ in }) throws -> BuiltInPageServer {
        let pki = try self.pki
        var settings = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        mutate(&settings)
        let server = try BuiltInPageServer(runLoop: .socketStreams, tls: settings)
        server.start()
        addCleanup { server.stop() }
        return server
    }

    func testSelfTestTLSServesAndVerifiesItsOwnCertificate() throws {
        let result = try runStreamGet(["--self-test-tls", "-v"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.contains("Hello from SocketStreams"), result.stdoutText)
        XCTAssertTrue(result.stderr.contains("https://127.0.0.1:"), result.stderr)
        XCTAssertTrue(result.stderr.contains("* TLS: TLSv1.3"), result.stderr)
        XCTAssertTrue(result.stderr.contains("subject: CN=localhost"), result.stderr)
    }

    func testCACertificateOptionAndVerboseSessionDetails() throws {
        let server = try startTLSPageServer()
        let url = "https://localhost:\(server.port)/"
        let trusted = try runStreamGet(["-v", "--cacert", try pki.caCertificate, url])
        XCTAssertEqual(trusted.status, 0, trusted.stderr)
        XCTAssertTrue(trusted.stdoutText.contains("Hello from SocketStreams"))
        for line in [
            "* TLS: TLSv1.3, cipher TLS_", "* ALPN: server accepted", "subject: CN=localhost",
            "issuer: CN=SocketStreams Test CA", "start date: ", "expire date: ",
        ] {
            XCTAssertTrue(trusted.stderr.contains(line), "no \"\(line)\" in:\n\(trusted.stderr)")
        }

        let untrusted = try runStreamGet([url])
        XCTAssertEqual(untrusted.status, 60, "curl's CURLE_PEER_FAILED_VERIFICATION: \(untrusted.stderr)")
        XCTAssertTrue(untrusted.stderr.contains("the certificate for localhost port \(server.port) is not trusted"), untrusted.stderr)

        let insecure = try runStreamGet(["-k", url])
        XCTAssertEqual(insecure.status, 0, insecure.stderr)
    }

    func testVersionOptions() throws {
        let server = try startTLSPageServer { $0.maximumVersion = .v1_2 }
        let url = "https://localhost:\(server.port)/"
        let ca = try pki.caCertificate
        let twelve = try runStreamGet(["-v", "--cacert", ca, url])
        XCTAssertTrue(twelve.stderr.contains("* TLS: TLSv1.2"), twelve.stderr)
        let thirteen = try runStreamGet(["--tlsv1.3", "--cacert", ca, url])
        XCTAssertEqual(thirteen.status, 35, "curl's CURLE_SSL_CONNECT_ERROR")
        XCTAssertTrue(thirteen.stderr.contains("no TLS version in common") || thirteen.stderr.contains("protocol version"), thirteen.stderr)
        let capped = try runStreamGet(["-v", "--tls-max", "1.2", "--cacert", ca, "https://localhost:\(try startTLSPageServer().port)/"])
        XCTAssertTrue(capped.stderr.contains("* TLS: TLSv1.2"), capped.stderr)
    }

    func testClientCertificateAndPinnedKeyOptions() throws {
        let pki = try self.pki
        let server = try startTLSPageServer { $0.clientCertificates = .require }
        let url = "https://localhost:\(server.port)/"
        let anonymous = try runStreamGet(["--cacert", pki.caCertificate, url])
        XCTAssertEqual(anonymous.status, 35, anonymous.stderr)
        XCTAssertTrue(anonymous.stderr.contains("requires a client certificate"), anonymous.stderr)
        let certified = try runStreamGet(["--cacert", pki.caCertificate, "--cert", pki.clientCertificate, "--key", pki.clientKey, url])
        XCTAssertEqual(certified.status, 0, certified.stderr)

        let open = try startTLSPageServer()
        let pin = try XCTUnwrap(TLSSettings.publicKeyPin(certificatePEM: pki.data("server.pem"))).base64EncodedString()
        let pinned = try runStreamGet(["-k", "--pinnedpubkey", "sha256//\(pin)", "https://localhost:\(open.port)/"])
        XCTAssertEqual(pinned.status, 0, pinned.stderr)
        let wrongPin = Data(repeating: 1, count: 32).base64EncodedString()
        let refused = try runStreamGet(["-k", "--pinnedpubkey", "sha256//\(wrongPin)", "https://localhost:\(open.port)/"])
        XCTAssertEqual(refused.status, 90, "curl's CURLE_SSL_PINNEDPUBKEYNOTMATCH")
        XCTAssertTrue(refused.stderr.contains("pinned public key"), refused.stderr)
    }

    func testALPNOptions() throws {
        let server = try startTLSPageServer { $0.alpnProtocols = ["http/1.1"] }
        let url = "https://localhost:\(server.port)/"
        let offered = try runStreamGet(["-v", "--cacert", try pki.caCertificate, url])
        XCTAssertTrue(offered.stderr.contains("* ALPN: server accepted http/1.1"), offered.stderr)
        let none = try runStreamGet(["-v", "--no-alpn", "--cacert", try pki.caCertificate, url])
        XCTAssertTrue(none.stderr.contains("* ALPN: none negotiated"), none.stderr)
        let mismatch = try runStreamGet(["--alpn", "h2", "--cacert", try pki.caCertificate, url])
        XCTAssertEqual(mismatch.status, 35, "RFC 7301: no protocol in common is a fatal alert")
    }
}
