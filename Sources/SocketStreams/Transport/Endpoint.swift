/// What a pair connects to: the target the pair was created for, or the first hop actually dialled
/// (a proxy, once there is one). Stages use the target (the name a certificate must carry, the
/// address a proxy is asked for); error messages name it.
enum Endpoint: Sendable, Equatable {
    case host(String, port: Int)
    case unix(path: String)
    case native(fd: Int32)

    /// How errors name it: "example.com port 80", the socket path, or "native socket 7". The port is
    /// masked to 16 bits, as the pair's port property and the connect use it.
    var label: String {
        switch self {
        case .host(let name, let port): return "\(name) port \(port & 0xFFFF)"
        case .unix(let path): return path
        case .native(let fd): return "native socket \(fd)"
        }
    }
}
