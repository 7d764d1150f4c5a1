#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The TLS properties as CFNetwork defines them: what is accepted, refused, and read back; SNI;
/// session resumption.
final class TLSPropertyTests: SocketStreamsTestCase {

    func testLevelsAndSettingsAcceptedAndRefused() throws {
        let pair = makePair(host: "localhost", port: 1)
        let level = Stream.PropertyKey.socketSecurityLevelKey
        let settingsKey = Stream.PropertyKey(kCFStreamPropertySSLSettings as String)
        // Every level spelling: Foundation's structs (corelibs raw strings for SSLv2/v3 included), CF strings.
        let levels: [StreamSocketSecurityLevel] = [.negotiatedSSL, .tlSv1, .ssLv2, .ssLv3, .none]
        for value in levels.map({ $0 as Any }) + [
            (kCFStreamSocketSecurityLevelTLSv1 as String), "NSStreamSocketSecurityLevelSSLv3",
            NSString(string: (kCFStreamSocketSecurityLevelNone as String)),
        ] {
            XCTAssertTrue(pair.input.setProperty(value, forKey: level), "\(value)")
        }
        XCTAssertFalse(pair.input.setProperty("kCFStreamSocketSecurityLevelBogus", forKey: level))
        XCTAssertFalse(pair.input.setProperty(NSNumber(value: 3), forKey: level))
        // The dictionary: wrong types for known keys are refused; unknown keys are ignored.
        XCTAssertFalse(pair.input.setProperty([kCFStreamSSLValidatesCertificateChain as String: "maybe"], forKey: settingsKey))
        XCTAssertFalse(pair.input.setProperty([kCFStreamSSLPeerName as String: 42], forKey: settingsKey))
        XCTAssertFalse(pair.input.setProperty([kCFStreamSSLCertificates as String: ["not an identity"]], forKey: settingsKey))
        XCTAssertFalse(pair.input.setProperty("not a dictionary", forKey: settingsKey))
        let settings: [String: Any] = [
            kCFStreamSSLLevel as String: (kCFStreamSocketSecurityLevelTLSv1 as String), "kCFStreamSSLSomethingNew": true,
        ]
        XCTAssertTrue(pair.input.setProperty(settings, forKey: settingsKey))
        // Read back as set, from either stream of the pair.
        XCTAssertEqual(
            (pair.output.property(forKey: settingsKey) as? [String: Any])?[kCFStreamSSLLevel as String] as? String,
            (kCFStreamSocketSecurityLevelTLSv1 as String))
        XCTAssertEqual(pair.output.property(forKey: level) as? String, (kCFStreamSocketSecurityLevelTLSv1 as String))
        XCTAssertNotNil(pair.output.property(forKey: .tlsSettingsKey) as? TLSSettings)
        XCTAssertNil(
            pair.output.property(forKey: Stream.PropertyKey(kCFStreamPropertySSLPeerCertificates as String)), "no peer before a handshake")
        XCTAssertFalse(pair.input.setProperty("not settings", forKey: .tlsSettingsKey))
        // nil removes TLS.
        XCTAssertTrue(pair.input.setProperty(nil as AnyObject?, forKey: settingsKey))
        XCTAssertNil(pair.input.property(forKey: .tlsSettingsKey))
    }

    /// Level None before open: a plain connection.
    func testLevelNoneIsPlain() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        XCTAssertTrue(pair.input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey))
        XCTAssertTrue(pair.input.setProperty(StreamSocketSecurityLevel.none, forKey: .socketSecurityLevelKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "plain"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "plain" }, recorder.trace)
    }

    /// The client sends the pair's host as SNI: s_server presents the right certificate only for it
    /// (`-servername` with a second certificate), so verification passes only because SNI was sent.
    func testSNIIsTheHostName() throws {
        let pki = try self.pki
        let (port, _) = try startOpenSSLServer([
            "-www", "-cert", pki.wrongName.0, "-key", pki.wrongName.1,
            "-servername", "localhost", "-cert2", pki.serverCertificate, "-key2", pki.serverKey,
        ])
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), recorder.trace)
    }

    /// With resumesSessions, the second connection to the same host and port resumes the first's
    /// session (TLS 1.3 tickets arrive after the handshake, so the first pair reads until the end).
    func testSessionResumption() throws {
        let pki = try self.pki
        let (port, _) = try startOpenSSLServer(["-www", "-cert", pki.serverCertificate, "-key", pki.serverKey])
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        settings.resumesSessions = true
        var resumed: [Bool] = []
        for _ in 0..<2 {
            let pair = makePair(host: "localhost", port: port)
            XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
            let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
            XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
            resumed.append((pair.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo)?.resumedSession ?? false)
        }
        XCTAssertEqual(resumed, [false, true])
    }
}
