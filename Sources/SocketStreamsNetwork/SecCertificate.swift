// Security's certificate, key, identity and policy objects and the calls that make and read them
// (SecCertificate.h, SecKey.h, SecIdentity.h, SecPolicy.h, SecImportExport.h), over SocketStreams'
// OpenSSL helpers (TLSCertificateTools). Each object is immutable once made, so each is `Sendable`.
//
// Public-key pinning: `SecKeyCopyExternalRepresentation(SecCertificateCopyKey(cert)!, nil)` gives the
// bytes Apple gives (PKCS#1 RSAPublicKey for RSA, the X9.63 uncompressed point for EC), so a SHA-256 over
// them equals the digest Apple-platform code computes over the same certificate. Code that pins the
// SubjectPublicKeyInfo prepends the ASN.1 header for the key type, as it does on Apple platforms.

import Foundation

/// An X.509 certificate (`SecCertificate`), holding its DER. Two certificates are equal when their
/// DER is (`CFEqual` on Apple platforms).
public final class SecCertificate: Hashable, Sendable {
    /// The certificate, DER.
    let der: Data

    init(der: Data) {
        self.der = der
    }

    /// Equal DER (`CFEqual`).
    public static func == (lhs: SecCertificate, rhs: SecCertificate) -> Bool { lhs.der == rhs.der }

    /// The DER's hash (`CFHash`).
    public func hash(into hasher: inout Hasher) { hasher.combine(der) }
}

/// A public key (`SecKey`), as a certificate carries it. Private keys stay inside ``SecIdentity``.
public final class SecKey: Sendable {
    let key: TLSPublicKey

    init(key: TLSPublicKey) {
        self.key = key
    }
}

/// A certificate with its private key (`SecIdentity`), from ``SecPKCS12Import(_:_:_:)``. It holds the
/// chain the archive carried (the identity's certificate first) and the key as PEM, in memory only.
public final class SecIdentity: Sendable {
    /// The identity's certificate and any CA certificates that came with it.
    let chain: [SecCertificate]
    let privateKeyPEM: Data

    init(chain: [SecCertificate], privateKeyPEM: Data) {
        self.chain = chain
        self.privateKeyPEM = privateKeyPEM
    }

    /// The SocketStreams identity with `certificates` (the identity's own certificate first) as its chain.
    func tlsIdentity(chain certificates: [SecCertificate]? = nil) -> TLSIdentity {
        let pem = (certificates ?? chain).map { TLSChainVerifier.pem(certificate: $0.der) }.reduce(Data(), +)
        return TLSIdentity(certificateChainPEM: pem, privateKeyPEM: privateKeyPEM)
    }
}

/// What a trust evaluation checks (`SecPolicy`): ``SecPolicyCreateSSL(_:_:)`` or ``SecPolicyCreateBasicX509()``.
public final class SecPolicy: Sendable {
    let purpose: TLSChainPolicy.Purpose
    let hostName: String?

    init(purpose: TLSChainPolicy.Purpose, hostName: String?) {
        self.purpose = purpose
        self.hostName = hostName
    }
}

// MARK: certificates

/// A certificate from its DER (`SecCertificateCreateWithData`); nil if `data` is not one DER certificate.
/// The allocator is ignored.
public func SecCertificateCreateWithData(_ allocator: CFAllocator?, _ data: CFData) -> SecCertificate? {
    let der = data as Data
    return TLSCertificateTools.isCertificate(der) ? SecCertificate(der: der) : nil
}

/// The certificate's DER (`SecCertificateCopyData`).
public func SecCertificateCopyData(_ certificate: SecCertificate) -> CFData {
    certificate.der as CFData
}

/// A human-readable summary of the certificate (`SecCertificateCopySubjectSummary`): the subject's common
/// name, else its e-mail address, else the whole subject.
public func SecCertificateCopySubjectSummary(_ certificate: SecCertificate) -> CFString? {
    TLSCertificateTools.subjectSummary(certificate.der).map { $0 as CFString }
}

/// The certificate's public key (`SecCertificateCopyKey`); nil if it cannot be read.
public func SecCertificateCopyKey(_ certificate: SecCertificate) -> SecKey? {
    TLSCertificateTools.publicKey(certificate.der).map(SecKey.init(key:))
}

/// The key's external representation (`SecKeyCopyExternalRepresentation`), as Apple gives it for public
/// keys: PKCS#1 RSAPublicKey for RSA, the X9.63 uncompressed point (04 || X || Y) for EC, the raw key for
/// Ed25519. Never fails for a key a certificate gave, so `error` is left alone.
public func SecKeyCopyExternalRepresentation(_ key: SecKey, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?) -> CFData? {
    key.key.external as CFData
}

/// The key's block size in bytes (`SecKeyGetBlockSize`): the RSA modulus's length, or an EC field element's.
public func SecKeyGetBlockSize(_ key: SecKey) -> Int {
    key.key.kind == .rsa ? key.key.bits / 8 : (key.key.bits + 7) / 8
}

// MARK: identities and PKCS#12

/// Reads a PKCS#12 archive (`SecPKCS12Import`): `options` holds ``kSecImportExportPassphrase`` (a
/// string; none is the empty passphrase). On success `items` gets one dictionary with
/// ``kSecImportItemIdentity`` (a ``SecIdentity``), ``kSecImportItemCertChain`` (`[SecCertificate]`, the
/// identity's certificate first), ``kSecImportItemTrust`` and ``kSecImportItemLabel``, and the result is
/// ``errSecSuccess``; a wrong passphrase gives ``errSecAuthFailed``, data that is not PKCS#12
/// ``errSecDecode``, an archive without a key and its certificate ``errSecItemNotFound``. Nothing goes to
/// a keychain (Linux has none).
@discardableResult
public func SecPKCS12Import(_ pkcs12_data: CFData, _ options: CFDictionary, _ items: UnsafeMutablePointer<CFArray?>) -> OSStatus {
    let passphrase = (options[kSecImportExportPassphrase as String] as? String) ?? ""
    switch TLSCertificateTools.pkcs12(pkcs12_data as Data, password: passphrase) {
    case .undecodable: return errSecDecode
    case .wrongPassword: return errSecAuthFailed
    case .noIdentity: return errSecItemNotFound
    case .identity(let certificates, let privateKeyPEM):
        let chain = certificates.map(SecCertificate.init(der:))
        let identity = SecIdentity(chain: chain, privateKeyPEM: privateKeyPEM)
        let trust = SecTrust(certificateChain: certificates, policy: TLSChainPolicy(purpose: .basic))
        var item: [String: Any] = [
            kSecImportItemIdentity as String: identity,
            kSecImportItemCertChain as String: chain as NSArray,
            kSecImportItemTrust as String: trust,
        ]
        if let label = TLSCertificateTools.subjectSummary(certificates[0]) { item[kSecImportItemLabel as String] = label }
        items.pointee = [item as NSDictionary] as CFArray
        return errSecSuccess
    }
}

/// The identity's certificate (`SecIdentityCopyCertificate`): ``errSecSuccess``.
@discardableResult
public func SecIdentityCopyCertificate(_ identityRef: SecIdentity, _ certificateRef: UnsafeMutablePointer<SecCertificate?>) -> OSStatus {
    certificateRef.pointee = identityRef.chain[0]
    return errSecSuccess
}

// MARK: policies

/// The TLS policy (`SecPolicyCreateSSL`): `server` true checks a server's certificate (the "ssl_server"
/// purpose, the server-leaf rules) and `hostname`, if given; false checks a client's ("ssl_client").
public func SecPolicyCreateSSL(_ server: Bool, _ hostname: CFString?) -> SecPolicy {
    SecPolicy(purpose: server ? .server : .client, hostName: hostname.map { $0 as String })
}

/// The basic X.509 policy (`SecPolicyCreateBasicX509`): the chain to an anchor, no purpose, no name.
public func SecPolicyCreateBasicX509() -> SecPolicy {
    SecPolicy(purpose: .basic, hostName: nil)
}
