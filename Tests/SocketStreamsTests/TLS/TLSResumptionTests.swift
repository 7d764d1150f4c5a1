import COpenSSL
import Foundation
import SocketStreamsTestSupport
import TestPeers
@testable import SocketStreams
import XCTest

/// Session resumption, on by default for clients as on Apple platforms: resumed when it should be, never
/// under other trust settings than those that verified the session, a full handshake when the server
/// refuses what is offered, and the cache bounded.
final class TLSResumptionTests: SocketStreamsTestCase {

    /// One GET through a pair with `settings`; whether the handshake resumed a session.
    private func resumed(port: Int, _ settings: TLSSettings, file: StaticString = #filePath, line: UInt = #line) -> Bool? {
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey), file: file, line: line)
        // TLS 1.3 tickets come after the handshake: read to the end so the next connection has them.
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace, file: file, line: line)
        XCTAssertTrue(recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok"), recorder.trace, file: file, line: line)
        return (pair.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo)?.resumedSession
    }

    private func trusting(_ pki: TestPKI) -> TLSSettings {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        return settings
    }

    func testClientsResumeByDefaultWithTLS13TicketsAndTLS12SessionIDs() throws {
        let pki = try self.pki
        XCTAssertTrue(TLSSettings().resumesSessions)
        for version in ["-tls1_3", "-tls1_2"] {
            let (port, _) = try startOpenSSLServer(["-www", version, "-cert", pki.serverCertificate, "-key", pki.serverKey])
            let settings = trusting(pki)
            XCTAssertEqual((0..<3).map { _ in resumed(port: port, settings) }, [false, true, true], version)
            var off = settings
            off.resumesSessions = false
            XCTAssertEqual(resumed(port: port, off), false, version)
        }
    }

    func testASessionIsNeverOfferedUnderOtherTrustSettings() throws {
        let pki = try self.pki
        let (port, _) = try startOpenSSLServer(["-www", "-cert", pki.serverCertificate, "-key", pki.serverKey])
        let settings = trusting(pki)
        XCTAssertEqual(resumed(port: port, settings), false)
        // Other roots (the CA twice over is another list), a pin, another profile: each its own full handshake.
        var roots = settings
        roots.trustRoots.append(.pemFile(pki.caCertificate))
        var pinned = settings
        pinned.pinnedPublicKeySHA256 = [try XCTUnwrap(TLSSettings.publicKeyPin(certificatePEM: pki.data("server.pem")))]
        var profile = settings
        profile.verificationProfile = .compatible
        for (name, other) in [("roots", roots), ("pins", pinned), ("profile", profile)] {
            XCTAssertEqual(resumed(port: port, other), false, name)
            XCTAssertEqual(resumed(port: port, other), true, name)
        }
        // A trust evaluation is asked on every connection, resumed ones too, with the same chain; its
        // refusal fails a resumed connection as it does a full one.
        let chains = Guarded<[[Data]]>([])
        let accepts = Guarded(true)
        var evaluated = settings
        evaluated.trustEvaluation = TLSTrustEvaluation { trust, completion in
            chains.withLock { $0.append(trust.certificateChain) }
            completion(accepts.withLock { $0 })
        }
        XCTAssertEqual([resumed(port: port, evaluated), resumed(port: port, evaluated)], [false, true])
        let asked = chains.withLock { $0 }
        XCTAssertEqual(asked.count, 2)
        XCTAssertFalse(asked.first?.isEmpty ?? true)
        XCTAssertEqual(asked.first, asked.last, "the resumed connection's evaluation sees the session's chain")
        accepts.withLock { $0 = false }
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(evaluated, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) }, recorder.trace)
        XCTAssertEqual((pair.input.streamError as NSError?)?.code, -9825)
        XCTAssertEqual(chains.withLock { $0.count }, 3)
        pair.input.close()  // s_server -www serves one connection at a time
        pair.output.close()
        // The first settings' session is still there for them.
        XCTAssertEqual(resumed(port: port, settings), true)
    }

    func testAServerThatRefusesTheSessionGetsAFullHandshake() throws {
        let pki = try self.pki
        // Stateful TLS 1.3 tickets with no server cache: what the client offers is never found.
        let (port, _) = try startOpenSSLServer(["-www", "-no_ticket", "-no_cache", "-cert", pki.serverCertificate, "-key", pki.serverKey])
        let settings = trusting(pki)
        XCTAssertEqual((0..<3).map { _ in resumed(port: port, settings) }, [false, false, false])
    }

    func testAFailedHandshakeDropsThePeersSessions() throws {
        let pki = try self.pki
        let (port, server) = try startOpenSSLServer(["-www", "-cert", pki.serverCertificate, "-key", pki.serverKey])
        let settings = trusting(pki)
        XCTAssertEqual(resumed(port: port, settings), false)
        let context = try TLSContext.shared(for: settings)
        let key = TLSSessionKey(host: "localhost", port: port, pins: [], peerID: nil)
        XCTAssertGreaterThan(context.sessions.count(for: key), 0)
        // The same port now served with a certificate for another name: the handshake fails.
        server.stop()
        let (wrongCertificate, wrongKey) = pki.wrongName
        let openssl = try Peer.locate("openssl", hint: "apt-get install -y --no-install-recommends openssl")
        let again = Peer(
            name: "openssl s_server", executable: openssl,
            arguments: ["s_server", "-accept", "127.0.0.1:\(port)", "-www", "-cert", wrongCertificate, "-key", wrongKey])
        addCleanup { again.stop() }
        _ = try again.start(readyPattern: #"^(ACCEPT)\s*$"#)  // given a port, s_server does not print it
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) }, recorder.trace)
        XCTAssertEqual(context.sessions.count(for: key), 0)
    }

    /// At most two sessions a peer and 256 peers; a TLS 1.3 session is handed out once, a TLS 1.2 one
    /// until replaced; a session OpenSSL would not resume is never offered.
    func testTheCacheIsBoundedAndTicketsAreUsedOnce() throws {
        let cache = TLSSessionCache()
        func session(_ version: Int32, id: UInt8, resumable: Bool = true) -> OpaquePointer {
            let session = SSL_SESSION_new()!
            XCTAssertEqual(SSL_SESSION_set_protocol_version(session, version), 1)
            if resumable {
                var bytes = [id, 1, 2, 3]
                XCTAssertEqual(SSL_SESSION_set1_id(session, &bytes, 4), 1)
            }
            return session
        }
        func key(_ index: Int) -> TLSSessionKey { TLSSessionKey(host: "host\(index)", port: 443, pins: [], peerID: nil) }
        for index in 0..<300 { cache.store(session(TLS1_3_VERSION, id: 1), for: key(index)) }
        XCTAssertEqual(cache.peerCount, TLSSessionCache.capacity)
        XCTAssertEqual(cache.count(for: key(0)), 0, "the least recently stored peers go first")
        XCTAssertEqual(cache.count(for: key(299)), 1)
        for id in 0..<3 { cache.store(session(TLS1_3_VERSION, id: UInt8(id)), for: key(299)) }
        XCTAssertEqual(cache.count(for: key(299)), TLSSessionCache.perPeer)

        let context = try TLSContext.shared(for: TLSSettings())
        func offered(_ key: TLSSessionKey) -> Bool {
            let ssl = SSL_new(context.context)!
            defer { SSL_free(ssl) }
            cache.resume(ssl, key: key)
            return SSL_get_session(ssl) != nil
        }
        XCTAssertTrue(offered(key(299)))
        XCTAssertEqual(cache.count(for: key(299)), 1, "a TLS 1.3 ticket is used once")
        let twelve = key(1000)
        cache.store(session(TLS1_2_VERSION, id: 9), for: twelve)
        XCTAssertTrue(offered(twelve))
        XCTAssertTrue(offered(twelve))
        XCTAssertEqual(cache.count(for: twelve), 1, "a TLS 1.2 session ID stays")
        let stale = key(1001)
        cache.store(session(TLS1_3_VERSION, id: 0, resumable: false), for: stale)
        XCTAssertFalse(offered(stale))
        XCTAssertEqual(cache.count(for: stale), 0)
        cache.forget(twelve)
        XCTAssertEqual(cache.count(for: twelve), 0)
    }
}
