#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import StreamGetCore
import XCTest

/// The verification settings' edges (the corpus, TLSCorpusTests, covers the verdicts), and
/// `stream-get`'s `--resolve`, `--connect-to` and `--crlfile`.
final class TLSVerificationSettingsTests: SocketStreamsTestCase {
    private func runStreamGet(_ arguments: [String]) throws -> CommandResult {
        try runCommand(try streamGetExecutable().path, ["--timeout", "30"] + arguments, timeout: 60)
    }

    /// The error of a handshake with `settings` against s_server on the test PKI's server certificate.
    private func handshakeError(_ settings: TLSSettings) throws -> NSError? {
        let pki = try self.pki
        let port = try startOpenSSLServer(["-www", "-cert", pki.serverCertificate, "-key", pki.serverKey]).port
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input) },
            recorder.trace)
        return pair.input.streamError as NSError?
    }

    func testUnusableRevocationListsAndDepthAreConfigurationErrors() throws {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(try pki.caCertificate)]
        settings.revocationLists = [.pemFile("/nonexistent/list.crl")]
        var error = try handshakeError(settings)
        XCTAssertEqual(error?.code, -9848, "\(String(describing: error))")
        XCTAssertTrue(
            error?.localizedDescription.contains("cannot read the CRL file /nonexistent/list.crl") == true, "\(String(describing: error))")

        settings.revocationLists = [.pem(Data("not a CRL".utf8))]
        error = try handshakeError(settings)
        XCTAssertEqual(error?.code, -9848, "\(String(describing: error))")
        XCTAssertTrue(error?.localizedDescription.contains("no PEM certificate revocation list") == true, "\(String(describing: error))")

        settings.revocationLists = []
        settings.maximumChainDepth = -1
        error = try handshakeError(settings)
        XCTAssertEqual(error?.code, -9848, "\(String(describing: error))")
        XCTAssertTrue(error?.localizedDescription.contains("maximum chain depth") == true, "\(String(describing: error))")

        // Depth 0: no intermediate, which the test PKI's chain (leaf, root) has none of.
        settings.maximumChainDepth = 0
        XCTAssertNil(try handshakeError(settings))
    }

    /// A chain of one, trusted directly, is exempt from the server-leaf rules: `openssl req -x509`
    /// makes self-signed certificates with cA=TRUE, which Apple's and OpenSSL's clients accept.
    func testSelfSignedCACertificateTrustedDirectlyIsAccepted() throws {
        let pki = try self.pki
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.selfSigned.0)]
        let port = try startOpenSSLServer(["-www", "-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]).port
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), recorder.trace)
    }

    func testDNSNameConstraintMatching() {
        XCTAssertTrue(TLSVerification.dnsName("example.com", isWithin: "example.com"))
        XCTAssertTrue(TLSVerification.dnsName("WWW.Example.com", isWithin: "example.COM"))
        XCTAssertTrue(TLSVerification.dnsName("a.b.example.com.", isWithin: "example.com"))
        XCTAssertTrue(TLSVerification.dnsName("anything.test", isWithin: ""))
        XCTAssertFalse(TLSVerification.dnsName("badexample.com", isWithin: "example.com"))
        XCTAssertFalse(TLSVerification.dnsName("example.com", isWithin: "www.example.com"))
        XCTAssertFalse(TLSVerification.dnsName("example.org", isWithin: "example.com"))
    }

    func testParsesResolveConnectToAndCRLFileOptions() throws {
        let options = try StreamGetOptions(arguments: [
            "--resolve", "Example.com:443:127.0.0.1", "--resolve", "+v6.test:8443:[::1],127.0.0.2",
            "--connect-to", "a.test:443:v6.test:8443", "--crlfile", "/tmp/x.crl", "https://example.com/",
        ])
        XCTAssertEqual(options.connectOverrides.addresses, ["example.com:443": "127.0.0.1", "v6.test:8443": "::1"])
        XCTAssertEqual(options.tls.crlFile, "/tmp/x.crl")
        XCTAssertEqual(options.tls.settings.revocationLists, [.pemFile("/tmp/x.crl")])
        XCTAssertEqual(options.tls.settings.revocationCheck, .wholeChain)
        func target(_ overrides: StreamGetConnectOverrides, _ host: String, _ port: Int) -> String {
            overrides.target(host: host, port: port).map { "\($0.host) \($0.port)" } ?? "none"
        }
        XCTAssertEqual(target(options.connectOverrides, "EXAMPLE.com", 443), "127.0.0.1 443")
        // --connect-to first, then --resolve for the host and port it gives, as curl does.
        XCTAssertEqual(target(options.connectOverrides, "a.test", 443), "::1 8443")
        XCTAssertEqual(target(options.connectOverrides, "a.test", 80), "none")
        let catchAll = try StreamGetOptions(arguments: ["--connect-to", "::[::1]:", "--connect-to", "b.test::c.test:"]).connectOverrides
        XCTAssertEqual(target(catchAll, "other.test", 80), "::1 80")
        XCTAssertNil(StreamGetConnectOverrides().target(host: "example.com", port: 443))

        for arguments in [
            ["--resolve", "example.com:443"], ["--resolve", "example.com:http:127.0.0.1"], ["--resolve", ":443:127.0.0.1"],
            ["--resolve", "example.com:70000:127.0.0.1"], ["--connect-to", "a:1"], ["--connect-to", "a:1:b:x"],
            ["--connect-to", "a:1:[::1"], ["--crlfile"],
        ] {
            XCTAssertThrowsError(try StreamGetOptions(arguments: arguments), "\(arguments)")
        }
    }

    private func startTLSPageServer() throws -> BuiltInPageServer {
        let pki = try self.pki
        var settings = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        let server = try BuiltInPageServer(runLoop: .socketStreams, tls: settings)
        server.start()
        addCleanup { server.stop() }
        return server
    }

    /// `--connect-to` sends the connection elsewhere; TLS still verifies the URL's host, and
    /// `--resolve` tests any name against a local server.
    func testConnectToAndResolveReachALocalServerUnderAnotherName() throws {
        let server = try startTLSPageServer()
        let ca = try pki.caCertificate
        let routed = try runStreamGet([
            "-v", "--cacert", ca, "--connect-to", "localhost:443:127.0.0.1:\(server.port)", "https://localhost/",
        ])
        XCTAssertEqual(routed.status, 0, routed.stderr)
        XCTAssertTrue(routed.stdoutText.contains("Hello from SocketStreams"), routed.stdoutText)
        XCTAssertTrue(routed.stderr.contains("* connecting to 127.0.0.1 port \(server.port)"), routed.stderr)

        let resolved = try runStreamGet([
            "--cacert", ca, "--resolve", "localhost:\(server.port):127.0.0.1", "https://localhost:\(server.port)/",
        ])
        XCTAssertEqual(resolved.status, 0, resolved.stderr)

        // The certificate names localhost, not www.example.com: refused for the URL's name.
        let misnamed = try runStreamGet([
            "--cacert", ca, "--resolve", "www.example.com:\(server.port):127.0.0.1", "https://www.example.com:\(server.port)/",
        ])
        XCTAssertEqual(misnamed.status, 60, misnamed.stderr)
        XCTAssertTrue(
            misnamed.stderr.contains("the certificate for www.example.com port \(server.port) is not trusted: hostname mismatch"),
            misnamed.stderr)
    }

    func testCRLFileThatCannotBeReadFailsTheFetch() throws {
        let server = try startTLSPageServer()
        let result = try runStreamGet([
            "--cacert", try pki.caCertificate, "--crlfile", "/nonexistent.crl", "https://localhost:\(server.port)/",
        ])
        XCTAssertEqual(result.status, 35, result.stderr)  // curl's CURLE_SSL_CONNECT_ERROR: the TLS setup failed
        XCTAssertTrue(result.stderr.contains("cannot read the CRL file /nonexistent.crl"), result.stderr)
    }
}
