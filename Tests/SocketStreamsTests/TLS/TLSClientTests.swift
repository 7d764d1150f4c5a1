#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// A TLS client against `openssl s_server`: the GET that works, what it negotiated, and the Apple
/// spellings of the settings.
final class TLSClientTests: SocketStreamsTestCase {

    /// Settings trusting only the test CA.
    func trustingTestCA() throws -> TLSSettings {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(try pki.caCertificate)]
        return settings
    }

    /// s_server -www answering with a CA-signed certificate for localhost.
    func startWWWServer(_ extra: [String] = []) throws -> Int {
        let pki = try self.pki
        return try startOpenSSLServer(["-www", "-cert", pki.serverCertificate, "-key", pki.serverKey] + extra).port
    }

    /// An Apple-guide GET over the pair; returns the recorder once the server closed.
    func get(_ pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) -> DelegateRecorder {
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input)
            }, recorder.trace, file: file, line: line)
        return recorder
    }

    func testGetOverTLSWithTheTypedSettings() throws {
        let port = try startWWWServer()
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(try trustingTestCA(), forKey: .tlsSettingsKey))
        let recorder = get(pair)
        XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), recorder.snapshot.receivedString)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        // openCompleted first, then hasSpaceAvailable only after the handshake.
        XCTAssertEqual(recorder.snapshot.events(.output).prefix(2), [.openCompleted, .hasSpaceAvailable])
    }

    func testNegotiatedInfoAndPeerCertificates() throws {
        let port = try startWWWServer(["-alpn", "http/1.1"])
        let pair = makePair(host: "localhost", port: port)
        var settings = try trustingTestCA()
        settings.alpnProtocols = ["h2", "http/1.1"]
        XCTAssertTrue(pair.output.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n")
        var infoAtFirstSpace: TLSConnectionInfo?
        var certificatesAtFirstSpace: [Data]?
        recorder.onEvent = { stream, event in
            guard event == .hasSpaceAvailable, infoAtFirstSpace == nil else { return }
            infoAtFirstSpace = stream.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
            certificatesAtFirstSpace =
                stream.property(forKey: Stream.PropertyKey(kCFStreamPropertySSLPeerCertificates as String)) as? [Data]
        }
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        let info = try XCTUnwrap(infoAtFirstSpace, "no connection info at the first hasSpaceAvailable")
        XCTAssertEqual(info.protocolVersion, "TLSv1.3")
        XCTAssertTrue(info.cipherSuite.hasPrefix("TLS_"), info.cipherSuite)
        XCTAssertEqual(info.alpnProtocol, "http/1.1")
        XCTAssertFalse(info.resumedSession)
        let certificates = try XCTUnwrap(certificatesAtFirstSpace)
        XCTAssertEqual(certificates.first, try derOfPEM(pki.serverCertificate))
        // The level reads back as negotiated.
        XCTAssertEqual(pair.input.property(forKey: .socketSecurityLevelKey) as? String, "kCFStreamSocketSecurityLevelTLSv1")
    }

    /// Apple's spelling, unchanged: the level as a `StreamSocketSecurityLevel`, and the settings
    /// dictionary with CF key strings.
    func testAppleSpellingsLevelAndSettingsDictionary() throws {
        let port = try startWWWServer()
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey))
        XCTAssertEqual(pair.input.property(forKey: .socketSecurityLevelKey) as? String, StreamSocketSecurityLevel.negotiatedSSL.rawValue)
        // The system store does not know the test CA, so trust it through the dictionary instead:
        // no Apple key names a CA file, so relax the chain as GCDAsyncSocket users do and pin instead.
        let settings: [String: Any] = [
            kCFStreamSSLValidatesCertificateChain as String: false,
            kCFStreamSSLPeerName as String: "localhost",
        ]
        XCTAssertTrue(pair.output.setProperty(settings, forKey: Stream.PropertyKey(kCFStreamPropertySSLSettings as String)))
        let recorder = get(pair)
        XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), recorder.trace)
    }

    private func derOfPEM(_ path: String) throws -> Data {
        let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
        let body = text.components(separatedBy: "\n").filter { !$0.hasPrefix("-----") }.joined()
        return try XCTUnwrap(Data(base64Encoded: body))
    }
}
