#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreams
import StressScenarios

// socketstreams-stress: runs the stress scenarios (Tests/Stress/Scenarios) against the library, each
// scenario over each transport in a child process of its own, so a crash ends that child only and is
// reported with its signal and the crashing frame.
//
//   socketstreams-stress [--iterations N] [--tls-socks-iterations N] [--scenario NAME|all]
//                        [--transport plain|tls|socks5|all] [--seed S] [--group-size N] [--stall SECONDS] [--log-dir DIR]
//
// --iterations is per scenario over plain TCP (default 2000); TLS and SOCKS5 make --tls-socks-iterations
// (default as many). The task-group scenario makes 1/100 of these (20): each of its iterations opens
// 1,000 connections.
//
// Prints one line per scenario and transport, then "N passed, N failed"; exits 1 if anything failed,
// crashed or hung (a child that prints no progress for --stall seconds, default 120, is killed and
// counted as a hang), 2 on a usage error.

let usage = """
    usage: socketstreams-stress [--iterations N] [--tls-socks-iterations N] [--scenario NAME|all]
                                [--transport plain|tls|socks5|all] [--seed S] [--group-size N] [--stall SECONDS]
                                [--log-dir DIR] [--list]
    --iterations: per scenario over plain TCP (default 2000; the task-group scenario makes 1/100 of it)
    --tls-socks-iterations: the same over TLS and SOCKS5 (default: --iterations)
    scenarios: \(StressScenario.all.map(\.name).joined(separator: ", "))
    """

struct Options {
    var iterations = 2_000
    /// Iterations over TLS and SOCKS5 (each costs a handshake or a proxy connection more).
    var otherIterations: Int?
    var scenarios = StressScenario.all
    var transports = StressTransport.allCases
    var seed = UInt64(UInt32.random(in: 0...UInt32.max))
    var groupSize = 1_000
    var stall = 120.0
    var logDirectory = "/tmp/socketstreams-stress"
    var child = false
}

func parse(_ arguments: [String]) -> Options {
    func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("socketstreams-stress: \(message)\n\(usage)\n".utf8))
        exit(2)
    }
    var options = Options()
    var index = 0
    func value(_ name: String) -> String {
        index += 1
        guard index < arguments.count else { fail("\(name) needs a value") }
        return arguments[index]
    }
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "--iterations":
            guard let count = Int(value(argument)), count > 0 else { fail("--iterations takes a positive number") }
            options.iterations = count
        case "--scenario":
            let name = value(argument)
            if name != "all" {
                guard let scenario = StressScenario.named(name) else { fail("no scenario \(name)") }
                options.scenarios = [scenario]
            }
        case "--transport":
            let name = value(argument)
            if name != "all" {
                guard let transport = StressTransport(rawValue: name) else { fail("no transport \(name) (plain, tls, socks5, all)") }
                options.transports = [transport]
            }
        case "--tls-socks-iterations":
            guard let count = Int(value(argument)), count > 0 else { fail("--tls-socks-iterations takes a positive number") }
            options.otherIterations = count
        case "--seed":
            guard let seed = UInt64(value(argument)) else { fail("--seed takes a number") }
            options.seed = seed
        case "--group-size":
            guard let size = Int(value(argument)), size > 0 else { fail("--group-size takes a positive number") }
            options.groupSize = size
        case "--stall":
            guard let seconds = Double(value(argument)), seconds > 0 else { fail("--stall takes seconds") }
            options.stall = seconds
        case "--log-dir":
            options.logDirectory = value(argument)
        case "--child":
            options.child = true
        case "--list":
            for scenario in StressScenario.all { print("\(scenario.name): \(scenario.summary)") }
            exit(0)
        case "--help", "-h":
            say(usage)
            exit(0)
        default:
            fail("unknown argument \(argument)")
        }
        index += 1
    }
    return options
}

/// Writes a line to stdout at once (the parent reads it through a pipe).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// A child process with its stdout on a pipe: `posix_spawn`, a thread reading the pipe, `waitpid`
/// (Foundation's `Process` missed a crashed child's end once in testing, so the parent does it itself).
final class Child: Sendable {
    private struct State {
        var lines: [String] = []
        var partial = ""
        var lastOutput = Date()
        var ended = false
    }

    let pid: pid_t
    private let state = Guarded(State())
    private let changed = DispatchSemaphore(value: 0)

    /// Starts `arguments[0]` with `arguments`, stdout on a pipe read here, stderr on `logPath`.
    init(_ arguments: [String], logPath: String, environment: [String: String]) throws {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw StressError("pipe: \(String(cString: strerror(errno)))") }
        let (reader, writer) = (pipeFDs[0], pipeFDs[1])
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writer, 1)
        posix_spawn_file_actions_addopen(&actions, 2, logPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addclose(&actions, reader)
        posix_spawn_file_actions_addclose(&actions, writer)
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
        close(writer)
        guard spawned == 0 else {
            close(reader)
            throw StressError("posix_spawn: \(String(cString: strerror(spawned)))")
        }
        self.pid = pid
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = read(reader, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                take(count > 0 ? Array(buffer[0..<count]) : nil)
                if count <= 0 { break }
            }
            close(reader)
        }
        thread.start()
    }

    private func take(_ bytes: [UInt8]?) {
        state.withLock { state in
            guard let bytes else {
                state.ended = true
                if !state.partial.isEmpty { state.lines.append(state.partial) }
                return
            }
            state.partial += String(decoding: bytes, as: UTF8.self)
            var pieces = state.partial.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            state.partial = pieces.removeLast()
            state.lines += pieces
            state.lastOutput = Date()
        }
        changed.signal()
    }

    /// Waits until the child closes its output (true) or prints nothing for `stall` seconds (false).
    func waitForEnd(stall: Double) -> Bool {
        while true {
            let (ended, last) = state.withLock { ($0.ended, $0.lastOutput) }
            if ended { return true }
            if Date().timeIntervalSince(last) > stall { return false }
            _ = changed.wait(timeout: .now() + 1)
        }
    }

    /// Waits for the child's exit: its exit status, or the signal that ended it.
    func wait() -> (status: Int32, signal: Int32?) {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signal = status & 0x7F
        return signal == 0 ? ((status >> 8) & 0xFF, nil) : (0, signal)
    }

    var lines: [String] { state.withLock { $0.lines } }
}

/// The child: one scenario over one transport. Prints "progress N" after each iteration and, at the
/// end, "result " and the result as JSON.
func runChild(_ options: Options) async -> Int32 {
    guard let scenario = options.scenarios.first, let transport = options.transports.first else { return 2 }
    let environment: StressEnvironment
    do {
        environment = try StressEnvironment(transports: [transport])
    } catch {
        say("setup failed: \(error)")
        return 1
    }
    if let proxy = environment.proxyProcess { say("proxy pid \(proxy)") }
    let result = await StressRunner.run(
        scenario, over: transport, iterations: scenario.iterations(options.iterations), seed: options.seed,
        environment: environment, groupSize: options.groupSize
    ) { done in
        say("progress \(done)")
    }
    environment.stop()
    let json = String(decoding: (try? JSONEncoder().encode(result)) ?? Data(), as: UTF8.self)
    say("result \(json)")
    return result.passed ? 0 : 1
}

/// What a child that crashed left on stderr: the backtracer's "*** Program crashed" line and the
/// first frames of the crashed thread.
func crashSummary(_ log: String) -> String {
    let lines = log.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    var summary: [String] = []
    if let crashed = lines.first(where: { $0.contains("Program crashed") || $0.hasPrefix("Fatal error") || $0.contains("fatal error") }) {
        summary.append(crashed.trimmingCharacters(in: .whitespaces))
    }
    if let thread = lines.firstIndex(where: { $0.hasPrefix("Thread") && $0.contains("crashed") }) {
        let frames = lines[(thread + 1)...].drop { $0.isEmpty }.prefix { !$0.isEmpty }.filter { $0.contains(" in ") }
        summary += frames.prefix(3).map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
    }
    return summary.isEmpty ? lines.suffix(5).joined(separator: " | ") : summary.joined(separator: " | ")
}

/// The parent: runs each scenario over each transport in a child and reports.
func runAll(_ options: Options) -> Int32 {
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    try? FileManager.default.createDirectory(atPath: options.logDirectory, withIntermediateDirectories: true)
    let other = options.otherIterations ?? options.iterations
    say(
        "socketstreams-stress: seed \(options.seed), \(options.iterations) iterations plain, \(other) TLS and SOCKS5, logs in \(options.logDirectory)"
    )
    var passed = 0
    var failed = 0
    for scenario in options.scenarios {
        for transport in options.transports where scenario.transports.contains(transport) {
            let base = transport == .plain ? options.iterations : options.otherIterations ?? options.iterations
            let requested = scenario.iterations(base)
            let logPath = "\(options.logDirectory)/\(scenario.name)-\(transport.rawValue).log"
            var environment = ProcessInfo.processInfo.environment
            environment["SWIFT_BACKTRACE"] = "enable=yes,interactive=no,color=no,threads=crashed"
            let arguments = [
                executable.path, "--child", "--scenario", scenario.name, "--transport", transport.rawValue,
                "--iterations", String(base), "--seed", String(options.seed), "--group-size", String(options.groupSize),
            ]
            let started = Date()
            let child: Child
            do {
                child = try Child(arguments, logPath: logPath, environment: environment)
            } catch {
                say("\(scenario.name) \(transport.rawValue): could not start a child: \(error)")
                failed += 1
                continue
            }
            // The watchdog: a child that prints no progress for `stall` seconds is killed as hung.
            let stalled = !child.waitForEnd(stall: options.stall)
            if stalled { kill(child.pid, SIGKILL) }
            let (status, signal) = child.wait()
            let collected = child.lines
            // A child that crashed or was killed leaves its microsocks behind (one that ended kills it itself).
            if !collected.contains(where: { $0.hasPrefix("result ") }), let line = collected.first(where: { $0.hasPrefix("proxy pid ") }),
                let pid = pid_t(line.dropFirst(10))
            {
                kill(pid, SIGKILL)
            }
            let done = collected.last { $0.hasPrefix("progress ") }.flatMap { Int($0.dropFirst(9)) } ?? 0
            if let json = collected.last(where: { $0.hasPrefix("result ") }),
                let result = try? JSONDecoder().decode(StressResult.self, from: Data(json.dropFirst(7).utf8))
            {
                say(result.line)
                for message in result.messages { say("    \(message)") }
                if result.passed && status == 0 && signal == nil { passed += 1 } else { failed += 1 }
                continue
            }
            failed += 1
            let elapsed = String(format: "%.1f", Date().timeIntervalSince(started))
            let name = "\(scenario.name) \(transport.rawValue)".padding(toLength: 36, withPad: " ", startingAt: 0)
            if stalled {
                say("\(name) \(done)/\(requested) iterations, HUNG: no progress for \(Int(options.stall)) s, killed (\(elapsed) s)")
            } else if let signal {
                let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
                say(
                    "\(name) \(done)/\(requested) iterations, CRASHED (signal \(signal)) after \(done) iterations (\(elapsed) s): "
                        + crashSummary(log))
            } else {
                say("\(name) \(done)/\(requested) iterations, exited with status \(status) without a result (\(elapsed) s)")
                for line in collected.suffix(3) where !line.hasPrefix("progress ") { say("    \(line)") }
            }
        }
    }
    say("\(passed) passed, \(failed) failed")
    return failed == 0 ? 0 : 1
}

let options = parse(Array(CommandLine.arguments.dropFirst()))
if options.child {
    exit(await runChild(options))
}
exit(runAll(options))
