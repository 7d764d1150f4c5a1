// Every property name a socket stream pair answers to: CFNetwork's `kCFStream…` constants and
// SocketStreams' own `Stream.PropertyKey`s. The Properties layer is the only one that knows these
// spellings; below it, the pair is set with typed values (`Connection.set(_:)` with a `PairSettings.Change`).
//
// `nonisolated(unsafe)` on the `kCF…` constants here: each is a `let` bound once, at load, to an NSString
// literal that nothing ever mutates, so there is no state to own; the annotation is needed only because
// corelibs-foundation's NSString (our `CFString`) is not `Sendable`.

import Foundation

/// `kCFStreamPropertySocketNativeHandle`: `Data` holding the socket's `Int32` fd. Read-only.
nonisolated(unsafe) public let kCFStreamPropertySocketNativeHandle: CFString = "kCFStreamPropertySocketNativeHandle"
/// `kCFStreamPropertySocketRemoteHostName`: the host name the pair was created with (or the Unix path). Read-only.
nonisolated(unsafe) public let kCFStreamPropertySocketRemoteHostName: CFString = "kCFStreamPropertySocketRemoteHostName"
/// `kCFStreamPropertySocketRemotePortNumber`: the port the pair was created with, as an `NSNumber`. Read-only.
nonisolated(unsafe) public let kCFStreamPropertySocketRemotePortNumber: CFString = "kCFStreamPropertySocketRemotePortNumber"
/// `kCFStreamPropertyShouldCloseNativeSocket`: a Bool, whether the fd is closed with the streams. Default true
/// for host and Unix pairs, false for native-socket pairs. May be set at any time.
nonisolated(unsafe) public let kCFStreamPropertyShouldCloseNativeSocket: CFString = "kCFStreamPropertyShouldCloseNativeSocket"

/// `kCFStreamPropertySocketSecurityLevel` (`Stream.PropertyKey.socketSecurityLevelKey`): one of the
/// `kCFStreamSocketSecurityLevel…` strings (or a `StreamSocketSecurityLevel`). Set before `open()`, or
/// on an open plain pair to secure it in place (STARTTLS). Reads back what was set; after the
/// handshake, `kCFStreamSocketSecurityLevelTLSv1` (the negotiated version: `tlsConnectionInfoKey`).
nonisolated(unsafe) public let kCFStreamPropertySocketSecurityLevel: CFString = "kCFStreamPropertySocketSecurityLevel"
/// `kCFStreamSocketSecurityLevelNone`: no TLS.
nonisolated(unsafe) public let kCFStreamSocketSecurityLevelNone: CFString = "kCFStreamSocketSecurityLevelNone"
/// `kCFStreamSocketSecurityLevelSSLv2`: refused; the handshake fails with errSSLPeerProtocolVersion (-9836).
nonisolated(unsafe) public let kCFStreamSocketSecurityLevelSSLv2: CFString = "kCFStreamSocketSecurityLevelSSLv2"
/// `kCFStreamSocketSecurityLevelSSLv3`: refused; the handshake fails with errSSLPeerProtocolVersion (-9836).
nonisolated(unsafe) public let kCFStreamSocketSecurityLevelSSLv3: CFString = "kCFStreamSocketSecurityLevelSSLv3"
/// `kCFStreamSocketSecurityLevelTLSv1`: TLS 1.2 or newer here.
nonisolated(unsafe) public let kCFStreamSocketSecurityLevelTLSv1: CFString = "kCFStreamSocketSecurityLevelTLSv1"
/// `kCFStreamSocketSecurityLevelNegotiatedSSL`: the newest TLS both sides support, 1.2 at least.
nonisolated(unsafe) public let kCFStreamSocketSecurityLevelNegotiatedSSL: CFString = "kCFStreamSocketSecurityLevelNegotiatedSSL"

/// `kCFStreamPropertySSLSettings`: a `[String: Any]` with the `kCFStreamSSL…` keys below, mapped onto
/// `TLSSettings`. Set before `open()` or on an open plain pair (STARTTLS). Keys it does not know are ignored.
nonisolated(unsafe) public let kCFStreamPropertySSLSettings: CFString = "kCFStreamPropertySSLSettings"
/// `kCFStreamSSLLevel`: a security level string; NegotiatedSSL when absent.
nonisolated(unsafe) public let kCFStreamSSLLevel: CFString = "kCFStreamSSLLevel"
/// `kCFStreamSSLPeerName`: the name verified and sent as SNI; `NSNull()` turns the name check off.
nonisolated(unsafe) public let kCFStreamSSLPeerName: CFString = "kCFStreamSSLPeerName"
/// `kCFStreamSSLValidatesCertificateChain`: a Bool, true by default.
nonisolated(unsafe) public let kCFStreamSSLValidatesCertificateChain: CFString = "kCFStreamSSLValidatesCertificateChain"
/// `kCFStreamSSLAllowsExpiredCertificates`: a Bool, false by default.
nonisolated(unsafe) public let kCFStreamSSLAllowsExpiredCertificates: CFString = "kCFStreamSSLAllowsExpiredCertificates"
/// `kCFStreamSSLAllowsExpiredRoots`: a Bool, false by default.
nonisolated(unsafe) public let kCFStreamSSLAllowsExpiredRoots: CFString = "kCFStreamSSLAllowsExpiredRoots"
/// `kCFStreamSSLAllowsAnyRoot`: a Bool, false by default.
nonisolated(unsafe) public let kCFStreamSSLAllowsAnyRoot: CFString = "kCFStreamSSLAllowsAnyRoot"
/// `kCFStreamSSLCertificates`: the local identity. On Linux a `TLSIdentity`, alone or first in an array
/// (Darwin's `SecIdentity` has no Linux counterpart).
nonisolated(unsafe) public let kCFStreamSSLCertificates: CFString = "kCFStreamSSLCertificates"
/// `kCFStreamSSLIsServer`: a Bool; true makes the pair the TLS server (it then needs `kCFStreamSSLCertificates`).
nonisolated(unsafe) public let kCFStreamSSLIsServer: CFString = "kCFStreamSSLIsServer"
/// `kCFStreamPropertySSLPeerCertificates`: read-only, from the first has-bytes/has-space event after the
/// handshake: the peer's certificates as an array of DER `Data`, leaf first (Darwin returns `SecCertificate`s).
nonisolated(unsafe) public let kCFStreamPropertySSLPeerCertificates: CFString = "kCFStreamPropertySSLPeerCertificates"

extension Stream.PropertyKey {
    /// SocketStreams' own: TLS as a typed `TLSSettings` value (the preferred spelling for new code; the
    /// CFNetwork level and settings dictionary map onto it). Set before `open()` or on an open plain
    /// pair (STARTTLS).
    public static let tlsSettingsKey = Stream.PropertyKey("SocketStreamsPropertyTLSSettings")

    /// SocketStreams' own, read-only: a `TLSConnectionInfo` once the handshake is done (protocol
    /// version, cipher suite, ALPN protocol, peer certificates, whether the session was resumed).
    public static let tlsConnectionInfoKey = Stream.PropertyKey("SocketStreamsPropertyTLSConnectionInfo")

    /// SocketStreams' own: the longest the open may take, name lookup included, in seconds
    /// (a number, not a Bool; 0 or unset means no limit). Set before `open()`. On expiry both streams get
    /// `errorOccurred` with `NSPOSIXErrorDomain` `ETIMEDOUT`. CFNetwork has no public equivalent.
    public static let connectTimeoutKey = Stream.PropertyKey("SocketStreamsPropertyConnectTimeout")

    /// SocketStreams' own: `TCP_NODELAY` (a Bool, not 0 or 1) on the pair's TCP socket. May be set at any time.
    public static let tcpNoDelayKey = Stream.PropertyKey("SocketStreamsPropertyTCPNoDelay")

    /// SocketStreams' own: TCP Fast Open (RFC 7413) on the connect (a Bool): once the kernel holds a
    /// cookie for the server, `connect(2)` returns at once and the first bytes written (a TLS
    /// ClientHello, or the application's first request) go in the SYN; without one the connect is an
    /// ordinary one that asks for a cookie (`TCP_FASTOPEN_CONNECT`). The open then completes before
    /// the server has answered: write first, and send only what may be sent twice. Network.framework's
    /// `NWProtocolTCP.Options.enableFastOpen` and `NWParameters.allowFastOpen` set it. Set before
    /// `open()`, on a host pair.
    public static let tcpFastOpenKey = Stream.PropertyKey("SocketStreamsPropertyTCPFastOpen")

    /// SocketStreams' own: where outgoing connections come from, a ``LocalBinding`` (GCDAsyncSocket's
    /// `viaInterface:`; `bind(2)` before `connect(2)`). Set before `open()`; refused on Unix-domain and
    /// native-socket pairs.
    public static let localBindingKey = Stream.PropertyKey("SocketStreamsPropertyLocalBinding")

    /// SocketStreams' own: set to `true` on an open pair (usually on its output stream; properties
    /// belong to the pair) to half-close it: the write side ends and the read side stays open.
    /// CFNetwork has no equivalent (closing a CFWriteStream sends nothing); this is `shutdown(fd,
    /// SHUT_WR)`, with TLS's `close_notify` first, as SwiftNIO's `close(mode: .output)` does.
    ///
    /// Over TLS, the unsent tail of the last record goes out, then `close_notify` (`SSL_shutdown`
    /// once, without waiting for the peer's), then FIN; over plain TCP, FIN. Nothing new is flushed:
    /// only what `write` already returned as written precedes it. The input stream goes on reading
    /// until the peer ends its side (`endEncountered`), so the peer can still answer. A later `write`
    /// returns -1, and the output stream alone gets `errorOccurred` with `NSPOSIXErrorDomain` `EPIPE`.
    /// Setting it waits (in `poll(2)`) only while the socket cannot take those last bytes.
    ///
    /// `setProperty` returns false before the pair is open (handshakes done), after it failed or was
    /// closed, once it is already shut, for any value but `true`, and if the socket refused
    /// (the pair then fails as a failed write does). Reads back as whether the output was shut.
    public static let shutdownOutputKey = Stream.PropertyKey("SocketStreamsPropertyShutdownOutput")
}

/// `kCFStreamPropertySSLPeerTrust`: Darwin's `SecTrust` of the peer. Linux has no `SecTrust`: the name
/// exists so code that asks for it compiles, and it reads as nil (use `kCFStreamPropertySSLPeerCertificates`
/// or `tlsConnectionInfoKey`).
nonisolated(unsafe) public let kCFStreamPropertySSLPeerTrust: CFString = "kCFStreamPropertySSLPeerTrust"
/// `kCFStreamPropertySSLContext`: Darwin's SecureTransport `SSLContextRef`. Not on Linux: reads as nil,
/// and setting it returns false.
nonisolated(unsafe) public let kCFStreamPropertySSLContext: CFString = "kCFStreamPropertySSLContext"

/// `kCFStreamPropertySOCKSProxy` (`Stream.PropertyKey.socksProxyConfigurationKey`): a dictionary with the
/// keys below (or `StreamSOCKSProxyConfiguration` keys). Set before `open()` (afterwards `setProperty`
/// returns false); reads back as it was set, password included, as CFNetwork does.
nonisolated(unsafe) public let kCFStreamPropertySOCKSProxy: CFString = "kCFStreamPropertySOCKSProxy"
/// `kCFStreamPropertySOCKSProxyHost`: the proxy's host (Darwin's raw key `SOCKSProxy`; Foundation on
/// Linux spells it `NSStreamSOCKSProxyKey`; both are accepted).
nonisolated(unsafe) public let kCFStreamPropertySOCKSProxyHost: CFString = "SOCKSProxy"
/// `kCFStreamPropertySOCKSProxyPort`: the proxy's port, a number; 1080 when absent (Darwin `SOCKSPort`,
/// Linux `NSStreamSOCKSPortKey`).
nonisolated(unsafe) public let kCFStreamPropertySOCKSProxyPort: CFString = "SOCKSPort"
/// `kCFStreamPropertySOCKSVersion`: `kCFStreamSocketSOCKSVersion4` or `…5` (the default).
nonisolated(unsafe) public let kCFStreamPropertySOCKSVersion: CFString = "kCFStreamPropertySOCKSVersion"
/// `kCFStreamSocketSOCKSVersion4`: SOCKS4, and SOCKS4a for host-name targets.
nonisolated(unsafe) public let kCFStreamSocketSOCKSVersion4: CFString = "kCFStreamSocketSOCKSVersion4"
/// `kCFStreamSocketSOCKSVersion5`: SOCKS5.
nonisolated(unsafe) public let kCFStreamSocketSOCKSVersion5: CFString = "kCFStreamSocketSOCKSVersion5"
/// `kCFStreamPropertySOCKSUser`: SOCKS5 username (≤ 255 bytes) or SOCKS4 USERID.
nonisolated(unsafe) public let kCFStreamPropertySOCKSUser: CFString = "kCFStreamPropertySOCKSUser"
/// `kCFStreamPropertySOCKSPassword`: SOCKS5 password (≤ 255 bytes).
nonisolated(unsafe) public let kCFStreamPropertySOCKSPassword: CFString = "kCFStreamPropertySOCKSPassword"

/// `kCFStreamPropertyCONNECTProxy` (CFNetwork SPI): an HTTP CONNECT proxy as a dictionary with the keys
/// below. Set before `open()`; reads back as it was set.
nonisolated(unsafe) public let kCFStreamPropertyCONNECTProxy: CFString = "kCFStreamPropertyCONNECTProxy"
/// `kCFStreamPropertyCONNECTProxyHost`: the HTTP proxy's host.
nonisolated(unsafe) public let kCFStreamPropertyCONNECTProxyHost: CFString = "kCFStreamPropertyCONNECTProxyHost"
/// `kCFStreamPropertyCONNECTProxyPort`: the HTTP proxy's port, a number.
nonisolated(unsafe) public let kCFStreamPropertyCONNECTProxyPort: CFString = "kCFStreamPropertyCONNECTProxyPort"
/// `kCFStreamPropertyCONNECTAdditionalHeaders`: a `[String: String]` of header fields sent with the
/// CONNECT request (a `Proxy-Authorization` among them authenticates).
nonisolated(unsafe) public let kCFStreamPropertyCONNECTAdditionalHeaders: CFString = "kCFStreamPropertyCONNECTAdditionalHeaders"

extension Stream.PropertyKey {
    /// SocketStreams' own: the proxy as a typed `ProxyConfiguration` (any kind, HTTP CONNECT included),
    /// or nil for none. Set before `open()`. Reads back the proxy in use, however it was set.
    public static let proxyConfigurationKey = Stream.PropertyKey("SocketStreamsPropertyProxyConfiguration")
}

/// `kCFStreamNetworkServiceType` (`Stream.PropertyKey.networkServiceType`): the traffic class of a TCP
/// pair, one of the `kCFStreamNetworkServiceType…` values below (or Foundation's
/// `StreamNetworkServiceTypeValue`). Linux has no service classes: each value marks the socket's
/// traffic with a DSCP (`IP_TOS`/`IPV6_TCLASS`) and a queueing priority (`SO_PRIORITY`)
/// (Guides/PortingFromApplePlatforms.md has the table). Set before or after the open; nil clears it;
/// reads back as set. A Unix-domain pair and an unknown value are refused (`setProperty` returns false).
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

/// Lets the Properties layer `switch` over property and dictionary key names with the `kCF…`
/// constants (`CFString`s) as patterns.
func ~= (pattern: CFString, value: String) -> Bool { pattern.isEqual(to: value) }
func ~= (pattern: CFString, value: String?) -> Bool { value.map { pattern.isEqual(to: $0) } ?? false }
