import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// A trust a handshake made is evaluated again with the certificates the handshake parsed, not a
/// second parse of their DER: the verdicts must be those of the DER's own verification.
final class TLSPeerTrustTests: SocketStreamsTestCase {
    func testAHandshakesTrustVerifiesWithItsParsedChainAsTheDERWould() throws {
        let pki = try self.pki
        let (port, _) = try startOpenSSLServer([
            "-www", "-cert", pki.serverCertificate, "-cert_chain", pki.caCertificate, "-key", pki.serverKey,
        ])
        let trusts = Guarded<[TLSPeerTrust]>([])
        var settings = TLSSettings()
        settings.trustEvaluation = TLSTrustEvaluation { trust, completion in
            trusts.withLock { $0.append(trust) }
            completion(true)
        }
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        let trust = try XCTUnwrap(trusts.withLock { $0.first })
        XCTAssertEqual(trust.certificateChain.count, 2, "the leaf and the CA the server sent")
        XCTAssertEqual(trust.parsed?.certificates.count, 2, "the handshake's certificates are kept with the trust")

        let ca = trust.certificateChain[1]
        var policies: [TLSChainPolicy] = []
        var anchored = TLSChainPolicy(purpose: .server, hostName: "localhost")
        anchored.anchors = [ca]
        policies.append(anchored)
        var otherName = anchored
        otherName.hostName = "elsewhere.example"
        policies.append(otherName)
        policies.append(TLSChainPolicy(purpose: .server, hostName: "localhost"))  // the system store only
        var basic = TLSChainPolicy(purpose: .basic)
        basic.anchors = [ca]
        policies.append(basic)
        for policy in policies {
            trust.evaluation.withLock { $0 = TLSTrustState(policy: policy) }
            let fromParsed = trust.evaluated()
            let fromDER = TLSChainVerifier.verify(trust.certificateChain, policy: policy)
            XCTAssertEqual(fromParsed, fromDER, "\(policy)")
        }
        let verdicts = policies.map { policy in
            trust.evaluation.withLock { $0 = TLSTrustState(policy: policy) }
            return trust.evaluated()
        }
        XCTAssertEqual(verdicts.map(\.isTrusted), [true, false, false, true])
        XCTAssertTrue(verdicts[1].isNameMismatch)
    }
}
