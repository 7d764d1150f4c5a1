// What a client checks beyond OpenSSL's default verdict, in the verify callback `SSL_CTX_set_verify`
// installs, and why each refusal happened (the rule, the certificate's subject, its depth), for the
// stream error's description.
//
// - The host flags (set per SSL, see TLSTransport): no partial wildcards (`ba*.example.com`),
//   never the subject CN (`X509_CHECK_FLAG_NEVER_CHECK_SUBJECT`): a name must be in the subjectAltName.
// - OpenSSL checks name constraints against the names written in the leaf, so a wildcard
//   `*.example.com` passes a CA that excludes `bar.example.com`, and then matches `bar.example.com`.
//   The callback checks the peer name itself against every CA's DNS subtrees.
// - A CA certificate (basicConstraints cA=TRUE) or one with name constraints is not a server's
//   leaf; malformed name constraints (no subtree at all, a DNS base with a leading period or that is
//   not a domain name) refuse the chain rather than constrain nothing.
// - Below the trust anchor: an extension OpenSSL knows but cannot decode, or a DSA signature,
//   refuses the chain (OpenSSL ignores the first and accepts the second; Go, rustls and browsers do
//   neither).
// - The strict profile: X509_V_FLAG_X509_STRICT, whose rules are overlooked on the trust anchor,
//   plus a leaf's subjectAltName marked critical beside a non-empty subject.
// - The Baseline Requirements' profile (opt-in): the shim's rules, and a wildcard over a public suffix
//   (PublicSuffixList, the system's list).
// - OpenSSL's server purpose refuses a leaf whose keyUsage does not allow signing (a CA's keyCertSign alone),
//   in every profile; the refusal says so.
// - `kCFStreamSSLAllowsExpiredCertificates` covers the whole chain, root and self-signed leaf included.
// - notAfter is inclusive (RFC 5280 §4.1.2.5): a certificate is still valid at its notAfter second.
// - Which chain is verified is TLSPathBuilder's choice: it runs OpenSSL's verification, and with it this
//   callback, on each candidate path until one passes.
//
// OpenSSL calls the callback with ok=0 for each failure (a 1 back overlooks it) and, once the chain is
// built and its signatures checked, with ok=1 for each certificate from the root down to the leaf: the
// checks of our own run in those calls.

import COpenSSL
import Foundation

/// Why a chain was refused, recorded by the verify callback on the connection's transport.
struct VerifyRejection: Sendable, Equatable {
    /// The `X509_V_ERR_*` code, as `SSL_get_verify_result` reports it.
    var code: Int32
    /// The rule, e.g. "hostname mismatch" or "name constraints exclude bar.example.com".
    var rule: String
    /// The certificate's subject (RFC 2253), "" when there is none.
    var subject: String
    /// 0 for the leaf, 1 for its issuer, and so on.
    var depth: Int
    /// How many complete paths path building verified, when more than one (this is the first's reason).
    var pathsTried: Int?
    /// That first path's subjects, leaf first, when path building tried several.
    var path: [String] = []

    /// `rule (certificate "CN=…", the leaf)`, or `…, depth 2)` for a certificate above it, and
    /// `; path CN=a → CN=b → CN=c, the first of 3 tried` when path building tried several.
    var description: String {
        let which = depth == 0 ? "the leaf" : "depth \(depth)"
        let names = path.map { $0.isEmpty ? "<empty subject>" : $0 }.joined(separator: " → ")
        let paths = pathsTried.map { "; path \(names), the first of \($0) tried" } ?? ""
        return "\(rule) (certificate \"\(subject.isEmpty ? "<empty subject>" : subject)\", \(which)\(paths))"
    }
}

/// What the verify callback may overlook and must add, kept as the context's ex-data (a small integer, not a pointer).
struct VerifyFlags: OptionSet {
    let rawValue: Int
    static let expiredCertificates = VerifyFlags(rawValue: 1 << 4)
    static let expiredRoots = VerifyFlags(rawValue: 1 << 5)
    static let anyRoot = VerifyFlags(rawValue: 1 << 6)
    /// A client verifying a server: the server-leaf and name-constraint rules apply.
    static let verifiesServer = VerifyFlags(rawValue: 1 << 7)
    /// Always set, so the stored value is never a null pointer.
    static let present = VerifyFlags(rawValue: 1 << 8)
    /// ``VerificationProfile/strict``: the profile rules OpenSSL's flag lacks apply too.
    static let strict = VerifyFlags(rawValue: 1 << 9)
    /// ``VerificationProfile/baselineRequirements``: the CA/Browser Forum's certificate profile too.
    static let baseline = VerifyFlags(rawValue: 1 << 10)

    init(rawValue: Int) { self.rawValue = rawValue }

    init(_ settings: TLSSettings) {
        var flags: VerifyFlags = .present
        if settings.allowsExpiredCertificates { flags.insert(.expiredCertificates) }
        if settings.allowsExpiredRoots { flags.insert(.expiredRoots) }
        if settings.allowsAnyRoot { flags.insert(.anyRoot) }
        if settings.role == .client && settings.validatesCertificateChain { flags.insert(.verifiesServer) }
        if settings.verificationProfile != .compatible { flags.insert(.strict) }
        if settings.verificationProfile == .baselineRequirements { flags.insert(.baseline) }
        self = flags
    }
}

enum TLSVerification {
    /// The host flags every client uses: the name must be in the subjectAltName, and a wildcard is a
    /// whole left-most label.
    static let hostFlags = UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT)

    static let flagsIndex = cssl_ctx_get_ex_new_index()

    /// `SSL_CTX_set_verify`'s callback.
    static let callback: @convention(c) (Int32, OpaquePointer?) -> Int32 = { ok, store in
        guard let store, let sslPointer = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()) else { return 0 }
        let ssl = OpaquePointer(sslPointer)
        guard let raw = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), flagsIndex) else { return 0 }
        let flags = VerifyFlags(rawValue: Int(bitPattern: raw))
        let transport = TLSTransport.owner(of: ssl)
        let depth = Int(X509_STORE_CTX_get_error_depth(store))
        let certificate = X509_STORE_CTX_get_current_cert(store)
        let chainLength = X509_STORE_CTX_get0_chain(store).map { Int(cssl_sk_X509_num($0)) } ?? 0

        if ok != 1 {
            let error = X509_STORE_CTX_get_error(store)
            if overlooks(error, flags: flags, atRoot: depth >= chainLength - 1) { return 1 }
            if error == X509_V_ERR_CERT_HAS_EXPIRED, let certificate, expiresAtCheckTime(certificate, store) { return 1 }
            var rule = String(cString: X509_verify_cert_error_string(Int(error)))
            if error == X509_V_ERR_INVALID_PURPOSE, depth == 0, let certificate, let reason = keyUsageReason(certificate) {
                rule += reason
            }
            if error == X509_V_ERR_HOSTNAME_MISMATCH, let leaf = X509_STORE_CTX_get0_cert(store) {
                var wildcard = [CChar](repeating: 0, count: 256)
                if cssl_x509_has_dns_san(leaf) == 0 {
                    rule += ": the certificate names no DNS host in its subjectAltName (its subject CN is not checked)"
                } else if cssl_x509_partial_wildcard(leaf, &wildcard, Int32(wildcard.count)) != 0 {
                    let name = String(decoding: wildcard.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    rule += " (\"\(name)\" is a partial wildcard, which matches nothing: a wildcard is a whole left-most label)"
                }
            }
            transport?.rejection = VerifyRejection(code: error, rule: rule, subject: subjectText(certificate), depth: depth)
            return 0
        }
        guard flags.contains(.verifiesServer), let certificate else { return 1 }
        if let rule = check(
            certificate, depth: depth, chainLength: chainLength, hostName: hostName(transport, store), strict: flags.contains(.strict),
            baseline: flags.contains(.baseline))
        {
            X509_STORE_CTX_set_error(store, rule.code)
            transport?.rejection = VerifyRejection(code: rule.code, rule: rule.text, subject: subjectText(certificate), depth: depth)
            return 0
        }
        return 1
    }

    /// The DNS name the chain is verified for: the connection's, or, for a chain verified outside a
    /// handshake (TLSChainVerifier, no transport), the one set on the store context's parameters.
    private static func hostName(_ transport: TLSTransport?, _ store: OpaquePointer) -> String? {
        if let transport { return transport.verifiedDNSName }
        return X509_VERIFY_PARAM_get0_host(X509_STORE_CTX_get0_param(store), 0).map { String(cString: $0) }
    }

    /// The failures the settings allow (`kCFStreamSSLAllowsExpiredCertificates`, `…AllowsExpiredRoots`, `…AllowsAnyRoot`).
    private static func overlooks(_ error: Int32, flags: VerifyFlags, atRoot: Bool) -> Bool {
        switch error {
        case X509_V_ERR_CERT_HAS_EXPIRED, X509_V_ERR_CERT_NOT_YET_VALID:
            // Apple: "allows expired certificates" covers every certificate, the root too; "expired roots" only roots.
            return flags.contains(.expiredCertificates) || (atRoot && flags.contains(.expiredRoots))
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
            X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
            X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE, X509_V_ERR_CERT_UNTRUSTED:
            return flags.contains(.anyRoot)
        case X509_V_ERR_PATHLEN_INVALID_FOR_NON_CA, X509_V_ERR_PATHLEN_WITHOUT_KU_KEY_CERT_SIGN,
            X509_V_ERR_CA_BCONS_NOT_CRITICAL, X509_V_ERR_CA_CERT_MISSING_KEY_USAGE, X509_V_ERR_KU_KEY_CERT_SIGN_INVALID_FOR_NON_CA,
            X509_V_ERR_ISSUER_NAME_EMPTY, X509_V_ERR_SUBJECT_NAME_EMPTY, X509_V_ERR_EMPTY_SUBJECT_SAN_NOT_CRITICAL,
            X509_V_ERR_EMPTY_SUBJECT_ALT_NAME, X509_V_ERR_AUTHORITY_KEY_IDENTIFIER_CRITICAL,
            X509_V_ERR_SUBJECT_KEY_IDENTIFIER_CRITICAL, X509_V_ERR_MISSING_AUTHORITY_KEY_IDENTIFIER,
            X509_V_ERR_MISSING_SUBJECT_KEY_IDENTIFIER, X509_V_ERR_EXTENSIONS_REQUIRE_VERSION_3:
            // X509_STRICT's profile rules hold for the certificates a chain brings, not for the trust
            // anchor, which is configured rather than verified (RFC 5280 §6.1.1 d): five roots of the
            // Debian store (Go Daddy and Starfield Class 2, ePKI, TWCA Global, Hongkong Post 1) would
            // otherwise fail every chain that ends at them.
            return atRoot
        default:
            return false
        }
    }

    /// RFC 5280 §4.1.2.5: the validity period runs from notBefore *through* notAfter, so a certificate
    /// is still valid at its notAfter second; OpenSSL's `X509_cmp_time` counts that second as expired.
    /// The check time is whole seconds (the current time's fraction is dropped, as the encoding's is).
    private static func expiresAtCheckTime(_ certificate: OpaquePointer, _ store: OpaquePointer) -> Bool {
        guard let notAfter = X509_get0_notAfter(certificate) else { return false }
        let param = X509_STORE_CTX_get0_param(store)
        let now =
            (X509_VERIFY_PARAM_get_flags(param) & UInt(X509_V_FLAG_USE_CHECK_TIME)) != 0 ? X509_VERIFY_PARAM_get_time(param) : time(nil)
        return ASN1_TIME_cmp_time_t(notAfter, now) == 0
    }

    /// Our own rules for the certificate at `depth` of a chain OpenSSL accepted: nil when it passes.
    static func check(
        _ certificate: OpaquePointer, depth: Int, chainLength: Int, hostName: String?, strict: Bool, baseline: Bool = false
    ) -> (code: Int32, text: String)? {
        // The trust anchor's own encoding and signature are exempt (it is configured, not verified),
        // and so is a certificate that is its own chain (trusted directly, or with allowsAnyRoot);
        // an anchor's name constraints still hold, and so do the Baseline Requirements' root rules.
        let isAnchor = depth >= chainLength - 1
        if baseline && !(depth == 0 && isAnchor) {
            var text = [CChar](repeating: 0, count: 400)
            // The root rules are for a self-issued anchor; a trusted intermediate is held to an intermediate's.
            let isRoot = isAnchor && X509_NAME_cmp(X509_get_subject_name(certificate), X509_get_issuer_name(certificate)) == 0
            // The wildcard rule first: a wildcard over a public suffix is the graver fault of a leaf whose
            // subject CN is also not among its names.
            if depth == 0, let phrase = PublicSuffixList.system.wildcardOverPublicSuffix(wildcardBases(certificate)) {
                return (X509_V_ERR_APPLICATION_VERIFICATION, "\(phrase) (verificationProfile .baselineRequirements)")
            }
            if cssl_x509_baseline_violation(certificate, depth == 0 ? 0 : isRoot ? 2 : 1, &text, Int32(text.count)) != 0 {
                let phrase = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                return (X509_V_ERR_APPLICATION_VERIFICATION, "\(phrase) (verificationProfile .baselineRequirements)")
            }
        }
        if !isAnchor {
            let undecodable = cssl_x509_undecodable_extension(certificate)
            if undecodable != NID_undef {
                return (X509_V_ERR_INVALID_EXTENSION, "the \(String(cString: OBJ_nid2ln(undecodable))) extension is malformed")
            }
            if cssl_x509_signature_key_nid(certificate) == NID_dsa {
                return (
                    X509_V_ERR_UNSUPPORTED_SIGNATURE_ALGORITHM,
                    "a DSA signature (the CA/Browser Forum forbids DSA; browsers, Go and rustls refuse it)"
                )
            }
        }
        var present: Int32 = 0
        let constraints = cssl_x509_name_constraints(certificate, &present)
        defer { NAME_CONSTRAINTS_free(constraints) }
        if depth == 0 {
            guard !isAnchor else { return nil }
            if strict && cssl_x509_is_ca(certificate) != 0 {
                return (
                    X509_V_ERR_INVALID_PURPOSE,
                    "a CA certificate (basicConstraints cA=TRUE) is not a server certificate (verificationProfile .compatible allows it)"
                )
            }
            if present != 0 {
                return (X509_V_ERR_INVALID_PURPOSE, "a server certificate may not carry name constraints")
            }
            if strict && cssl_x509_san_critical_with_subject(certificate) != 0 {
                return (
                    X509_V_ERR_INVALID_EXTENSION,
                    "the subjectAltName is critical though the subject is not empty (RFC 5280 §4.2.1.6; verificationProfile .compatible allows it)"
                )
            }
            return nil
        }
        guard present != 0 else { return nil }
        guard let constraints else {
            return (X509_V_ERR_INVALID_EXTENSION, "the name constraints extension cannot be decoded")
        }
        let permittedCount = cssl_nc_count(constraints, 0)
        let excludedCount = cssl_nc_count(constraints, 1)
        if permittedCount == 0 && excludedCount == 0 {
            return (
                X509_V_ERR_INVALID_EXTENSION, "malformed name constraints: neither permitted nor excluded subtrees (RFC 5280 §4.2.1.10)"
            )
        }
        func dnsBases(excluded: Int32, count: Int32) -> [String] {
            (0..<count).compactMap { index in
                var length: Int32 = 0
                guard let bytes = cssl_nc_dns(constraints, excluded, index, &length) else { return nil }
                return String(decoding: UnsafeBufferPointer(start: bytes, count: Int(length)), as: UTF8.self)
            }
        }
        let permitted = dnsBases(excluded: 0, count: permittedCount)
        let excluded = dnsBases(excluded: 1, count: excludedCount)
        if let bad = (permitted + excluded).first(where: { $0.hasPrefix(".") }) {
            return (X509_V_ERR_UNSUPPORTED_NAME_SYNTAX, "malformed name constraints: the DNS name \"\(bad)\" starts with a period")
        }
        if let bad = (permitted + excluded).first(where: { !isDomainConstraint($0) }) {
            return (
                X509_V_ERR_UNSUPPORTED_NAME_SYNTAX,
                "malformed name constraints: the DNS name \"\(bad)\" is not a domain name (RFC 5280 §4.2.1.10: no wildcard, no empty label)"
            )
        }
        guard let hostName else { return nil }
        if let base = excluded.first(where: { dnsName(hostName, isWithin: $0) }) {
            return (X509_V_ERR_EXCLUDED_VIOLATION, "the name constraints exclude \(hostName) (excluded subtree \"\(base)\")")
        }
        if !permitted.isEmpty && !permitted.contains(where: { dnsName(hostName, isWithin: $0) }) {
            return (
                X509_V_ERR_PERMITTED_VIOLATION,
                "the name constraints do not permit \(hostName) (permitted: \(permitted.map { "\"\($0)\"" }.joined(separator: ", ")))"
            )
        }
        return nil
    }

    /// What follows "*." in each wildcard dNSName of the certificate's subjectAltName.
    static func wildcardBases(_ certificate: OpaquePointer) -> [String] {
        var buffer = [CChar](repeating: 0, count: 512)
        let needed = Int(cssl_x509_wildcard_bases(certificate, &buffer, Int32(buffer.count)))
        if needed >= buffer.count {
            buffer = [CChar](repeating: 0, count: needed + 1)
            _ = cssl_x509_wildcard_bases(certificate, &buffer, Int32(buffer.count))
        }
        let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return text.split(separator: "\n").map(String.init)
    }

    /// Why OpenSSL's purpose check refused a server's leaf whose keyUsage does not allow the handshake's
    /// signature (RFC 5280 §4.2.1.3: signatures other than on certificates and CRLs need digitalSignature;
    /// RFC 8446 §4.4.2.2 holds the TLS server's key to its certificate's restrictions); nil for another reason.
    private static func keyUsageReason(_ certificate: OpaquePointer) -> String? {
        let usage = X509_get_key_usage(certificate)
        guard usage != UInt32.max, usage & UInt32(KU_DIGITAL_SIGNATURE | KU_KEY_ENCIPHERMENT | KU_KEY_AGREEMENT) == 0 else { return nil }
        let ca = cssl_x509_is_ca(certificate) != 0 ? "a CA certificate whose " : ""
        return
            ": \(ca)keyUsage has no digitalSignature (nor keyEncipherment or keyAgreement), so its key may not sign a TLS handshake "
            + "(RFC 5280 §4.2.1.3, RFC 8446 §4.4.2.2; in every verificationProfile)"
    }

    /// Whether a dNSName constraint's base is a domain name (RFC 5280 §4.2.1.10): empty (every name), or
    /// labels of 1 to 63 letters, digits, hyphens or underscores, none empty; so no wildcard, space or
    /// doubled period. Go and rustls refuse a chain whose constraint is not one; Chromium's matching
    /// lets it constrain nothing (a permitted one then permits nothing).
    static func isDomainConstraint(_ base: String) -> Bool {
        if base.isEmpty { return true }
        guard base.utf8.count <= 253 else { return false }
        return base.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63
                && label.utf8.allSatisfy { byte in
                    (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D
                        || byte == 0x5F
                }
        }
    }

    /// RFC 5280 §4.2.1.10: a DNS name is within a subtree when it is the base or ends with "." + base,
    /// ASCII case ignored; an empty base covers every name.
    static func dnsName(_ name: String, isWithin base: String) -> Bool {
        let name = trimmedLowercase(name)
        let base = trimmedLowercase(base)
        if base.isEmpty { return true }
        return name == base || name.hasSuffix("." + base)
    }

    private static func trimmedLowercase(_ text: String) -> String {
        var text = text.lowercased()
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }

    /// The subject in RFC 2253 form.
    static func subjectText(_ certificate: OpaquePointer?) -> String {
        guard let certificate else { return "" }
        return nameText(X509_get_subject_name(certificate))
    }

    /// A name (`X509_NAME`) in RFC 2253 form.
    static func nameText(_ name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        X509_NAME_print_ex(bio, name, 0, cssl_xn_flag_rfc2253())
        var pointer: UnsafeMutablePointer<CChar>?
        let length = cssl_bio_get_mem_data(bio, &pointer)
        guard length > 0, let pointer else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
    }
}
