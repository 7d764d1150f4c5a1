// Command-line options of `stream-bench` (the harness). The `server` and `measure` subcommands
// are internal: the harness re-executes its own binary with them.

import Foundation

enum CPUPlacement: String, Codable {
    /// Client and server pinned to the same CPU (default): no cross-CPU wake-ups, stable figures.
    case same
    /// Client on CPU 0, server on CPU 1.
    case separate
    /// No pinning.
    case none

    var serverCPU: Int {
        switch self {
        case .same: return 0
        case .separate: return 1
        case .none: return -1
        }
    }

    var clientCPU: Int {
        self == .none ? -1 : 0
    }
}

struct UsageError: Error, CustomStringConvertible {
    let description: String
}

struct Options {
    var quick = false
    var runs: Int?
    var workloads: [Workload] = Workload.allCases
    var clients: [ClientKind] = ClientKind.allCases
    var cpus: CPUPlacement = .same
    var outputDirectory: String?
    /// `--record`: write into `Benchmarks/results`, the recorded run the guides are checked against.
    var record = false
    var timeout: Double?
    /// `--datagram-sizes`: every UDP workload at each of these sizes (nil: each workload's defaults).
    var datagramSizes: [Int]?
    var help = false

    /// Runs per client on `workload`: `--runs`, else 1 with `--quick`, else the workload's default.
    func runs(for workload: Workload) -> Int { runs ?? (quick ? 1 : workload.defaultRuns) }
    /// The datagram sizes `workload` runs at; nil for a stream workload.
    func datagramSizes(for workload: Workload) -> [Int]? {
        guard let defaults = workload.defaultDatagramSizes else { return nil }
        return datagramSizes ?? defaults
    }

    /// Per-measurement limit; a hung client is killed and reported as a failure.
    var effectiveTimeout: Double { timeout ?? (quick ? 60 : 300) }

    var effectiveOutputDirectory: String {
        outputDirectory ?? (record ? Self.recordedResultsDirectory() : Self.freshOutputDirectory())
    }

    static let usage = """
        Usage: stream-bench [options]

        Compares SocketStreams clients with raw sockets against one loopback server process.

        Options:
          --quick                 Small sizes, 1 run (what the test suite runs).
          --runs N                Runs per client and workload (default 9 for single-connection
                          workloads, 3 for many1k, many5k and idle; 1 with --quick).
          --workloads LIST        Comma-separated: download, upload, pingpong, connect, many1k,
                                  many5k, idle, tls-download, tls-upload, tls-pingpong,
                                  tls-handshake, socks-connect, socks-download, udp-receive,
                                  udp-send, udp-send-quiet, udp-pingpong, udp-fanin; "many" =
                                  many1k,many5k,idle; "plain", "tls", "socks", "udp"; "all" (default).
          --clients LIST          Comma-separated: baseline, streams-delegate, streams-thread,
                                  streams-queue, streams-polling, streams-async, streams-queued,
                                  gcdasyncsocket, nwconnection, filehandle, baseline-udp,
                                  baseline-udp-batch, gcdasyncudpsocket; "all" (default). The UDP clients run the UDP
                                  workloads only, the others the stream workloads only.
          --datagram-sizes LIST   Comma-separated datagram sizes in bytes (8-65507) for every UDP
                                  workload, each size a row of its own (default: 64,1200 for
                                  udp-receive, udp-send and udp-send-quiet; 64 for udp-pingpong
                                  and udp-fanin).
          --cpus same|separate|none
                                  Pin client and server to CPU 0 (same, default), to CPUs 0 and 1
                                  (separate), or not at all (none).
          --out DIR               Where latest.md, latest.json and ratios.svg go (default: a new
                                  directory under .build/stream-bench of this package).
          --record                Write them into Benchmarks/results instead: the recorded run
                                  that Guides/Performance.md and the README quote (and the tests
                                  check them against). Without it, a run never touches the checkout.
          --timeout SECONDS       Limit per measurement (default 300; 60 with --quick).
          -h, --help              This text.

        stream-bench soak [--minutes N] [--interval S] [--out DIR] runs a long mixed load and checks
        that fds and RSS stay flat (stream-bench soak --help).
        """

    static func parse(_ arguments: [String]) throws -> Options {
        var options = Options()
        var iterator = arguments.makeIterator()
        func value(_ flag: String) throws -> String {
            guard let value = iterator.next(), !value.hasPrefix("--") else {
                throw UsageError(description: "\(flag) needs a value")
            }
            return value
        }
        while let argument = iterator.next() {
            switch argument {
            case "--quick":
                options.quick = true
            case "--runs":
                let text = try value(argument)
                guard let runs = Int(text), runs >= 1 else { throw UsageError(description: "--runs needs a positive number") }
                options.runs = runs
            case "--workloads":
                options.workloads = try parseWorkloads(try value(argument))
            case "--clients":
                options.clients = try parseClients(try value(argument))
            case "--cpus":
                let text = try value(argument)
                guard let placement = CPUPlacement(rawValue: text) else {
                    throw UsageError(description: "--cpus must be same, separate or none")
                }
                options.cpus = placement
            case "--out":
                options.outputDirectory = try value(argument)
            case "--record":
                options.record = true
            case "--datagram-sizes":
                options.datagramSizes = try parseDatagramSizes(try value(argument))
            case "--timeout":
                let text = try value(argument)
                guard let seconds = Double(text), seconds > 0 else { throw UsageError(description: "--timeout needs seconds") }
                options.timeout = seconds
            case "-h", "--help":
                options.help = true
            default:
                throw UsageError(description: "unknown option \(argument)")
            }
        }
        return options
    }

    /// Workloads in canonical order, without duplicates.
    static func parseWorkloads(_ list: String) throws -> [Workload] {
        var selected = Set<Workload>()
        for name in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) {
            if let workload = Workload(rawValue: name) {
                selected.insert(workload)
            } else if let expansion = Workload.aliases[name] {
                selected.formUnion(expansion)
            } else {
                throw UsageError(description: "unknown workload \(name)")
            }
        }
        if selected.isEmpty { throw UsageError(description: "--workloads is empty") }
        return Workload.allCases.filter(selected.contains)
    }

    /// Datagram sizes in the order given, without duplicates.
    static func parseDatagramSizes(_ list: String) throws -> [Int] {
        var sizes: [Int] = []
        for text in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            let range = DatagramPayload.minimumSize...DatagramPayload.maximumSize
            guard let size = Int(text), range.contains(size) else {
                throw UsageError(description: "--datagram-sizes: \(text) is not a size of \(range.lowerBound)–\(range.upperBound) bytes")
            }
            if !sizes.contains(size) { sizes.append(size) }
        }
        if sizes.isEmpty { throw UsageError(description: "--datagram-sizes is empty") }
        return sizes
    }

    /// Clients in the order given (that is the alternation order), without duplicates.
    static func parseClients(_ list: String) throws -> [ClientKind] {
        var clients: [ClientKind] = []
        for name in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces).lowercased() }) {
            let expansion: [ClientKind]
            if name == "all" {
                expansion = ClientKind.allCases
            } else if let client = ClientKind(rawValue: name) {
                expansion = [client]
            } else {
                throw UsageError(description: "unknown client \(name)")
            }
            for client in expansion where !clients.contains(client) { clients.append(client) }
        }
        if clients.isEmpty { throw UsageError(description: "--clients is empty") }
        return clients
    }

    /// `<package>/Benchmarks/results` (`--record`), found from this source file's location at build
    /// time; `./Benchmarks/results` if the checkout is not there any more.
    static func recordedResultsDirectory(sourceFile: String = #filePath) -> String {
        packageDirectory(sourceFile: sourceFile).map { $0.appendingPathComponent("Benchmarks/results").path } ?? "Benchmarks/results"
    }

    /// A new directory for one run's results, `<package>/.build/stream-bench/<UTC time>`, which git
    /// ignores: a run that is not recorded never dirties the checkout.
    static func freshOutputDirectory(sourceFile: String = #filePath) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let base =
            packageDirectory(sourceFile: sourceFile).map { $0.appendingPathComponent(".build/stream-bench").path }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("stream-bench").path
        var directory = "\(base)/\(formatter.string(from: Date()))-\(getpid())"
        var suffix = 1
        while FileManager.default.fileExists(atPath: directory) {
            suffix += 1
            directory = "\(base)/\(formatter.string(from: Date()))-\(getpid())-\(suffix)"
        }
        return directory
    }

    /// The package's root, found from this source file's location at build time (nil if the
    /// checkout is not there any more).
    private static func packageDirectory(sourceFile: String) -> URL? {
        var url = URL(fileURLWithPath: sourceFile)
        while url.pathComponents.count > 1 {
            url.deleteLastPathComponent()
            if url.lastPathComponent == "Benchmarks",
                FileManager.default.fileExists(atPath: url.appendingPathComponent("Sources").path)
            {
                return url.deletingLastPathComponent()
            }
        }
        return nil
    }
}
