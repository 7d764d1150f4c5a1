// `NWError` and the names around it. Its printed forms are Apple's, with Linux's errno values (code
// matches `.posix(.ECONNREFUSED)` symbolically, so the numbers may differ from Darwin's 61):
//
//     String(describing:)   "POSIXErrorCode(rawValue: 111): Connection refused"
//                           "-65554: NoSuchRecord"
//                           "-9808: bad certificate format"
//     localizedDescription  "The operation couldn’t be completed. (Network.NWError error 111 - Connection refused)"
//
// DNS codes are DNS-SD's (`kDNSServiceErr_…`, dns_sd.h) and TLS statuses SecureTransport's (`errSSL…`,
// SecureTransport.h), with the sentences `SecCopyErrorMessageString` gives them.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A DNS-SD error code (`kDNSServiceErr_NoSuchRecord` = -65554, …): `dns_sd.h`'s `DNSServiceErrorType`,
/// which Linux's Foundation does not declare.
public typealias DNSServiceErrorType = Int32

/// A Security framework status code (`errSSLBadCert` = -9808, …): `MacTypes.h`'s `OSStatus`, which
/// Linux's Foundation does not declare.
public typealias OSStatus = Int32

/// The CFError domain of `NWError.posix` errors: Network.framework's `kNWErrorDomainPOSIX`, whose value
/// is Core Foundation's POSIX domain, "NSPOSIXErrorDomain".
public var kNWErrorDomainPOSIX: CFString { NSPOSIXErrorDomain as CFString }

/// The CFError domain of `NWError.dns` errors: Network.framework's `kNWErrorDomainDNS`
/// ("kNWErrorDomainDNS").
public var kNWErrorDomainDNS: CFString { "kNWErrorDomainDNS" as CFString }

/// The CFError domain of `NWError.tls` errors: Network.framework's `kNWErrorDomainTLS`, whose value is
/// the OSStatus domain, "NSOSStatusErrorDomain".
public var kNWErrorDomainTLS: CFString { "NSOSStatusErrorDomain" as CFString }

/// An error of a connection, listener or path: Network.framework's `NWError` (`Error`, `Equatable`,
/// `CustomDebugStringConvertible`, `CustomNSError`, `Sendable`).
///
/// Match it as Apple-platform code does: `if error == .posix(.ECONNREFUSED)`, `case .dns(let code)`,
/// `case .tls(let status)`. As an `NSError` it is in the "Network.NWError" domain with ``errorCode``
/// as its code and the `localizedDescription` Apple gives it.
public enum NWError: Error, Equatable, CustomDebugStringConvertible, CustomNSError, Sendable {
    /// A POSIX error, used for most network protocol and routing errors (`NWError.posix(_:)`); the
    /// code has Linux's value.
    case posix(POSIXErrorCode)
    /// A DNS error met while resolving (`NWError.dns(_:)`): a DNS-SD code, e.g. -65554
    /// (`kDNSServiceErr_NoSuchRecord`) for a name that does not exist.
    case dns(DNSServiceErrorType)
    /// A TLS error (`NWError.tls(_:)`): a SecureTransport status, e.g. -9808 (`errSSLBadCert`).
    case tls(OSStatus)

    /// "Network.NWError", the domain Apple's `NWError` bridges to `NSError` in (`CustomNSError.errorDomain`).
    public static var errorDomain: String { "Network.NWError" }

    /// The errno, the DNS-SD code or the OSStatus (`NWError.errorCode`).
    public var errorCode: Int {
        switch self {
        case .posix(let code): Int(code.rawValue)
        case .dns(let code): Int(code)
        case .tls(let status): Int(status)
        }
    }

    /// The `NSLocalizedDescriptionKey` Apple's `NWError` carries, so that `localizedDescription` reads
    /// "The operation couldn’t be completed. (Network.NWError error 111 - Connection refused)"
    /// (`CustomNSError.errorUserInfo`).
    public var errorUserInfo: [String: Any] {
        [NSLocalizedDescriptionKey: "The operation couldn’t be completed. (Network.NWError error \(errorCode) - \(reason))"]
    }

    /// "POSIXErrorCode(rawValue: 111): Connection refused", "-65554: NoSuchRecord",
    /// "-9808: bad certificate format" (`NWError.debugDescription`).
    public var debugDescription: String {
        switch self {
        case .posix(let code): "POSIXErrorCode(rawValue: \(code.rawValue)): \(reason)"
        case .dns(let code): "\(code): \(reason)"
        case .tls(let status): "\(status): \(reason)"
        }
    }

    /// The words after the code: `strerror(3)`, the DNS-SD name, SecureTransport's sentence.
    private var reason: String {
        switch self {
        case .posix(let code): String(cString: strerror(code.rawValue))
        case .dns(let code): Self.dnsNames[code] ?? "Unknown"
        case .tls(let status): Self.tlsMessages[status] ?? "Unknown TLS error"
        }
    }

    /// `dns_sd.h`'s `kDNSServiceErr_…` names without their prefix, as Apple prints them.
    private static let dnsNames: [DNSServiceErrorType: String] = [
        0: "NoError", -65537: "Unknown", -65538: "NoSuchName", -65539: "NoMemory", -65540: "BadParam",
        -65541: "BadReference", -65542: "BadState", -65543: "BadFlags", -65544: "Unsupported", -65545: "NotInitialized",
        -65547: "AlreadyRegistered", -65548: "NameConflict", -65549: "Invalid", -65550: "Firewall", -65551: "Incompatible",
        -65552: "BadInterfaceIndex", -65553: "Refused", -65554: "NoSuchRecord", -65555: "NoAuth", -65556: "NoSuchKey",
        -65557: "NATTraversal", -65558: "DoubleNAT", -65559: "BadTime", -65560: "BadSig", -65561: "BadKey",
        -65562: "Transient", -65563: "ServiceNotRunning", -65564: "NATPortMappingUnsupported",
        -65565: "NATPortMappingDisabled", -65566: "NoRouter", -65567: "PollingMode", -65568: "Timeout",
        -65569: "DefunctConnection", -65570: "PolicyDenied", -65571: "NotPermitted",
    ]

    /// SecureTransport's statuses, with the sentences SecureTransport.h gives them.
    private static let tlsMessages: [OSStatus: String] = [
        -9800: "SSL protocol error", -9801: "Cipher Suite negotiation failure", -9802: "Fatal alert",
        -9803: "I/O would block (not fatal)", -9804: "attempt to restore an unknown session",
        -9805: "connection closed gracefully", -9806: "connection closed via error", -9807: "invalid certificate chain",
        -9808: "bad certificate format", -9809: "underlying cryptographic error", -9810: "Internal error",
        -9812: "valid cert chain, untrusted root", -9813: "cert chain not verified by root",
        -9814: "chain had an expired cert", -9815: "chain had a cert not yet valid",
        -9816: "server closed session with no notification", -9818: "bad SSLCipherSuite",
        -9819: "unexpected message received", -9820: "bad MAC",
        -9821: "decryption failed", -9822: "record overflow", -9823: "decompression failure", -9824: "handshake failure",
        -9825: "misc. bad certificate", -9826: "bad unsupported cert format", -9827: "certificate revoked",
        -9828: "certificate expired", -9829: "unknown certificate", -9830: "illegal parameter",
        -9831: "unknown Cert Authority", -9832: "access denied", -9833: "decoding error", -9834: "decryption error",
        -9835: "export restriction", -9836: "bad protocol version", -9837: "insufficient security",
        -9838: "internal error", -9839: "user canceled", -9840: "no renegotiation allowed",
        -9843: "peer host name mismatch", -9844: "peer dropped connection before responding", -9848: "configuration error",
    ]
}
