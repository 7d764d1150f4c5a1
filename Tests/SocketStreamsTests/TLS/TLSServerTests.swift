#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import StreamGetCore
import XCTest

/// Pairs from `StreamListener` as TLS servers, checked by real clients (`openssl s_client`, `curl`)
/// and by our own client; client certificates; the Apple dictionary spelling on the server side.
final class TLSServerTests: SocketStreamsTestCase {

    private func serverSettings(_ mutate: (inout TLSSettings) -> Void = { _ in }) throws -> TLSSettings {
        let pki = try self.pki
        var settings = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        settings.trustRoots = [.pemFile(pki.caCertificate)]  // for client certificates
        mutate(&settings)
        return settings
    }

    private func clientSettings(_ mutate: (inout TLSSettings) -> Void = { _ in }) throws -> TLSSettings {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(try pki.caCertificate)]
        mutate(&settings)
        return settings
    }

    /// Echoes `message` through a TLS echo server with our own client; returns the client recorder.
    private func echo(
        _ message: String, server: StreamEchoServer, client: TLSSettings,
        file: StaticString = #filePath, line: UInt = #line
    ) -> DelegateRecorder {
        let pair = makePair(host: "localhost", port: server.port)
        XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey), file: file, line: line)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: message))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.snapshot.receivedString == message || recorder.has(.errorOccurred, on: .input)
            }, recorder.trace, file: file, line: line)
        return recorder
    }

    func testOurClientAndServerEcho() throws {
        let server = try startStreamEchoServer(tls: try serverSettings())
        let recorder = echo("over TLS both ways", server: server, client: try clientSettings())
        XCTAssertEqual(recorder.snapshot.receivedString, "over TLS both ways")
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
    }

    /// A TLS listener whose connections write `greeting` (blocking style, through the handshake)
    /// and close; `configure` sets each accepted pair's TLS. Returns the port.
    private func greetingServer(_ greeting: String, configure: @escaping (StreamPair) -> Void) throws -> Int {
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let host = ListenerHost(listener) { pair in
            configure(pair)
            let bytes = Array(greeting.utf8)
            pair.input.open()
            pair.output.open()
            _ = pair.output.write(bytes, maxLength: bytes.count)  // blocks through the handshake
            pair.output.close()
            pair.input.close()
        }
        addCleanup { host.stop() }
        return listener.port
    }

    /// The identity from a PKCS#12 archive, and given the Apple way: kCFStreamSSLIsServer and
    /// kCFStreamSSLCertificates in the settings dictionary. `openssl s_client` verifies it and reads
    /// the greeting, then sees the close_notify (exit status 0).
    func testPKCS12IdentityThroughTheSettingsDictionary() throws {
        let pki = try self.pki
        let identity = TLSIdentity(pkcs12: pki.data("server.p12"), password: TestPKI.pkcs12Password)
        let port = try greetingServer("hello from a PKCS#12 identity\n") { pair in
            let settings: [String: Any] = [kCFStreamSSLIsServer as String: true, kCFStreamSSLCertificates as String: [identity]]
            XCTAssertTrue(pair.output.setProperty(settings, forKey: Stream.PropertyKey(kCFStreamPropertySSLSettings as String)))
        }
        let result = try runCommand(
            "openssl",
            [
                "s_client", "-connect", "127.0.0.1:\(port)", "-CAfile", pki.caCertificate,
                "-verify_return_error", "-verify_hostname", "localhost", "-quiet", "-ign_eof",
            ])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.contains("hello from a PKCS#12 identity"), result.stdoutText + result.stderr)
    }

    /// `curl` fetches the built-in page from a TLS listener, verifying it against the test CA, over
    /// TLS 1.2 and 1.3.
    func testCurlFetchesFromOurTLSServer() throws {
        let server = try BuiltInPageServer(runLoop: .socketStreams, tls: try serverSettings())
        server.start()
        addCleanup { server.stop() }
        for version in ["--tlsv1.2", "--tlsv1.3"] {
            let result = try runCommand(
                "curl",
                [
                    "-sS", version, "--cacert", try pki.caCertificate,
                    "https://localhost:\(server.port)/",
                ])
            XCTAssertEqual(result.status, 0, result.stderr)
            XCTAssertTrue(result.stdoutText.contains("Hello from SocketStreams"), result.stdoutText)
        }
        let pinned = try runCommand(
            "curl",
            [
                "-sS", "--tls-max", "1.2", "-w", "%{ssl_verify_result} %{http_version}",
                "-o", "/dev/null", "--cacert", try pki.caCertificate, "https://localhost:\(server.port)/",
            ])
        XCTAssertEqual(pinned.stdoutText, "0 1.1", pinned.stderr)
    }

    /// A server that requires client certificates: our client with an identity gets through; one
    /// without fails with errSSLCertificateRequired on both ends.
    func testRequiredClientCertificates() throws {
        let pki = try self.pki
        let server = try startStreamEchoServer(tls: try serverSettings { $0.clientCertificates = .require })
        let withIdentity = echo(
            "certified", server: server,
            client: try clientSettings {
                $0.identity = TLSIdentity(certificateChainFile: pki.clientCertificate, privateKeyFile: pki.clientKey)
            })
        XCTAssertEqual(withIdentity.snapshot.receivedString, "certified")

        let without = echo("anonymous", server: server, client: try clientSettings())
        XCTAssertTrue(runUntil(timeout: shortTimeout) { without.has(.errorOccurred, on: .input) }, without.trace)
        let error = try XCTUnwrap(without.snapshot.errors[.input])
        XCTAssertEqual(error.domain, "NSOSStatusErrorDomain")
        XCTAssertEqual(error.code, -9863, "\(error)")
        XCTAssertEqual(without.snapshot.receivedString, "")
    }

    /// ALPN: the server picks its first preference the client offers; s_client sees it.
    func testServerALPN() throws {
        let settings = try serverSettings { $0.alpnProtocols = ["h2", "http/1.1"] }
        let port = try greetingServer("alpn\n") { _ = $0.input.setProperty(settings, forKey: .tlsSettingsKey) }
        let result = try runCommand(
            "openssl",
            [
                "s_client", "-connect", "127.0.0.1:\(port)", "-alpn", "http/1.1,h2",
                "-CAfile", try pki.caCertificate, "-ign_eof",
            ])
        XCTAssertTrue((result.stdoutText + result.stderr).contains("ALPN protocol: h2"), result.stdoutText + result.stderr)
        let server = try startStreamEchoServer(tls: settings)
        let client = echo("alpn", server: server, client: try clientSettings { $0.alpnProtocols = ["http/1.1"] })
        XCTAssertEqual(client.snapshot.receivedString, "alpn")
    }

    /// A server without an identity cannot handshake: a clear configuration error, not a crash.
    func testServerWithoutIdentityFailsClearly() throws {
        var settings = TLSSettings()
        settings.role = .server
        let server = try startStreamEchoServer(tls: settings)
        let recorder = echo("x", server: server, client: try clientSettings())
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) }, recorder.trace)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { server.finishedCount == 1 })
    }
}
