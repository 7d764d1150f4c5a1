import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

/// The shapes Apple-platform TLS code takes (Guides/NetworkFramework.md lists them), written here in the
/// spellings such code uses, no `_ =` in front of Security calls, and run in real handshakes: what compiles
/// here compiles in a port that only changes its `import`.
final class DarwinPatternsTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "tls")

    /// "Trust everything": a verify block that always completes true (an HTTP client's
    /// certificate-verification-none mode).
    func testTrustAllVerifyBlock() throws {
        let pki = try self.pki
        let outcome = try tlsExchange(["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]) { options in
            sec_protocol_options_set_verify_block(
                options, { (_, _, sec_protocol_verify_complete) in sec_protocol_verify_complete(true) }, queue)
        }
        XCTAssertNil(outcome.error)
    }

    /// Anchors, then an asynchronous evaluation that completes the verify block from its callback (an MQTT
    /// client's shape), with the older version calls beside it.
    func testAnchorsWithAsynchronousEvaluation() throws {
        let pki = try self.pki
        let caCertificates = [try secCertificate(pki.caCertificate)]
        let outcome = try tlsExchange(["-cert", pki.serverCertificate, "-key", pki.serverKey]) { sec in
            sec_protocol_options_set_tls_min_version(sec, .tlsProtocol12)
            sec_protocol_options_set_min_tls_protocol_version(sec, .TLSv12)
            let host = "localhost"
            sec_protocol_options_set_tls_server_name(sec, host)
            sec_protocol_options_set_verify_block(
                sec,
                { _, sec_trust, complete in
                    let trust = sec_trust_copy_ref(sec_trust).takeRetainedValue()
                    SecTrustSetPolicies(trust, SecPolicyCreateSSL(true, host as CFString))
                    SecTrustSetAnchorCertificates(trust, caCertificates as CFArray)
                    SecTrustSetAnchorCertificatesOnly(trust, true)
                    SecTrustEvaluateAsyncWithError(trust, DispatchQueue.global()) { _, result, error in
                        if let error { print("trust failed: \(CFErrorGetCode(error)) \(error.localizedDescription)") }
                        complete(result)
                    }
                }, queue)
        }
        XCTAssertNil(outcome.error)
    }

    /// Pinning the leaf's DER and its public key, reading them as pinning code reads them.
    func testPinningTheLeafAndItsKey() throws {
        let pki = try self.pki
        let pinnedCertificate = SecCertificateCopyData(try secCertificate(pki.selfSigned.0)) as Data
        let pinnedKey = SecKeyCopyExternalRepresentation(SecCertificateCopyKey(try secCertificate(pki.selfSigned.0))!, nil)! as Data
        let results = Guarded<[Bool]>([])
        let outcome = try tlsExchange(["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]) { options in
            sec_protocol_options_set_verify_block(
                options,
                { _, secTrust, complete in
                    let trust = sec_trust_copy_ref(secTrust).takeRetainedValue()
                    guard let serverCertificate = SecTrustGetCertificateAtIndex(trust, 0) else { return complete(false) }
                    let serverData = SecCertificateCopyData(serverCertificate)
                    let data = CFDataGetBytePtr(serverData)
                    let size = CFDataGetLength(serverData)
                    let copied = NSData(bytes: data, length: size)
                    let byCertificate = copied.isEqual(to: pinnedCertificate)
                    var byKey = false
                    if let chain = SecTrustCopyCertificateChain(trust) as? [SecCertificate], let key = SecCertificateCopyKey(chain[0]),
                        let keyData = SecKeyCopyExternalRepresentation(key, nil) as Data?
                    {
                        byKey = keyData == pinnedKey
                    }
                    results.withLock { $0 = [byCertificate, byKey] }
                    complete(byCertificate && byKey)
                }, queue)
        }
        XCTAssertNil(outcome.error)
        XCTAssertEqual(results.withLock { $0 }, [true, true])
    }

    /// A client certificate given by a challenge block (a WebSocket client's shape), to an mTLS server.
    func testChallengeBlockIdentityReachesAnMTLSServer() throws {
        let pki = try self.pki
        let identity = try clientSecIdentity()
        let asked = Guarded(0)
        let server = [
            "-cert", pki.serverCertificate, "-key", pki.serverKey, "-Verify", "1", "-CAfile", pki.caCertificate, "-verify_return_error",
        ]
        let outcome = try tlsExchange(server) { options in
            sec_protocol_options_set_peer_authentication_required(options, false)
            sec_protocol_options_set_challenge_block(
                options,
                { _, complete in
                    asked.withLock { $0 += 1 }
                    complete(sec_identity_create(identity))
                }, queue)
        }
        XCTAssertNil(outcome.error)
        XCTAssertTrue(outcome.received.hasPrefix("HTTP/1.0 200 ok"), outcome.received)
        XCTAssertEqual(asked.withLock { $0 }, 1)
    }

    /// An identity with its chain given explicitly.
    func testIdentityWithCertificates() throws {
        let pki = try self.pki
        let identity = try clientSecIdentity()
        var certificate: SecCertificate?
        SecIdentityCopyCertificate(identity, &certificate)
        let server = [
            "-cert", pki.serverCertificate, "-key", pki.serverKey, "-Verify", "1", "-CAfile", pki.caCertificate, "-verify_return_error",
        ]
        let outcome = try tlsExchange(server) { options in
            sec_protocol_options_set_peer_authentication_required(options, false)
            sec_protocol_options_set_local_identity(options, sec_identity_create_with_certificates(identity, [certificate!] as CFArray)!)
        }
        XCTAssertNil(outcome.error)
    }
}
