import Foundation

/// `kCFStreamPropertySocketNativeHandle`: `Data` holding the socket's `Int32` fd. Read-only.
public let kCFStreamPropertySocketNativeHandle = "kCFStreamPropertySocketNativeHandle"
/// `kCFStreamPropertySocketRemoteHostName`: the host name the pair was created with (or the Unix path). Read-only.
public let kCFStreamPropertySocketRemoteHostName = "kCFStreamPropertySocketRemoteHostName"
/// `kCFStreamPropertySocketRemotePortNumber`: the port the pair was created with, as an `NSNumber`. Read-only.
public let kCFStreamPropertySocketRemotePortNumber = "kCFStreamPropertySocketRemotePortNumber"
/// `kCFStreamPropertyShouldCloseNativeSocket`: whether the fd is closed with the streams. Default true
/// for host and Unix pairs, false for native-socket pairs. May be set at any time.
public let kCFStreamPropertyShouldCloseNativeSocket = "kCFStreamPropertyShouldCloseNativeSocket"

/// `kCFStreamPropertySocketSecurityLevel` (`Stream.PropertyKey.socketSecurityLevelKey`): one of the
/// `kCFStreamSocketSecurityLevel…` strings (or a `StreamSocketSecurityLevel`). Set before `open()`, or
/// on an open plain pair to secure it in place (STARTTLS). Reads back what was set; after the
/// handshake, `kCFStreamSocketSecurityLevelTLSv1` (the negotiated version: `tlsConnectionInfoKey`).
public let kCFStreamPropertySocketSecurityLevel = "kCFStreamPropertySocketSecurityLevel"
/// `kCFStreamSocketSecurityLevelNone`: no TLS.
public let kCFStreamSocketSecurityLevelNone = "kCFStreamSocketSecurityLevelNone"
/// `kCFStreamSocketSecurityLevelSSLv2`: refused; the handshake fails with errSSLPeerProtocolVersion (-9836).
public let kCFStreamSocketSecurityLevelSSLv2 = "kCFStreamSocketSecurityLevelSSLv2"
/// `kCFStreamSocketSecurityLevelSSLv3`: refused; the handshake fails with errSSLPeerProtocolVersion (-9836).
public let kCFStreamSocketSecurityLevelSSLv3 = "kCFStreamSocketSecurityLevelSSLv3"
/// `kCFStreamSocketSecurityLevelTLSv1`: TLS 1.2 or newer here.
public let kCFStreamSocketSecurityLevelTLSv1 = "kCFStreamSocketSecurityLevelTLSv1"
/// `kCFStreamSocketSecurityLevelNegotiatedSSL`: the newest TLS both sides support, 1.2 at least.
public let kCFStreamSocketSecurityLevelNegotiatedSSL = "kCFStreamSocketSecurityLevelNegotiatedSSL"

/// `kCFStreamPropertySSLSettings`: a `[String: Any]` with the `kCFStreamSSL…` keys below, mapped onto
/// `TLSSettings`. Set before `open()` or on an open plain pair (STARTTLS). Keys it does not know are ignored.
public let kCFStreamPropertySSLSettings = "kCFStreamPropertySSLSettings"
/// `kCFStreamSSLLevel`: a security level string; NegotiatedSSL when absent.
public let kCFStreamSSLLevel = "kCFStreamSSLLevel"
/// `kCFStreamSSLPeerName`: the name verified and sent as SNI; `NSNull()` turns the name check off.
public let kCFStreamSSLPeerName = "kCFStreamSSLPeerName"
/// `kCFStreamSSLValidatesCertificateChain`: a Bool, true by default.
public let kCFStreamSSLValidatesCertificateChain = "kCFStreamSSLValidatesCertificateChain"
/// `kCFStreamSSLAllowsExpiredCertificates`: a Bool, false by default.
public let kCFStreamSSLAllowsExpiredCertificates = "kCFStreamSSLAllowsExpiredCertificates"
/// `kCFStreamSSLAllowsExpiredRoots`: a Bool, false by default.
public let kCFStreamSSLAllowsExpiredRoots = "kCFStreamSSLAllowsExpiredRoots"
/// `kCFStreamSSLAllowsAnyRoot`: a Bool, false by default.
public let kCFStreamSSLAllowsAnyRoot = "kCFStreamSSLAllowsAnyRoot"
/// `kCFStreamSSLCertificates`: the local identity. On Linux a `TLSIdentity`, alone or first in an array
/// (Darwin's `SecIdentity` has no Linux counterpart).
public let kCFStreamSSLCertificates = "kCFStreamSSLCertificates"
/// `kCFStreamSSLIsServer`: a Bool; true makes the pair the TLS server (it then needs `kCFStreamSSLCertificates`).
public let kCFStreamSSLIsServer = "kCFStreamSSLIsServer"
/// `kCFStreamPropertySSLPeerCertificates`: read-only, from the first has-bytes/has-space event after the
/// handshake: the peer's certificates as an array of DER `Data`, leaf first (Darwin returns `SecCertificate`s).
public let kCFStreamPropertySSLPeerCertificates = "kCFStreamPropertySSLPeerCertificates"

extension Stream.PropertyKey {
    /// SocketStreams' own: TLS as a typed `TLSSettings` value (the preferred spelling for new code; the
    /// CFNetwork level and settings dictionary map onto it). Set before `open()` or on an open plain
    /// pair (STARTTLS).
    public static let tlsSettingsKey = Stream.PropertyKey("SocketStreamsPropertyTLSSettings")

    /// SocketStreams' own, read-only: a `TLSConnectionInfo` once the handshake is done (protocol
    /// version, cipher suite, ALPN protocol, peer certificates, whether the session was resumed).
    public static let tlsConnectionInfoKey = Stream.PropertyKey("SocketStreamsPropertyTLSConnectionInfo")

    /// SocketStreams' own: the longest the open may take, name lookup included, in seconds
    /// (a number; 0 or unset means no limit). Set before `open()`. On expiry both streams get
    /// `errorOccurred` with `NSPOSIXErrorDomain` `ETIMEDOUT`. CFNetwork has no public equivalent.
    public static let connectTimeoutKey = Stream.PropertyKey("SocketStreamsPropertyConnectTimeout")

    /// SocketStreams' own: `TCP_NODELAY` (a Bool) on the pair's TCP socket. May be set at any time.
    public static let tcpNoDelayKey = Stream.PropertyKey("SocketStreamsPropertyTCPNoDelay")
}
