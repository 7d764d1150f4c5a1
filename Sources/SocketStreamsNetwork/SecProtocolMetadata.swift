// The objects Network.framework's TLS calls pass around (SecProtocolMetadata.h, SecProtocolObject.h):
// the metadata of a handshake, built from SocketStreams' `TLSConnectionInfo`, and the `sec_trust_t`,
// `sec_identity_t` and `sec_certificate_t` wrappers over the Security objects, with the calls that make
// and open them. Every object is immutable once made.

import Dispatch
import Foundation

/// What a TLS handshake negotiated (`sec_protocol_metadata_t`): given to verify and challenge blocks,
/// and read from a ready connection's `NWProtocolTLS.Metadata.securityProtocolMetadata`.
// swift-format-ignore: TypeNamesShouldBeCapitalized
// @unchecked Sendable: every stored property is a `let`; the C strings are written in `init`, only
// read afterwards, and freed in `deinit`.
public final class sec_protocol_metadata_t: @unchecked Sendable {
    let info: TLSConnectionInfo?
    /// The server name: the handshake's SNI, else the name the connection was made for.
    let serverName: String?
    private let alpnCString: UnsafeMutablePointer<CChar>?
    private let serverNameCString: UnsafeMutablePointer<CChar>?

    init(info: TLSConnectionInfo?, serverName: String? = nil) {
        self.info = info
        self.serverName = info?.serverName ?? serverName
        alpnCString = info?.alpnProtocol.map { strdup($0) } ?? nil
        serverNameCString = self.serverName.map { strdup($0) } ?? nil
    }

    deinit {
        free(alpnCString)
        free(serverNameCString)
    }

    var negotiatedProtocol: UnsafePointer<CChar>? { alpnCString.map { UnsafePointer($0) } }
    var serverNamePointer: UnsafePointer<CChar>? { serverNameCString.map { UnsafePointer($0) } }
}

/// A trust object as Network.framework hands it to a verify block (`sec_trust_t`): open it with
/// ``sec_trust_copy_ref(_:)``.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public final class sec_trust_t: Sendable {
    let trust: SecTrust

    init(trust: SecTrust) {
        self.trust = trust
    }
}

/// An identity as Network.framework takes it (`sec_identity_t`): a ``SecIdentity``, with the certificate
/// chain to present when it was made with one.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public final class sec_identity_t: Sendable {
    let identity: SecIdentity
    /// The chain presented, the identity's certificate first; nil for the identity's own.
    let certificates: [SecCertificate]?

    init(identity: SecIdentity, certificates: [SecCertificate]?) {
        self.identity = identity
        self.certificates = certificates
    }

    /// The SocketStreams identity the handshake presents.
    var tlsIdentity: TLSIdentity { identity.tlsIdentity(chain: certificates) }
}

/// A certificate as Network.framework passes it (`sec_certificate_t`).
// swift-format-ignore: TypeNamesShouldBeCapitalized
public final class sec_certificate_t: Sendable {
    let certificate: SecCertificate

    init(certificate: SecCertificate) {
        self.certificate = certificate
    }
}

// MARK: metadata

/// The version negotiated (`sec_protocol_metadata_get_negotiated_tls_protocol_version`): `.TLSv12` or `.TLSv13`.
public func sec_protocol_metadata_get_negotiated_tls_protocol_version(_ metadata: sec_protocol_metadata_t) -> tls_protocol_version_t {
    metadata.info?.protocolVersion == "TLSv1.3" ? .TLSv13 : .TLSv12
}

/// The version negotiated as an `SSLProtocol` (`sec_protocol_metadata_get_negotiated_protocol_version`,
/// deprecated): `.tlsProtocol12` or `.tlsProtocol13`, `.sslProtocolUnknown` before a handshake.
public func sec_protocol_metadata_get_negotiated_protocol_version(_ metadata: sec_protocol_metadata_t) -> SSLProtocol {
    guard let info = metadata.info else { return .sslProtocolUnknown }
    return info.protocolVersion == "TLSv1.3" ? .tlsProtocol13 : .tlsProtocol12
}

/// The ALPN protocol agreed on, nil if none (`sec_protocol_metadata_get_negotiated_protocol`): valid as
/// long as `metadata` is. `String(cString:)` reads it.
public func sec_protocol_metadata_get_negotiated_protocol(_ metadata: sec_protocol_metadata_t) -> UnsafePointer<CChar>? {
    metadata.negotiatedProtocol
}

/// The cipher suite negotiated (`sec_protocol_metadata_get_negotiated_tls_ciphersuite`); raw value 0
/// (TLS_NULL_WITH_NULL_NULL) before a handshake or for a suite without an IANA name known here.
public func sec_protocol_metadata_get_negotiated_tls_ciphersuite(_ metadata: sec_protocol_metadata_t) -> tls_ciphersuite_t {
    metadata.info.flatMap { tls_ciphersuite_t(ianaName: $0.cipherSuite) } ?? tls_ciphersuite_t(rawValue: 0)!
}

/// The server name (SNI) of the handshake, nil if none (`sec_protocol_metadata_get_server_name`): valid
/// as long as `metadata` is.
public func sec_protocol_metadata_get_server_name(_ metadata: sec_protocol_metadata_t) -> UnsafePointer<CChar>? {
    metadata.serverNamePointer
}

/// Calls `handler` with each certificate the peer sent, leaf first
/// (`sec_protocol_metadata_access_peer_certificate_chain`); false when there are none.
@discardableResult
public func sec_protocol_metadata_access_peer_certificate_chain(
    _ metadata: sec_protocol_metadata_t, _ handler: (sec_certificate_t) -> Void
) -> Bool {
    guard let chain = metadata.info?.peerCertificates, !chain.isEmpty else { return false }
    for der in chain { handler(sec_certificate_t(certificate: SecCertificate(der: der))) }
    return true
}

/// The peer's public key, as ``SecKeyCopyExternalRepresentation(_:_:)`` gives it
/// (`sec_protocol_metadata_copy_peer_public_key`); nil when the peer sent no certificate.
public func sec_protocol_metadata_copy_peer_public_key(_ metadata: sec_protocol_metadata_t) -> DispatchData? {
    guard let leaf = metadata.info?.peerCertificates.first, let key = TLSCertificateTools.publicKey(leaf) else { return nil }
    return key.external.withUnsafeBytes { DispatchData(bytes: $0) }
}

// MARK: trust, identities, certificates

/// A ``sec_trust_t`` over `trust` (`sec_trust_create`).
public func sec_trust_create(_ trust: SecTrust) -> sec_trust_t? {
    sec_trust_t(trust: trust)
}

/// The ``SecTrust`` inside (`sec_trust_copy_ref`), retained: take it with `.takeRetainedValue()`.
public func sec_trust_copy_ref(_ trust: sec_trust_t) -> Unmanaged<SecTrust> {
    Unmanaged.passRetained(trust.trust)
}

/// An identity for ``sec_protocol_options_set_local_identity(_:_:)`` presenting `identity`'s own chain
/// (`sec_identity_create`).
public func sec_identity_create(_ identity: SecIdentity) -> sec_identity_t? {
    sec_identity_t(identity: identity, certificates: nil)
}

/// An identity presenting `identity`'s key with `certificates` (``SecCertificate``s, its certificate
/// first) as the chain (`sec_identity_create_with_certificates`); nil if the array holds something else
/// or is empty.
public func sec_identity_create_with_certificates(_ identity: SecIdentity, _ certificates: CFArray) -> sec_identity_t? {
    guard let list = certificates as? [SecCertificate], !list.isEmpty else { return nil }
    return sec_identity_t(identity: identity, certificates: list)
}

/// The ``SecIdentity`` inside, retained (`sec_identity_copy_ref`).
public func sec_identity_copy_ref(_ identity: sec_identity_t) -> Unmanaged<SecIdentity>? {
    Unmanaged.passRetained(identity.identity)
}

/// The certificates the identity presents, retained (`sec_identity_copy_certificates_ref`); nil when it
/// presents its own chain.
public func sec_identity_copy_certificates_ref(_ identity: sec_identity_t) -> Unmanaged<CFArray>? {
    identity.certificates.map { Unmanaged.passRetained($0 as CFArray) }
}

/// A ``sec_certificate_t`` over `certificate` (`sec_certificate_create`).
public func sec_certificate_create(_ certificate: SecCertificate) -> sec_certificate_t? {
    sec_certificate_t(certificate: certificate)
}

/// The ``SecCertificate`` inside, retained (`sec_certificate_copy_ref`).
public func sec_certificate_copy_ref(_ certificate: sec_certificate_t) -> Unmanaged<SecCertificate> {
    Unmanaged.passRetained(certificate.certificate)
}
