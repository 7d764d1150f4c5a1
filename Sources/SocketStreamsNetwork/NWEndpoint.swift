// `NWEndpoint` and its host and port: plain values, as on Apple platforms. What Linux cannot reach (a
// Bonjour service) is still a value that can be made, compared and printed; the connection that is
// given one refuses it with an error that says so.

import Foundation

/// A local or remote endpoint of a connection: Network.framework's `NWEndpoint` (`Hashable`,
/// `CustomDebugStringConvertible`, `Sendable`).
public enum NWEndpoint: Hashable, CustomDebugStringConvertible, Sendable {
    /// A host, by name or address, and a port (`NWEndpoint.hostPort(host:port:)`).
    case hostPort(host: NWEndpoint.Host, port: NWEndpoint.Port)
    /// A Bonjour service (`NWEndpoint.service(name:type:domain:interface:)`). Linux has no Bonjour
    /// resolver here: the endpoint is kept as a value, and a connection or listener given one refuses
    /// it with a clear error rather than wait for a resolution that never comes.
    case service(name: String, type: String, domain: String, interface: NWInterface?)
    /// A Unix-domain socket path (`NWEndpoint.unix(path:)`).
    case unix(path: String)
    /// A URL, whose host and port (or scheme's default port) the connection uses (`NWEndpoint.url(_:)`).
    case url(URL)

    /// The interface the endpoint is scoped to: its host's for `.hostPort`, the service's for
    /// `.service`, nil otherwise (`NWEndpoint.interface`).
    public var interface: NWInterface? {
        switch self {
        case .hostPort(let host, _): host.interface
        case .service(_, _, _, let interface): interface
        case .unix, .url: nil
        }
    }

    /// "host:port" ("127.0.0.1:80", "::1:443", "example.com:8080"); a service as
    /// "name.type.domain"; a Unix path as itself; a URL as its absolute string
    /// (`NWEndpoint.debugDescription`).
    public var debugDescription: String {
        switch self {
        case .hostPort(let host, let port): "\(host):\(port)"
        case .service(let name, let type, let domain, _): "\(name).\(type).\(domain)"
        case .unix(let path): path
        case .url(let url): url.absoluteString
        }
    }

    /// A name or address that identifies a host: Network.framework's `NWEndpoint.Host` (`Hashable`,
    /// `CustomDebugStringConvertible`, `ExpressibleByStringLiteral`, `Sendable`).
    public enum Host: Hashable, CustomDebugStringConvertible, ExpressibleByStringLiteral, Sendable {
        /// A host name, resolved when a connection starts, optionally scoped to an interface
        /// (`NWEndpoint.Host.name(_:_:)`).
        case name(String, NWInterface?)
        /// An IPv4 address (`NWEndpoint.Host.ipv4(_:)`).
        case ipv4(IPv4Address)
        /// An IPv6 address (`NWEndpoint.Host.ipv6(_:)`).
        case ipv6(IPv6Address)

        /// `String`, as Apple declares it (`NWEndpoint.Host.StringLiteralType`).
        public typealias StringLiteralType = String

        /// A host from text: an IPv4 literal becomes `.ipv4`, an IPv6 literal (scoped ones included,
        /// "fe80::1%lo") `.ipv6`, except an IPv4-mapped one ("::ffff:192.0.2.1"), which becomes `.ipv4`
        /// of the address inside; anything else `.name(string, nil)` (`NWEndpoint.Host.init(_:)`).
        public init(_ string: String) {
            if let v4 = IPv4Address(string) {
                self = .ipv4(v4)
            } else if let v6 = IPv6Address(string) {
                if v6.isIPv4Mapped, v6.interface == nil, let v4 = v6.asIPv4 {
                    self = .ipv4(v4)
                } else {
                    self = .ipv6(v6)
                }
            } else {
                self = .name(string, nil)
            }
        }

        /// The same as ``init(_:)``, for `let host: NWEndpoint.Host = "example.com"`
        /// (`NWEndpoint.Host.init(stringLiteral:)`).
        public init(stringLiteral value: String) {
            self.init(value)
        }

        /// The interface the host is scoped to: the name's, or the address's (`NWEndpoint.Host.interface`).
        public var interface: NWInterface? {
            switch self {
            case .name(_, let interface): interface
            case .ipv4(let address): address.interface
            case .ipv6(let address): address.interface
            }
        }

        /// The name, or the address as its type prints it; a scoped name with `%` and the interface's
        /// name after it (`NWEndpoint.Host.debugDescription`).
        public var debugDescription: String {
            switch self {
            case .name(let name, let interface): interface.map { name + "%" + $0.name } ?? name
            case .ipv4(let address): address.debugDescription
            case .ipv6(let address): address.debugDescription
            }
        }
    }

    /// A TCP or UDP port number: Network.framework's `NWEndpoint.Port` (`Hashable`,
    /// `CustomDebugStringConvertible`, `ExpressibleByIntegerLiteral`, `RawRepresentable`, `Sendable`).
    public struct Port: Hashable, CustomDebugStringConvertible, ExpressibleByIntegerLiteral, RawRepresentable, Sendable {
        /// `UInt16` (`NWEndpoint.Port.RawValue`).
        public typealias RawValue = UInt16
        /// `UInt16` (`NWEndpoint.Port.IntegerLiteralType`): a literal outside 0...65535 does not compile.
        public typealias IntegerLiteralType = UInt16

        /// The port number (`NWEndpoint.Port.rawValue`).
        public var rawValue: UInt16

        /// Port 0: for a listener, "any free port", which the kernel picks (`NWEndpoint.Port.any`).
        public static let any: NWEndpoint.Port = 0
        /// Port 22 (`NWEndpoint.Port.ssh`).
        public static let ssh: NWEndpoint.Port = 22
        /// Port 25 (`NWEndpoint.Port.smtp`).
        public static let smtp: NWEndpoint.Port = 25
        /// Port 80 (`NWEndpoint.Port.http`).
        public static let http: NWEndpoint.Port = 80
        /// Port 110 (`NWEndpoint.Port.pop`).
        public static let pop: NWEndpoint.Port = 110
        /// Port 143 (`NWEndpoint.Port.imap`).
        public static let imap: NWEndpoint.Port = 143
        /// Port 443 (`NWEndpoint.Port.https`).
        public static let https: NWEndpoint.Port = 443
        /// Port 993 (`NWEndpoint.Port.imaps`).
        public static let imaps: NWEndpoint.Port = 993
        /// Port 1080 (`NWEndpoint.Port.socks`).
        public static let socks: NWEndpoint.Port = 1080

        /// A port from decimal text, "0" to "65535" (leading zeros allowed); nil for anything else,
        /// service names such as "http" included, as Apple documents (`NWEndpoint.Port.init?(_:)`).
        public init?(_ service: String) {
            guard !service.isEmpty, service.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = UInt16(service) else {
                return nil
            }
            rawValue = value
        }

        /// A port from a number; never nil, since every `UInt16` is a port (`NWEndpoint.Port.init?(rawValue:)`).
        public init?(rawValue: UInt16) {
            self.rawValue = rawValue
        }

        /// A port from an integer literal (`NWEndpoint.Port.init(integerLiteral:)`).
        public init(integerLiteral value: UInt16) {
            rawValue = value
        }

        /// The number in decimal: "80" (`NWEndpoint.Port.debugDescription`).
        public var debugDescription: String { String(rawValue) }
    }
}
