// Network.framework's IP address values. Text is parsed as glibc's `inet_pton(3)` parses it (the tests
// hold the two equal on every byte boundary and on random strings), plus, for IPv6, the `%scope` suffix
// of a scoped address (RFC 4007 §11): an interface name or index the system knows. The printed form is
// `inet_ntop(3)`'s, with the scope's interface name after a `%`.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What IPv4 and IPv6 addresses share: Network.framework's `IPAddress` protocol.
public protocol IPAddress {
    /// An address from its bytes in network order (4 for IPv4, 16 for IPv6), scoped to `interface`;
    /// nil if `rawValue` has another length (`IPAddress.init(_:_:)`).
    init?(_ rawValue: Data, _ interface: NWInterface?)
    /// The address's bytes in network order (`IPAddress.rawValue`).
    var rawValue: Data { get }
    /// The interface the address is scoped to, if any (`IPAddress.interface`).
    var interface: NWInterface? { get }
    /// Whether this is a loopback address (`IPAddress.isLoopback`).
    var isLoopback: Bool { get }
    /// Whether this address is in a link-local range (`IPAddress.isLinkLocal`).
    var isLinkLocal: Bool { get }
    /// Whether this is a multicast address (`IPAddress.isMulticast`).
    var isMulticast: Bool { get }
}

/// An IPv4 address, optionally scoped to an interface: Network.framework's `IPv4Address` (`Hashable`,
/// `CustomDebugStringConvertible`, `Sendable`, `IPAddress`).
public struct IPv4Address: IPAddress, Hashable, CustomDebugStringConvertible, Sendable {
    /// The four bytes, first byte first.
    private let bytes: (UInt8, UInt8, UInt8, UInt8)
    /// The interface the address is scoped to (`IPv4Address.interface`).
    public let interface: NWInterface?

    private init(_ bytes: (UInt8, UInt8, UInt8, UInt8), interface: NWInterface? = nil) {
        self.bytes = bytes
        self.interface = interface
    }

    /// The unspecified address, 0.0.0.0 (`IPv4Address.any`).
    public static let any = IPv4Address((0, 0, 0, 0))
    /// The limited broadcast address, 255.255.255.255 (`IPv4Address.broadcast`).
    public static let broadcast = IPv4Address((255, 255, 255, 255))
    /// The loopback address, 127.0.0.1 (`IPv4Address.loopback`).
    public static let loopback = IPv4Address((127, 0, 0, 1))
    /// The all-hosts multicast group, 224.0.0.1 (`IPv4Address.allHostsGroup`).
    public static let allHostsGroup = IPv4Address((224, 0, 0, 1))
    /// The all-routers multicast group, 224.0.0.2 (`IPv4Address.allRoutersGroup`).
    public static let allRoutersGroup = IPv4Address((224, 0, 0, 2))
    /// The IGMPv3 reports multicast group, 224.0.0.22 (`IPv4Address.allReportsGroup`).
    public static let allReportsGroup = IPv4Address((224, 0, 0, 22))
    /// The multicast DNS group, 224.0.0.251 (`IPv4Address.mdnsGroup`).
    public static let mdnsGroup = IPv4Address((224, 0, 0, 251))

    /// Parses dotted-quad text, as `inet_pton(AF_INET)` does (exactly four decimal parts, each 0...255,
    /// no leading zeros, no spaces); nil for anything else, a string with a NUL byte included
    /// (`IPv4Address.init?(_:)`).
    public init?(_ string: String) {
        guard let bytes = AddressText.parse(string, family: AF_INET, count: 4) else { return nil }
        self.init((bytes[0], bytes[1], bytes[2], bytes[3]))
    }

    /// An address from its four bytes in network order, scoped to `interface`; nil unless `rawValue`
    /// holds exactly four bytes (`IPv4Address.init?(_:_:)`).
    public init?(_ rawValue: Data, _ interface: NWInterface? = nil) {
        guard rawValue.count == 4 else { return nil }
        let b = Array(rawValue)
        self.init((b[0], b[1], b[2], b[3]), interface: interface)
    }

    /// The four bytes in network order (`IPv4Address.rawValue`).
    public var rawValue: Data { Data([bytes.0, bytes.1, bytes.2, bytes.3]) }

    /// 127.0.0.0/8 (`IPv4Address.isLoopback`).
    public var isLoopback: Bool { bytes.0 == 127 }
    /// 169.254.0.0/16 (`IPv4Address.isLinkLocal`).
    public var isLinkLocal: Bool { bytes.0 == 169 && bytes.1 == 254 }
    /// 224.0.0.0/4 (`IPv4Address.isMulticast`).
    public var isMulticast: Bool { bytes.0 & 0xF0 == 0xE0 }

    /// The dotted quad, `%` and the interface's name after it when the address is scoped:
    /// "127.0.0.1", "169.254.1.1%eth0" (`IPv4Address.debugDescription`).
    public var debugDescription: String {
        let text = "\(bytes.0).\(bytes.1).\(bytes.2).\(bytes.3)"
        return interface.map { text + "%" + $0.name } ?? text
    }

    /// Equal when the bytes and the interface are (`IPv4Address.==`).
    public static func == (lhs: IPv4Address, rhs: IPv4Address) -> Bool {
        lhs.bytes == rhs.bytes && lhs.interface == rhs.interface
    }

    /// Hashes the bytes and the interface.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(rawValue)
        hasher.combine(interface)
    }
}

/// An IPv6 address, optionally scoped to an interface: Network.framework's `IPv6Address` (`Hashable`,
/// `CustomDebugStringConvertible`, `Sendable`, `IPAddress`).
public struct IPv6Address: IPAddress, Hashable, CustomDebugStringConvertible, Sendable {
    /// A multicast address's scope, the low four bits of its second byte (RFC 4291 §2.7):
    /// Network.framework's `IPv6Address.Scope`.
    public enum Scope: UInt8, Hashable, Sendable {
        /// Interface-local, 1 (`IPv6Address.Scope.nodeLocal`).
        case nodeLocal = 1
        /// Link-local, 2 (`IPv6Address.Scope.linkLocal`).
        case linkLocal = 2
        /// Site-local, 5 (`IPv6Address.Scope.siteLocal`).
        case siteLocal = 5
        /// Organization-local, 8 (`IPv6Address.Scope.organizationLocal`).
        case organizationLocal = 8
        /// Global, 14 (`IPv6Address.Scope.global`).
        case global = 14
    }

    /// The sixteen bytes in network order.
    private let bytes: [UInt8]
    /// The interface the address is scoped to, from a `%scope` suffix or given with the bytes
    /// (`IPv6Address.interface`).
    public let interface: NWInterface?

    private init(bytes: [UInt8], interface: NWInterface? = nil) {
        self.bytes = bytes
        self.interface = interface
    }

    private static func make(_ text: String) -> IPv6Address {
        IPv6Address(bytes: AddressText.parse(text, family: AF_INET6, count: 16)!)
    }

    /// The unspecified address, `::` (`IPv6Address.any`).
    public static let any = make("::")
    /// `::`, as Apple declares it: IPv6 has no broadcast, and Network.framework's
    /// `IPv6Address.broadcast` is the unspecified address.
    public static let broadcast = make("::")
    /// The loopback address, `::1` (`IPv6Address.loopback`).
    public static let loopback = make("::1")
    /// All nodes, interface-local, `ff01::1` (`IPv6Address.nodeLocalNodes`).
    public static let nodeLocalNodes = make("ff01::1")
    /// All nodes, link-local, `ff02::1` (`IPv6Address.linkLocalNodes`).
    public static let linkLocalNodes = make("ff02::1")
    /// All routers, link-local, `ff02::2` (`IPv6Address.linkLocalRouters`).
    public static let linkLocalRouters = make("ff02::2")

    /// Parses IPv6 text as `inet_pton(AF_INET6)` does (`::` compression, a trailing dotted quad), with an
    /// optional `%scope` naming an interface by name or index ("fe80::1%lo", "fe80::1%1"); nil for
    /// anything else, for a scope the system has no interface for, and for a string with a NUL byte
    /// (`IPv6Address.init?(_:)`).
    public init?(_ string: String) {
        var text = Substring(string)
        var interface: NWInterface?
        if let percent = text.firstIndex(of: "%") {
            let scope = String(text[text.index(after: percent)...])
            text = text[..<percent]
            if let index = Int(scope), scope.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
                interface = NWInterface(systemIndex: index)
            } else {
                interface = NWInterface(systemName: scope)
            }
            guard interface != nil else { return nil }
        }
        guard let bytes = AddressText.parse(String(text), family: AF_INET6, count: 16) else { return nil }
        self.init(bytes: bytes, interface: interface)
    }

    /// An address from its sixteen bytes in network order, scoped to `interface`; nil unless `rawValue`
    /// holds exactly sixteen bytes (`IPv6Address.init?(_:_:)`).
    public init?(_ rawValue: Data, _ interface: NWInterface? = nil) {
        guard rawValue.count == 16 else { return nil }
        self.init(bytes: Array(rawValue), interface: interface)
    }

    /// The sixteen bytes in network order (`IPv6Address.rawValue`).
    public var rawValue: Data { Data(bytes) }

    /// `::` (`IPv6Address.isAny`).
    public var isAny: Bool { bytes.allSatisfy { $0 == 0 } }
    /// `::1` (`IPv6Address.isLoopback`).
    public var isLoopback: Bool { bytes[0..<15].allSatisfy { $0 == 0 } && bytes[15] == 1 }
    /// `::a.b.c.d`, the deprecated IPv4-compatible form: 96 zero bits, then an IPv4 address other than
    /// 0.0.0.0 and 0.0.0.1 (`IN6_IS_ADDR_V4COMPAT`); Apple's spelling of the name
    /// (`IPv6Address.isIPv4Compatabile`).
    public var isIPv4Compatabile: Bool {
        bytes[0..<12].allSatisfy { $0 == 0 } && !(bytes[12..<15].allSatisfy { $0 == 0 } && bytes[15] <= 1)
    }
    /// `::ffff:a.b.c.d` (`IPv6Address.isIPv4Mapped`).
    public var isIPv4Mapped: Bool { bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF }
    /// The IPv4 address inside an IPv4-mapped or IPv4-compatible address, nil for any other
    /// (`IPv6Address.asIPv4`).
    public var asIPv4: IPv4Address? {
        guard isIPv4Mapped || isIPv4Compatabile else { return nil }
        return IPv4Address(Data(bytes[12..<16]), interface)
    }
    /// 2002::/16, a 6to4 address (`IPv6Address.is6to4`).
    public var is6to4: Bool { bytes[0] == 0x20 && bytes[1] == 0x02 }
    /// fe80::/10 (`IPv6Address.isLinkLocal`).
    public var isLinkLocal: Bool { bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80 }
    /// ff00::/8 (`IPv6Address.isMulticast`).
    public var isMulticast: Bool { bytes[0] == 0xFF }
    /// fc00::/7, a unique local address (RFC 4193; `IPv6Address.isUniqueLocal`).
    public var isUniqueLocal: Bool { bytes[0] & 0xFE == 0xFC }
    /// A multicast address's scope, nil for a unicast address or a scope value RFC 4291 leaves
    /// unassigned (`IPv6Address.multicastScope`).
    public var multicastScope: Scope? { isMulticast ? Scope(rawValue: bytes[1] & 0x0F) : nil }

    /// `inet_ntop(3)`'s text, `%` and the interface's name after it when the address is scoped:
    /// "::1", "fe80::1%lo" (`IPv6Address.debugDescription`).
    public var debugDescription: String {
        let text = AddressText.format(bytes, family: AF_INET6)
        return interface.map { text + "%" + $0.name } ?? text
    }
}

/// Address text to bytes and back, through glibc.
enum AddressText {
    /// `inet_pton(3)` of `text`, or nil; a string with a NUL byte is never an address (C would stop
    /// reading at the NUL).
    static func parse(_ text: String, family: Int32, count: Int) -> [UInt8]? {
        guard !text.utf8.contains(0) else { return nil }
        var bytes = [UInt8](repeating: 0, count: count)
        let parsed = bytes.withUnsafeMutableBytes { inet_pton(family, text, $0.baseAddress) }
        return parsed == 1 ? bytes : nil
    }

    /// `inet_ntop(3)` of `bytes`.
    static func format(_ bytes: [UInt8], family: Int32) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        _ = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
