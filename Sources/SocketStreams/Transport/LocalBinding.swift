// Choosing where an outgoing connection comes from: the local address (by number or by interface)
// and port given to bind(2) before connect(2), as GCDAsyncSocket's `viaInterface:` and curl's
// `--interface`/`--local-port` do. With several loopback source addresses a process can open more
// connections to one server than one address's ephemeral port range allows.

import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The local end of an outgoing connection: the IPv4 and/or IPv6 address and the port each attempt's
/// socket is bound to (`bind(2)`) before it connects. Set it on an unopened pair with
/// `Stream.PropertyKey.localBindingKey`; ``QueuedSocket`` takes it in `connect`'s
/// `configure`, and GCDAsyncSocket's `viaInterface:` makes one.
///
/// An attempt of a family the binding has no address for is bound only to the port (if one is given)
/// or not at all, as GCDAsyncSocket leaves a family without an interface address unbound. With a
/// port, `SO_REUSEADDR` is set. A bind failure (EADDRNOTAVAIL, EADDRINUSE) fails that attempt with
/// its `NSPOSIXErrorDomain` error.
public struct LocalBinding: Sendable, Hashable {
    /// The local IPv4 address (numeric), or nil.
    public var ipv4Address: String?
    /// The local IPv6 address (numeric), or nil.
    public var ipv6Address: String?
    /// The local port, 0 for one the kernel picks.
    public var port: Int

    /// A binding to a numeric address (IPv4 or IPv6; nil for the port alone) and port. Nil when
    /// `address` is not a numeric address or `port` is outside 0...65535.
    public init?(address: String?, port: Int = 0) {
        guard (0...65_535).contains(port) else { return nil }
        self.port = port
        guard let address else { return }
        var v4 = in_addr()
        var v6 = in6_addr()
        let bare = address.hasPrefix("[") && address.hasSuffix("]") ? String(address.dropFirst().dropLast()) : address
        if inet_pton(AF_INET, bare, &v4) == 1 {
            ipv4Address = bare
        } else if inet_pton(AF_INET6, bare, &v6) == 1 {
            ipv6Address = bare
        } else {
            return nil
        }
    }

    /// A binding to an interface as GCDAsyncSocket names one: an interface name (`lo`, `eth0`: its
    /// first IPv4 and first IPv6 address, from `getifaddrs(3)`), a numeric address, or `localhost` /
    /// `loopback` (127.0.0.1 and ::1). Nil when nothing matches or `port` is outside 0...65535.
    public init?(interface: String, port: Int = 0) {
        guard (0...65_535).contains(port) else { return nil }
        if interface == "localhost" || interface == "loopback" {
            self.init(ipv4Address: "127.0.0.1", ipv6Address: "::1", port: port)
            return
        }
        if let numeric = LocalBinding(address: interface, port: port) {
            self = numeric
            return
        }
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return nil }
        defer { freeifaddrs(first) }
        var found = LocalBinding(ipv4Address: nil, ipv6Address: nil, port: port)
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            cursor = entry.pointee.ifa_next
            guard let name = entry.pointee.ifa_name, String(cString: name) == interface, let address = entry.pointee.ifa_addr
            else { continue }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            switch Int32(address.pointee.sa_family) {
            case AF_INET where found.ipv4Address == nil:
                var v4 = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                if inet_ntop(AF_INET, &v4, &text, socklen_t(text.count)) != nil { found.ipv4Address = Self.string(text) }
            case AF_INET6 where found.ipv6Address == nil:
                var v6 = address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                // A link-local address needs a scope to be bound; skip it for a global one.
                if v6.__in6_u.__u6_addr8.0 == 0xFE, v6.__in6_u.__u6_addr8.1 & 0xC0 == 0x80 { continue }
                if inet_ntop(AF_INET6, &v6, &text, socklen_t(text.count)) != nil { found.ipv6Address = Self.string(text) }
            default:
                continue
            }
        }
        guard found.ipv4Address != nil || found.ipv6Address != nil else { return nil }
        self = found
    }

    /// A binding to these addresses (numeric, unchecked) and port.
    public init(ipv4Address: String?, ipv6Address: String?, port: Int = 0) {
        self.ipv4Address = ipv4Address
        self.ipv6Address = ipv6Address
        self.port = port
    }

    private static func string(_ text: [CChar]) -> String {
        String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Binds `fd`, a socket of `family`, as this binding says (nothing to do: no bind).
    func bind(_ fd: Int32, family: Int32) throws(SystemError) {
        let host = family == AF_INET ? ipv4Address : family == AF_INET6 ? ipv6Address : nil
        guard host != nil || port != 0 else { return }
        guard
            let address = host.flatMap({ SocketAddress(numericHost: $0, port: port) }) ?? SocketAddress.anyOrNil(family: family, port: port)
        else { return }
        if port != 0 { try Posix.setOption(fd, level: SOL_SOCKET, name: SO_REUSEADDR, value: 1) }
        try Posix.bind(fd, to: address)
    }
}

extension SocketAddress {
    /// The wildcard address of an IP family, nil for any other.
    static func anyOrNil(family: Int32, port: Int) -> SocketAddress? {
        family == AF_INET || family == AF_INET6 ? any(family: family, port: port) : nil
    }
}
