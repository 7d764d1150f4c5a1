/// What a pair connects to: the target the pair was created for, or the first hop actually dialled
/// (a proxy, once there is one). Stages use the target (the name a certificate must carry, the
/// address a proxy is asked for); error messages name it.
enum Endpoint: Sendable, Equatable {
    case host(String, port: Int)
    case unix(path: String)
    case native(fd: Int32)

    /// How errors name it: "example.com port 80", the socket path, or "native socket 7". A port
    /// outside 0...65535 is named as given, and says so: such a pair fails at open (`PortNumber`).
    var label: String {
        switch self {
        case .host(let name, let port): return "\(name) \(PortNumber.label(port))"
        case .unix(let path): return path
        case .native(let fd): return "native socket \(fd)"
        }
    }
}
