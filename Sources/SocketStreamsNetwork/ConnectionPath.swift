// A ready connection's path: the interface its socket's local address belongs to, the families it can
// use, and its two endpoints, read from the socket (`getsockname`, `getpeername`, `getifaddrs`).

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

extension NWPath {
    /// The path of a connected socket: satisfied, over the interface holding its local address (none for
    /// a Unix socket), with its local and remote endpoints.
    static func connection(socket fd: Int32) -> NWPath {
        let local = Posix.boundAddress(of: fd)
        let remote = Posix.connectedAddress(of: fd)
        let family = local?.family ?? AF_UNSPEC
        let interface = local.flatMap { interfaceName(holding: $0) }.flatMap { NWInterface(systemName: $0) }
        return NWPath(
            status: .satisfied, availableInterfaces: interface.map { [$0] } ?? [], isExpensive: interface?.type == .cellular,
            supportsIPv4: family == AF_INET, supportsIPv6: family == AF_INET6, supportsDNS: family != AF_UNIX,
            localEndpoint: local.map(endpoint), remoteEndpoint: remote.map(endpoint))
    }

    /// `address` as an endpoint: a host and port, or a Unix path.
    static func endpoint(_ address: SocketAddress) -> NWEndpoint {
        if address.family == AF_UNIX { return .unix(path: address.host) }
        return .hostPort(host: NWEndpoint.Host(address.host), port: NWEndpoint.Port(rawValue: UInt16(clamping: address.port)) ?? .any)
    }

    /// The interface whose addresses include `address`'s host (`getifaddrs(3)`).
    private static func interfaceName(holding address: SocketAddress) -> String? {
        let wanted = address.addressBytes
        guard !wanted.isEmpty else { return nil }
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return nil }
        defer { freeifaddrs(list) }
        var entry = list
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            guard let pointer = current.pointee.ifa_addr, Int32(pointer.pointee.sa_family) == address.family else { continue }
            let length = socklen_t(address.family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
            if SocketAddress(pointer, length: length).addressBytes == wanted { return String(cString: current.pointee.ifa_name) }
        }
        return nil
    }
}
