import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

/// Real handshakes against `openssl s_server` with the settings the TLS options come to, over a plain
/// stream pair (what NWConnection does with them): verify blocks, peer authentication, client identities,
/// ALPN and the metadata.
final class TLSHandshakeTests: SocketStreamsTestCase {
    private let verifyQueue = DispatchQueue(label: "verify")

    /// A verify block that trusts `anchor` only, as pinning code does on Apple platforms; it records what
    /// it saw.
    private func pinning(_ anchor: SecCertificate, seen: Guarded<[String]>) -> sec_protocol_verify_t {
        { metadata, trust, complete in
            let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
            _ = SecTrustSetAnchorCertificates(secTrust, [anchor] as CFArray)
            var error: CFError?
            let trusted = SecTrustEvaluateWithError(secTrust, &error)
            let version = sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata)
            let name = sec_protocol_metadata_get_server_name(metadata).map { String(cString: $0) } ?? "-"
            let chain = (SecTrustCopyCertificateChain(secTrust) as? [SecCertificate])?.count ?? 0
            seen.withLock { $0.append("\(trusted) \(version) \(name) \(chain) \(error.map { CFErrorGetCode($0) } ?? 0)") }
            complete(trusted)
        }
    }

    func testVerifyBlockPinningTheServerCertificateAccepts() throws {
        let pki = try self.pki
        let seen = Guarded<[String]>([])
        let pinned = try secCertificate(pki.selfSigned.0)
        let outcome = try tlsExchange(["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]) { options in
            sec_protocol_options_set_verify_block(options, pinning(pinned, seen: seen), verifyQueue)
        }
        XCTAssertNil(outcome.error)
        XCTAssertTrue(outcome.received.hasPrefix("HTTP/1.0 200 ok"), outcome.received)
        XCTAssertEqual(seen.withLock { $0 }, ["true TLSv13 localhost 1 0"])
    }

    func testVerifyBlockTrustingTheCAAcceptsItsServer() throws {
        let pki = try self.pki
        let seen = Guarded<[String]>([])
        let anchor = try secCertificate(pki.caCertificate)
        let server = ["-cert", pki.serverCertificate, "-key", pki.serverKey, "-cert_chain", pki.caCertificate]
        let outcome = try tlsExchange(server) { options in
            sec_protocol_options_set_verify_block(options, pinning(anchor, seen: seen), verifyQueue)
        }
        XCTAssertNil(outcome.error)
        XCTAssertEqual(seen.withLock { $0 }, ["true TLSv13 localhost 2 0"])
    }

    func testVerifyBlockThatRejectsFailsWithBadCert() throws {
        let pki = try self.pki
        let seen = Guarded<[String]>([])
        // The CA does not vouch for the self-signed server: the evaluation fails and the block says false.
        let outcome = try tlsExchange(["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]) { options in
            sec_protocol_options_set_verify_block(options, pinning(try secCertificate(pki.caCertificate), seen: seen), verifyQueue)
        }
        XCTAssertEqual(outcome.error?.domain, NSOSStatusErrorDomain)
        XCTAssertEqual(outcome.error?.code, Int(errSSLBadCert), "\(String(describing: outcome.error))")
        XCTAssertEqual(seen.withLock { $0 }, ["false TLSv13 localhost 1 \(errSecNotTrusted)"])
        XCTAssertFalse(outcome.received.contains("HTTP/1.0"))

        let refused = try tlsExchange(["-cert", pki.serverCertificate, "-key", pki.serverKey]) { options in
            sec_protocol_options_set_verify_block(options, { _, _, complete in complete(false) }, verifyQueue)
        }
        XCTAssertEqual(refused.error?.code, -9808)
    }

    /// A verify block replaces default trust evaluation: OpenSSL's verdict on a self-signed certificate
    /// does not refuse the handshake on its own.
    func testVerifyBlockReplacesDefaultEvaluation() throws {
        let pki = try self.pki
        let called = Guarded(0)
        let outcome = try tlsExchange(["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]) { options in
            sec_protocol_options_set_verify_block(
                options,
                { _, _, complete in
                    called.withLock { $0 += 1 }
                    complete(true)
                }, verifyQueue)
        }
        XCTAssertNil(outcome.error)
        XCTAssertEqual(called.withLock { $0 }, 1)
    }

    func testPeerAuthenticationFalseAcceptsASelfSignedServer() throws {
        let pki = try self.pki
        let server = ["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]
        let refused = try tlsExchange(server) { _ in }
        XCTAssertNotNil(refused.error, "the default verifies the chain")
        let accepted = try tlsExchange(server) { sec_protocol_options_set_peer_authentication_required($0, false) }
        XCTAssertNil(accepted.error)
        XCTAssertTrue(accepted.received.hasPrefix("HTTP/1.0 200 ok"), accepted.received)
    }

    func testClientIdentityFromPKCS12ReachesAnMTLSServer() throws {
        let pki = try self.pki
        let identity = try XCTUnwrap(sec_identity_create(try clientSecIdentity()))
        let anchor = try secCertificate(pki.caCertificate)
        let server = [
            "-cert", pki.serverCertificate, "-key", pki.serverKey, "-Verify", "1", "-CAfile", pki.caCertificate, "-verify_return_error",
        ]
        let seen = Guarded<[String]>([])
        let accepted = try tlsExchange(server) { options in
            sec_protocol_options_set_verify_block(options, pinning(anchor, seen: seen), verifyQueue)
            sec_protocol_options_set_local_identity(options, identity)
        }
        XCTAssertNil(accepted.error)
        XCTAssertTrue(accepted.received.hasPrefix("HTTP/1.0 200 ok"), accepted.received)

        // Without one, the server refuses (TLS 1.3: after the client's handshake, as certificate_required).
        let refused = try tlsExchange(server) { options in
            sec_protocol_options_set_verify_block(options, pinning(anchor, seen: seen), verifyQueue)
        }
        XCTAssertNotNil(refused.error)
    }

    func testALPNAndCipherSuiteShowInTheMetadata() throws {
        let pki = try self.pki
        let outcome = try tlsExchange(["-cert", pki.serverCertificate, "-key", pki.serverKey, "-alpn", "h2"]) { options in
            sec_protocol_options_set_peer_authentication_required(options, false)
            sec_protocol_options_add_tls_application_protocol(options, "h2")
            sec_protocol_options_add_tls_application_protocol(options, "http/1.1")
            sec_protocol_options_set_max_tls_protocol_version(options, .TLSv12)
            // Not OpenSSL's first choice, so its being negotiated shows the list was applied.
            sec_protocol_options_append_tls_ciphersuite(options, .ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
        }
        XCTAssertNil(outcome.error)
        let metadata = NWProtocolTLS.Metadata(info: try XCTUnwrap(outcome.info)).securityProtocolMetadata
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_protocol(metadata).map { String(cString: $0) }, "h2")
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata), .TLSv12)
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_ciphersuite(metadata), .ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
        XCTAssertEqual(sec_protocol_metadata_get_server_name(metadata).map { String(cString: $0) }, "localhost")
        var count = 0
        XCTAssertTrue(sec_protocol_metadata_access_peer_certificate_chain(metadata) { _ in count += 1 })
        XCTAssertEqual(count, 1)
    }

    func testTLS13CipherSuiteIsTheOneAppended() throws {
        let pki = try self.pki
        let outcome = try tlsExchange(["-cert", pki.serverCertificate, "-key", pki.serverKey]) { options in
            sec_protocol_options_set_peer_authentication_required(options, false)
            sec_protocol_options_append_tls_ciphersuite(options, .CHACHA20_POLY1305_SHA256)
        }
        XCTAssertNil(outcome.error)
        let metadata = NWProtocolTLS.Metadata(info: try XCTUnwrap(outcome.info)).securityProtocolMetadata
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata), .TLSv13)
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_ciphersuite(metadata), .CHACHA20_POLY1305_SHA256)
    }
}
