#if canImport(Glibc)
    import Glibc
#endif
import Foundation

/// A real third-party peer (python http.server, socat, openssl s_server...) run as a child process on
/// loopback: shared by the test targets (SocketStreamsTestSupport for SocketStreamsTests, StreamGetCoreTests
/// and GuideTests; CocoaAsyncSocketTests), each of which adds the peers it uses in an extension.
///
/// `start(readyPattern:)` launches it and waits, with a deadline, until its output matches the
/// readiness pattern (for example "Serving HTTP on ... port N"); the first capture group is
/// returned. `stop()` terminates it and waits for it to exit; it is idempotent and also runs
/// from deinit, and tests register it as a cleanup so a failing test never leaves a peer behind.
// @unchecked Sendable: `output` and `exited` are reached only under `condition`; the `Process` is
// configured in init and then only started and signalled (Foundation locks its own state).
public final class Peer: @unchecked Sendable {
    public enum PeerError: Error, CustomStringConvertible {
        case notInstalled(String, hint: String)
        case exitedEarly(String, status: Int32, output: String)
        case notReady(String, output: String)

        public var description: String {
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

    public let name: String
    private let process = Process()
    private let outputPipe = Pipe()
    private let condition = NSCondition()
    private var output = ""
    private var exited = false

    /// util-linux `setpriv --pdeathsig`: makes the kernel signal the peer if the test process
    /// dies without tearing down (a crash), so no orphaned peer outlives a crashed run.
    private static let setpriv = "/usr/bin/setpriv"

    public init(name: String, executable: String, arguments: [String]) {
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
    public var printed: String {
        condition.lock()
        defer { condition.unlock() }
        return output
    }

    /// Waits until the peer has printed `text` (its output arrives asynchronously); false after `timeout`.
    public func waitForOutput(containing text: String, timeout: TimeInterval = 5) -> Bool {
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
    public func start(readyPattern: String, timeout: TimeInterval = 10) throws -> String {
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

    /// Terminates the peer (SIGTERM; SIGKILL if it is still there 8 s later) and waits for it to exit,
    /// by the kernel's word (`ChildExit`): corelibs-foundation can miss a child's exit, and a full CI
    /// run once hung here for good on `waitUntilExit()`.
    public func stop() {
        guard process.processIdentifier > 0 else { return }
        if process.isRunning { process.terminate() }
        _ = ChildExit.waitOrEnd(process, timeout: 3)
    }

    // MARK: locating tools

    /// The absolute path of `tool` found in PATH or the usual system directories.
    public static func locate(_ tool: String, hint: String) throws -> String {
        var directories = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init)
        directories += ["/usr/local/bin", "/usr/bin", "/bin"]
        for directory in directories where !directory.isEmpty {
            let candidate = directory + "/" + tool
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw PeerError.notInstalled(tool, hint: hint)
    }
}
