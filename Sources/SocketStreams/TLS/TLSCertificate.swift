import COpenSSL
import Foundation

/// An X.509 certificate as TLS peers present it, with the fields people read.
public struct TLSCertificate: Sendable, Hashable {
    /// The certificate, DER.
    public let der: Data
    /// The subject, one line, e.g. "CN=localhost".
    public let subject: String
    /// The issuer, one line.
    public let issuer: String
    /// The validity period.
    public let notBefore: Date
    /// The end of the validity period.
    public let notAfter: Date

    /// Parses a DER certificate (`d2i_X509`); nil if it is not one.
    public init?(der: Data) {
        OpenSSLLibrary.prepare()
        let parsed = der.withUnsafeBytes { raw -> OpaquePointer? in
            var cursor: UnsafePointer<UInt8>? = raw.baseAddress?.assumingMemoryBound(to: UInt8.self)
            guard cursor != nil else { return nil }
            return d2i_X509(nil, &cursor, raw.count)
        }
        guard let certificate = parsed else { return nil }
        defer { X509_free(certificate) }
        self.init(certificate: certificate, der: der)
    }

    /// Parses the first certificate of PEM text; nil if there is none.
    public init?(pem: Data) {
        guard let certificate = (try? PEM.certificates(pem, what: "the certificate"))?.first else { return nil }
        defer { X509_free(certificate) }
        var buffer: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509(certificate, &buffer)
        guard length > 0, let buffer else { return nil }
        defer { cssl_free(buffer) }
        self.init(certificate: certificate, der: Data(bytes: buffer, count: Int(length)))
    }

    private init?(certificate: OpaquePointer, der: Data) {
        guard let notBefore = Self.date(X509_get0_notBefore(certificate)),
            let notAfter = Self.date(X509_get0_notAfter(certificate))
        else { return nil }
        self.der = der
        subject = Self.oneLine(X509_get_subject_name(certificate))
        issuer = Self.oneLine(X509_get_issuer_name(certificate))
        self.notBefore = notBefore
        self.notAfter = notAfter
    }

    /// RFC 2253 style, e.g. "CN=localhost,O=Example".
    private static func oneLine(_ name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        X509_NAME_print_ex(bio, name, 0, cssl_xn_flag_rfc2253())
        var data: UnsafeMutablePointer<CChar>?
        let length = cssl_bio_get_mem_data(bio, &data)
        guard length > 0, let data else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var moment = tm()
        guard ASN1_TIME_to_tm(time, &moment) == 1 else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&moment)))
    }
}

extension TLSIdentity {
    /// A new P-256 key and a self-signed certificate for `dnsNames` and `ipAddresses`, valid from a
    /// minute ago for `validity` seconds: a test or development server's identity, made at run time
    /// so no key material is ever stored. Returns the identity and the certificate (PEM) for clients
    /// to trust (`TLSTrustRoot.pem`).
    public static func makeSelfSigned(
        commonName: String = "localhost", dnsNames: [String] = ["localhost"], ipAddresses: [String] = ["127.0.0.1", "::1"],
        validity: TimeInterval = 86_400
    ) throws -> (identity: TLSIdentity, certificatePEM: Data) {
        let (certificatePEM, privateKeyPEM) = try makeSelfSignedPEM(
            commonName: commonName, dnsNames: dnsNames,
            ipAddresses: ipAddresses, validity: validity)
        return (TLSIdentity(certificateChainPEM: certificatePEM, privateKeyPEM: privateKeyPEM), certificatePEM)
    }

    /// `makeSelfSigned`'s certificate and private key as PEM text, for programs that hand them to
    /// something else (another process's OpenSSL, a file).
    public static func makeSelfSignedPEM(
        commonName: String = "localhost", dnsNames: [String] = ["localhost"], ipAddresses: [String] = ["127.0.0.1", "::1"],
        validity: TimeInterval = 86_400
    ) throws -> (certificatePEM: Data, privateKeyPEM: Data) {
        OpenSSLLibrary.prepare()
        func failure(_ what: String) -> NSError {
            NSError(
                domain: TLSErrors.domain, code: TLSStatus.badConfiguration,
                userInfo: [
                    NSLocalizedDescriptionKey: "Could not make a self-signed certificate: \(what)",
                    TLSErrors.queueKey: TLSErrors.drainQueue(),
                ])
        }
        ERR_clear_error()
        guard let keyContext = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw failure("EVP_PKEY_CTX_new_from_name") }
        defer { EVP_PKEY_CTX_free(keyContext) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(keyContext) == 1, EVP_PKEY_CTX_set_group_name(keyContext, "P-256") == 1,
            EVP_PKEY_generate(keyContext, &key) == 1, let key
        else { throw failure("key generation") }
        defer { EVP_PKEY_free(key) }

        guard let certificate = X509_new() else { throw failure("X509_new") }
        defer { X509_free(certificate) }
        var serial = [UInt8](repeating: 0, count: 16)
        _ = RAND_bytes(&serial, Int32(serial.count))
        serial[0] &= 0x7F
        let serialNumber = BN_bin2bn(serial, Int32(serial.count), nil)
        defer { BN_free(serialNumber) }
        let names = (dnsNames.map { "DNS:\($0)" } + ipAddresses.map { "IP:\($0)" }).joined(separator: ",")
        guard X509_set_version(certificate, 2) == 1,
            BN_to_ASN1_INTEGER(serialNumber, X509_get_serialNumber(certificate)) != nil,
            X509_gmtime_adj(X509_getm_notBefore(certificate), -60) != nil,
            X509_gmtime_adj(X509_getm_notAfter(certificate), Int(validity)) != nil,
            X509_set_pubkey(certificate, key) == 1,
            let name = X509_get_subject_name(certificate),
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, -1, -1, 0) == 1,
            X509_set_issuer_name(certificate, name) == 1
        else { throw failure("certificate fields") }
        if !names.isEmpty {
            guard let extensionValue = X509V3_EXT_conf_nid(nil, nil, NID_subject_alt_name, names),
                X509_add_ext(certificate, extensionValue, -1) == 1
            else { throw failure("subjectAltName \(names)") }
            X509_EXTENSION_free(extensionValue)
        }
        guard X509_sign(certificate, key, EVP_sha256()) > 0 else { throw failure("X509_sign") }

        func pem(_ write: (OpaquePointer) -> Int32) throws -> Data {
            guard let bio = BIO_new(BIO_s_mem()) else { throw failure("BIO_new") }
            defer { BIO_free(bio) }
            guard write(bio) == 1 else { throw failure("PEM output") }
            var data: UnsafeMutablePointer<CChar>?
            let length = cssl_bio_get_mem_data(bio, &data)
            guard length > 0, let data else { throw failure("PEM output") }
            return Data(bytes: data, count: Int(length))
        }
        let certificatePEM = try pem { PEM_write_bio_X509($0, certificate) }
        let keyPEM = try pem { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
        return (certificatePEM, keyPEM)
    }
}
