import Foundation

/// A proxy the pair connects through: SOCKS4/4a, SOCKS5 (with RFC 1929 username/password) or an HTTP
/// `CONNECT` tunnel. The pair dials the proxy, asks it for the host and port the pair was created with,
/// and only then is live (TLS, if asked for, runs to the target through the tunnel).
///
/// Set it with `setProperty(_:forKey: .proxyConfigurationKey)` before `open()`. CFNetwork's spelling,
/// the `kCFStreamPropertySOCKSProxy` dictionary (`.socksProxyConfigurationKey`), maps onto it.
///
/// How the target is named to the proxy: an IP literal as an address (SOCKS4, SOCKS5 ATYP 1 or 4,
/// `CONNECT [::1]:443`), a host name as a name that the proxy resolves (SOCKS4a, SOCKS5 ATYP 3, `CONNECT
/// name:443`). Nothing is resolved locally, so no name lookup leaves this machine. To have a name
/// resolved here instead (curl's `--socks4`/`--socks5`), resolve it first, create the pair with the
/// address, and keep certificate checks on the name with `TLSSettings.peerName`.
public struct ProxyConfiguration: Sendable, Equatable, CustomStringConvertible {
    /// The proxy protocol.
    public enum Kind: Sendable, Equatable {
        /// SOCKS version 4, and 4a for host-name targets (`kCFStreamSocketSOCKSVersion4`). IPv6 targets
        /// cannot be reached through it.
        case socks4
        /// SOCKS version 5 (RFC 1928; `kCFStreamSocketSOCKSVersion5`), with username/password
        /// authentication (RFC 1929) when both are given.
        case socks5
        /// An HTTP proxy's `CONNECT` tunnel (RFC 9110 §9.3.6), with Basic authentication when a
        /// username is given.
        case httpConnect
    }

    /// The proxy protocol.
    public var kind: Kind
    /// The proxy's host name or address.
    public var host: String
    /// The proxy's port (1…65535; with any other, `setProperty(_:forKey: .proxyConfigurationKey)`
    /// returns false and the pair keeps no proxy).
    public var port: Int
    /// SOCKS5 and HTTP: the username; SOCKS4: the USERID field. nil: none.
    public var username: String?
    /// SOCKS5 and HTTP: the password. (SOCKS4 has none.)
    public var password: String?
    /// HTTP `CONNECT` only: extra header fields sent with the request (e.g. `User-Agent`, or a
    /// `Proxy-Authorization` of a scheme other than Basic), in this order.
    public var additionalHeaders: [(name: String, value: String)]

    /// A proxy of `kind` at `host`:`port`.
    public init(
        kind: Kind, host: String, port: Int, username: String? = nil, password: String? = nil,
        additionalHeaders: [(name: String, value: String)] = []
    ) {
        self.kind = kind
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.additionalHeaders = additionalHeaders
    }

    /// A SOCKS4/4a proxy; `userID` is sent in the request's USERID field.
    public static func socks4(host: String, port: Int = 1080, userID: String? = nil) -> ProxyConfiguration {
        ProxyConfiguration(kind: .socks4, host: host, port: port, username: userID)
    }

    /// A SOCKS5 proxy, with username/password authentication when both are given.
    public static func socks5(host: String, port: Int = 1080, username: String? = nil, password: String? = nil)
        -> ProxyConfiguration
    {
        ProxyConfiguration(kind: .socks5, host: host, port: port, username: username, password: password)
    }

    /// An HTTP proxy's CONNECT tunnel, with Basic authentication when `username` is given.
    public static func httpConnect(
        host: String, port: Int, username: String? = nil, password: String? = nil,
        additionalHeaders: [(name: String, value: String)] = []
    ) -> ProxyConfiguration {
        ProxyConfiguration(
            kind: .httpConnect, host: host, port: port, username: username, password: password,
            additionalHeaders: additionalHeaders)
    }

    /// Equal when every setting is, the additional headers in order.
    public static func == (lhs: ProxyConfiguration, rhs: ProxyConfiguration) -> Bool {
        lhs.kind == rhs.kind && lhs.host == rhs.host && lhs.port == rhs.port && lhs.username == rhs.username
            && lhs.password == rhs.password
            && lhs.additionalHeaders.map(\.name) == rhs.additionalHeaders.map(\.name)
            && lhs.additionalHeaders.map(\.value) == rhs.additionalHeaders.map(\.value)
    }

    /// "SOCKS5 proxy 127.0.0.1 port 1080" (never the password).
    public var description: String { "\(kindName) proxy \(Endpoint.host(host, port: port).label)" }

    /// "SOCKS4", "SOCKS5", "HTTP".
    var kindName: String {
        switch kind {
        case .socks4: return "SOCKS4"
        case .socks5: return "SOCKS5"
        case .httpConnect: return "HTTP"
        }
    }

    // MARK: userInfo keys of proxy errors

    /// userInfo key of a proxy failure's `streamError`: the proxy's host (a String).
    public static let errorProxyHostKey = "SocketStreamsProxyHost"
    /// userInfo key of a proxy failure's `streamError`: the proxy's port (an Int).
    public static let errorProxyPortKey = "SocketStreamsProxyPort"
    /// userInfo key of an HTTP proxy failure's `streamError`: the status code of its reply (an Int).
    public static let errorHTTPStatusCodeKey = "SocketStreamsProxyHTTPStatusCode"
    /// userInfo key of an HTTP proxy failure's `streamError`: its reply's head, as text.
    public static let errorHTTPResponseHeadKey = "SocketStreamsProxyHTTPResponseHead"
}

// The `kCF…` constants below are `nonisolated(unsafe)` only because corelibs' NSString (our
// `CFString`) is not `Sendable`: each is a `let` bound once to a literal nothing mutates.
/// `kCFSOCKSStatusCodeKey`: userInfo key of a SOCKS failure, the status the proxy replied with (a String,
/// as CFNetwork gives it).
nonisolated(unsafe) public let kCFSOCKSStatusCodeKey: CFString = "kCFSOCKSStatusCodeKey"
/// `kCFSOCKSVersionKey`: userInfo key of an unsupported-server-version failure, the version the proxy
/// answered with (a String).
nonisolated(unsafe) public let kCFSOCKSVersionKey: CFString = "kCFSOCKSVersionKey"
/// `kCFSOCKSNegotiationMethodKey`: userInfo key of an unsupported-method failure, the method the proxy
/// chose (a String).
nonisolated(unsafe) public let kCFSOCKSNegotiationMethodKey: CFString = "kCFSOCKSNegotiationMethodKey"
