#if canImport(Glibc)
    import Glibc
#endif
import CSocketStreamsShims
import Foundation
import SocketStreams

/// How a scenario's connections reach the peer.
public enum StressTransport: String, Sendable, CaseIterable {
    /// Plain TCP to the peer server.
    case plain
    /// TLS: the library's client (trusting the server's self-signed certificate) against the peer
    /// server's own OpenSSL.
    case tls
    /// Plain TCP through microsocks (SOCKS5, no authentication) to the peer server.
    case socks5
}

/// The peers every scenario talks to: the ``PeerServer`` (plain and TLS ports) and, for the SOCKS5
/// transport, a microsocks process on 127.0.0.1 whose outgoing connections come from 127.0.0.2 (so
/// they cannot leave loopback). Everything listens on loopback, on ports the kernel picks.
public final class StressEnvironment: Sendable {
    public let server: PeerServer
    /// microsocks' port, if it was started.
    public let proxyPort: Int?
    /// microsocks' process id, if it was started.
    public let proxyProcess: pid_t?
    private let clientTLS: TLSSettings
    /// The peer server's self-signed certificate (DER), which the GCDAsyncSocket scenarios pin in
    /// their manual trust decision.
    public let certificateDER: Data
    /// The delegate queue the QueuedSocket scenarios share (as an application's sockets would).
    public let delegateQueue = DispatchQueue(label: "socketstreams-stress.delegate")

    /// Raises the soft open-file limit to the hard one, starts the peer server and, if `socks5` is
    /// among `transports`, microsocks.
    public init(transports: [StressTransport]) throws {
        Self.raiseFileLimit()
        let (certificate, key) = try TLSIdentity.makeSelfSignedPEM(commonName: "127.0.0.1")
        server = try PeerServer(certificatePEM: certificate, privateKeyPEM: key)
        let base64 = String(decoding: certificate, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        certificateDER = Data(base64Encoded: base64) ?? Data()
        var client = TLSSettings()
        client.trustRoots = [.pem(certificate)]
        clientTLS = client
        if transports.contains(.socks5) {
            do {
                let (process, port) = try Self.startMicrosocks()
                (proxyProcess, proxyPort) = (process, port)
            } catch {
                server.stop()
                throw error
            }
        } else {
            (proxyProcess, proxyPort) = (nil, nil)
        }
    }

    /// Stops microsocks and the peer server.
    public func stop() {
        if let proxyProcess {
            kill(proxyProcess, SIGKILL)
            var status: Int32 = 0
            while waitpid(proxyProcess, &status, 0) < 0 && errno == EINTR {}
        }
        server.stop()
    }

    /// The host and port a connection to `mode` asks for (the target, through the proxy too).
    public func target(_ mode: PeerServer.Mode, _ transport: StressTransport) -> (host: String, port: Int) {
        ("127.0.0.1", server.port(mode, tls: transport == .tls))
    }

    /// Sets the transport's properties on an unopened pair: TLS settings or the SOCKS5 proxy.
    public func configure(_ input: InputStream, _ output: OutputStream, for transport: StressTransport) {
        switch transport {
        case .plain: break
        case .tls: _ = input.setProperty(clientTLS, forKey: .tlsSettingsKey)
        case .socks5:
            _ = input.setProperty(ProxyConfiguration.socks5(host: "127.0.0.1", port: proxyPort ?? 0), forKey: .proxyConfigurationKey)
        }
    }

    /// An unopened pair to `mode` over `transport` (`createStreamPair(host:port:)`, then ``configure(_:_:for:)``).
    public func pair(_ mode: PeerServer.Mode, _ transport: StressTransport) -> (input: InputStream, output: OutputStream) {
        let (host, port) = target(mode, transport)
        let pair = createStreamPair(host: host, port: port)
        configure(pair.input, pair.output, for: transport)
        return (pair.input, pair.output)
    }

    /// A new, unopened AsyncConnection to `mode` over `transport`.
    public func connection(_ mode: PeerServer.Mode, _ transport: StressTransport) -> AsyncConnection {
        let pair = pair(mode, transport)
        return AsyncConnection(input: pair.input, output: pair.output)
    }

    /// What a leftover connection is waiting for, for a failure's message: every TCP socket in this
    /// network namespace with its state and queues (/proc/net/tcp), and where each of microsocks'
    /// threads is blocked (/proc/PID/task/TID/syscall: the call's number and arguments, and wchan).
    public func diagnostics() -> String {
        var lines = ["TCP sockets (/proc/net/tcp: local remote state tx_queue:rx_queue):"]
        let states = [
            "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT",
            "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
        ]
        let table = (try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8)) ?? ""
        for row in table.split(separator: "\n").dropFirst() {
            let fields = row.split(separator: " ")
            guard fields.count > 4 else { continue }
            let state = states[String(fields[3])] ?? String(fields[3])
            if state == "TIME_WAIT" || state == "LISTEN" { continue }
            lines.append("  \(Self.endpoint(fields[1])) \(Self.endpoint(fields[2])) \(state) \(fields[4])")
        }
        if let pid = proxyProcess {
            lines.append("microsocks (pid \(pid)) threads (syscall number and arguments, wchan):")
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            for task in tasks.sorted() {
                let call = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/syscall", encoding: .utf8)) ?? "?"
                let wchan = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/wchan", encoding: .utf8)) ?? "?"
                lines.append("  \(task): \(call.trimmingCharacters(in: .whitespacesAndNewlines)) (\(wchan))")
            }
        }
        return lines.joined(separator: "\n")
    }

    /// "0100007F:1F90" (/proc/net/tcp's little-endian IPv4 address and port) as "127.0.0.1:8080".
    private static func endpoint(_ field: Substring) -> String {
        let parts = field.split(separator: ":")
        guard parts.count == 2, let address = UInt32(parts[0], radix: 16), let port = Int(parts[1], radix: 16) else {
            return String(field)
        }
        let bytes = [address & 0xFF, address >> 8 & 0xFF, address >> 16 & 0xFF, address >> 24]
        return bytes.map(String.init).joined(separator: ".") + ":\(port)"
    }

    /// The open file descriptors of this process and what each is (/proc/self/fd).
    public static func openFileDescriptors() -> [Int: String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        var descriptors: [Int: String] = [:]
        for name in names {
            guard let fd = Int(name) else { continue }
            descriptors[fd] = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)")) ?? "?"
        }
        return descriptors
    }

    private static func raiseFileLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// Starts microsocks on a free port of 127.0.0.1 (`posix_spawn`, its output on /dev/null) and waits
    /// until it accepts connections: a connect every 2 ms, for at most 10 s, while it runs (it prints
    /// nothing when ready). Retried on another port if it exits (the port was taken in between).
    private static func startMicrosocks() throws -> (pid_t, Int) {
        let searched =
            (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
            + ["/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin"]
        guard let executable = searched.map({ $0 + "/microsocks" }).first(where: { access($0, X_OK) == 0 }) else {
            throw StressError("microsocks not found in PATH (apt-get install microsocks; Scripts/test installs it)")
        }
        for _ in 0..<5 {
            let port = try unusedPort()
            let arguments = [executable, "-i", "127.0.0.1", "-p", String(port), "-b", "127.0.0.2"]
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)  // a line per connection
            var pid: pid_t = 0
            let argv = arguments.map { strdup($0) } + [nil]
            defer { for argument in argv { free(argument) } }
            let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
            guard spawned == 0 else { throw StressError("posix_spawn \(executable): \(String(cString: strerror(spawned)))") }
            let deadline = Date(timeIntervalSinceNow: 10)
            var status: Int32 = 0
            while waitpid(pid, &status, WNOHANG) == 0 {
                if canConnect(port: port) { return (pid, port) }
                if Date() > deadline {
                    kill(pid, SIGKILL)
                    waitpid(pid, &status, 0)
                    throw StressError("microsocks did not accept connections on 127.0.0.1:\(port) within 10 s")
                }
                usleep(2_000)
            }
        }
        throw StressError("microsocks exited at once on each of 5 ports tried")
    }

    private static func unusedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw StressError("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { throw StressError("bind: \(String(cString: strerror(errno)))") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
