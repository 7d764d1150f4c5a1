#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest
import TestPeers

/// Host names with non-ASCII labels (IDNA): converted to A-labels once, and that is what the resolver,
/// SNI, certificate matching, a proxy and stream-get see; a name without an A-label form fails before
/// anything is dialled, with the reason.
final class InternationalisedHostTests: SocketStreamsTestCase {
    func testUnicodeLabelsBecomeALabels() {
        let cases: [(String, String)] = [
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.Example", "xn--bcher-kva.Example".lowercased()),
            ("münchen.de", "xn--mnchen-3ya.de"),
            ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
            ("例え。テスト", "xn--r8jz45g.xn--zckzah"),  // the ideographic full stop separates labels
            ("ｂüｃｈｅｒ.example", "xn--bcher-kva.example"),  // full-width letters map to ASCII (NFKC)
            ("bücher.example.", "xn--bcher-kva.example."),
            ("straße.de", "xn--strae-oqa.de"),  // non-transitional: ß is kept
            ("www.example.com", "www.example.com"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("127.0.0.1", "127.0.0.1"),
        ]
        for (host, expected) in cases {
            XCTAssertEqual(try IDNA.toASCII(host).get(), expected, host)
        }
    }

    func testInvalidLabelsSayWhy() {
        let cases: [(String, String)] = [
            ("☃.example", "U+2603"),
            ("bü cher.example", "U+0020"),
            ("-bücher.example", "hyphen"),
            ("bücher-.example", "hyphen"),
            ("\u{301}bücher.example", "combining mark"),
            ("bü\u{200D}cher.example", "U+200D"),
            ("bücher..example", "empty label"),
            (String(repeating: "ü", count: 60) + ".example", "more than 63"),
        ]
        for (host, fragment) in cases {
            switch IDNA.toASCII(host) {
            case .success(let ascii): XCTFail("\(host) became \(ascii)")
            case .failure(let failure): XCTAssertTrue(failure.reason.contains(fragment), "\(host): \(failure.reason)")
            }
        }
    }

    /// A name without an A-label form fails as an unresolvable name does, with the reason, and no
    /// connection is made (the resolver refuses it before getaddrinfo).
    func testInvalidNameFailsBeforeDialling() throws {
        let pair = makePair(host: "☃.example", port: 443)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: 10) { recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output) },
            recorder.trace)
        let error = try XCTUnwrap(pair.input.streamError as NSError?)
        XCTAssertEqual(error.domain, "kCFErrorDomainCFNetwork")
        XCTAssertEqual(intValue(error.userInfo["kCFGetAddrInfoFailureKey"]), Int(EAI_NONAME), "\(error.userInfo)")
        XCTAssertTrue(error.localizedDescription.contains("not a valid internationalised host name"), error.localizedDescription)
        XCTAssertTrue(error.localizedDescription.contains("U+2603"), error.localizedDescription)
    }

    /// `kCFStreamSSLPeerName` in U-labels: the A-labels go out as SNI and are matched against the
    /// certificate. The server answers an SNI of the A-labels with the internationalised certificate and
    /// anything else with one for another name, so only the A-labels verify.
    func testTLSSendsAndMatchesTheALabels() throws {
        let pki = try TestPKI.shared.get()
        let (peer, port) = try Peer.opensslServer([
            "-www", "-cert", pki.wrongName.0, "-key", pki.wrongName.1,
            "-servername", TestPKI.internationalisedALabel, "-cert2", pki.internationalised.0, "-key2", pki.internationalised.1,
        ])
        defer { peer.stop() }
        for name in ["bücher.example", "BÜCHER.example", TestPKI.internationalisedALabel] {
            let pair = makePair(host: "127.0.0.1", port: port)
            var settings = TLSSettings()
            settings.trustRoots = [.pemFile(pki.caCertificate)]
            settings.peerName = .name(name)
            XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
            let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
            XCTAssertTrue(
                runUntil(timeout: 20) { recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input) },
                recorder.trace)
            XCTAssertFalse(recorder.has(.errorOccurred, on: .input), "\(name): \(pair.input.streamError.map { "\($0)" } ?? "")")
            XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), name)
            pair.input.close()
            pair.output.close()
        }
    }

    /// Through a SOCKS5 proxy (remote resolution), the target name the proxy gets is the A-labels.
    func testProxyGetsTheALabels() throws {
        let request = Locked<[UInt8]>([])
        let server = try startRawServer { connection in
            guard let greeting = try? connection.readExactly(3), Array(greeting) == [5, 1, 0] else { return }
            try? connection.write(Data([5, 0]))
            guard let connect = try? ProxyScriptedTests.readSOCKS5Request(connection) else { return }
            request.value = connect
            try? connection.write(Data([5, 0, 0, 1, 127, 0, 0, 1, 0x12, 0x34] + Array("WELCOME\n".utf8)))
            connection.shutdownWrite()
            _ = try? connection.readToEOF()
        }
        let pair = makePair(host: "bücher.example", port: 4242)
        XCTAssertTrue(
            pair.input.setProperty(ProxyConfiguration.socks5(host: "127.0.0.1", port: server.port), forKey: .proxyConfigurationKey))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        let name = Array(TestPKI.internationalisedALabel.utf8)
        XCTAssertEqual(request.value, [5, 1, 0, 3, UInt8(name.count)] + name + [0x10, 0x92])
    }

    /// stream-get takes a URL in U-labels: the A-labels are resolved (`--resolve` names them), sent as
    /// SNI and verified.
    func testStreamGetFetchesFromAUnicodeURL() throws {
        let pki = try TestPKI.shared.get()
        let (peer, port) = try Peer.opensslServer(["-www", "-cert", pki.internationalised.0, "-key", pki.internationalised.1])
        defer { peer.stop() }
        let result = try runCommand(
            try streamGetExecutable().path,
            [
                "--timeout", "20", "--cacert", pki.caCertificate, "--resolve", "\(TestPKI.internationalisedALabel):\(port):127.0.0.1",
                "https://bücher.example:\(port)/",
            ], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.contains("s_server"), result.stdoutText.prefix(200).description)
        let refused = try runCommand(try streamGetExecutable().path, ["https://☃.example/"], timeout: 60)
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.stderr.contains("U+2603"), refused.stderr)
    }
}
