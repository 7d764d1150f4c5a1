// The Security framework's names that verify blocks, identities and PKCS#12 imports use, with Apple's
// values: result codes (`errSec…` from SecBase.h, `errSSL…` from SecureTransport.h), the PKCS#12 import
// keys (SecImportExport.h), the trust options and results (SecTrust.h), the legacy `SSLProtocol`
// (SecureTransport.h) and the TLS versions and cipher suites of Network.framework's TLS options
// (SecProtocolTypes.h). Only names: the calls are in SecTrust.swift, SecCertificate.swift and
// SecProtocolOptions.swift.

import Dispatch
import Foundation

/// A Dispatch queue as Security's and Network's C signatures name it (`dispatch_queue_t`); Swift code
/// passes a `DispatchQueue`.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public typealias dispatch_queue_t = DispatchQueue

// MARK: CFData's accessors, for certificate and key bytes

/// The number of bytes (`CFDataGetLength`), for the `CFData` this package's Security calls return (an
/// `NSData`; CoreFoundation's own function takes CoreFoundation's type).
public func CFDataGetLength(_ theData: CFData!) -> CFIndex { theData.length }

/// The bytes (`CFDataGetBytePtr`), valid while `theData` lives, as CoreFoundation's are.
public func CFDataGetBytePtr(_ theData: CFData!) -> UnsafePointer<UInt8>! {
    theData.length == 0 ? nil : theData.bytes.assumingMemoryBound(to: UInt8.self)
}

// MARK: result codes (SecBase.h)

/// No error (`errSecSuccess`).
public let errSecSuccess: OSStatus = 0
/// The function or operation is not implemented (`errSecUnimplemented`).
public let errSecUnimplemented: OSStatus = -4
/// One or more parameters passed to a function were not valid (`errSecParam`).
public let errSecParam: OSStatus = -50
/// Failed to allocate memory (`errSecAllocate`).
public let errSecAllocate: OSStatus = -108
/// The user name or passphrase you entered is not correct (`errSecAuthFailed`): `SecPKCS12Import` with
/// a wrong passphrase.
public let errSecAuthFailed: OSStatus = -25293
/// The specified item could not be found (`errSecItemNotFound`).
public let errSecItemNotFound: OSStatus = -25300
/// A passphrase is required for import/export (`errSecPassphraseRequired`).
public let errSecPassphraseRequired: OSStatus = -25260
/// The item you are trying to import has an unknown format (`errSecUnknownFormat`).
public let errSecUnknownFormat: OSStatus = -25257
/// Unable to decode the provided data (`errSecDecode`): data that is not a certificate or PKCS#12 archive.
public let errSecDecode: OSStatus = -26275
/// A host name mismatch has occurred (`errSecHostNameMismatch`).
public let errSecHostNameMismatch: OSStatus = -67602
/// The certificate chain failed verification (`errSecVerifyFailed`).
public let errSecVerifyFailed: OSStatus = -67808
/// An expired certificate was detected (`errSecCertificateExpired`).
public let errSecCertificateExpired: OSStatus = -67818
/// The certificate is not yet valid (`errSecCertificateNotValidYet`).
public let errSecCertificateNotValidYet: OSStatus = -67819
/// The trust policy was not trusted (`errSecNotTrusted`): what an unknown or untrusted root gives.
public let errSecNotTrusted: OSStatus = -67843

// MARK: SecureTransport statuses (SecureTransport.h), which NWError.tls carries

/// SSL protocol error (`errSSLProtocol`).
public let errSSLProtocol: OSStatus = -9800
/// Cipher Suite negotiation failure (`errSSLNegotiation`).
public let errSSLNegotiation: OSStatus = -9801
/// Fatal alert (`errSSLFatalAlert`).
public let errSSLFatalAlert: OSStatus = -9802
/// Connection closed via error (`errSSLClosedAbort`).
public let errSSLClosedAbort: OSStatus = -9806
/// Invalid certificate chain (`errSSLXCertChainInvalid`).
public let errSSLXCertChainInvalid: OSStatus = -9807
/// Bad certificate format (`errSSLBadCert`): a verify block that completes `false`.
public let errSSLBadCert: OSStatus = -9808
/// Valid cert chain, untrusted root (`errSSLUnknownRootCert`).
public let errSSLUnknownRootCert: OSStatus = -9812
/// Cert chain not verified by root (`errSSLNoRootCert`).
public let errSSLNoRootCert: OSStatus = -9813
/// Chain had an expired cert (`errSSLCertExpired`).
public let errSSLCertExpired: OSStatus = -9814
/// Bad SSLCipherSuite (`errSSLBadCipherSuite`): a cipher suite OpenSSL cannot offer.
public let errSSLBadCipherSuite: OSStatus = -9818
/// Handshake failure (`errSSLPeerHandshakeFail`).
public let errSSLPeerHandshakeFail: OSStatus = -9824
/// Misc. bad certificate (`errSSLPeerBadCert`).
public let errSSLPeerBadCert: OSStatus = -9825
/// Unknown certificate (`errSSLPeerCertUnknown`).
public let errSSLPeerCertUnknown: OSStatus = -9829
/// Bad protocol version (`errSSLPeerProtocolVersion`): versions this package cannot offer.
public let errSSLPeerProtocolVersion: OSStatus = -9836
/// Peer host name mismatch (`errSSLHostNameMismatch`).
public let errSSLHostNameMismatch: OSStatus = -9843
/// Configuration error (`errSSLBadConfiguration`): options that cannot make a TLS configuration.
public let errSSLBadConfiguration: OSStatus = -9848
/// The peer did not send a certificate it was asked for (`errSSLCertificateRequired`).
public let errSSLCertificateRequired: OSStatus = -9863

// MARK: PKCS#12 import (SecImportExport.h)

/// The passphrase of the archive, a `CFString`, in `SecPKCS12Import`'s options (`kSecImportExportPassphrase`).
public var kSecImportExportPassphrase: CFString { "passphrase" as CFString }
/// The `SecIdentity` of an imported item (`kSecImportItemIdentity`).
public var kSecImportItemIdentity: CFString { "identity" as CFString }
/// The certificate chain (`[SecCertificate]`, the identity's certificate first) of an imported item
/// (`kSecImportItemCertChain`).
public var kSecImportItemCertChain: CFString { "chain" as CFString }
/// A `SecTrust` for the imported chain (`kSecImportItemTrust`).
public var kSecImportItemTrust: CFString { "trust" as CFString }
/// The item's label, the certificate's subject summary (`kSecImportItemLabel`).
public var kSecImportItemLabel: CFString { "label" as CFString }

// MARK: trust (SecTrust.h)

/// Options of a trust evaluation (`SecTrustOptionFlags`, `SecTrustSetOptions`).
public struct SecTrustOptionFlags: OptionSet, Sendable {
    /// The flags' bits (`SecTrustOptionFlags.rawValue`).
    public let rawValue: UInt32
    /// Flags from their bits (`SecTrustOptionFlags.init(rawValue:)`).
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Expired or not yet valid certificates anywhere in the chain are accepted (`kSecTrustOptionAllowExpired`).
    public static let allowExpired = SecTrustOptionFlags(rawValue: 0x0000_0001)
    /// The leaf may be a CA certificate (`kSecTrustOptionLeafIsCA`): here the compatible profile, which
    /// also leaves out X509_STRICT's other rules.
    public static let leafIsCA = SecTrustOptionFlags(rawValue: 0x0000_0002)
    /// Fetch missing issuers from the network (`kSecTrustOptionFetchIssuerFromNet`): accepted, never
    /// done (the verifier uses the chain sent and the anchors).
    public static let fetchIssuerFromNet = SecTrustOptionFlags(rawValue: 0x0000_0004)
    /// An expired root is accepted (`kSecTrustOptionAllowExpiredRoot`).
    public static let allowExpiredRoot = SecTrustOptionFlags(rawValue: 0x0000_0008)
    /// Revocation checked for every certificate (`kSecTrustOptionRequireRevPerCert`): accepted, no
    /// effect (no CRLs or OCSP responses are fetched).
    public static let requireRevPerCert = SecTrustOptionFlags(rawValue: 0x0000_0010)
    /// Use the user's trust settings (`kSecTrustOptionUseTrustSettings`): accepted, no effect.
    public static let useTrustSettings = SecTrustOptionFlags(rawValue: 0x0000_0020)
    /// A self-signed certificate in the chain is trusted as an anchor (`kSecTrustOptionImplicitAnchors`).
    public static let implicitAnchors = SecTrustOptionFlags(rawValue: 0x0000_0040)
}

/// The outcome of an evaluation as `SecTrustGetTrustResult` reports it (`SecTrustResultType`).
public enum SecTrustResultType: UInt32, Sendable {
    /// Not evaluated yet (`kSecTrustResultInvalid`).
    case invalid = 0
    /// Trusted because the user said so (`kSecTrustResultProceed`); never given here.
    case proceed = 1
    /// Deprecated (`kSecTrustResultConfirm`).
    case confirm = 2
    /// Distrusted by the user (`kSecTrustResultDeny`); never given here.
    case deny = 3
    /// Trusted, with no user setting involved (`kSecTrustResultUnspecified`): a passing evaluation.
    case unspecified = 4
    /// Not trusted, a failure the user could override (`kSecTrustResultRecoverableTrustFailure`): a
    /// failing evaluation.
    case recoverableTrustFailure = 5
    /// Not trusted and not overridable (`kSecTrustResultFatalTrustFailure`): a chain that cannot be read.
    case fatalTrustFailure = 6
    /// Another error (`kSecTrustResultOtherError`).
    case otherError = 7
}

// MARK: TLS versions and cipher suites

/// A TLS or DTLS version (`tls_protocol_version_t`, SecProtocolTypes.h), with its wire value.
///
/// This package offers TLS 1.2 and 1.3 only: a minimum below 1.2 means 1.2, a maximum below 1.2 fails
/// the connection with `NWError.tls(errSSLPeerProtocolVersion)`; the DTLS versions stand for the TLS
/// versions they derive from (DTLS 1.2 for TLS 1.2, DTLS 1.0 for TLS 1.1).
// swift-format-ignore: TypeNamesShouldBeCapitalized
public enum tls_protocol_version_t: UInt16, Sendable {
    /// TLS 1.0 (`tls_protocol_version_TLSv10`).
    case TLSv10 = 0x0301
    /// TLS 1.1 (`tls_protocol_version_TLSv11`).
    case TLSv11 = 0x0302
    /// TLS 1.2 (`tls_protocol_version_TLSv12`).
    case TLSv12 = 0x0303
    /// TLS 1.3 (`tls_protocol_version_TLSv13`).
    case TLSv13 = 0x0304
    /// DTLS 1.0 (`tls_protocol_version_DTLSv10`).
    case DTLSv10 = 0xfeff
    /// DTLS 1.2 (`tls_protocol_version_DTLSv12`).
    case DTLSv12 = 0xfefd

    /// The TLS version this one stands for here: nil below TLS 1.2.
    var tlsVersion: TLSVersion? {
        switch self {
        case .TLSv10, .TLSv11, .DTLSv10: nil
        case .TLSv12, .DTLSv12: .v1_2
        case .TLSv13: .v1_3
        }
    }

    init(_ version: TLSVersion) {
        switch version {
        case .v1_2: self = .TLSv12
        case .v1_3: self = .TLSv13
        }
    }
}

/// SecureTransport's protocol versions (`SSLProtocol`, SecureTransport.h), which the deprecated
/// `sec_protocol_options_set_tls_min_version` and `…_max_version` take.
public enum SSLProtocol: Int32, Sendable {
    /// No protocol specified (`kSSLProtocolUnknown`).
    case sslProtocolUnknown = 0
    /// SSL 2 (`kSSLProtocol2`).
    case sslProtocol2 = 1
    /// SSL 3 (`kSSLProtocol3`).
    case sslProtocol3 = 2
    /// SSL 3 only (`kSSLProtocol3Only`).
    case sslProtocol3Only = 3
    /// TLS 1.0 (`kTLSProtocol1`).
    case tlsProtocol1 = 4
    /// TLS 1.0 only (`kTLSProtocol1Only`).
    case tlsProtocol1Only = 5
    /// All supported (`kSSLProtocolAll`).
    case sslProtocolAll = 6
    /// TLS 1.1 (`kTLSProtocol11`).
    case tlsProtocol11 = 7
    /// TLS 1.2 (`kTLSProtocol12`).
    case tlsProtocol12 = 8
    /// DTLS 1.0 (`kDTLSProtocol1`).
    case dtlsProtocol1 = 9
    /// TLS 1.3 (`kTLSProtocol13`).
    case tlsProtocol13 = 10
    /// DTLS 1.2 (`kDTLSProtocol12`).
    case dtlsProtocol12 = 11
    /// The newest supported (`kTLSProtocolMaxSupported`).
    case tlsProtocolMaxSupported = 999

    /// As a `tls_protocol_version_t`; nil for "unknown", "all" and "newest" (no bound).
    var protocolVersion: tls_protocol_version_t? {
        switch self {
        case .sslProtocolUnknown, .sslProtocolAll, .tlsProtocolMaxSupported: nil
        case .sslProtocol2, .sslProtocol3, .sslProtocol3Only, .tlsProtocol1, .tlsProtocol1Only: .TLSv10
        case .tlsProtocol11: .TLSv11
        case .tlsProtocol12: .TLSv12
        case .tlsProtocol13: .TLSv13
        case .dtlsProtocol1: .DTLSv10
        case .dtlsProtocol12: .DTLSv12
        }
    }
}

/// A TLS cipher suite by its IANA value (`tls_ciphersuite_t`, SecProtocolTypes.h), with Apple's named
/// values (`.ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`, `.AES_128_GCM_SHA256`...).
///
/// A struct rather than Apple's imported C enum so that a negotiated suite Apple's list lacks (OpenSSL
/// offers DHE suites) still has a value: `tls_ciphersuite_t(rawValue:)` always succeeds, and `switch`
/// needs a `default` as it does over Apple's non-frozen enum.
// swift-format-ignore: TypeNamesShouldBeCapitalized
public struct tls_ciphersuite_t: RawRepresentable, Hashable, Sendable {
    /// The IANA value (`tls_ciphersuite_t.rawValue`).
    public let rawValue: UInt16
    /// The suite with this IANA value (`tls_ciphersuite_t.init(rawValue:)`); never nil.
    public init?(rawValue: UInt16) { self.rawValue = rawValue }

    private init(_ value: UInt16) { rawValue = value }

    /// `tls_ciphersuite_RSA_WITH_3DES_EDE_CBC_SHA`.
    public static let RSA_WITH_3DES_EDE_CBC_SHA = tls_ciphersuite_t(0x000A)
    /// `tls_ciphersuite_RSA_WITH_AES_128_CBC_SHA`.
    public static let RSA_WITH_AES_128_CBC_SHA = tls_ciphersuite_t(0x002F)
    /// `tls_ciphersuite_RSA_WITH_AES_256_CBC_SHA`.
    public static let RSA_WITH_AES_256_CBC_SHA = tls_ciphersuite_t(0x0035)
    /// `tls_ciphersuite_RSA_WITH_AES_128_GCM_SHA256`.
    public static let RSA_WITH_AES_128_GCM_SHA256 = tls_ciphersuite_t(0x009C)
    /// `tls_ciphersuite_RSA_WITH_AES_256_GCM_SHA384`.
    public static let RSA_WITH_AES_256_GCM_SHA384 = tls_ciphersuite_t(0x009D)
    /// `tls_ciphersuite_RSA_WITH_AES_128_CBC_SHA256`.
    public static let RSA_WITH_AES_128_CBC_SHA256 = tls_ciphersuite_t(0x003C)
    /// `tls_ciphersuite_RSA_WITH_AES_256_CBC_SHA256`.
    public static let RSA_WITH_AES_256_CBC_SHA256 = tls_ciphersuite_t(0x003D)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA`.
    public static let ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA = tls_ciphersuite_t(0xC008)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_AES_128_CBC_SHA`.
    public static let ECDHE_ECDSA_WITH_AES_128_CBC_SHA = tls_ciphersuite_t(0xC009)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_AES_256_CBC_SHA`.
    public static let ECDHE_ECDSA_WITH_AES_256_CBC_SHA = tls_ciphersuite_t(0xC00A)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA`.
    public static let ECDHE_RSA_WITH_3DES_EDE_CBC_SHA = tls_ciphersuite_t(0xC012)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_AES_128_CBC_SHA`.
    public static let ECDHE_RSA_WITH_AES_128_CBC_SHA = tls_ciphersuite_t(0xC013)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_AES_256_CBC_SHA`.
    public static let ECDHE_RSA_WITH_AES_256_CBC_SHA = tls_ciphersuite_t(0xC014)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256`.
    public static let ECDHE_ECDSA_WITH_AES_128_CBC_SHA256 = tls_ciphersuite_t(0xC023)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384`.
    public static let ECDHE_ECDSA_WITH_AES_256_CBC_SHA384 = tls_ciphersuite_t(0xC024)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_AES_128_CBC_SHA256`.
    public static let ECDHE_RSA_WITH_AES_128_CBC_SHA256 = tls_ciphersuite_t(0xC027)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_AES_256_CBC_SHA384`.
    public static let ECDHE_RSA_WITH_AES_256_CBC_SHA384 = tls_ciphersuite_t(0xC028)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`.
    public static let ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 = tls_ciphersuite_t(0xC02B)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384`.
    public static let ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 = tls_ciphersuite_t(0xC02C)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_AES_128_GCM_SHA256`.
    public static let ECDHE_RSA_WITH_AES_128_GCM_SHA256 = tls_ciphersuite_t(0xC02F)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_AES_256_GCM_SHA384`.
    public static let ECDHE_RSA_WITH_AES_256_GCM_SHA384 = tls_ciphersuite_t(0xC030)
    /// `tls_ciphersuite_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256`.
    public static let ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 = tls_ciphersuite_t(0xCCA8)
    /// `tls_ciphersuite_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256`.
    public static let ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 = tls_ciphersuite_t(0xCCA9)
    /// `tls_ciphersuite_AES_128_GCM_SHA256` (TLS 1.3).
    public static let AES_128_GCM_SHA256 = tls_ciphersuite_t(0x1301)
    /// `tls_ciphersuite_AES_256_GCM_SHA384` (TLS 1.3).
    public static let AES_256_GCM_SHA384 = tls_ciphersuite_t(0x1302)
    /// `tls_ciphersuite_CHACHA20_POLY1305_SHA256` (TLS 1.3).
    public static let CHACHA20_POLY1305_SHA256 = tls_ciphersuite_t(0x1303)

    /// IANA names of Apple's suites, by value: what TLSSettings and TLSConnectionInfo use.
    static let ianaNames: [UInt16: String] = [
        0x000A: "TLS_RSA_WITH_3DES_EDE_CBC_SHA", 0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA", 0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
        0x009C: "TLS_RSA_WITH_AES_128_GCM_SHA256", 0x009D: "TLS_RSA_WITH_AES_256_GCM_SHA384",
        0x003C: "TLS_RSA_WITH_AES_128_CBC_SHA256", 0x003D: "TLS_RSA_WITH_AES_256_CBC_SHA256",
        0xC008: "TLS_ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA", 0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
        0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", 0xC012: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
        0xC023: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", 0xC024: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384",
        0xC027: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 0xC028: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
        0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", 0xC02C: "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xC030: "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        0xCCA8: "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", 0xCCA9: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        0x1301: "TLS_AES_128_GCM_SHA256", 0x1302: "TLS_AES_256_GCM_SHA384", 0x1303: "TLS_CHACHA20_POLY1305_SHA256",
        // OpenSSL's defaults beyond Apple's list, so a negotiated one has its value.
        0x009E: "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", 0x009F: "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
        0xCCAA: "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ]

    /// The IANA name, nil for a value neither Apple's list nor OpenSSL's defaults have.
    var ianaName: String? { Self.ianaNames[rawValue] }

    /// The suite of an IANA name (TLSConnectionInfo.cipherSuite); nil for an unknown name.
    init?(ianaName: String) {
        guard let value = Self.ianaNames.first(where: { $0.value == ianaName })?.key else { return nil }
        rawValue = value
    }
}
