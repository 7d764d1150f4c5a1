// `stream-bench soak [--minutes N] [--interval S] [--out DIR]`: drives a steady mix of every kind of
// SocketStreams use against real loopback peers for N minutes (default 30) in one process, samples
// its open file descriptors, resident memory and threads every S seconds (default 5), and writes
// soak.csv, soak.md and soak.svg. Exits 1 if an operation failed unexpectedly or if fds or RSS grew
// from minute 2 to the end beyond a small tolerance, so the run itself is the check. See
// Benchmarks/README.md.

import Foundation
import Glibc
import SocketStreams

struct SoakOptions {
    var minutes = 30.0
    var interval = 5.0
    var outputDirectory: String?
    /// The kinds of operation in the mix (all by default; fewer to find which one makes something grow).
    var kinds = Set(SoakLane.Kind.allCases)
    var help = false

    static let usage = """
        Usage: stream-bench soak [--minutes N] [--interval S] [--out DIR] [--record]

        Runs a mixed load (delegate, thread, queue and polling clients; short, echo, bulk, long-lived,
        TLS, refused and reset connections; a StreamListener peer and the epoll server) for N minutes,
        sampling fds, RSS and threads, and fails if they grow after the first 2 minutes.

        Options:
          --minutes N     Duration in minutes (default 30; fractions allowed).
          --interval S    Seconds between samples (default 5).
          --out DIR       Where soak.csv, soak.md and soak.svg go (default: a new directory under
                          .build/stream-bench of this package).
          --record        Write them into Benchmarks/results instead (the recorded soak run).
          --kinds LIST    Only these kinds of operation (comma-separated: short, echo, bulk, long, tls,
                          refused, reset; default all), to find which one makes something grow.
          -h, --help      This text.
        """

    static func parse(_ arguments: [String]) throws -> SoakOptions {
        var options = SoakOptions()
        var iterator = arguments.makeIterator()
        func number(_ flag: String) throws -> Double {
            guard let text = iterator.next(), let value = Double(text), value > 0, value.isFinite else {
                throw UsageError(description: "\(flag) needs a positive number")
            }
            return value
        }
        while let argument = iterator.next() {
            switch argument {
            case "--minutes": options.minutes = try number(argument)
            case "--interval": options.interval = try number(argument)
            case "--out":
                guard let value = iterator.next(), !value.hasPrefix("--") else { throw UsageError(description: "--out needs a value") }
                options.outputDirectory = value
            case "--record":
                options.outputDirectory = Options.recordedResultsDirectory()
            case "--kinds":
                guard let list = iterator.next(), !list.hasPrefix("--") else { throw UsageError(description: "--kinds needs a list") }
                options.kinds = [.served]
                for name in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                    guard let kind = SoakLane.Kind(rawValue: name), kind != .served else {
                        throw UsageError(description: "unknown kind \(name)")
                    }
                    options.kinds.insert(kind)
                }
            case "-h", "--help": options.help = true
            default: throw UsageError(description: "unknown option \(argument)")
            }
        }
        if options.interval > options.minutes * 60 / 4 {
            throw UsageError(description: "--interval must leave at least 4 samples in the run")
        }
        return options
    }
}

enum SoakCommand {
    static func run(_ arguments: [String]) -> Int32 {
        let options: SoakOptions
        do {
            options = try SoakOptions.parse(arguments)
        } catch {
            Posix.printError("stream-bench soak: \(error)\n\n\(SoakOptions.usage)")
            return 2
        }
        if options.help {
            print(SoakOptions.usage)
            return 0
        }
        do {
            return try soak(options)
        } catch {
            Posix.printError("stream-bench soak: \(error)")
            return 1
        }
    }

    private static func soak(_ options: SoakOptions) throws -> Int32 {
        Posix.raiseFileDescriptorLimit()
        let machine = MachineInfo.current()
        let duration = options.minutes * 60
        let executable = try ChildProcess.currentExecutable()

        // One certificate for both TLS peers: the epoll server reads it from files, the listener
        // takes it as an identity, and every TLS client trusts it.
        let (certificatePEM, keyPEM) = try TLSIdentity.makeSelfSignedPEM(
            commonName: "stream-bench soak", dnsNames: ["localhost"],
            ipAddresses: ["127.0.0.1", "::1"],
            validity: duration + 86_400)
        let directory = NSTemporaryDirectory() + "stream-bench-soak-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try certificatePEM.write(to: URL(fileURLWithPath: directory + "/certificate.pem"))
        try keyPEM.write(to: URL(fileURLWithPath: directory + "/key.pem"))
        var tls = TLSSettings()
        tls.trustRoots = [.pem(certificatePEM)]

        // The epoll server first, while this process has no other threads that could open fds.
        let server = try ChildProcess.spawn(
            executable,
            [
                "server", "--tls-cert", directory + "/certificate.pem",
                "--tls-key", directory + "/key.pem",
            ],
            stdin: .pipe, stdout: .pipe, stderr: .inherit)
        defer {
            server.closeStdin()
            server.wait(timeout: 10)
        }
        let serverPorts = try server.readLine(timeout: 30).split(separator: " ").compactMap { UInt16($0) }
        guard serverPorts.count == 3 else { throw BenchError("server did not print its three ports") }
        let refused = try Posix.reserveUnlistenedPort(ipv6: false)
        let refused6 = try Posix.reserveUnlistenedPort(ipv6: true)
        defer {
            Posix.close(refused.fd)
            Posix.close(refused6.fd)
        }

        let counters = SoakCounters()
        let listenerThread = SoakRunLoopThread(name: "soak listener")
        let delegateThread = SoakRunLoopThread(name: "soak delegate")
        let queue = DispatchQueue(label: "stream-bench.soak")
        let peer = try ListenerPeer(
            runLoop: listenerThread.runLoop,
            identity: TLSIdentity(certificateChainPEM: certificatePEM, privateKeyPEM: keyPEM),
            counters: counters)
        let ports = SoakLoad.Ports(
            server: serverPorts[0], serverTLS: serverPorts[1], listener: UInt16(peer.plain.port),
            listener6: UInt16(peer.plain6.port), listenerTLS: UInt16(peer.tls.port),
            refused: refused.port, refused6: refused6.port)
        Posix.printError(
            "stream-bench soak: \(formatMinutes(duration)) min, a sample every \(formatNumber(options.interval, decimals: 1)) s; "
                + "server pid \(server.pid) on 127.0.0.1:\(ports.server) (TLS \(ports.serverTLS)), listeners "
                + "127.0.0.1:\(ports.listener), [::1]:\(ports.listener6), TLS 127.0.0.1:\(ports.listenerTLS); "
                + "refused ports \(ports.refused), [::1]:\(ports.refused6); " + machine.summary)

        let load = SoakLoad(counters: counters)
        let start = Posix.monotonicNanoseconds()
        func elapsed() -> Double { Stopwatch.seconds(from: start, to: Posix.monotonicNanoseconds()) }
        let beforeLoad = try SoakSample.take(at: 0, counters: counters, withKinds: true)
        load.start(ports: ports, delegate: delegateThread.runLoop, queue: queue, tls: tls, kinds: options.kinds)

        var samples: [SoakSample] = []
        var nextProgress = 60.0
        for index in 0... {
            let due = min(Double(index) * options.interval, duration)
            let wait = due - elapsed()
            if wait > 0 { Thread.sleep(forTimeInterval: wait) }
            let sample = try SoakSample.take(at: elapsed(), counters: counters, withKinds: due >= duration)
            samples.append(sample)
            if sample.seconds >= nextProgress || due >= duration {
                nextProgress += 60
                Posix.printError(
                    "  \(formatMinutes(sample.seconds)) fds \(sample.fds), VmRSS \(formatBytes(sample.residentBytes)), "
                        + "RssAnon \(formatBytes(sample.anonymousBytes)), threads \(sample.threads), "
                        + "operations \(formatNumber(Double(sample.operationTotal), decimals: 0)), "
                        + "unexpected errors \(sample.unexpectedTotal)")
            }
            if let termination = server.poll() {
                throw BenchError("the server process exited (\(termination)) at \(formatMinutes(sample.seconds)); aborting")
            }
            if due >= duration { break }
        }

        // Drain: no new operations; the ones in flight end (long-lived ones without their gaps).
        load.stop()
        let drainStart = elapsed()
        var drained = false
        while elapsed() - drainStart < 120 {
            if counters.inFlight == 0 && load.threads.wait(timeout: .now()) == .success {
                drained = true
                break
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        let drainSeconds = elapsed() - drainStart
        Thread.sleep(forTimeInterval: 1)  // the last closes reach the peers and the reactor
        let afterDrain = try SoakSample.take(at: elapsed(), counters: counters, withKinds: true)
        peer.close()
        delegateThread.stop()
        listenerThread.stop()

        let report = SoakReport(
            date: ISO8601DateFormatter().string(from: Date()), machine: machine, duration: duration, interval: options.interval,
            lanes: counters.allLanes, samples: samples, beforeLoad: beforeLoad, afterDrain: afterDrain,
            drainSeconds: drainSeconds, drained: drained, firstErrors: counters.firstUnexpectedErrors,
            unexpected: counters.snapshot.map(\.unexpected))
        let resultsDirectory = options.outputDirectory ?? Options.freshOutputDirectory()
        let markdown = try report.write(to: resultsDirectory)
        print(markdown)
        Posix.printError("stream-bench soak: results in \(resultsDirectory)\n")
        if !report.verdict.isEmpty {
            Posix.printError("stream-bench soak: FAILED:\n  " + report.verdict.joined(separator: "\n  "))
            return 1
        }
        return 0
    }
}

/// One sample of the soak process: what it holds, and the operations so far.
struct SoakSample {
    var seconds: Double
    var fds: Int
    var threads: Int
    var residentBytes: Int
    var anonymousBytes: Int
    /// Completed operations per lane, cumulative.
    var operations: [Int]
    /// Unexpected errors of every lane, cumulative.
    var unexpectedTotal: Int

    /// The open fds by kind (socket, eventpoll, …), for the samples the report shows them for.
    var fdKinds: [String: Int]?

    var operationTotal: Int { operations.reduce(0, +) }

    static func take(at seconds: Double, counters: SoakCounters, withKinds: Bool = false) throws -> SoakSample {
        let memory = try ProcessMemory.snapshot()
        let counts = counters.snapshot
        return SoakSample(
            seconds: seconds, fds: Posix.openDescriptorCount() ?? -1, threads: try ProcessMemory.threadCount() ?? -1,
            residentBytes: memory.residentBytes, anonymousBytes: memory.anonymousBytes,
            operations: counts.map(\.operations), unexpectedTotal: counts.reduce(0) { $0 + $1.unexpectedTotal },
            fdKinds: withKinds ? Posix.openDescriptorKinds() : nil)
    }
}

/// "12:05" for 725 seconds.
func formatMinutes(_ seconds: Double) -> String {
    let whole = Int(seconds.rounded())
    return "\(whole / 60):" + (whole % 60 < 10 ? "0" : "") + "\(whole % 60)"
}
