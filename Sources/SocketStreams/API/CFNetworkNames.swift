// CFNetwork's error names that Darwin code uses beside the stream calls (the service-type names are
// property spellings: Properties/PropertyKeys.swift), with
// Darwin's types and values (CFNetworkErrors.h, CFHost.h, CFSocketStream.h). The ones
// swift-corelibs' CoreFoundation already declares (kCFStreamErrorDomainSSL, kCFStreamErrorDomainSOCKS,
// kCFStreamErrorDomainPOSIX) are not repeated: two declarations would make both ambiguous.

import Foundation

// The `kCF…` constants below are `nonisolated(unsafe)` only because corelibs' NSString (our
// `CFString`) is not `Sendable`: each is a `let` bound once to a literal nothing mutates.
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

/// `CFReadStreamGetBuffer`: socket streams have no internal buffer to lend, so this returns nil and
/// sets `numBytesRead` to 0, as CFNetwork's socket streams do; read with `CFReadStreamRead`.
public func CFReadStreamGetBuffer(
    _ stream: CFReadStream!, _ maxBytesToRead: CFIndex, _ numBytesRead: UnsafeMutablePointer<CFIndex>!
) -> UnsafePointer<UInt8>! {
    numBytesRead?.pointee = 0
    return nil
}
