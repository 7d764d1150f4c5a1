import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

/// The `sec_protocol_options_*` calls' values, and the settings the seam makes of them.
final class TLSOptionsTests: SocketStreamsTestCase {
    private func options(_ configure: (sec_protocol_options_t) -> Void = { _ in }) -> NWProtocolTLS.Options {
        let options = NWProtocolTLS.Options()
        configure(options.securityProtocolOptions)
        return options
    }

    private func identity() throws -> sec_identity_t { try XCTUnwrap(sec_identity_create(try clientSecIdentity())) }

    private func tlsError(_ body: () throws -> Void) -> NWError? {
        do {
            try body()
            return nil
        } catch {
            return error as? NWError
        }
    }

    func testAppleRawValues() {
        XCTAssertEqual(tls_protocol_version_t.TLSv10.rawValue, 0x0301)
        XCTAssertEqual(tls_protocol_version_t.TLSv11.rawValue, 0x0302)
        XCTAssertEqual(tls_protocol_version_t.TLSv12.rawValue, 0x0303)
        XCTAssertEqual(tls_protocol_version_t.TLSv13.rawValue, 0x0304)
        XCTAssertEqual(tls_protocol_version_t.DTLSv10.rawValue, 0xfeff)
        XCTAssertEqual(tls_protocol_version_t.DTLSv12.rawValue, 0xfefd)
        XCTAssertEqual(SSLProtocol.tlsProtocol12.rawValue, 8)
        XCTAssertEqual(SSLProtocol.tlsProtocol13.rawValue, 10)
        XCTAssertEqual(SSLProtocol.tlsProtocol1.rawValue, 4)
        XCTAssertEqual(tls_ciphersuite_t.ECDHE_ECDSA_WITH_AES_128_GCM_SHA256.rawValue, 0xC02B)
        XCTAssertEqual(tls_ciphersuite_t.AES_256_GCM_SHA384.rawValue, 0x1302)
        XCTAssertEqual(tls_ciphersuite_t(rawValue: 0xCCA9), .ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
        XCTAssertEqual(SecTrustOptionFlags.allowExpired.rawValue, 1)
        XCTAssertEqual(SecTrustOptionFlags.implicitAnchors.rawValue, 0x40)
        XCTAssertEqual(errSecAuthFailed, -25293)
        XCTAssertEqual(errSecDecode, -26275)
        XCTAssertEqual(errSSLBadCert, -9808)
        XCTAssertEqual(kSecImportExportPassphrase as String, "passphrase")
        XCTAssertEqual(sec_protocol_options_get_default_min_tls_protocol_version(), .TLSv12)
    }

    func testDefaultsVerifyTheEndpointHost() throws {
        let settings = try options().settings(role: .client, endpointHost: "example.com")
        XCTAssertEqual(settings.role, .client)
        XCTAssertEqual(settings.peerName, .name("example.com"))
        XCTAssertTrue(settings.validatesCertificateChain)
        XCTAssertEqual(settings.trustRoots, [.system])
        XCTAssertEqual(settings.minimumVersion, .v1_2)
        XCTAssertNil(settings.maximumVersion)
        XCTAssertNil(settings.trustEvaluation)
        XCTAssertNil(settings.identity)
        XCTAssertTrue(settings.resumesSessions, "resumption is on by default, as on Apple platforms")
        // No host (a Unix socket) and no server name: the chain is still verified, with no name.
        XCTAssertEqual(try options().settings(role: .client, endpointHost: nil).peerName, TLSSettings.PeerName.none)
    }

    func testServerNameOverridesTheEndpointAndALPNIsKeptInOrder() throws {
        let settings = try options { options in
            sec_protocol_options_set_tls_server_name(options, "api.example.com")
            sec_protocol_options_add_tls_application_protocol(options, "h2")
            sec_protocol_options_add_tls_application_protocol(options, "http/1.1")
        }.settings(role: .client, endpointHost: "10.0.0.1")
        XCTAssertEqual(settings.peerName, .name("api.example.com"))
        XCTAssertEqual(settings.alpnProtocols, ["h2", "http/1.1"])
    }

    func testVersions() throws {
        var settings = try options { options in
            sec_protocol_options_set_min_tls_protocol_version(options, .TLSv13)
        }.settings(role: .client, endpointHost: "h")
        XCTAssertEqual(settings.minimumVersion, .v1_3)
        // Below 1.2 means 1.2 for the minimum.
        settings = try options { options in
            sec_protocol_options_set_min_tls_protocol_version(options, .TLSv10)
            sec_protocol_options_set_max_tls_protocol_version(options, .TLSv12)
        }.settings(role: .client, endpointHost: "h")
        XCTAssertEqual(settings.minimumVersion, .v1_2)
        XCTAssertEqual(settings.maximumVersion, .v1_2)
        // The deprecated SSLProtocol spellings.
        settings = try options { options in
            sec_protocol_options_set_tls_min_version(options, .tlsProtocol12)
            sec_protocol_options_set_tls_max_version(options, .tlsProtocol13)
        }.settings(role: .client, endpointHost: "h")
        XCTAssertEqual(settings.minimumVersion, .v1_2)
        XCTAssertEqual(settings.maximumVersion, .v1_3)
        // A maximum below 1.2 cannot be honoured: the connection fails, it does not quietly use 1.2.
        for maximum in [tls_protocol_version_t.TLSv11, .TLSv10, .DTLSv10] {
            let error = tlsError {
                _ = try options { sec_protocol_options_set_max_tls_protocol_version($0, maximum) }
                    .settings(role: .client, endpointHost: "h")
            }
            XCTAssertEqual(error, .tls(errSSLPeerProtocolVersion), "\(maximum)")
        }
        XCTAssertEqual(
            tlsError {
                _ = try options { sec_protocol_options_set_tls_max_version($0, .tlsProtocol1) }.settings(role: .client, endpointHost: "h")
            },
            .tls(-9836))
        // A maximum older than the minimum.
        let crossed = tlsError {
            _ = try options { options in
                sec_protocol_options_set_min_tls_protocol_version(options, .TLSv13)
                sec_protocol_options_set_max_tls_protocol_version(options, .TLSv12)
            }.settings(role: .client, endpointHost: "h")
        }
        XCTAssertEqual(crossed, .tls(errSSLBadConfiguration))
    }

    func testPeerAuthenticationAndTheVerifyBlock() throws {
        var settings = try options { sec_protocol_options_set_peer_authentication_required($0, false) }
            .settings(role: .client, endpointHost: "h")
        XCTAssertFalse(settings.validatesCertificateChain)
        settings = try options { options in
            sec_protocol_options_set_verify_block(options, { _, _, complete in complete(true) }, .main)
        }.settings(role: .client, endpointHost: "h")
        XCTAssertNotNil(settings.trustEvaluation)
        XCTAssertEqual(settings.trustEvaluation?.rejectionStatus, -9808)
    }

    func testCipherSuitesAndResumption() throws {
        var settings = try options { options in
            sec_protocol_options_append_tls_ciphersuite(options, .AES_128_GCM_SHA256)
            sec_protocol_options_append_tls_ciphersuite(options, .ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
            sec_protocol_options_set_tls_resumption_enabled(options, true)
            sec_protocol_options_set_tls_false_start_enabled(options, true)
            sec_protocol_options_set_tls_renegotiation_enabled(options, true)
            sec_protocol_options_set_tls_ocsp_enabled(options, true)
        }.settings(role: .client, endpointHost: "h")
        XCTAssertEqual(settings.cipherSuites, ["TLS_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"])
        XCTAssertTrue(settings.resumesSessions)
        settings = try options { options in
            sec_protocol_options_set_tls_resumption_enabled(options, true)
            sec_protocol_options_set_tls_tickets_enabled(options, false)
        }.settings(role: .client, endpointHost: "h")
        XCTAssertFalse(settings.resumesSessions)
        settings = try options { sec_protocol_options_set_tls_resumption_enabled($0, false) }.settings(role: .client, endpointHost: "h")
        XCTAssertFalse(settings.resumesSessions)
        let unknown = tlsError {
            _ = try options { sec_protocol_options_append_tls_ciphersuite($0, tls_ciphersuite_t(rawValue: 0x0001)!) }
                .settings(role: .client, endpointHost: "h")
        }
        XCTAssertEqual(unknown, .tls(errSSLBadCipherSuite))
    }

    func testServerNeedsAnIdentityAndCanRequireClients() throws {
        XCTAssertEqual(tlsError { _ = try options().settings(role: .server, endpointHost: nil) }, .tls(errSSLBadConfiguration))
        let identity = try identity()
        var settings = try options { sec_protocol_options_set_local_identity($0, identity) }.settings(role: .server, endpointHost: nil)
        XCTAssertEqual(settings.role, .server)
        XCTAssertNotNil(settings.identity)
        XCTAssertEqual(settings.clientCertificates, .none)
        settings = try options { options in
            sec_protocol_options_set_local_identity(options, identity)
            sec_protocol_options_set_peer_authentication_required(options, true)
        }.settings(role: .server, endpointHost: nil)
        XCTAssertEqual(settings.clientCertificates, .require)
    }

    func testLocalIdentityAndChallengeBlockGiveTheClientIdentity() throws {
        let identity = try identity()
        XCTAssertNotNil(
            try options { sec_protocol_options_set_local_identity($0, identity) }.settings(role: .client, endpointHost: "h").identity)
        // The challenge block, asked on its queue, from another thread.
        let queue = DispatchQueue(label: "challenge")
        let asked = Guarded<String?>(nil)
        let challenged = options { options in
            sec_protocol_options_set_challenge_block(
                options,
                { metadata, complete in
                    asked.withLock { $0 = sec_protocol_metadata_get_server_name(metadata).map { String(cString: $0) } }
                    complete(identity)
                }, queue)
        }
        XCTAssertEqual(try challenged.settings(role: .client, endpointHost: "server.example").identity, identity.tlsIdentity)
        XCTAssertEqual(asked.withLock { $0 }, "server.example")
        // Made on the challenge queue itself: run there directly, no deadlock.
        let onQueue = try queue.sync { try challenged.settings(role: .client, endpointHost: "h") }
        XCTAssertEqual(onQueue.identity, identity.tlsIdentity)
    }

    func testCopiedOptionsKeepTheirValuesApart() throws {
        let original = options { sec_protocol_options_add_tls_application_protocol($0, "h2") }
        let copy = try XCTUnwrap(original.copied() as? NWProtocolTLS.Options)
        XCTAssertFalse(copy.securityProtocolOptions === original.securityProtocolOptions)
        sec_protocol_options_add_tls_application_protocol(copy.securityProtocolOptions, "http/1.1")
        XCTAssertEqual(try original.settings(role: .client, endpointHost: "h").alpnProtocols, ["h2"])
        XCTAssertEqual(try copy.settings(role: .client, endpointHost: "h").alpnProtocols, ["h2", "http/1.1"])
    }

    func testMetadataReadsTheConnectionInfo() throws {
        let leaf = try Data(contentsOf: URL(fileURLWithPath: try pki.serverCertificate))
        let der = try XCTUnwrap(TLSCertificate(pem: leaf)).der
        let info = TLSConnectionInfo(
            protocolVersion: "TLSv1.3", cipherSuite: "TLS_AES_256_GCM_SHA384", alpnProtocol: "h2", peerCertificates: [der],
            resumedSession: false, verifyResult: 0, verifyResultDescription: "ok", serverName: "localhost")
        let metadata = NWProtocolTLS.Metadata(info: info).securityProtocolMetadata
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata), .TLSv13)
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_protocol_version(metadata), .tlsProtocol13)
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_protocol(metadata).map { String(cString: $0) }, "h2")
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_ciphersuite(metadata), .AES_256_GCM_SHA384)
        XCTAssertEqual(sec_protocol_metadata_get_server_name(metadata).map { String(cString: $0) }, "localhost")
        var seen: [Data] = []
        XCTAssertTrue(
            sec_protocol_metadata_access_peer_certificate_chain(metadata) { certificate in
                seen.append(SecCertificateCopyData(sec_certificate_copy_ref(certificate).takeRetainedValue()) as Data)
            })
        XCTAssertEqual(seen, [der])
        let key = try XCTUnwrap(sec_protocol_metadata_copy_peer_public_key(metadata))
        XCTAssertEqual(key.count, 65)  // P-256, X9.63 uncompressed
        XCTAssertEqual(Data(key), SecKeyCopyExternalRepresentation(SecCertificateCopyKey(SecCertificate(der: der))!, nil)! as Data)

        let empty = NWProtocolTLS.Metadata(info: nil).securityProtocolMetadata
        XCTAssertNil(sec_protocol_metadata_get_negotiated_protocol(empty))
        XCTAssertNil(sec_protocol_metadata_get_server_name(empty))
        XCTAssertFalse(sec_protocol_metadata_access_peer_certificate_chain(empty) { _ in XCTFail("no certificates") })
        XCTAssertNil(sec_protocol_metadata_copy_peer_public_key(empty))
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_ciphersuite(empty).rawValue, 0)
    }
}
