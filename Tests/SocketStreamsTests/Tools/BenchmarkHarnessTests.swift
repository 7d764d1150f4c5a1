// Runs the built `stream-bench --quick` so the benchmark harness cannot rot unnoticed: exit status 0,
// all three result files written (into a temporary directory, never Benchmarks/results), and a figure
// in the JSON for every client × workload that ran.
//
// STREAM_BENCH_TEST_CLIENTS (comma-separated, default "all") narrows the clients, e.g. to
// "baseline,filehandle" while the library is a stub.

import Foundation
import TestPeers
import SocketStreamsTestSupport
import XCTest

final class BenchmarkHarnessTests: XCTestCase {
    private static let allClients = [
        "baseline", "streams-delegate", "streams-thread", "streams-queue", "streams-polling", "filehandle", "nwconnection",
        "nwconnection-framer", "baseline-udp", "baseline-udp-batch", "gcdasyncudpsocket",
    ]
    private static let allWorkloads = [
        "download", "upload", "pingpong", "connect", "many1k", "many5k", "idle", "udp-receive", "udp-send", "udp-send-quiet",
        "udp-pingpong", "udp-fanin",
    ]
    /// The longest one `stream-bench` run here may take (a sanitizer slows it several times) before
    /// `runCommand` kills it and the test fails, rather than waiting forever.
    private static let runLimit: TimeInterval = 600

    /// A run without `--out` never touches the checkout: it writes a new directory under the
    /// package's `.build/stream-bench`, says which, and leaves `Benchmarks/results` (the recorded run
    /// the guides are checked against) byte for byte as it was (issue 25: it rewrote them, after which
    /// GuideExampleTests failed).
    func testRunWithoutOutLeavesTheRecordedResultsAlone() throws {
        let binary = URL(fileURLWithPath: try builtExecutable("stream-bench"))
        let package = packageRoot
        let recorded = package.appendingPathComponent("Benchmarks/results")
        let names = ["latest.md", "latest.json", "ratios.svg"]
        let before = try names.map { try Data(contentsOf: recorded.appendingPathComponent($0)) }
        let run = try runCommand(binary.path, ["--quick", "--workloads", "pingpong", "--clients", "baseline"], timeout: Self.runLimit)
        let log = run.stderr
        XCTAssertEqual(run.status, 0, log)
        let after = try names.map { try Data(contentsOf: recorded.appendingPathComponent($0)) }
        XCTAssertEqual(before, after, "Benchmarks/results changed")
        let line = try XCTUnwrap(log.split(separator: "\n").last { $0.hasPrefix("stream-bench: results in ") }, log)
        let directory = URL(fileURLWithPath: String(line.dropFirst("stream-bench: results in ".count)))
        defer { try? FileManager.default.removeItem(at: directory) }
        XCTAssertEqual(directory.deletingLastPathComponent().path, package.appendingPathComponent(".build/stream-bench").path)
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.appendingPathComponent("latest.md").path))
    }

    func testQuickRunWritesCompleteResults() throws {
        let binary = URL(fileURLWithPath: try builtExecutable("stream-bench"))
        let clients = Self.clientsUnderTest()
        let output = FileManager.default.temporaryDirectory
            .appendingPathComponent("stream-bench-test-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: output) }
        let results = output.appendingPathComponent("results", isDirectory: true)

        let stdoutURL = output.appendingPathComponent("stdout.txt")
        let stderrURL = output.appendingPathComponent("stderr.txt")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        let stdout = try FileHandle(forWritingTo: stdoutURL)
        let stderr = try FileHandle(forWritingTo: stderrURL)
        defer {
            try? stdout.close()
            try? stderr.close()
        }

        let process = Process()
        process.executableURL = binary
        process.arguments = ["--quick", "--out", results.path, "--clients", clients.joined(separator: ",")]
        process.standardOutput = stdout
        process.standardError = stderr
        // Under a sanitizer (Scripts/sanitize sets SOCKETSTREAMS_SANITIZER) everything runs 2-10 times slower.
        let slowdown = ProcessInfo.processInfo.environment["SOCKETSTREAMS_SANITIZER"] == nil ? 1.0 : 4.0
        let started = Date()
        try process.run()
        let exit = ChildExit.waitOrEnd(process, timeout: 120 * slowdown)
        let elapsed = Date().timeIntervalSince(started)
        let log = (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""

        XCTAssertNotNil(exit, "stream-bench --quick did not finish within \(Int(120 * slowdown)) s:\n\(log)")
        XCTAssertEqual(exit, .exited(0), "stream-bench --quick failed:\n\(log)")
        XCTAssertLessThan(elapsed, 30 * slowdown, "--quick must stay well under \(Int(30 * slowdown)) s; took \(elapsed) s")

        let markdown = try String(contentsOf: results.appendingPathComponent("latest.md"), encoding: .utf8)
        XCTAssertTrue(markdown.contains("| Workload |"), markdown)
        let svg = try String(contentsOf: results.appendingPathComponent("ratios.svg"), encoding: .utf8)
        XCTAssertTrue(svg.hasPrefix("<?xml"))
        XCTAssertTrue(svg.contains("<svg") && svg.contains("</svg>"))
        let printed = (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? ""
        XCTAssertTrue(printed.contains("| Workload |"), "the table is also printed to stdout")

        let data = try Data(contentsOf: results.appendingPathComponent("latest.json"))
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let configuration = try XCTUnwrap(report["configuration"] as? [String: Any])
        XCTAssertEqual(configuration["quick"] as? Bool, true)
        XCTAssertEqual((report["failures"] as? [Any])?.count, 0)
        let machine = try XCTUnwrap(report["machine"] as? [String: Any])
        XCTAssertFalse((machine["uname"] as? String ?? "").isEmpty)
        XCTAssertFalse((machine["cpuModel"] as? String ?? "").isEmpty)

        let workloads = try XCTUnwrap(report["workloads"] as? [[String: Any]])
        for workload in Self.allWorkloads where clients.contains(where: { Self.supports($0, workload) }) {
            let entry = try XCTUnwrap(workloads.first { $0["workload"] as? String == workload }, "no \(workload) in the JSON")
            let entries = try XCTUnwrap(entry["results"] as? [[String: Any]])
            let reference = Self.reference(workload)
            for client in clients where Self.supports(client, workload) {
                let result = try XCTUnwrap(
                    entries.first { $0["client"] as? String == client },
                    "no \(client) result for \(workload)")
                XCTAssertNil(result["error"], "\(client) / \(workload): \(result["error"] ?? "")")
                let samples = try XCTUnwrap(result["samples"] as? [[String: Any]])
                XCTAssertEqual(samples.count, 1, "\(client) / \(workload): one run with --quick")
                let summary = try XCTUnwrap(result["summary"] as? [String: Any], "\(client) / \(workload): no figure")
                let median = try XCTUnwrap((summary["median"] as? NSNumber)?.doubleValue)
                XCTAssertTrue(median.isFinite, "\(client) / \(workload)")
                if workload != "idle" {
                    XCTAssertGreaterThan(median, 0, "\(client) / \(workload)")
                }
                if client != reference && workload != "idle" && clients.contains(reference) {
                    XCTAssertNotNil(result["ratioToBaseline"], "\(client) / \(workload): no ratio to \(reference)")
                }
                if ["udp-receive", "udp-send", "udp-send-quiet", "udp-fanin"].contains(workload) {
                    let sample = try XCTUnwrap(samples.first)
                    let sent = try XCTUnwrap(sample["datagrams"] as? Int, "\(client) / \(workload): no datagram count")
                    let received = try XCTUnwrap(sample["datagramsReceived"] as? Int, "\(client) / \(workload)")
                    XCTAssertTrue(received > 0 && received <= sent, "\(client) / \(workload): \(received) of \(sent)")
                }
                if workload == "udp-fanin" {
                    // Every one of the 1,000 peers was seen as a sender (the run fails otherwise).
                    XCTAssertEqual(samples.first?["datagramSenders"] as? Int, 1_000, "\(client) / \(workload)")
                }
                // Each of ours is held to its own goal (issue 48), which the Target column shows.
                if let goal = Self.goals[workload]?[client] {
                    let target = try XCTUnwrap(result["target"] as? [String: Any], "\(client) / \(workload): no target")
                    XCTAssertEqual((target["value"] as? NSNumber)?.doubleValue, goal, "\(client) / \(workload)")
                }
            }
        }
    }

    /// Some of the goals `stream-bench` holds each face to (`Workload.target(for:)`), from the issues.
    static let goals: [String: [String: Double]] = [
        "pingpong": ["streams-thread": 0.85, "streams-delegate": 0.80, "gcdasyncsocket": 0.85, "nwconnection": 0.85],
        "connect": ["streams-queued": 0.80, "streams-delegate": 0.72, "gcdasyncsocket": 0.80],
        "download": ["streams-thread": 0.97, "gcdasyncsocket": 0.95],
        "tls-handshake": ["streams-queued": 1.0, "streams-delegate": 0.85],
        "tls-download": ["streams-async": 1.2],
        "udp-pingpong": ["gcdasyncudpsocket": 0.85, "nwconnection": 0.85],
        "udp-send": ["nwconnection": 0.90],
    ]

    /// The clients the harness implements for each workload (filehandle: download and ping-pong only).
    /// `stream-bench scale` (issue 25) at two small Ns: exit status 0, both files in `--out`, a sample for
    /// every face at every N with figures that make sense (the timeouts marked where the face arms
    /// them), and nothing written to Benchmarks/results.
    func testScaleRunMeasuresEveryFaceAtEveryN() throws {
        let binary = URL(fileURLWithPath: try builtExecutable("stream-bench"))
        let recorded = packageRoot.appendingPathComponent("Benchmarks/results/scale.json")
        let recordedBefore = try? Data(contentsOf: recorded)
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("stream-bench-scale-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        let run = try runCommand(binary.path, ["scale", "--connections", "20,60", "--out", output.path], timeout: Self.runLimit)
        let log = run.stderr
        XCTAssertEqual(run.status, 0, log)
        XCTAssertTrue(FileManager.default.fileExists(atPath: output.appendingPathComponent("scale.md").path))
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: output.appendingPathComponent("scale.json"))) as? [String: Any]
        let samples = try XCTUnwrap(json?["samples"] as? [[String: Any]], log)
        let faces = ["baseline", "pairs-thread", "pairs-queue", "queued", "async", "gcd"]
        for face in faces {
            for connections in [20, 60] {
                let sample = samples.first { $0["face"] as? String == face && $0["connections"] as? Int == connections }
                XCTAssertNotNil(sample, "no sample for \(face) at \(connections)")
                guard let sample else { continue }
                for key in ["openCPUMicroseconds", "openWallMicroseconds", "roundTripMicroseconds"] {
                    let value = sample[key] as? Double ?? -1
                    XCTAssertTrue(value > 0 && value < 1e6, "\(face) \(connections) \(key): \(value)")
                }
                XCTAssertEqual(sample["timeoutsArmed"] as? Bool, face == "queued" || face == "gcd")
            }
        }
        XCTAssertEqual(try? Data(contentsOf: recorded), recordedBefore, "Benchmarks/results/scale.json changed")
    }

    /// `stream-bench scale --sources 3`: every face opens its connections from 127.0.0.1, .2 and .3 (the
    /// library's LocalBinding; viaInterface: for GCDAsyncSocket; bind(2) for the baseline). A binding
    /// that failed would fail the connection and the run; each sample and the report record the count.
    func testScaleRunSpreadsConnectionsOverSourceAddresses() throws {
        let binary = URL(fileURLWithPath: try builtExecutable("stream-bench"))
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("stream-bench-sources-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        let run = try runCommand(
            binary.path, ["scale", "--connections", "30", "--sources", "3", "--out", output.path], timeout: Self.runLimit)
        let log = run.stderr
        XCTAssertEqual(run.status, 0, log)
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: output.appendingPathComponent("scale.json"))) as? [String: Any]
        XCTAssertEqual(json?["sources"] as? Int, 3)
        let samples = try XCTUnwrap(json?["samples"] as? [[String: Any]], log)
        XCTAssertEqual(
            Set(samples.compactMap { $0["face"] as? String }), ["baseline", "pairs-thread", "pairs-queue", "queued", "async", "gcd"])
        for sample in samples { XCTAssertEqual(sample["sources"] as? Int, 3, "\(sample)") }
        let markdown = try String(contentsOf: output.appendingPathComponent("scale.md"), encoding: .utf8)
        XCTAssertTrue(markdown.contains("127.0.0.1 … 127.0.0.3"), markdown)
    }

    /// Bad arguments are a usage error (exit 2), never a crash: an N beyond what RLIMIT_NOFILE allows,
    /// an unknown face, a source count outside 1...254.
    func testScaleRunRejectsBadArguments() throws {
        let binary = URL(fileURLWithPath: try builtExecutable("stream-bench"))
        for arguments in [
            ["scale", "--connections", "100000000"], ["scale", "--faces", "nonsense"], ["scale", "--connections", "-3"],
            ["scale", "--sources", "0"], ["scale", "--sources", "255"], ["scale", "--sources", "many"],
        ] {
            XCTAssertEqual(try runCommand(binary.path, arguments, timeout: Self.runLimit).status, 2, "\(arguments)")
        }
    }

    /// Whether the harness runs `client` on `workload`: the UDP clients run the UDP workloads only,
    /// filehandle download and ping-pong only, nwconnection one connection at a time and the UDP workloads,
    /// nwconnection-framer ping-pong only.
    private static func supports(_ client: String, _ workload: String) -> Bool {
        let udpClient = ["baseline-udp", "baseline-udp-batch", "gcdasyncudpsocket"].contains(client)
        if workload.hasPrefix("udp-") { return udpClient || client == "nwconnection" }
        if udpClient { return false }
        if client == "nwconnection" { return ["download", "upload", "pingpong", "connect"].contains(workload) }
        if client == "nwconnection-framer" { return workload == "pingpong" }
        return client != "filehandle" || workload == "download" || workload == "pingpong"
    }

    /// The client a workload's ratios are to: the UDP ones' is the batch baseline.
    private static func reference(_ workload: String) -> String {
        workload.hasPrefix("udp-") ? "baseline-udp-batch" : "baseline"
    }

    private static func clientsUnderTest() -> [String] {
        let requested = ProcessInfo.processInfo.environment["STREAM_BENCH_TEST_CLIENTS"] ?? "all"
        let names = requested.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        return names.contains("all") || names.isEmpty ? allClients : names
    }
}
