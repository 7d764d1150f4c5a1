// `stream-bench scale`: how cost grows with the number of connections. For every face (raw sockets,
// pairs on the stream thread and on a queue, QueuedSocket, AsyncConnection, GCDAsyncSocket) and every
// N, one fresh process opens N connections to the epoll server, one round trip each (with a timeout
// armed where the face has timeouts), leaves them idle with a read pending, then makes a round trip on
// every connection in turn, and reports the open's CPU per connection, the anonymous RSS per idle
// connection above the process's own, and the time per round trip. See Benchmarks/README.md.

import Foundation
import Glibc

/// One face at one N, measured in its own process.
struct ScaleSample: Codable {
    var face: String
    var connections: Int
    /// Process CPU (user + system, every thread) to open every connection and make its first round
    /// trip, per connection (µs).
    var openCPUMicroseconds: Double
    /// Wall time of the same, per connection (µs).
    var openWallMicroseconds: Double
    /// RssAnon with every connection idle minus RssAnon before opening any, per connection (bytes).
    var anonBytesPerIdleConnection: Double
    /// The same with VmRSS (bytes).
    var rssBytesPerIdleConnection: Double
    /// RssAnon before opening any (after a warm-up connection), bytes.
    var anonBaselineBytes: Int
    /// Wall time per round trip of the measured phase, one connection after another (µs).
    var roundTripMicroseconds: Double
    /// Process CPU per round trip of the same phase (µs).
    var roundTripCPUMicroseconds: Double
    /// Whether every read and write had a timeout armed.
    var timeoutsArmed: Bool
    /// How many source addresses the connections came from (`--sources`; nil in runs made before it
    /// existed: one, the kernel's choice).
    var sources: Int?
}

struct ScaleReport: Codable {
    var date: String
    var machine: MachineInfo
    var descriptorLimit: Int
    var connections: [Int]
    var faces: [String]
    /// `--sources` (nil in runs made before it existed: one).
    var sources: Int?
    /// `--in-flight`: the most connects unanswered at once (nil in runs made before it existed: 256).
    var connectsInFlight: Int?
    var samples: [ScaleSample]
    var failures: [String]
}

enum ScaleCommand {
    static let usage = """
        Usage: stream-bench scale [options]

        Opens N connections per face to the epoll server (one round trip each, timeouts armed where the
        face has them), leaves them idle, then makes a round trip on every one; reports open CPU per
        connection, RSS per idle connection and time per round trip, each face and N in its own process.

        Options:
          --connections LIST  Comma-separated Ns (default: 1000, 5000, 10000, … below the most the
                              hard RLIMIT_NOFILE allows, and that most: the limit less 500).
          --faces LIST        baseline, pairs-thread, pairs-queue, queued, async, gcd; "all" (default).
          --sources N         Spread the connections over the source addresses 127.0.0.1 … 127.0.0.N
                              (1…254), each bound before its connect (LocalBinding; viaInterface: for
                              GCDAsyncSocket; bind(2) for the baseline). Default 1: no bind, the
                              kernel's choice, about 28,000 ephemeral ports for every connection.
          --in-flight N       The most connects unanswered at once (default 256; the raw-socket
                              baseline opens one at a time). What the opens allocate for the time
                              they take stays in the heap as fragments: fewer in flight, less of it.
          --cpus same|separate|none   As for the main run (default same: client and server on CPU 0).
          --out DIR           Where scale.md and scale.json go (default: a new directory under
                              .build/stream-bench of this package).
          --record            Write them into Benchmarks/results instead.
          --timeout SECONDS   Limit per measurement (default 600).
          --render FILE       Rewrite scale.md from a saved scale.json (beside it, or into an --out given
                              before it), without measuring.
        """

    /// File descriptors kept free for the process's own (stdio, epoll sets, the release connection).
    static let reservedDescriptors = 500

    static func run(_ arguments: [String]) -> Int32 {
        var sizes: [Int]?
        var faces = ScaleFaceKind.allCases
        var cpus = CPUPlacement.same
        var sources = 1
        var inFlight = maxConnectsInFlight
        var outputDirectory: String?
        var record = false
        var timeout = 600.0
        var iterator = arguments.makeIterator()
        do {
            func value(_ flag: String) throws -> String {
                guard let value = iterator.next(), !value.hasPrefix("--") else { throw UsageError(description: "\(flag) needs a value") }
                return value
            }
            while let argument = iterator.next() {
                switch argument {
                case "--connections":
                    let list = try value(argument).split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
                    guard !list.isEmpty, list.allSatisfy({ ($0 ?? 0) > 0 }) else {
                        throw UsageError(description: "--connections needs positive numbers")
                    }
                    sizes = list.map { $0! }
                case "--faces":
                    let text = try value(argument)
                    if text == "all" { continue }
                    faces = try text.split(separator: ",").map { name in
                        guard let face = ScaleFaceKind(rawValue: String(name)) else {
                            throw UsageError(description: "unknown face \(name)")
                        }
                        return face
                    }
                case "--sources":
                    guard let count = Int(try value(argument)), (1...ScaleSources.most).contains(count) else {
                        throw UsageError(description: "--sources needs a number from 1 to \(ScaleSources.most)")
                    }
                    sources = count
                case "--in-flight":
                    guard let count = Int(try value(argument)), count > 0 else {
                        throw UsageError(description: "--in-flight needs a positive number")
                    }
                    inFlight = count
                case "--cpus":
                    guard let placement = CPUPlacement(rawValue: try value(argument)) else {
                        throw UsageError(description: "--cpus must be same, separate or none")
                    }
                    cpus = placement
                case "--out": outputDirectory = try value(argument)
                case "--record": record = true
                case "--timeout":
                    guard let seconds = Double(try value(argument)), seconds > 0 else {
                        throw UsageError(description: "--timeout needs seconds")
                    }
                    timeout = seconds
                case "--render":
                    // Rewrites scale.md from a saved scale.json (into --out, else beside it), measuring nothing.
                    let path = try value(argument)
                    let report = try JSONDecoder().decode(ScaleReport.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
                    let directory = outputDirectory ?? URL(fileURLWithPath: path).deletingLastPathComponent().path
                    let markdown = ScaleMarkdown.render(report)
                    try Data(markdown.utf8).write(to: URL(fileURLWithPath: directory).appendingPathComponent("scale.md"))
                    print(markdown)
                    return 0
                case "-h", "--help":
                    print(usage)
                    return 0
                default: throw UsageError(description: "unknown option \(argument)")
                }
            }
        } catch {
            Posix.printError("stream-bench scale: \(error)\n\n\(usage)")
            return 2
        }
        let limit = Posix.raiseFileDescriptorLimit()
        let most = limit - reservedDescriptors
        let chosen = sizes ?? defaultSizes(most: most)
        if let tooMany = chosen.first(where: { $0 > most }) {
            Posix.printError("stream-bench scale: \(tooMany) connections need more than RLIMIT_NOFILE \(limit) allows (at most \(most))")
            return 2
        }
        let directory = outputDirectory ?? (record ? Options.recordedResultsDirectory() : Options.freshOutputDirectory())
        do {
            return try measureAll(
                sizes: chosen, faces: faces, cpus: cpus, sources: sources, inFlight: inFlight, limit: limit,
                directory: directory, timeout: timeout)
        } catch {
            Posix.printError("stream-bench scale: \(error)")
            return 1
        }
    }

    /// 1,000, 5,000, 10,000, 20,000, 50,000, … up to 90% of `most`, then `most`.
    static func defaultSizes(most: Int) -> [Int] {
        let steps = [1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000]
        return steps.filter { $0 * 10 <= most * 9 } + [most]
    }

    private static func measureAll(
        sizes: [Int], faces: [ScaleFaceKind], cpus: CPUPlacement, sources: Int, inFlight: Int, limit: Int,
        directory: String, timeout: Double
    ) throws -> Int32 {
        let executable = try ChildProcess.currentExecutable()
        let server = try ChildProcess.spawn(
            executable, ["server", "--cpu", "\(cpus.serverCPU)"], stdin: .pipe, stdout: .pipe, stderr: .inherit)
        defer {
            server.closeStdin()
            server.wait(timeout: 30)
        }
        guard let port = try server.readLine(timeout: 30).split(separator: " ").first.flatMap({ UInt16($0) }) else {
            throw BenchError("server did not print its port")
        }
        let machine = MachineInfo.current()
        Posix.printError("stream-bench scale: server pid \(server.pid) on 127.0.0.1:\(port); RLIMIT_NOFILE \(limit); \(machine.summary)")
        var samples: [ScaleSample] = []
        var failures: [String] = []
        for size in sizes {
            for face in faces {
                let arguments = [
                    "scale-measure", "--face", face.rawValue, "--connections", "\(size)", "--port", "\(port)",
                    "--cpu", "\(cpus.clientCPU)", "--sources", "\(sources)", "--in-flight", "\(inFlight)",
                ]
                do {
                    let child = try ChildProcess.spawn(executable, arguments, stdin: .devNull, stdout: .pipe, stderr: .pipe)
                    let output = try child.collectOutput(timeout: timeout)
                    let detail = output.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
                    if output.timedOut { throw BenchError("timed out after \(timeout) s" + (detail.isEmpty ? "" : ": \(detail)")) }
                    guard output.termination == .exited(0) else {
                        throw BenchError("\(output.termination)" + (detail.isEmpty ? "" : ": \(detail)"))
                    }
                    guard let line = output.stdout.split(separator: "\n").last,
                        let sample = try? JSONDecoder().decode(ScaleSample.self, from: Data(line.utf8))
                    else { throw BenchError("unreadable result: \(output.stdout)") }
                    samples.append(sample)
                    Posix.printError(
                        "  \(face.rawValue) × \(size): open \(formatNumber(sample.openCPUMicroseconds, decimals: 1)) µs CPU/conn, "
                            + "idle \(formatNumber(sample.anonBytesPerIdleConnection, decimals: 0)) B/conn, "
                            + "\(formatNumber(sample.roundTripMicroseconds, decimals: 1)) µs/RT")
                } catch {
                    failures.append("\(face.rawValue) × \(size): \(error)")
                    Posix.printError("  FAILED \(face.rawValue) × \(size): \(error)")
                }
                if let termination = server.poll() { throw BenchError("the server process exited (\(termination)); aborting") }
            }
        }
        let report = ScaleReport(
            date: ISO8601DateFormatter().string(from: Date()), machine: machine, descriptorLimit: limit, connections: sizes,
            faces: faces.map(\.rawValue), sources: sources, connectsInFlight: inFlight, samples: samples, failures: failures)
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let markdown = ScaleMarkdown.render(report)
        try Data(markdown.utf8).write(to: url.appendingPathComponent("scale.md"))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(report).write(to: url.appendingPathComponent("scale.json"))
        print(markdown)
        Posix.printError("stream-bench scale: results in \(directory)")
        return failures.isEmpty ? 0 : 1
    }
}

/// `stream-bench scale-measure --face F --connections N --port P [--cpu C] [--sources S] [--in-flight K]`:
/// one face at one N.
enum ScaleMeasureCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var face: ScaleFaceKind?
        var connections: Int?
        var port: UInt16?
        var cpu = -1
        var sources: Int? = 1
        var inFlight: Int? = maxConnectsInFlight
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--face": face = iterator.next().flatMap(ScaleFaceKind.init(rawValue:))
            case "--connections": connections = iterator.next().flatMap { Int($0) }
            case "--port": port = iterator.next().flatMap { UInt16($0) }
            case "--cpu": cpu = iterator.next().flatMap { Int($0) } ?? -1
            case "--sources": sources = iterator.next().flatMap { Int($0) }.flatMap { (1...ScaleSources.most).contains($0) ? $0 : nil }
            case "--in-flight": inFlight = iterator.next().flatMap { Int($0) }.flatMap { $0 > 0 ? $0 : nil }
            default:
                Posix.printError("stream-bench scale-measure: unknown argument \(argument)")
                return 2
            }
        }
        guard let face, let connections, connections > 0, let port, let sources, let inFlight else {
            Posix.printError(
                "stream-bench scale-measure: needs --face, --connections and --port (and --sources from 1 to \(ScaleSources.most), "
                    + "--in-flight above 0)")
            return 2
        }
        do {
            let sample = try measure(face, connections: connections, port: port, cpu: cpu, sources: sources, inFlight: inFlight)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            try FileHandle.standardOutput.write(contentsOf: try encoder.encode(sample) + Data("\n".utf8))
            return 0
        } catch {
            Posix.printError("stream-bench scale-measure \(face.rawValue) \(connections): \(error)")
            return 1
        }
    }

    static func measure(
        _ kind: ScaleFaceKind, connections: Int, port: UInt16, cpu: Int, sources: Int = 1, inFlight: Int = maxConnectsInFlight
    ) throws -> ScaleSample {
        let limit = Posix.raiseFileDescriptorLimit()
        if limit < connections + 32 { throw BenchError("RLIMIT_NOFILE is \(limit), too low for \(connections) connections") }
        if cpu >= 0 { try Posix.pinToCPU(cpu) }
        // A warm-up connection through every phase: lazy machinery (threads, reactors, queues) starts
        // outside the figures.
        let warmUp = kind.makeFace(port: port, group: UInt64.random(in: 1...UInt64.max), sources: sources)
        try warmUp.open(count: 1, inFlight: inFlight)
        try warmUp.roundTrips()
        try warmUp.release()
        _ = try ProcessMemory.snapshot()

        let face = kind.makeFace(port: port, group: UInt64.random(in: 1...UInt64.max), sources: sources)
        let memoryBefore = try ProcessMemory.snapshot()
        let cpu0 = processCPUSeconds()
        let wall0 = Posix.monotonicNanoseconds()
        try face.open(count: connections, inFlight: inFlight)
        let wall1 = Posix.monotonicNanoseconds()
        let cpu1 = processCPUSeconds()
        let memoryIdle = try ProcessMemory.snapshot()
        try face.roundTrips()
        let wall2 = Posix.monotonicNanoseconds()
        let cpu2 = processCPUSeconds()
        try face.release()
        let n = Double(connections)
        return ScaleSample(
            face: kind.rawValue, connections: connections,
            openCPUMicroseconds: (cpu1 - cpu0) / n * 1e6,
            openWallMicroseconds: Stopwatch.seconds(from: wall0, to: wall1) / n * 1e6,
            anonBytesPerIdleConnection: Double(memoryIdle.anonymousBytes - memoryBefore.anonymousBytes) / n,
            rssBytesPerIdleConnection: Double(memoryIdle.residentBytes - memoryBefore.residentBytes) / n,
            anonBaselineBytes: memoryBefore.anonymousBytes,
            roundTripMicroseconds: Stopwatch.seconds(from: wall1, to: wall2) / n * 1e6,
            roundTripCPUMicroseconds: (cpu2 - cpu1) / n * 1e6,
            timeoutsArmed: kind.armsTimeouts, sources: sources)
    }

    /// User + system CPU of every thread of this process (`getrusage(RUSAGE_SELF)`), seconds.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        _ = getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}

/// The scale run's Markdown: every face at every N, then each face's growth from the smallest N to
/// the largest against the issue's targets.
enum ScaleMarkdown {
    /// Where the connections came from.
    static func sourcesSentence(_ sources: Int) -> String {
        sources > 1
            ? "Sources: 127.0.0.1 … 127.0.0.\(sources), connection i bound to 127.0.0.(1 + i mod \(sources)) before its connect "
                + "(`--sources \(sources)`)."
            : "Sources: one, the kernel's choice (127.0.0.1, no bind)."
    }

    static func render(_ report: ScaleReport) -> String {
        var lines = [
            "# stream-bench scale",
            "",
            "\(report.date); \(report.machine.summary); RLIMIT_NOFILE \(report.descriptorLimit). One process per face and N; "
                + "client and server pinned as for the main run. Open: CPU (and wall) per connection to connect and make one "
                + "round trip, at most \(report.connectsInFlight ?? maxConnectsInFlight) unanswered. Idle: RssAnon per idle connection above the process's own "
                + "(VmRSS in brackets). Round trip: a 64-byte echo on every connection, one after another, per round trip. "
                + "Timeouts: a write timeout of \(Int(Scale.writeTimeout)) s and a read pending with \(Int(Scale.readTimeout)) s "
                + "on every idle connection (QueuedSocket, GCDAsyncSocket; the others have none to arm). "
                + sourcesSentence(report.sources ?? 1),
            "",
            "| face | N | open µs CPU/conn | open µs wall/conn | idle B/conn | µs/RT | µs CPU/RT |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for face in report.faces {
            for sample in report.samples.filter({ $0.face == face }).sorted(by: { $0.connections < $1.connections }) {
                lines.append(
                    "| \(face)\(sample.timeoutsArmed ? " (timeouts)" : "") | \(sample.connections) | "
                        + "\(formatNumber(sample.openCPUMicroseconds, decimals: 1)) | \(formatNumber(sample.openWallMicroseconds, decimals: 1)) | "
                        + "\(formatNumber(sample.anonBytesPerIdleConnection, decimals: 0)) (\(formatNumber(sample.rssBytesPerIdleConnection, decimals: 0))) | "
                        + "\(formatNumber(sample.roundTripMicroseconds, decimals: 1)) | \(formatNumber(sample.roundTripCPUMicroseconds, decimals: 1)) |"
                )
            }
        }
        lines += [
            "",
            "Growth and targets (issue 25: time per round trip at the largest N within 1.3× of the smallest; ≤ 2 KiB per "
                + "idle connection; open CPU ≤ 1.5× the baseline's). Wall time per round trip swings with whatever else the "
                + "machine runs; the process's CPU per round trip does not, so growth is given for both. Slope: bytes per "
                + "idle connection between the smallest and the largest N (what each further connection costs; the figure "
                + "at a small N also carries fixed costs spread over few connections).",
            "",
            "| face | µs/RT wall, largest ÷ smallest N | µs CPU/RT, largest ÷ smallest N | most B per idle conn | slope B/conn | open CPU ÷ baseline at each N |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        let baseline = report.samples.filter { $0.face == ScaleFaceKind.baseline.rawValue }
        for face in report.faces {
            let samples = report.samples.filter { $0.face == face }.sorted { $0.connections < $1.connections }
            guard let smallest = samples.first, let largest = samples.last else { continue }
            let wall = largest.roundTripMicroseconds / smallest.roundTripMicroseconds
            let cpu = largest.roundTripCPUMicroseconds / smallest.roundTripCPUMicroseconds
            let memory = samples.map(\.anonBytesPerIdleConnection).max() ?? 0
            var slope = "—"
            if largest.connections > smallest.connections {
                let value =
                    (largest.anonBytesPerIdleConnection * Double(largest.connections) - smallest.anonBytesPerIdleConnection
                        * Double(smallest.connections)) / Double(largest.connections - smallest.connections)
                slope = "\(formatNumber(value, decimals: 0)) \(value <= 2048 ? "✓" : "✗")"
            }
            let open = samples.map { sample -> String in
                guard let c = baseline.first(where: { $0.connections == sample.connections }) else { return "—" }
                return formatNumber(sample.openCPUMicroseconds / c.openCPUMicroseconds, decimals: 2)
            }
            let span = "(\(smallest.connections) → \(largest.connections))"
            lines.append(
                "| \(face) | \(formatNumber(wall, decimals: 2))× \(span) \(wall <= 1.3 ? "✓" : "✗") | "
                    + "\(formatNumber(cpu, decimals: 2))× \(cpu <= 1.3 ? "✓" : "✗") | "
                    + "\(formatNumber(memory, decimals: 0)) \(memory <= 2048 ? "✓" : "✗") | \(slope) | \(open.joined(separator: " / ")) |")
        }
        if !report.failures.isEmpty {
            lines += ["", "**Failed:**", ""] + report.failures.map { "- \($0)" }
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
