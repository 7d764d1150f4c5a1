// CFNetwork's error and service-type names that Darwin code uses beside the stream calls, with
// Darwin's types and values (CFNetworkErrors.h, CFHost.h, CFSocketStream.h). The ones
// swift-corelibs' CoreFoundation already declares (kCFStreamErrorDomainSSL, kCFStreamErrorDomainSOCKS,
// kCFStreamErrorDomainPOSIX) are not repeated: two declarations would make both ambiguous.

import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `kCFErrorDomainCFNetwork`: the `NSError` domain of name-resolution and proxy failures
/// (codes in ``CFNetworkErrors``).
nonisolated(unsafe) public let kCFErrorDomainCFNetwork: CFString = "kCFErrorDomainCFNetwork"
/// `kCFGetAddrInfoFailureKey`: the userInfo key holding `getaddrinfo`'s own code (an `EAI_*` value,
/// glibc's numbers) in a ``CFNetworkErrors/cfHostErrorUnknown`` error.
nonisolated(unsafe) public let kCFGetAddrInfoFailureKey: CFString = "kCFGetAddrInfoFailureKey"

/// `kCFStreamErrorDomainNetDB` (12): the `CFStreamError` domain of `getaddrinfo` failures, whose
/// codes are `EAI_*` values (`_kCFStreamErrorDomainKey` in a resolution error's userInfo).
public let kCFStreamErrorDomainNetDB: Int32 = 12
/// `kCFStreamErrorDomainSystemConfiguration` (13).
public let kCFStreamErrorDomainSystemConfiguration: Int32 = 13

/// `CFNetworkErrors`: the codes of ``kCFErrorDomainCFNetwork``, as Swift imports the `CF_ENUM`
/// (`CFNetworkErrors.cfHostErrorUnknown.rawValue == 2`).
public enum CFNetworkErrors: Int32, Sendable {
    /// `kCFHostErrorHostNotFound`.
    case cfHostErrorHostNotFound = 1
    /// `kCFHostErrorUnknown`: a resolution failure; `kCFGetAddrInfoFailureKey` holds the `EAI_*` code.
    case cfHostErrorUnknown = 2
    /// `kCFSOCKSErrorUnknownClientVersion`.
    case cfsocksErrorUnknownClientVersion = 100
    /// `kCFSOCKSErrorUnsupportedServerVersion`.
    case cfsocksErrorUnsupportedServerVersion = 101
    /// `kCFSOCKS4ErrorRequestFailed` (SOCKS4 reply 91).
    case cfsocks4ErrorRequestFailed = 110
    /// `kCFSOCKS4ErrorIdentdFailed` (92).
    case cfsocks4ErrorIdentdFailed = 111
    /// `kCFSOCKS4ErrorIdConflict` (93).
    case cfsocks4ErrorIdConflict = 112
    /// `kCFSOCKS4ErrorUnknownStatusCode`.
    case cfsocks4ErrorUnknownStatusCode = 113
    /// `kCFSOCKS5ErrorBadState`.
    case cfsocks5ErrorBadState = 120
    /// `kCFSOCKS5ErrorBadResponseAddr`.
    case cfsocks5ErrorBadResponseAddr = 121
    /// `kCFSOCKS5ErrorBadCredentials`.
    case cfsocks5ErrorBadCredentials = 122
    /// `kCFSOCKS5ErrorUnsupportedNegotiationMethod`.
    case cfsocks5ErrorUnsupportedNegotiationMethod = 123
    /// `kCFSOCKS5ErrorNoAcceptableMethod`.
    case cfsocks5ErrorNoAcceptableMethod = 124
    /// `kCFFTPErrorUnexpectedStatusCode`.
    case cfftpErrorUnexpectedStatusCode = 200
    /// `kCFErrorHTTPAuthenticationTypeUnsupported`.
    case cfErrorHTTPAuthenticationTypeUnsupported = 300
    /// `kCFErrorHTTPBadCredentials`.
    case cfErrorHTTPBadCredentials = 301
    /// `kCFErrorHTTPConnectionLost`.
    case cfErrorHTTPConnectionLost = 302
    /// `kCFErrorHTTPParseFailure`.
    case cfErrorHTTPParseFailure = 303
    /// `kCFErrorHTTPRedirectionLoopDetected`.
    case cfErrorHTTPRedirectionLoopDetected = 304
    /// `kCFErrorHTTPBadURL`.
    case cfErrorHTTPBadURL = 305
    /// `kCFErrorHTTPProxyConnectionFailure`.
    case cfErrorHTTPProxyConnectionFailure = 306
    /// `kCFErrorHTTPBadProxyCredentials`.
    case cfErrorHTTPBadProxyCredentials = 307
    /// `kCFErrorPACFileError`.
    case cfErrorPACFileError = 308
    /// `kCFErrorPACFileAuth`.
    case cfErrorPACFileAuth = 309
    /// `kCFErrorHTTPSProxyConnectionFailure`.
    case cfErrorHTTPSProxyConnectionFailure = 310
    /// `kCFStreamErrorHTTPSProxyFailureUnexpectedResponseToCONNECTMethod`.
    case cfStreamErrorHTTPSProxyFailureUnexpectedResponseToCONNECTMethod = 311
}

/// `kCFStreamNetworkServiceType` (`Stream.PropertyKey.networkServiceType`): the kind of traffic, set on
/// a pair before or after open. Linux has no service classes; the value becomes the socket's DSCP
/// (`IP_TOS`/`IPV6_TCLASS`): VoIP and Voice EF (46), CallSignaling CS3 (24), Video, AVStreaming and
/// ResponsiveAV AF41 (34), ResponsiveData AF21 (18), Background CS1 (8).
nonisolated(unsafe) public let kCFStreamNetworkServiceType: CFString = "kCFStreamNetworkServiceType"
/// `kCFStreamNetworkServiceTypeVoIP`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeVoIP: CFString = "kCFStreamNetworkServiceTypeVoIP"
/// `kCFStreamNetworkServiceTypeVideo`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeVideo: CFString = "kCFStreamNetworkServiceTypeVideo"
/// `kCFStreamNetworkServiceTypeBackground`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeBackground: CFString = "kCFStreamNetworkServiceTypeBackground"
/// `kCFStreamNetworkServiceTypeVoice`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeVoice: CFString = "kCFStreamNetworkServiceTypeVoice"
/// `kCFStreamNetworkServiceTypeResponsiveData`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeResponsiveData: CFString = "kCFStreamNetworkServiceTypeResponsiveData"
/// `kCFStreamNetworkServiceTypeCallSignaling`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeCallSignaling: CFString = "kCFStreamNetworkServiceTypeCallSignaling"
/// `kCFStreamNetworkServiceTypeAVStreaming`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeAVStreaming: CFString = "kCFStreamNetworkServiceTypeAVStreaming"
/// `kCFStreamNetworkServiceTypeResponsiveAV`.
nonisolated(unsafe) public let kCFStreamNetworkServiceTypeResponsiveAV: CFString = "kCFStreamNetworkServiceTypeResponsiveAV"

/// `CFReadStreamGetBuffer`: socket streams have no internal buffer to lend, so this returns nil and
/// sets `numBytesRead` to 0, as CFNetwork's socket streams do; read with `CFReadStreamRead`.
public func CFReadStreamGetBuffer(
    _ stream: CFReadStream!, _ maxBytesToRead: CFIndex, _ numBytesRead: UnsafeMutablePointer<CFIndex>!
) -> UnsafePointer<UInt8>! {
    numBytesRead?.pointee = 0
    return nil
}

/// The service types and their DSCP values.
enum NetworkServiceType {
    static let dscp: [String: Int32] = [
        "kCFStreamNetworkServiceTypeVoIP": 46, "kCFStreamNetworkServiceTypeVoice": 46,
        "kCFStreamNetworkServiceTypeCallSignaling": 24, "kCFStreamNetworkServiceTypeVideo": 34,
        "kCFStreamNetworkServiceTypeAVStreaming": 34, "kCFStreamNetworkServiceTypeResponsiveAV": 34,
        "kCFStreamNetworkServiceTypeResponsiveData": 18, "kCFStreamNetworkServiceTypeBackground": 8,
    ]

    /// The service type a property value names (a String, NSString or `StreamNetworkServiceTypeValue`), or nil.
    static func name(_ value: AnyObject?) -> String? {
        let text = (value as? StreamNetworkServiceTypeValue)?.rawValue ?? (value as? String)
        guard let text, dscp[text] != nil else { return nil }
        return text
    }

    /// Sets the socket's DSCP for `name` (IPv4 and IPv6; the family that does not apply fails harmlessly).
    static func apply(_ name: String, to fd: Int32) {
        guard let code = dscp[name] else { return }
        var tos = code << 2
        _ = setsockopt(fd, Int32(IPPROTO_IP), IP_TOS, &tos, socklen_t(MemoryLayout<Int32>.size))
        _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_TCLASS, &tos, socklen_t(MemoryLayout<Int32>.size))
    }
}
