// Verifying a certificate chain outside a handshake, for the Security calls that evaluate a trust
// object (`SecTrustEvaluateWithError`) and read certificates and keys (`SecCertificateCopyKey`,
// `SecPKCS12Import`): the same verifier a handshake runs, not a second one.
//
// - `TLSChainVerifier.verify` builds the settings a client handshake would have (the anchors as
//   `trustRoots`, the system store unless only the anchors count, the expiry allowances, the profile),
//   takes the shared context for them (so the system store is parsed once, as for connections), makes an
//   SSL on it only to carry the host name and the context's parameters, and runs TLSPathBuilder's
//   callback on a store context holding the served chain, with TLSVerification's callback per
//   certificate: exactly what `SSL_do_handshake` runs on a server's Certificate message.
// - The verdict is OpenSSL's code (`X509_V_OK`, `X509_V_ERR_*`), its text and the verified chain (leaf
//   to anchor), which is what `SecTrustCopyCertificateChain` returns after an evaluation.
// - The key and PKCS#12 helpers return plain values (DER, PEM) so the Security layer above needs no
//   OpenSSL of its own.

import COpenSSL
import Foundation

/// How a chain is verified outside a handshake: the policy, anchors and options the Security calls set
/// on a trust object (`SecTrustSetPolicies`, `SecTrustSetAnchorCertificates`, `SecTrustSetOptions`).
package struct TLSChainPolicy: Sendable, Hashable {
    /// What the leaf is for.
    package enum Purpose: Sendable, Hashable {
        /// A TLS server's certificate (`SecPolicyCreateSSL(true, name)`): OpenSSL's "ssl_server" purpose
        /// and the server-leaf rules.
        case server
        /// A TLS client's certificate (`SecPolicyCreateSSL(false, nil)`): "ssl_client".
        case client
        /// Any certificate (`SecPolicyCreateBasicX509`): no purpose, no name.
        case basic
    }

    package var purpose: Purpose = .server
    /// The name the leaf must carry (a DNS name or an IP address), nil for none.
    package var hostName: String?
    /// Trusted certificates, DER; empty for the system store alone.
    package var anchors: [Data] = []
    /// With anchors: only they are trusted (`SecTrustSetAnchorCertificatesOnly(trust, true)`, the
    /// default once anchors are set); false adds the system store.
    package var anchorsOnly = true
    package var allowsExpiredCertificates = false
    package var allowsExpiredRoots = false
    /// A CA certificate may be the leaf (`kSecTrustOptionLeafIsCA`): the compatible profile.
    package var leafMayBeCA = false
    /// A self-signed certificate of the chain is an anchor (`kSecTrustOptionImplicitAnchors`).
    package var implicitAnchors = false
    /// The time the chain is verified at, nil for now (`SecTrustSetVerifyDate`).
    package var verificationTime: Date?

    package init(purpose: Purpose = .server, hostName: String? = nil) {
        self.purpose = purpose
        self.hostName = hostName
    }
}

/// A verification's outcome.
package struct TLSChainVerdict: Sendable, Hashable {
    /// `X509_V_OK` (0) or an `X509_V_ERR_*` code; -1 when the chain or the settings could not be used.
    package let code: Int
    /// OpenSSL's text for the code, or why nothing was verified.
    package let description: String
    /// The chain as verified, DER, leaf to anchor (the served chain when none was built).
    package let chain: [Data]

    package var isTrusted: Bool { code == 0 }
    /// Whether the only failure was a certificate's validity period.
    package var isExpiry: Bool {
        code == Int(X509_V_ERR_CERT_HAS_EXPIRED) || code == Int(X509_V_ERR_CERT_NOT_YET_VALID)
    }
    /// Whether the name did not match.
    package var isNameMismatch: Bool { code == Int(X509_V_ERR_HOSTNAME_MISMATCH) || code == Int(X509_V_ERR_IP_ADDRESS_MISMATCH) }
}

/// The package's verifier applied to a DER chain, with no connection.
package enum TLSChainVerifier {
    /// Verifies `chain` (DER, leaf first) under `policy`; `parsed`, the same certificates as OpenSSL
    /// objects (a handshake's), spares parsing them again.
    package static func verify(_ chain: [Data], policy: TLSChainPolicy) -> TLSChainVerdict {
        verify(chain, policy: policy, parsed: nil)
    }

    static func verify(_ chain: [Data], policy: TLSChainPolicy, parsed: TLSParsedChain?) -> TLSChainVerdict {
        OpenSSLLibrary.prepare()
        let certificates: [OpaquePointer]
        if let parsed, parsed.certificates.count == chain.count {
            certificates = parsed.certificates
            for certificate in certificates { X509_up_ref(certificate) }  // freed below like parsed ones
        } else {
            certificates = chain.compactMap(parse)
        }
        defer { for certificate in certificates { X509_free(certificate) } }
        guard let leaf = certificates.first, certificates.count == chain.count else {
            return TLSChainVerdict(code: -1, description: chain.isEmpty ? "no certificate" : "a certificate is not DER", chain: chain)
        }
        var settings = TLSSettings()
        var anchors = policy.anchors
        if policy.implicitAnchors {
            anchors += zip(chain, certificates).filter { X509_check_issued($0.1, $0.1) == X509_V_OK }.map(\.0)
        }
        settings.trustRoots = anchors.map { .pem(pem(certificate: $0)) }
        if anchors.isEmpty || !policy.anchorsOnly || (policy.anchors.isEmpty && policy.implicitAnchors) {
            settings.trustRoots.append(.system)
        }
        settings.allowsExpiredCertificates = policy.allowsExpiredCertificates
        settings.allowsExpiredRoots = policy.allowsExpiredRoots
        if policy.leafMayBeCA { settings.verificationProfile = .compatible }
        settings.verificationTime = policy.verificationTime
        let context: TLSContext
        do {
            context = try TLSContext.shared(for: settings)
        } catch {
            return TLSChainVerdict(code: -1, description: error.message, chain: chain)
        }
        guard let ssl = SSL_new(context.context) else { return TLSChainVerdict(code: -1, description: "SSL_new failed", chain: chain) }
        defer { SSL_free(ssl) }
        SSL_set_connect_state(ssl)
        if let hostName = policy.hostName, policy.purpose != .basic {
            let param = SSL_get0_param(ssl)
            if SocketAddress(numericHost: hostName, port: 0) != nil {
                let bare = hostName.hasPrefix("[") ? String(hostName.dropFirst().dropLast()) : hostName
                X509_VERIFY_PARAM_set1_ip_asc(param, bare)
            } else {
                SSL_set_hostflags(ssl, TLSVerification.hostFlags)
                SSL_set1_host(ssl, IDNA.asciiOrSame(hostName))
            }
        }
        guard let store = X509_STORE_CTX_new(), let untrusted = cssl_sk_X509_new_null() else {
            return TLSChainVerdict(code: -1, description: "X509_STORE_CTX_new failed", chain: chain)
        }
        defer {
            X509_STORE_CTX_free(store)
            cssl_sk_X509_pop_free(untrusted)
        }
        for certificate in certificates.dropFirst() { _ = cssl_sk_X509_push_up_ref(untrusted, certificate) }
        guard X509_STORE_CTX_init(store, SSL_CTX_get_cert_store(context.context), leaf, untrusted) == 1 else {
            return TLSChainVerdict(code: -1, description: "X509_STORE_CTX_init failed", chain: chain)
        }
        // What OpenSSL's ssl_verify_cert_chain does before verifying a peer's chain.
        X509_STORE_CTX_set_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx(), UnsafeMutableRawPointer(ssl))
        switch policy.purpose {
        case .server: X509_STORE_CTX_set_default(store, "ssl_server")
        case .client: X509_STORE_CTX_set_default(store, "ssl_client")
        case .basic: X509_STORE_CTX_set_default(store, "default")
        }
        X509_VERIFY_PARAM_set1(X509_STORE_CTX_get0_param(store), SSL_get0_param(ssl))
        X509_STORE_CTX_set_verify_cb(store, TLSVerification.callback)
        let passed = TLSPathBuilder.callback(store, nil) == 1
        let code = passed ? X509_V_OK : X509_STORE_CTX_get_error(store)
        var verified: [Data] = []
        if let built = X509_STORE_CTX_get0_chain(store) {
            for index in 0..<cssl_sk_X509_num(built) {
                if let certificate = cssl_sk_X509_value(built, index), let der = der(certificate) { verified.append(der) }
            }
        }
        let failed = !passed && code == X509_V_OK ? X509_V_ERR_UNSPECIFIED : code
        return TLSChainVerdict(
            code: Int(failed), description: String(cString: X509_verify_cert_error_string(Int(failed))),
            chain: verified.isEmpty ? chain : verified)
    }

    /// `d2i_X509`, to be `X509_free`d.
    static func parse(_ der: Data) -> OpaquePointer? {
        der.withUnsafeBytes { raw -> OpaquePointer? in
            var cursor: UnsafePointer<UInt8>? = raw.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard cursor != nil else { return nil }
            let certificate = d2i_X509(nil, &cursor, raw.count)
            // Trailing bytes are not a certificate.
            if let certificate, let cursor, cursor != raw.baseAddress!.assumingMemoryBound(to: UInt8.self) + raw.count {
                X509_free(certificate)
                return nil
            }
            return certificate
        }
    }

    static func der(_ certificate: OpaquePointer) -> Data? {
        var buffer: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509(certificate, &buffer)
        guard length > 0, let buffer else { return nil }
        defer { cssl_free(buffer) }
        return Data(bytes: buffer, count: Int(length))
    }

    /// DER wrapped as PEM ("CERTIFICATE").
    package static func pem(certificate der: Data) -> Data {
        let base64 = der.base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return Data("-----BEGIN CERTIFICATE-----\n\(base64)\n-----END CERTIFICATE-----\n".utf8)
    }
}

/// Certificates as OpenSSL parsed them, each holding a reference of this object's (freed with it).
/// Immutable, and OpenSSL's `X509` objects may be read from several threads at once once parsed (their
/// extensions are cached under OpenSSL's own lock), so any thread may verify with them.
final class TLSParsedChain: @unchecked Sendable {
    let certificates: [OpaquePointer]

    /// Takes over one reference to each of `certificates`.
    init(taking certificates: [OpaquePointer]) {
        self.certificates = certificates
    }

    deinit {
        for certificate in certificates { X509_free(certificate) }
    }
}

/// A certificate's public key in the forms the Security calls give it.
package struct TLSPublicKey: Sendable, Hashable {
    package enum Kind: Sendable, Hashable {
        case rsa, ec, other
    }

    package let kind: Kind
    /// The key size in bits (`EVP_PKEY_get_bits`).
    package let bits: Int
    /// `SecKeyCopyExternalRepresentation`'s form: PKCS#1 RSAPublicKey for RSA, the X9.63 uncompressed
    /// point (04 || X || Y) for EC (`i2d_PublicKey`); the raw key for others (Ed25519).
    package let external: Data
    /// The SubjectPublicKeyInfo, DER (`i2d_X509_PUBKEY`), the form `TLSSettings.publicKeyPin` hashes.
    package let subjectPublicKeyInfo: Data
}

/// Certificates, keys and PKCS#12 as plain values, for the Security calls.
package enum TLSCertificateTools {
    /// Whether `der` is one DER certificate.
    package static func isCertificate(_ der: Data) -> Bool {
        OpenSSLLibrary.prepare()
        guard let certificate = TLSChainVerifier.parse(der) else { return false }
        X509_free(certificate)
        return true
    }

    /// The subject's common name, else the first e-mail address, else the whole subject (RFC 2253):
    /// what `SecCertificateCopySubjectSummary` shows.
    package static func subjectSummary(_ der: Data) -> String? {
        OpenSSLLibrary.prepare()
        guard let certificate = TLSChainVerifier.parse(der) else { return nil }
        defer { X509_free(certificate) }
        let name = X509_get_subject_name(certificate)
        for nid in [NID_commonName, NID_pkcs9_emailAddress] {
            let index = X509_NAME_get_index_by_NID(name, nid, -1)
            guard index >= 0, let entry = X509_NAME_get_entry(name, index), let value = X509_NAME_ENTRY_get_data(entry) else { continue }
            var utf8: UnsafeMutablePointer<UInt8>?
            let length = ASN1_STRING_to_UTF8(&utf8, value)
            guard length >= 0, let utf8 else { continue }
            defer { cssl_free(utf8) }
            return String(decoding: UnsafeBufferPointer(start: utf8, count: Int(length)), as: UTF8.self)
        }
        let subject = TLSVerification.nameText(name)
        return subject.isEmpty ? nil : subject
    }

    /// The certificate's public key; nil if `der` is not a certificate or its key cannot be read.
    package static func publicKey(_ der: Data) -> TLSPublicKey? {
        OpenSSLLibrary.prepare()
        guard let certificate = TLSChainVerifier.parse(der) else { return nil }
        defer { X509_free(certificate) }
        guard let spkiObject = X509_get_X509_PUBKEY(certificate), let key = X509_get0_pubkey(certificate) else { return nil }
        var buffer: UnsafeMutablePointer<UInt8>?
        var length = i2d_X509_PUBKEY(spkiObject, &buffer)
        guard length > 0, let spkiBytes = buffer else { return nil }
        let spki = Data(bytes: spkiBytes, count: Int(length))
        cssl_free(spkiBytes)
        let type = EVP_PKEY_get_base_id(key)
        let kind: TLSPublicKey.Kind = type == EVP_PKEY_RSA ? .rsa : type == EVP_PKEY_EC ? .ec : .other
        var external = Data()
        if kind == .other {
            var size = 0
            if EVP_PKEY_get_raw_public_key(key, nil, &size) == 1, size > 0 {
                var raw = [UInt8](repeating: 0, count: size)
                if EVP_PKEY_get_raw_public_key(key, &raw, &size) == 1 { external = Data(raw.prefix(size)) }
            }
        } else {
            buffer = nil
            length = i2d_PublicKey(key, &buffer)
            if length > 0, let bytes = buffer {
                external = Data(bytes: bytes, count: Int(length))
                cssl_free(bytes)
            }
        }
        ERR_clear_error()
        guard !external.isEmpty else { return nil }
        return TLSPublicKey(kind: kind, bits: Int(EVP_PKEY_get_bits(key)), external: external, subjectPublicKeyInfo: spki)
    }

    /// What a PKCS#12 archive holds, or why it cannot be read.
    package enum PKCS12Contents: Sendable {
        /// The certificates (DER, the key's own first) and the private key as unencrypted PEM.
        case identity(certificates: [Data], privateKeyPEM: Data)
        /// Not a PKCS#12 archive (`errSecDecode`).
        case undecodable
        /// The password does not open it (`errSecAuthFailed`).
        case wrongPassword
        /// An archive without a key and its certificate.
        case noIdentity
    }

    /// Opens a PKCS#12 archive (`d2i_PKCS12_bio`, `PKCS12_verify_mac`, `PKCS12_parse`).
    package static func pkcs12(_ data: Data, password: String) -> PKCS12Contents {
        OpenSSLLibrary.prepare()
        ERR_clear_error()
        defer { ERR_clear_error() }
        let archive = data.withUnsafeBytes { raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return d2i_PKCS12_bio(bio, nil)
        }
        guard let archive else { return .undecodable }
        defer { PKCS12_free(archive) }
        if PKCS12_mac_present(archive) == 1, PKCS12_verify_mac(archive, password, Int32(password.utf8.count)) != 1 {
            return .wrongPassword
        }
        guard case let (chain, key)? = try? PEM.pkcs12(data, password: password) else { return .noIdentity }
        defer {
            for certificate in chain { X509_free(certificate) }
            EVP_PKEY_free(key)
        }
        guard let bio = BIO_new(BIO_s_mem()) else { return .noIdentity }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else { return .noIdentity }
        var text: UnsafeMutablePointer<CChar>?
        let length = cssl_bio_get_mem_data(bio, &text)
        guard length > 0, let text else { return .noIdentity }
        return .identity(certificates: chain.compactMap(TLSChainVerifier.der), privateKeyPEM: Data(bytes: text, count: Int(length)))
    }
}
