#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Every way a handshake is refused by default, with the SecureTransport status CFNetwork would
/// report, and the setting that relaxes each one.
final class TLSVerificationTests: SocketStreamsTestCase {

    /// Runs an Apple-guide GET against `port` (s_server -www) with `settings`; returns the error, or
    /// nil if the response arrived.
    /// `failsInHandshake`: the refusal comes during the client's handshake, so no data event precedes it.
    private func outcome(
        port: Int, host: String = "localhost", _ settings: TLSSettings, failsInHandshake: Bool = true,
        file: StaticString = #filePath, line: UInt = #line
    ) -> NSError? {
        let pair = makePair(host: host, port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey), file: file, line: line)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input)
            }, recorder.trace, file: file, line: line)
        if recorder.has(.errorOccurred, on: .input) {
            XCTAssertTrue(
                runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .output) },
                "the error did not reach the output stream: \(recorder.trace)", file: file, line: line)
            if failsInHandshake {
                XCTAssertFalse(recorder.has(.hasBytesAvailable, on: .input), recorder.trace, file: file, line: line)
                XCTAssertFalse(recorder.has(.hasSpaceAvailable, on: .output), recorder.trace, file: file, line: line)
            }
            return pair.input.streamError as NSError?
        }
        XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), recorder.trace, file: file, line: line)
        return nil
    }

    private func assertRefused(
        _ error: NSError?, status: Int, message: String? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        guard let error else { return XCTFail("the handshake was accepted", file: file, line: line) }
        XCTAssertEqual(error.domain, "NSOSStatusErrorDomain", "\(error)", file: file, line: line)
        XCTAssertEqual(error.code, status, "\(error)", file: file, line: line)
        XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorDomainKey"]), 3, "\(error.userInfo)", file: file, line: line)
        XCTAssertEqual(intValue(error.userInfo["_kCFStreamErrorCodeKey"]), status, file: file, line: line)
        if let message {
            XCTAssertTrue(error.localizedDescription.contains(message), error.localizedDescription, file: file, line: line)
        }
    }

    private func server(_ certificate: (String, String), _ extra: [String] = []) throws -> Int {
        try startOpenSSLServer(["-www", "-cert", certificate.0, "-key", certificate.1] + extra).port
    }

    private var trustingCA: TLSSettings {
        get throws {
            var settings = TLSSettings()
            settings.trustRoots = [.pemFile(try pki.caCertificate)]
            return settings
        }
    }

    func testUnknownCAIsRefusedAndTrustingItAccepts() throws {
        let port = try server((pki.serverCertificate, pki.serverKey))
        let error = outcome(port: port, TLSSettings())  // the system store does not know the test CA
        assertRefused(
            error, status: -9813,
            message: "the certificate for localhost port \(port) is not trusted: unable to get local issuer certificate")
        XCTAssertEqual(intValue(error?.userInfo["OpenSSLVerifyResult"]), 20)
        XCTAssertFalse((error?.userInfo["OpenSSLErrors"] as? [String] ?? []).isEmpty, "\(String(describing: error?.userInfo))")
        XCTAssertNil(outcome(port: port, try trustingCA))
        // The CA given as PEM text, and added to the system store rather than replacing it.
        var inMemory = TLSSettings()
        inMemory.trustRoots = [.system, .pem(try pki.data("ca.pem"))]
        XCTAssertNil(outcome(port: port, inMemory))
    }

    func testSelfSignedIsRefusedAndAllowsAnyRootAccepts() throws {
        let port = try server(pki.selfSigned)
        assertRefused(outcome(port: port, TLSSettings()), status: -9812, message: "self-signed certificate")
        var anyRoot = TLSSettings()
        anyRoot.allowsAnyRoot = true
        XCTAssertNil(outcome(port: port, anyRoot))
        var unverified = TLSSettings()
        unverified.validatesCertificateChain = false
        XCTAssertNil(outcome(port: port, unverified))
    }

    func testExpiredIsRefusedAndAllowsExpiredAccepts() throws {
        let port = try server(pki.expired)
        assertRefused(outcome(port: port, try trustingCA), status: -9814, message: "certificate has expired")
        var expiredOK = try trustingCA
        expiredOK.allowsExpiredCertificates = true
        XCTAssertNil(outcome(port: port, expiredOK))
    }

    func testNotYetValidIsRefused() throws {
        let port = try server(pki.notYetValid)
        assertRefused(outcome(port: port, try trustingCA), status: -9815, message: "certificate is not yet valid")
    }

    func testWrongHostIsRefusedAndPeerNameRelaxesIt() throws {
        let port = try server(pki.wrongName)
        assertRefused(outcome(port: port, try trustingCA), status: -9843, message: "hostname mismatch")
        var named = try trustingCA
        named.peerName = .name("wrong.example")
        XCTAssertNil(outcome(port: port, named))
        var unnamed = try trustingCA
        unnamed.peerName = .none
        XCTAssertNil(outcome(port: port, unnamed))
    }

    /// An IP literal is checked against the certificate's IP addresses.
    func testIPLiteralIsCheckedAsAnAddress() throws {
        let port = try server((pki.serverCertificate, pki.serverKey))
        XCTAssertNil(outcome(port: port, host: "127.0.0.1", try trustingCA))
        let wrong = try server(pki.wrongName)
        assertRefused(outcome(port: wrong, host: "127.0.0.1", try trustingCA), status: -9843, message: "IP address mismatch")
    }

    func testVersionMismatchIsRefusedWithAProtocolVersionError() throws {
        let port = try server((pki.serverCertificate, pki.serverKey), ["-tls1_2"])
        var onlyTLS13 = try trustingCA
        onlyTLS13.minimumVersion = .v1_3
        assertRefused(outcome(port: port, onlyTLS13), status: -9836)
        XCTAssertNil(outcome(port: port, try trustingCA), "TLS 1.2 is allowed by default")
    }

    /// SSLv2/SSLv3 levels fail the handshake; they never silently become TLS.
    func testSSLv3LevelFailsClearly() throws {
        let port = try server((pki.serverCertificate, pki.serverKey))
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(StreamSocketSecurityLevel.ssLv3, forKey: .socketSecurityLevelKey))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .output) }, recorder.trace)
        assertRefused(pair.output.streamError as NSError?, status: -9836, message: "SSLv3")
        XCTAssertEqual(recorder.snapshot.events(.output).first, .openCompleted)
    }

    /// TLS 1.3: the client's handshake completes before the server checks for a certificate, so the
    /// refusal (alert certificate_required) arrives as the pair's error after openCompleted.
    func testMissingClientCertificateIsRefusedAndAnIdentityIsAccepted() throws {
        let pki = try self.pki
        let port = try server((pki.serverCertificate, pki.serverKey), ["-Verify", "1", "-CAfile", pki.caCertificate])
        assertRefused(
            outcome(port: port, try trustingCA, failsInHandshake: false), status: -9863,
            message: "requires a client certificate")
        var withIdentity = try trustingCA
        withIdentity.identity = TLSIdentity(certificateChainFile: pki.clientCertificate, privateKeyFile: pki.clientKey)
        XCTAssertNil(outcome(port: port, withIdentity))
    }

    func testPlaintextServerIsNotTLS() throws {
        let server = try startRawServer { connection in
            _ = try? RawSocket.readSome(connection.fd, timeout: 5)
            try? connection.write("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        }
        assertRefused(outcome(port: server.port, try trustingCA), status: -9800, message: "does not speak TLS")
    }

    func testGarbageFromTheServerFailsTheHandshake() throws {
        let server = try startRawServer { connection in
            _ = try? RawSocket.readSome(connection.fd, timeout: 5)
            try? connection.write(Data((0..<600).map { UInt8(truncatingIfNeeded: $0 &* 7919) }))
            _ = try? connection.readToEOF(timeout: 5)
        }
        let error = outcome(port: server.port, try trustingCA)
        XCTAssertEqual(error?.domain, "NSOSStatusErrorDomain", "\(String(describing: error))")
    }

    func testPeerClosingMidHandshakeIsClosedAbort() throws {
        let server = try startRawServer { connection in
            _ = try? RawSocket.readSome(connection.fd, timeout: 5)  // the ClientHello, then gone
        }
        assertRefused(outcome(port: server.port, try trustingCA), status: -9806, message: "closed the connection during the TLS handshake")
    }

    func testPinnedKeyIsCheckedEvenWithoutChainValidation() throws {
        let pki = try self.pki
        let port = try server(pki.selfSigned)
        let pin = try XCTUnwrap(TLSSettings.publicKeyPin(certificatePEM: pki.data("self-signed.pem")))
        var pinned = TLSSettings()
        pinned.validatesCertificateChain = false
        pinned.pinnedPublicKeySHA256 = [pin]
        XCTAssertNil(outcome(port: port, pinned))
        pinned.pinnedPublicKeySHA256 = [Data(repeating: 7, count: 32)]
        assertRefused(outcome(port: port, pinned), status: -9807, message: "pinned")
    }

    /// A pair from a native socket has no host name: a verifying client refuses to start rather than
    /// accept a valid certificate for any name, and works once it is given the name (or told to check
    /// the chain only).
    func testNativeSocketPairNeedsAPeerName() throws {
        let port = try server((pki.serverCertificate, pki.serverKey))
        func pair(_ settings: TLSSettings) throws -> StreamPair {
            let fd = try RawSocket.connectTo(family: .v4, port: port)
            let pair = createStreamPair(nativeSocket: fd)
            pair.input.setProperty(true, forKey: Stream.PropertyKey(kCFStreamPropertyShouldCloseNativeSocket as String))
            closeAfterTest(pair)
            XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
            return pair
        }
        func run(_ pair: StreamPair) -> DelegateRecorder {
            let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
            XCTAssertTrue(
                runUntil(timeout: shortTimeout) {
                    recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input)
                }, recorder.trace)
            pair.input.close()  // s_server serves one connection at a time
            pair.output.close()
            return recorder
        }
        let unnamed = try pair(try trustingCA)
        _ = run(unnamed)
        assertRefused(unnamed.input.streamError as NSError?, status: -9848, message: "no host name to verify")

        var named = try trustingCA
        named.peerName = .name("localhost")
        let namedPair = try pair(named)
        XCTAssertTrue(run(namedPair).snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"))

        var chainOnly = try trustingCA
        chainOnly.peerName = .none
        let chainPair = try pair(chainOnly)
        XCTAssertTrue(run(chainPair).snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"))
    }
}
