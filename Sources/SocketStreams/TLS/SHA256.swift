import COpenSSL
import Foundation

/// SHA-256 through OpenSSL's EVP interface.
enum SHA256 {
    static func digest(_ data: Data) -> Data {
        OpenSSLLibrary.prepare()
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        data.withUnsafeBytes { raw in
            _ = EVP_Digest(raw.baseAddress, raw.count, &output, &length, EVP_sha256(), nil)
        }
        return Data(output.prefix(Int(length)))
    }
}

extension TLSSettings {
    /// The pin for a certificate: the SHA-256 digest of its SubjectPublicKeyInfo (DER), the value
    /// `pinnedPublicKeySHA256` takes. `certificatePEM` holds the certificate in PEM; nil if it is not one.
    public static func publicKeyPin(certificatePEM: Data) -> Data? {
        guard let certificate = (try? PEM.certificates(certificatePEM, what: "the certificate"))?.first else { return nil }
        defer { X509_free(certificate) }
        guard let key = X509_get_X509_PUBKEY(certificate) else { return nil }
        var buffer: UnsafeMutablePointer<UInt8>?
        let length = i2d_X509_PUBKEY(key, &buffer)
        guard length > 0, let buffer else { return nil }
        defer { cssl_free(buffer) }
        return SHA256.digest(Data(bytes: buffer, count: Int(length)))
    }
}
