import Glibc

/// What a pair connects to: the target the pair was created for, or the first hop actually dialled
/// (a proxy, once there is one). Stages use the target (the name a certificate must carry, the
/// address a proxy is asked for); error messages name it.
enum Endpoint: Sendable, Equatable {
    case host(String, port: Int)
    case unix(path: String)
    /// A connected socket the pair adopts; `peer` is its remote address when the package accepted it
    /// (`StreamListener`), nil for `createStreamPair(nativeSocket:)`.
    case native(fd: Int32, peer: PeerAddress? = nil)

    /// How errors name it: "example.com port 80", the socket path, an accepted socket's peer
    /// ("127.0.0.1:54321", "[::1]:54321"), or "native socket 7". A port outside 0...65535 is named
    /// as given, and says so: such a pair fails at open (`PortNumber`).
    var label: String {
        switch self {
        case .host(let name, let port): return "\(name) \(PortNumber.label(port))"
        case .unix(let path): return path
        case .native(_, let peer?): return peer.label
        case .native(let fd, nil): return "native socket \(fd)"
        }
    }
}

/// The remote end of an accepted TCP connection, from `accept4(2)`: its numeric address
/// (`inet_ntop(3)`) and port. A class, so `Endpoint` stays 25 bytes (as a struct it made every
/// `Connection` 8 bytes bigger, past its malloc chunk).
final class PeerAddress: Sendable, Equatable {
    /// "127.0.0.1" or "::1".
    let host: String
    let port: Int

    /// Nil for an address that is not IPv4 or IPv6 (a Unix-domain peer is unnamed).
    init?(_ address: SocketAddress) {
        guard address.family == AF_INET || address.family == AF_INET6 else { return nil }
        host = address.host
        port = address.port
    }

    /// "127.0.0.1:54321", "[::1]:54321".
    var label: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    static func == (lhs: PeerAddress, rhs: PeerAddress) -> Bool { lhs.host == rhs.host && lhs.port == rhs.port }
}
