import CSocketStreamsShims
import Glibc

/// An IPv4, IPv6 or Unix-domain socket address with its length.
///
/// An IPv4 or IPv6 address is held inline in the room of a `sockaddr_in6` (28 bytes), so the value is
/// 36 bytes of plain data, copied without a `memcpy` call and destroyed without a release: a datagram's
/// destination and sender are copied several times on their way, and every datagram socket and
/// connection keeps some. A longer address (a Unix path's `sockaddr_un`) is kept in
/// `LongSocketAddresses` and named by its index.
package struct SocketAddress: Sendable, CustomStringConvertible, Hashable {
    /// An IPv4 (`sockaddr_in`) or IPv6 address, or a short Unix one; for a longer one, only its family.
    private var inet = sockaddr_in6()
    private var length: socklen_t = 0
    /// A longer address's index in `LongSocketAddresses`, plus one (0: none).
    private var long: UInt32 = 0

    package init() {}

    /// Copies a `sockaddr` returned by `getaddrinfo(3)` or `accept(2)`.
    package init(_ pointer: UnsafePointer<sockaddr>, length: socklen_t) {
        self.init(UnsafeRawPointer(pointer), length: Int(length))
    }

    private init(_ bytes: UnsafeRawPointer, length: Int) {
        let length = min(length, MemoryLayout<sockaddr_storage>.size)
        self.length = socklen_t(length)
        if length <= MemoryLayout<sockaddr_in6>.size {
            withUnsafeMutableBytes(of: &inet) { $0.copyMemory(from: UnsafeRawBufferPointer(start: bytes, count: length)) }
        } else {
            inet.sin6_family = bytes.loadUnaligned(as: sa_family_t.self)
            long = LongSocketAddresses.intern(UnsafeRawBufferPointer(start: bytes, count: length))
        }
    }

    /// Parses a numeric IPv4 or IPv6 address (`inet_pton(3)`); nil if `host` is not one (a name
    /// with a control byte is never one: C would stop reading it at a NUL), or if `port` is outside
    /// 0...65535 (never masked to 16 bits: callers refuse such a port first, see `PortNumber`).
    package init?(numericHost host: String, port: Int) {
        guard !Resolver.hasControlCharacter(host), let port16 = UInt16(exactly: port)?.bigEndian else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port16
            sin.sin_addr = v4
            self.init(copying: &sin)
            return
        }
        var v6 = in6_addr()
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if inet_pton(AF_INET6, bare, &v6) == 1 {
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port16
            sin6.sin6_addr = v6
            self.init(copying: &sin6)
            return
        }
        return nil
    }

    /// The wildcard address of a family (`INADDR_ANY` / `in6addr_any`).
    package static func any(family: Int32, port: Int) -> SocketAddress {
        SocketAddress(numericHost: family == AF_INET6 ? "::" : "0.0.0.0", port: port)!
    }

    /// A Unix-domain address; nil if the path does not fit `sun_path`.
    init?(unixPath path: String) {
        var sun = sockaddr_un()
        sun.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: sun.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &sun.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let length = MemoryLayout<sa_family_t>.size + bytes.count + 1
        self = withUnsafeBytes(of: &sun) { SocketAddress($0.baseAddress!, length: length) }
    }

    /// An IPv4 or IPv6 `sockaddr` as bytes (a `sockaddr_in` or `sockaddr_in6`, as GCDAsyncUdpSocket's
    /// addresses are `Data`); nil for any other family or a length too short for its family.
    package init?(sockaddrBytes bytes: UnsafeRawBufferPointer) {
        guard bytes.count >= MemoryLayout<sa_family_t>.size, let base = bytes.baseAddress else { return nil }
        let family = Int32(base.loadUnaligned(as: sa_family_t.self))
        let needed: Int
        switch family {
        case AF_INET: needed = MemoryLayout<sockaddr_in>.size
        case AF_INET6: needed = MemoryLayout<sockaddr_in6>.size
        default: return nil
        }
        guard bytes.count >= needed else { return nil }
        self.init(base, length: needed)
    }

    /// The address's `sockaddr` bytes (its family's structure, `length` bytes).
    package var sockaddrBytes: [UInt8] {
        withSockAddr { pointer, length in Array(UnsafeRawBufferPointer(start: pointer, count: Int(length))) }
    }

    /// The same address with another port.
    package func withPort(_ port: Int) -> SocketAddress {
        var copy = self
        let value = UInt16(truncatingIfNeeded: port).bigEndian
        switch family {
        case AF_INET, AF_INET6: copy.inet.sin6_port = value  // `sin_port` and `sin6_port` share their offset
        default: break
        }
        return copy
    }

    /// Same family, address and port (IPv6: and scope; Unix: path); the padding is not compared.
    package static func == (lhs: SocketAddress, rhs: SocketAddress) -> Bool {
        guard lhs.family == rhs.family else { return false }
        switch lhs.family {
        case AF_INET:
            return lhs.inet.sin6_port == rhs.inet.sin6_port && lhs.ipv4.sin_addr.s_addr == rhs.ipv4.sin_addr.s_addr
        case AF_INET6:
            return lhs.inet.sin6_port == rhs.inet.sin6_port && lhs.inet.sin6_scope_id == rhs.inet.sin6_scope_id
                && withUnsafeBytes(of: lhs.inet.sin6_addr) { left in withUnsafeBytes(of: rhs.inet.sin6_addr) { left.elementsEqual($0) } }
        default:
            return lhs.sockaddrBytes == rhs.sockaddrBytes
        }
    }

    /// What `==` compares: family, port and address (IPv6: and scope; otherwise the `sockaddr` bytes).
    package func hash(into hasher: inout Hasher) {
        hasher.combine(family)
        switch family {
        case AF_INET:
            hasher.combine(inet.sin6_port)
            hasher.combine(ipv4.sin_addr.s_addr)
        case AF_INET6:
            hasher.combine(inet.sin6_port)
            hasher.combine(inet.sin6_scope_id)
            withUnsafeBytes(of: inet.sin6_addr) { hasher.combine(bytes: $0) }
        default:
            hasher.combine(sockaddrBytes)
        }
    }

    /// The inline address read as a `sockaddr_in` (for an IPv4 one).
    private var ipv4: sockaddr_in {
        withUnsafeBytes(of: inet) { $0.load(as: sockaddr_in.self) }
    }

    private init<T>(copying value: inout T) {
        self = withUnsafeBytes(of: &value) { SocketAddress($0.baseAddress!, length: MemoryLayout<T>.size) }
    }

    /// `AF_INET`, `AF_INET6` or `AF_UNIX` (`AF_UNSPEC` for an empty address).
    package var family: Int32 { Int32(inet.sin6_family) }

    /// The port in host byte order (0 for Unix addresses).
    package var port: Int {
        switch family {
        case AF_INET, AF_INET6: return Int(UInt16(bigEndian: inet.sin6_port))
        default: return 0
        }
    }

    /// The address in network byte order: 4 bytes for IPv4, 16 for IPv6, none otherwise.
    package var addressBytes: [UInt8] {
        switch family {
        case AF_INET: return withUnsafeBytes(of: ipv4.sin_addr) { Array($0) }
        case AF_INET6: return withUnsafeBytes(of: inet.sin6_addr) { Array($0) }
        default: return []
        }
    }

    /// The numeric host (`inet_ntop(3)`) or the Unix path.
    package var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch family {
        case AF_INET:
            var addr = ipv4.sin_addr
            inet_ntop(AF_INET, &addr, &buffer, socklen_t(buffer.count))
        case AF_INET6:
            var addr = inet.sin6_addr
            inet_ntop(AF_INET6, &addr, &buffer, socklen_t(buffer.count))
        case AF_UNIX:
            return withSockAddr { pointer, length in
                let offset = MemoryLayout<sa_family_t>.size
                guard Int(length) > offset else { return "" }
                let bytes = UnsafeRawBufferPointer(start: pointer, count: Int(length))[offset...].prefix { $0 != 0 }
                return String(decoding: bytes, as: UTF8.self)
            }
        default:
            return "?"
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    package var description: String {
        switch family {
        case AF_INET6: return "[\(host)]:\(port)"
        case AF_UNIX: return host
        default: return "\(host):\(port)"
        }
    }

    package func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        if long != 0 {
            let storage = LongSocketAddresses.storage(long)
            return withUnsafeBytes(of: storage) { raw in body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
        }
        return withUnsafeBytes(of: inet) { raw in body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }

    /// Runs `body` with room for any address and its length, then holds what it left there
    /// (`accept(2)`, `getsockname(2)`).
    package mutating func withMutableSockAddr<R>(_ body: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> R) -> R {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutableBytes(of: &storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), &length)
        }
        self = withUnsafeBytes(of: &storage) { SocketAddress($0.baseAddress!, length: Int(length)) }
        return result
    }
}

/// The socket addresses longer than a `sockaddr_in6` (Unix paths) the process has met, each kept once
/// for the process's life and named by its index, so that `SocketAddress` stays plain data. Such
/// addresses are few (the paths a program listens on or connects to; a connecting client's own address
/// is unnamed, and Linux's automatic abstract names fit inline), so the table stays small.
enum LongSocketAddresses {
    private struct Table {
        var addresses: [sockaddr_storage] = []
        var indices: [[UInt8]: UInt32] = [:]
    }

    private static let table = Guarded(Table())

    /// The index (plus one) of `bytes`, added if new.
    static func intern(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        let key = Array(bytes)
        return table.withLock { table in
            if let index = table.indices[key] { return index }
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) }
            table.addresses.append(storage)
            let index = UInt32(table.addresses.count)
            table.indices[key] = index
            return index
        }
    }

    /// The address at `index` (plus one).
    static func storage(_ index: UInt32) -> sockaddr_storage {
        table.withLock { $0.addresses[Int(index) - 1] }
    }
}

/// A failed `getaddrinfo(3)`: the `EAI_*` code (glibc values, e.g. `EAI_NONAME` = -2) and, for
/// `EAI_SYSTEM`, the errno.
struct ResolutionError: Error {
    var code: Int32
    var systemErrno: Int32
    /// Why the name was refused before `getaddrinfo` saw it, if it was.
    var refusal: String? = nil
    var message: String { refusal ?? String(cString: gai_strerror(code)) }
}

enum Resolver {
    /// Blocking `getaddrinfo(3)` for TCP addresses of one family (`AF_INET`, `AF_INET6` or `AF_UNSPEC`).
    /// Call it off any thread that delivers events.
    ///
    /// A name with a control byte (NUL, CR, LF, DEL, …) fails with `EAI_NONAME` without a lookup:
    /// `getaddrinfo` would stop at a NUL and resolve a different name than the caller gave, and no
    /// host name (RFC 1123) or address literal contains one. A name with non-ASCII labels is looked up
    /// by its A-labels (IDNA), and one that has none fails with `EAI_NONAME` and the reason.
    static func resolve(host name: String, port: Int, family: Int32, passive: Bool = false) -> Result<[SocketAddress], ResolutionError> {
        guard PortNumber.isValid(port) else {
            return .failure(ResolutionError(code: EAI_SERVICE, systemErrno: 0, refusal: "the port is not in 0...65535"))
        }
        if hasControlCharacter(name) {
            return .failure(
                ResolutionError(
                    code: EAI_NONAME, systemErrno: 0,
                    refusal: "the name contains a control character"))
        }
        let host: String
        switch IDNA.toASCII(name) {
        case .success(let ascii): host = ascii
        case .failure(let failure):
            return .failure(
                ResolutionError(code: EAI_NONAME, systemErrno: 0, refusal: "not a valid internationalised host name: \(failure.reason)"))
        }
        var hints = addrinfo()
        hints.ai_family = family
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        hints.ai_flags = passive ? AI_PASSIVE : 0  // no AI_ADDRCONFIG: it hides ::1 on loopback-only hosts
        let list: UnsafeMutablePointer<addrinfo>?
        switch Posix.addressInfo(host, String(port), &hints) {
        case .success(let found): list = found
        case .failure(let error): return .failure(ResolutionError(code: error.code, systemErrno: error.systemErrno))
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var cursor = list
        while let info = cursor {
            if let sa = info.pointee.ai_addr {
                addresses.append(SocketAddress(sa, length: info.pointee.ai_addrlen))
            }
            cursor = info.pointee.ai_next
        }
        if addresses.isEmpty { return .failure(ResolutionError(code: cssh_eai_nodata(), systemErrno: 0)) }
        return .success(addresses)
    }

    /// Whether `name` holds a C0 control byte or DEL (a NUL among them).
    static func hasControlCharacter(_ name: String) -> Bool {
        // Over the contiguous UTF-8 of a native string: the generic `contains` over the view costs
        // far more, even for a short name such as "127.0.0.1", and this runs once or twice a connection.
        let isControl = { (byte: UInt8) in byte < 0x20 || byte == 0x7F }
        return name.utf8.withContiguousStorageIfAvailable { $0.contains(where: isControl) } ?? name.utf8.contains(where: isControl)
    }
}
