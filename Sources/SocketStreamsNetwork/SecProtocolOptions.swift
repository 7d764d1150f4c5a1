// Network.framework's TLS configuration as Security declares it (SecProtocolOptions.h): the
// `sec_protocol_options_t` an `NWProtocolTLS.Options` holds, and the `sec_protocol_options_*` calls that
// fill it. Each call only records its value in the options' `Guarded` state; NWProtocolTLS+Settings.swift
// turns the values into SocketStreams' `TLSSettings` when a connection starts, and says there what each
// becomes and what cannot be honoured.

import Dispatch
import Foundation

/// The completion a verify block calls once with its decision (`sec_protocol_verify_complete_t`).
// swift-format-ignore: TypeNamesShouldBeCapitalized
public typealias sec_protocol_verify_complete_t = @Sendable (_ result: Bool) -> Void

/// A verify block (`sec_protocol_verify_t`): the handshake's metadata, a trust over the peer's chain,
/// and the completion.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public typealias sec_protocol_verify_t =
    @Sendable (
        _ metadata: sec_protocol_metadata_t, _ trust_ref: sec_trust_t, _ complete: @escaping sec_protocol_verify_complete_t
    ) -> Void

/// The completion a challenge block calls once with the identity to present, or nil for none
/// (`sec_protocol_challenge_complete_t`).
// swift-format-ignore: TypeNamesShouldBeCapitalized
public typealias sec_protocol_challenge_complete_t = @Sendable (_ identity: sec_identity_t?) -> Void

/// A challenge block (`sec_protocol_challenge_t`): asked for the client identity.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public typealias sec_protocol_challenge_t =
    @Sendable (_ metadata: sec_protocol_metadata_t, _ complete: @escaping sec_protocol_challenge_complete_t) -> Void

/// Security's handle on one TLS configuration (`sec_protocol_options_t`), which an
/// `NWProtocolTLS.Options` holds as `securityProtocolOptions` and the `sec_protocol_options_*` calls
/// configure. Its values are kept under a lock, so the calls may come from any thread.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public final class sec_protocol_options_t: Sendable {
    struct Values {
        var verifyBlock: sec_protocol_verify_t?
        var verifyQueue: DispatchQueue?
        var challengeBlock: sec_protocol_challenge_t?
        var challengeQueue: DispatchQueue?
        var minimumVersion: tls_protocol_version_t?
        var maximumVersion: tls_protocol_version_t?
        var serverName: String?
        var applicationProtocols: [String] = []
        /// nil: the role's default (clients true, servers false).
        var peerAuthenticationRequired: Bool?
        var localIdentity: sec_identity_t?
        var cipherSuites: [tls_ciphersuite_t] = []
        var resumptionEnabled: Bool?
        var ticketsEnabled: Bool?
        var falseStartEnabled: Bool?
        var renegotiationEnabled: Bool?
        var ocspEnabled: Bool?
    }

    let values: Guarded<Values>

    init() {
        values = Guarded(Values())
    }

    /// A copy with the same values (`NWProtocolTLS.Options.copied()`, for `NWParameters.copy()`).
    func copied() -> sec_protocol_options_t {
        let copy = sec_protocol_options_t()
        let current = values.withLock { $0 }
        copy.values.withLock { $0 = current }
        return copy
    }
}

/// Replaces trust evaluation with `verify_block`, run on `verify_block_queue` once the peer's chain is in
/// (`sec_protocol_options_set_verify_block`): it gets the handshake's metadata, a ``sec_trust_t`` over the
/// chain (whose default policy is SSL with the server name) and a completion to call once, from any
/// thread. Completing true accepts whatever OpenSSL thought of the chain; false fails the connection with
/// `NWError.tls(errSSLBadCert)`. The handshake waits until it completes.
public func sec_protocol_options_set_verify_block(
    _ options: sec_protocol_options_t, _ verify_block: @escaping sec_protocol_verify_t, _ verify_block_queue: DispatchQueue
) {
    options.values.withLock { values in
        values.verifyBlock = verify_block
        values.verifyQueue = verify_block_queue
    }
}

/// Sets the block asked for the client identity when none is set (`sec_protocol_options_set_challenge_block`).
/// Apple asks when the server requests a certificate; this package chooses the client certificate before
/// the handshake, so the block is asked then, on `challenge_queue`, with metadata that holds only the server
/// name, and its identity is offered if the server asks.
public func sec_protocol_options_set_challenge_block(
    _ options: sec_protocol_options_t, _ challenge_block: @escaping sec_protocol_challenge_t, _ challenge_queue: DispatchQueue
) {
    challenge_queue.setSpecific(key: challengeQueueKey, value: ObjectIdentifier(challenge_queue))
    options.values.withLock { values in
        values.challengeBlock = challenge_block
        values.challengeQueue = challenge_queue
    }
}

/// Marks a challenge queue with its own identity, so that settings made on it run the challenge block
/// directly rather than wait for the queue they are on.
let challengeQueueKey = DispatchSpecificKey<ObjectIdentifier>()

/// The oldest version offered (`sec_protocol_options_set_min_tls_protocol_version`); TLS 1.2 unless set.
/// Versions below TLS 1.2 mean TLS 1.2: this package offers TLS 1.2 and 1.3 only.
public func sec_protocol_options_set_min_tls_protocol_version(_ options: sec_protocol_options_t, _ version: tls_protocol_version_t) {
    options.values[\.minimumVersion] = version
}

/// The newest version offered (`sec_protocol_options_set_max_tls_protocol_version`); TLS 1.3 unless set.
/// A version below TLS 1.2 cannot be honoured: the connection fails with `NWError.tls(errSSLPeerProtocolVersion)`.
public func sec_protocol_options_set_max_tls_protocol_version(_ options: sec_protocol_options_t, _ version: tls_protocol_version_t) {
    options.values[\.maximumVersion] = version
}

/// The oldest version offered by default (`sec_protocol_options_get_default_min_tls_protocol_version`): TLS 1.2.
public func sec_protocol_options_get_default_min_tls_protocol_version() -> tls_protocol_version_t { .TLSv12 }

/// The newest version offered by default (`sec_protocol_options_get_default_max_tls_protocol_version`): TLS 1.3.
public func sec_protocol_options_get_default_max_tls_protocol_version() -> tls_protocol_version_t { .TLSv13 }

/// The oldest version, as an `SSLProtocol` (`sec_protocol_options_set_tls_min_version`, deprecated):
/// as ``sec_protocol_options_set_min_tls_protocol_version(_:_:)``; `.sslProtocolUnknown`,
/// `.sslProtocolAll` and `.tlsProtocolMaxSupported` clear the bound.
public func sec_protocol_options_set_tls_min_version(_ options: sec_protocol_options_t, _ version: SSLProtocol) {
    options.values[\.minimumVersion] = version.protocolVersion
}

/// The newest version, as an `SSLProtocol` (`sec_protocol_options_set_tls_max_version`, deprecated): as
/// ``sec_protocol_options_set_max_tls_protocol_version(_:_:)``.
public func sec_protocol_options_set_tls_max_version(_ options: sec_protocol_options_t, _ version: SSLProtocol) {
    options.values[\.maximumVersion] = version.protocolVersion
}

/// The server name sent (SNI) and verified, instead of the endpoint's host
/// (`sec_protocol_options_set_tls_server_name`). A Swift `String` passes as the C string.
public func sec_protocol_options_set_tls_server_name(_ options: sec_protocol_options_t, _ server_name: UnsafePointer<CChar>) {
    options.values[\.serverName] = String(cString: server_name)
}

/// Adds an ALPN protocol, most preferred first (`sec_protocol_options_add_tls_application_protocol`).
public func sec_protocol_options_add_tls_application_protocol(
    _ options: sec_protocol_options_t, _ application_protocol: UnsafePointer<CChar>
) {
    let name = String(cString: application_protocol)
    options.values.withLock { $0.applicationProtocols.append(name) }
}

/// Whether the peer must authenticate (`sec_protocol_options_set_peer_authentication_required`): clients
/// default to true (the server's chain is verified), servers to false (no client certificate asked). A
/// client with false accepts any certificate; a server with true requires a trusted client certificate.
public func sec_protocol_options_set_peer_authentication_required(_ options: sec_protocol_options_t, _ peer_authentication_required: Bool) {
    options.values[\.peerAuthenticationRequired] = peer_authentication_required
}

/// The local identity (`sec_protocol_options_set_local_identity`): the certificate a server serves, or
/// a client presents when asked.
public func sec_protocol_options_set_local_identity(_ options: sec_protocol_options_t, _ identity: sec_identity_t) {
    options.values[\.localIdentity] = identity
}

/// Adds a cipher suite to those offered (`sec_protocol_options_append_tls_ciphersuite`); none added is
/// OpenSSL's defaults. A suite OpenSSL does not have fails the connection with
/// `NWError.tls(errSSLBadCipherSuite)`.
public func sec_protocol_options_append_tls_ciphersuite(_ options: sec_protocol_options_t, _ ciphersuite: tls_ciphersuite_t) {
    options.values.withLock { $0.cipherSuites.append(ciphersuite) }
}

/// Session resumption (`sec_protocol_options_set_tls_resumption_enabled`): on by default, as on Apple
/// platforms; a client offers a session kept from an earlier connection to the same host and port under
/// the same trust settings. A verify block is asked on resumed connections too, with the certificates of
/// the handshake that made the session.
public func sec_protocol_options_set_tls_resumption_enabled(_ options: sec_protocol_options_t, _ resumption_enabled: Bool) {
    options.values[\.resumptionEnabled] = resumption_enabled
}

/// Session tickets (`sec_protocol_options_set_tls_tickets_enabled`): false with resumption on keeps
/// sessions from being resumed (OpenSSL's TLS 1.3 sessions are tickets).
public func sec_protocol_options_set_tls_tickets_enabled(_ options: sec_protocol_options_t, _ tickets_enabled: Bool) {
    options.values[\.ticketsEnabled] = tickets_enabled
}

/// TLS False Start (`sec_protocol_options_set_tls_false_start_enabled`): recorded, no effect (OpenSSL has
/// no False Start; application data waits for the handshake).
public func sec_protocol_options_set_tls_false_start_enabled(_ options: sec_protocol_options_t, _ false_start_enabled: Bool) {
    options.values[\.falseStartEnabled] = false_start_enabled
}

/// TLS 1.2 renegotiation (`sec_protocol_options_set_tls_renegotiation_enabled`): recorded, no effect
/// (renegotiation is always refused, `SSL_OP_NO_RENEGOTIATION`).
public func sec_protocol_options_set_tls_renegotiation_enabled(_ options: sec_protocol_options_t, _ renegotiation_enabled: Bool) {
    options.values[\.renegotiationEnabled] = renegotiation_enabled
}

/// OCSP stapling (`sec_protocol_options_set_tls_ocsp_enabled`): recorded, no effect (no OCSP response is
/// asked for or checked; revocation is checked only against CRLs given to SocketStreams' TLSSettings).
public func sec_protocol_options_set_tls_ocsp_enabled(_ options: sec_protocol_options_t, _ ocsp_enabled: Bool) {
    options.values[\.ocspEnabled] = ocsp_enabled
}
