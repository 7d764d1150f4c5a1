#if canImport(Glibc)
    import Glibc
#endif
import Foundation

/// A real third-party peer (python http.server, socat) run as a child process on loopback.
///
/// `start(readyPattern:)` launches it and waits, with a deadline, until its output matches the
/// readiness pattern (for example "Serving HTTP on ... port N"); the first capture group is
/// returned. `stop()` terminates it and waits for it to exit; it is idempotent and also runs
/// from deinit, and tests register it as a cleanup so a failing test never leaves a peer behind.
final class Peer: @unchecked Sendable {
    enum PeerError: Error, CustomStringConvertible {
        case notInstalled(String, hint: String)
        case exitedEarly(String, status: Int32, output: String)
        case notReady(String, output: String)

        var description: String {
            switch self {
            case let .notInstalled(tool, hint):
                return "\(tool) is not installed (\(hint))"
            case let .exitedEarly(name, status, output):
                return "\(name) exited with status \(status) before it was ready. Output:\n\(output)"
            case let .notReady(name, output):
                return "\(name) printed no readiness line in time. Output:\n\(output)"
            }
        }
    }

    let name: String
    private let process = Process()
    private let outputPipe = Pipe()
    private let condition = NSCondition()
    private var output = ""
    private var exited = false

    /// util-linux `setpriv --pdeathsig`: makes the kernel signal the peer if the test process
    /// dies without tearing down (a crash), so no orphaned peer outlives a crashed run.
    private static let setpriv = "/usr/bin/setpriv"

    init(name: String, executable: String, arguments: [String]) {
        self.name = name
        if FileManager.default.isExecutableFile(atPath: Self.setpriv) {
            process.executableURL = URL(fileURLWithPath: Self.setpriv)
            process.arguments = ["--pdeathsig", "TERM", "--", executable] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        }
        process.standardOutput = outputPipe
        process.standardError = outputPipe
        process.standardInput = FileHandle.nullDevice
    }

    deinit { stop() }

    /// Everything the peer printed so far (stdout and stderr merged).
    var printed: String {
        condition.lock()
        defer { condition.unlock() }
        return output
    }

    /// Waits until the peer has printed `text` (its output arrives asynchronously); false after `timeout`.
    func waitForOutput(containing text: String, timeout: TimeInterval = 5) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !output.contains(text) {
            if !condition.wait(until: deadline) { return output.contains(text) }
        }
        return true
    }

    /// Launches the peer and waits until its output matches `readyPattern` (a regular expression
    /// with one capture group). Returns the captured text.
    func start(readyPattern: String, timeout: TimeInterval = 10) throws -> String {
        let regex = try NSRegularExpression(pattern: readyPattern, options: [.anchorsMatchLines])
        // The output is read with blocking reads on a thread of its own, until the end (the peer's
        // exit), not with a FileHandle readabilityHandler: that is a dispatch source on the pipe, and
        // corelibs-foundation closes the pipe's fd as soon as it cancels the source, before libdispatch
        // has let go of it. When a child process was being spawned at that moment (tests start peers
        // all the time), the fd's file description outlived the close in the child, the epoll
        // registration stayed, and libdispatch's manager thread later crashed on the freed source
        // (_dispatch_event_loop_drain; seen in full runs during the proxy tests).
        let reader = outputPipe.fileHandleForReading
        Thread.detachNewThread { [weak self] in
            while true {
                let data = reader.availableData
                guard let self else { return }
                self.condition.lock()
                if !data.isEmpty { self.output += String(decoding: data, as: UTF8.self) }
                self.condition.broadcast()
                self.condition.unlock()
                if data.isEmpty { return }
            }
        }
        process.terminationHandler = { [weak self] _ in
            guard let self else { return }
            self.condition.lock()
            self.exited = true
            self.condition.broadcast()
            self.condition.unlock()
        }
        try process.run()

        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            let range = NSRange(output.startIndex..., in: output)
            if let match = regex.firstMatch(in: output, range: range),
                let captured = Range(match.range(at: 1), in: output)
            {
                return String(output[captured])
            }
            if exited {
                throw PeerError.exitedEarly(name, status: process.terminationStatus, output: output)
            }
            if !condition.wait(until: deadline) {
                throw PeerError.notReady(name, output: output)
            }
        }
    }

    /// Terminates the peer (SIGTERM, then SIGKILL after 3 s) and waits for it to exit.
    func stop() {
        guard process.processIdentifier > 0 else { return }
        if process.isRunning { process.terminate() }
        condition.lock()
        let deadline = Date(timeIntervalSinceNow: 3)
        while !exited && process.isRunning && condition.wait(until: deadline) {}
        condition.unlock()
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            // Not `waitUntilExit()`: corelibs-foundation sometimes misses a child's exit (the child
            // stays a zombie nobody reaps and `isRunning` stays true), and a full CI run then hung
            // here for good. Wait, with a deadline, for Foundation to see it or the kernel to show it
            // dead.
            let deadline = Date(timeIntervalSinceNow: 10)
            while process.isRunning, !Self.isDead(process.processIdentifier), Date() < deadline {
                condition.lock()
                _ = condition.wait(until: Date(timeIntervalSinceNow: 0.05))
                condition.unlock()
            }
        }
    }

    /// Whether `pid` has exited (a zombie, or gone), from /proc: true once the kernel says so, whether
    /// or not anybody has reaped it.
    private static func isDead(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
        guard let close = stat.lastIndex(of: ")") else { return true }
        let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first
        return state == "Z" || state == "X"
    }

    // MARK: locating tools

    /// The absolute path of `tool` found in PATH or the usual system directories.
    static func locate(_ tool: String, hint: String) throws -> String {
        var directories = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        directories += ["/usr/local/bin", "/usr/bin", "/bin"]
        for directory in directories where !directory.isEmpty {
            let candidate = directory + "/" + tool
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw PeerError.notInstalled(tool, hint: hint)
    }

    // MARK: the peers the suite uses

    /// `python3 -u -m http.server 0 --bind ADDR --directory DIR`; returns the peer and its port.
    static func httpServer(family: IPFamily, directory: URL) throws -> (peer: Peer, port: Int) {
        let python = try locate("python3", hint: "needs Python 3 for http.server")
        let peer = Peer(
            name: "http.server[\(family.loopback)]", executable: python,
            arguments: [
                "-u", "-m", "http.server", "0", "--bind", family.loopback,
                "--directory", directory.path,
            ])
        let port = try peer.start(readyPattern: #"Serving HTTP on \S+ port (\d+)"#)
        return (peer, try parsePort(port, peer: peer))
    }

    /// `socat -d -d TCP4-LISTEN:0,bind=127.0.0.1,reuseaddr,fork PIPE` (or TCP6 on [::1]): an echo server.
    static func socatEcho(family: IPFamily) throws -> (peer: Peer, port: Int) {
        let socat = try locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let address =
            family == .v4
            ? "TCP4-LISTEN:0,bind=127.0.0.1,reuseaddr,fork"
            : "TCP6-LISTEN:0,bind=[::1],reuseaddr,fork"
        let peer = Peer(
            name: "socat echo[\(family.loopback)]", executable: socat,
            arguments: ["-d", "-d", address, "PIPE"])
        // socat -d -d logs e.g. "N listening on AF=2 127.0.0.1:37645" or "AF=10 [0000:...:0001]:36957".
        let port = try peer.start(readyPattern: #"listening on AF=(?:2|10) .*:(\d+)\s*$"#)
        return (peer, try parsePort(port, peer: peer))
    }

    /// `socat -d -d UNIX-LISTEN:PATH,fork PIPE`: a Unix-domain echo server.
    static func socatUnixEcho(path: String) throws -> Peer {
        let socat = try locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let peer = Peer(
            name: "socat unix echo", executable: socat,
            arguments: ["-d", "-d", "UNIX-LISTEN:\(path),fork", "PIPE"])
        _ = try peer.start(readyPattern: #"(listening on AF=1)"#)
        return peer
    }

    /// `openssl s_server -accept 127.0.0.1:0 ARGUMENTS` (e.g. `-www`, `-cert`, `-key`, `-tls1_3`):
    /// a TLS server from OpenSSL itself; returns the peer and its port.
    static func opensslServer(_ arguments: [String], family: IPFamily = .v4) throws -> (peer: Peer, port: Int) {
        let openssl = try locate("openssl", hint: "apt-get install -y --no-install-recommends openssl")
        let accept = family == .v4 ? "127.0.0.1:0" : "[::1]:0"
        let peer = Peer(name: "openssl s_server", executable: openssl, arguments: ["s_server", "-accept", accept] + arguments)
        let port = try peer.start(readyPattern: #"^ACCEPT .*:(\d+)\s*$"#)
        return (peer, try parsePort(port, peer: peer))
    }

    /// stunnel4 in the foreground, terminating TLS on 127.0.0.1:`port` with `certificate`/`key` and
    /// forwarding the plaintext to 127.0.0.1:`target` (and nowhere else). stunnel cannot report an
    /// ephemeral port, so the caller picks a free one; readiness is its "Configuration successful" line.
    static func stunnel(port: Int, target: Int, certificate: String, key: String, directory: URL) throws -> Peer {
        let stunnel = try locate("stunnel4", hint: "apt-get install -y --no-install-recommends stunnel4")
        let configuration = directory.appendingPathComponent("stunnel.conf")
        try Data(
            """
            foreground = yes
            pid =
            debug = 5
            [tls]
            accept = 127.0.0.1:\(port)
            connect = 127.0.0.1:\(target)
            cert = \(certificate)
            key = \(key)

            """.utf8
        ).write(to: configuration)
        let peer = Peer(name: "stunnel4", executable: stunnel, arguments: [configuration.path])
        _ = try peer.start(readyPattern: #"(Configuration successful)"#)
        return peer
    }

    private static func parsePort(_ text: String, peer: Peer) throws -> Int {
        guard let port = Int(text), port > 0, port < 65536 else {
            throw PeerError.notReady(peer.name, output: peer.printed)
        }
        return port
    }
}
