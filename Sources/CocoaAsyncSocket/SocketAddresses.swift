import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// `sockaddr` values as `Data`, as GCDAsyncSocket's `connectedAddress` and `lookupHost` give them.
enum SocketAddresses {
    /// The socket's peer (`getpeername`), or nil.
    static func peer(of fd: Int32) -> Data? { address(of: fd, peer: true) }

    /// The socket's own address (`getsockname`), or nil.
    static func local(of fd: Int32) -> Data? { address(of: fd, peer: false) }

    private static func address(of fd: Int32, peer: Bool) -> Data? {
        guard fd >= 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
            }
        }
        guard result == 0 else { return nil }
        return withUnsafeBytes(of: storage) { Data(bytes: $0.baseAddress!, count: min(Int(length), $0.count)) }
    }

    /// The address family, with an IPv4-mapped IPv6 address (a dual-stack listener's IPv4 peer)
    /// counted as IPv4, as GCDAsyncSocket's separate IPv4 listener reports it.
    static func family(_ address: Data) -> Int32 {
        guard address.count >= MemoryLayout<sa_family_t>.size else { return AF_UNSPEC }
        let family = Int32(address.withUnsafeBytes { $0.loadUnaligned(as: sa_family_t.self) })
        if family == AF_INET6, mappedIPv4(address) != nil { return AF_INET }
        return family
    }

    /// The IPv4 address inside an IPv4-mapped IPv6 one (`::ffff:a.b.c.d`).
    private static func mappedIPv4(_ address: Data) -> in_addr? {
        guard address.count >= MemoryLayout<sockaddr_in6>.size else { return nil }
        let v6 = address.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in6.self) }
        let bytes = withUnsafeBytes(of: v6.sin6_addr) { Array($0) }
        guard bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff else { return nil }
        var v4 = in_addr()
        withUnsafeMutableBytes(of: &v4) { $0.copyBytes(from: bytes[12..<16]) }
        return v4
    }

    /// The numeric host (`inet_ntop`'s text): dotted quad for IPv4 and IPv4-mapped, else IPv6 text.
    static func host(_ address: Data) -> String? {
        guard address.count >= MemoryLayout<sa_family_t>.size else { return nil }
        let family = Int32(address.withUnsafeBytes { $0.loadUnaligned(as: sa_family_t.self) })
        switch family {
        case AF_INET where address.count >= MemoryLayout<sockaddr_in>.size:
            return dottedQuad(address.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in.self) }.sin_addr)
        case AF_INET6 where address.count >= MemoryLayout<sockaddr_in6>.size:
            if let v4 = mappedIPv4(address) { return dottedQuad(v4) }
            var v6 = address.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in6.self) }.sin6_addr
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            guard inet_ntop(AF_INET6, &v6, &text, socklen_t(text.count)) != nil else { return nil }
            return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        default:
            return nil
        }
    }

    /// An IPv4 address as `inet_ntop` writes it ("127.0.0.1"), composed here: glibc's `inet_ntop`
    /// formats it with `sprintf`, a cost every connection's `socket:didConnectToHost:port:` paid
    /// (Benchmarks/results/syscalls.md).
    static func dottedQuad(_ address: in_addr) -> String {
        withUnsafeBytes(of: address.s_addr) { bytes in  // network order: the first byte is the first number
            "\(bytes[0]).\(bytes[1]).\(bytes[2]).\(bytes[3])"
        }
    }

    /// The port, host order; 0 for anything but IPv4 and IPv6.
    static func port(_ address: Data) -> UInt16 {
        guard address.count >= MemoryLayout<sa_family_t>.size else { return 0 }
        let family = Int32(address.withUnsafeBytes { $0.loadUnaligned(as: sa_family_t.self) })
        switch family {
        case AF_INET where address.count >= MemoryLayout<sockaddr_in>.size:
            return UInt16(bigEndian: address.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in.self) }.sin_port)
        case AF_INET6 where address.count >= MemoryLayout<sockaddr_in6>.size:
            return UInt16(bigEndian: address.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in6.self) }.sin6_port)
        default:
            return 0
        }
    }

    /// The path of a Unix-domain address, or nil.
    static func unixPath(_ address: Data) -> String? {
        guard address.count > MemoryLayout<sa_family_t>.size,
            Int32(address.withUnsafeBytes { $0.loadUnaligned(as: sa_family_t.self) }) == AF_UNIX
        else { return nil }
        let path = address.dropFirst(MemoryLayout<sa_family_t>.size).prefix { $0 != 0 }
        return String(decoding: path, as: UTF8.self)
    }

    /// An interface as GCDAsyncSocket's `viaInterface`/`onInterface` take it, without a port: an
    /// interface name (`lo`, `eth0`), a numeric address, `localhost` or `loopback`. Returns the numeric
    /// address to bind (IPv4 first, as GCDAsyncSocket prefers it), or nil if nothing matches.
    static func interfaceAddress(_ interface: String) -> String? {
        if interface == "localhost" || interface == "loopback" { return "127.0.0.1" }
        var probe4 = in_addr()
        var probe6 = in6_addr()
        if inet_pton(AF_INET, interface, &probe4) == 1 || inet_pton(AF_INET6, interface, &probe6) == 1 { return interface }
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return nil }
        defer { freeifaddrs(first) }
        var ipv6: String?
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let name = entry.pointee.ifa_name, String(cString: name) == interface, let address = entry.pointee.ifa_addr else {
                continue
            }
            let family = Int32(address.pointee.sa_family)
            let length = family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size
            guard family == AF_INET || family == AF_INET6 else { continue }
            let host = self.host(Data(bytes: address, count: length))
            if family == AF_INET { return host }
            if ipv6 == nil { ipv6 = host }
        }
        return ipv6
    }
}
