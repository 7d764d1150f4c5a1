import Foundation
import SocketStreamsTestSupport
import XCTest

/// The guides' example programs (Guides/Examples), run as a reader would run them.
final class GuideExampleTests: SocketStreamsTestCase {
    /// Guides/HandlingErrors.md: each failure reported with the domain and code the guide's table gives.
    func testHandlingErrorsReportsEachFailureAsTheGuideSays() throws {
        let result = try runCommand(try builtExecutable("handling-errors"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        let lines = result.stdoutText.split(separator: "\n").map(String.init)
        func line(_ label: String) -> String { lines.first { $0.hasPrefix(label + ": ") } ?? "(no \(label) line)" }
        XCTAssertTrue(line("refused").hasPrefix("refused: errorOccurred: NSPOSIXErrorDomain \(ECONNREFUSED): "), line("refused"))
        XCTAssertTrue(line("refused").hasSuffix("Connection refused"), line("refused"))
        // EAI_NONAME, or EAI_AGAIN where no name server answers (the tests' network namespace has none).
        XCTAssertTrue(
            [EAI_NONAME, EAI_AGAIN].contains {
                line("name").hasPrefix("name: errorOccurred: kCFErrorDomainCFNetwork 2 (kCFGetAddrInfoFailureKey \($0)): ")
            }, line("name"))
        XCTAssertEqual(line("end"), "end: endEncountered after 3 bytes (bye)")
        let untrusted = line("untrusted")
        XCTAssertTrue(
            ["-9813", "-9812", "-9807"].contains { untrusted.hasPrefix("untrusted: errorOccurred: NSOSStatusErrorDomain \($0): ") },
            untrusted)
        XCTAssertTrue(line("wrong name").hasPrefix("wrong name: errorOccurred: NSOSStatusErrorDomain -9843: "), line("wrong name"))
        XCTAssertEqual(line("trusted"), "trusted: endEncountered after 6 bytes (secret)")
        // The guide shows the same lines.
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/HandlingErrors.md"), encoding: .utf8)
        for label in ["refused", "name", "end", "untrusted", "wrong name", "trusted"] {
            XCTAssertTrue(guide.contains("\n\(label): "), "Guides/HandlingErrors.md does not show the \(label) line")
        }
    }
}

extension GuideExampleTests {
    /// Guides/ReadingAndWriting.md: the whole payload arrives through partial writes, and the server's
    /// count matches.
    func testReadingAndWritingDeliversEveryByte() throws {
        for megabytes in [1, 8] {
            let result = try runCommand(try builtExecutable("reading-and-writing"), [String(megabytes)], timeout: 60)
            XCTAssertEqual(result.status, 0, result.stderr)
            let bytes = megabytes << 20
            XCTAssertTrue(
                result.stdoutText.hasPrefix("sent \(bytes) bytes; the server received \(bytes) bytes\nwrites: "),
                result.stdoutText)
        }
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/ReadingAndWriting.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains("sent 8388608 bytes; the server received 8388608 bytes\n"), "the guide's sample output drifted")
    }
}

extension GuideExampleTests {
    /// Guides/AcceptingConnections.md: three clients answered by the plain listener, three over TLS.
    func testAcceptingConnectionsAnswersEveryClient() throws {
        let result = try runCommand(try builtExecutable("accepting-connections"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        let lines = result.stdoutText.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        XCTAssertEqual(lines.count, 8, result.stdoutText)
        XCTAssertTrue(lines.first?.hasPrefix("plain on 127.0.0.1:") == true, result.stdoutText)
        XCTAssertEqual(Array(lines.dropFirst().prefix(3)), ["HELLO 1", "HELLO 2", "HELLO 3"])
        XCTAssertTrue(lines.dropFirst(4).first?.hasPrefix("TLS on 127.0.0.1:") == true, result.stdoutText)
        XCTAssertEqual(Array(lines.suffix(3)), ["SECRET 1", "SECRET 2", "SECRET 3"])
    }
}

extension GuideExampleTests {
    /// Guides/PollingOrRunLoop.md: the same exchange, polling, on this thread's run loop and on the stream thread.
    func testPollingOrRunLoopGetsTheSameAnswerEachWay() throws {
        let result = try runCommand(try builtExecutable("polling-or-run-loop"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "polling: echo: polling\nrun loop: echo: run loop\nstream thread: echo: stream thread\n")
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/PollingOrRunLoop.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains(result.stdoutText), "the guide's sample output drifted")
    }
}

extension GuideExampleTests {
    /// Guides/SettingUpStreams.md: one exchange over a pair made each of the four ways.
    func testSettingUpStreamsMakesAPairEachWay() throws {
        let result = try runCommand(try builtExecutable("setting-up-streams"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(
            result.stdoutText,
            """
            host and port: echo: host and port (remote host 127.0.0.1)
            getStreamsToHost: echo: getStreamsToHost
            native socket: echo: native socket (handle is the fd: true)
            unix path: echo: unix path

            """)
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/SettingUpStreams.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains(result.stdoutText), "the guide's sample output drifted")
    }
}

extension GuideExampleTests {
    /// Guides/GettingStarted.md: the first delegate fetches the page the guide shows (its text block has
    /// the program's output with the HTTP line ends as plain newlines).
    func testGettingStartedShowsTheDelegateProgramsOutput() throws {
        let result = try runCommand(try builtExecutable("getting-started-delegate"), [], timeout: 30)
        XCTAssertEqual(result.status, 0, result.stderr)
        let shown = result.stdoutText.replacingOccurrences(of: "\r\n", with: "\n")
        XCTAssertEqual(shown, "HTTP/1.0 200 OK\nContent-Type: text/plain\n\nHello from SocketStreams.\n")
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/GettingStarted.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains("```text\n" + shown + "```\n"), "the guide's sample output drifted")
    }
}

extension GuideExampleTests {
    /// Guides/HTTPGetOverStreams.md: the `-v` trace it shows is what `stream-get -v` prints, with the
    /// port and the date replaced by PORT and DATE. Lines are compared as a multiset: the server runs on
    /// the stream thread, so how the client's events interleave with its reply is not fixed.
    func testStreamGetWalkThroughShowsTheRealTrace() throws {
        let result = try runCommand(try builtExecutable("stream-get"), ["-v"], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        let trace = result.stderr.split(separator: "\n").map { line -> String in
            var line = String(line)
            if line.hasPrefix("< Date: ") { line = "< Date: DATE" }
            return line.replacingOccurrences(of: #"(port |127\.0\.0\.1:)[0-9]+"#, with: "$1PORT", options: .regularExpression)
        }
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/HTTPGetOverStreams.md"), encoding: .utf8)
        let start = try XCTUnwrap(guide.range(of: "```text\n"))
        let end = try XCTUnwrap(guide.range(of: "\n```", range: start.upperBound..<guide.endIndex))
        let shown = guide[start.upperBound..<end.lowerBound].split(separator: "\n").map(String.init)
        XCTAssertEqual(
            shown.sorted(), trace.sorted(), "the guide's trace drifted; stream-get -v printed:\n\(trace.joined(separator: "\n"))")
        XCTAssertEqual(shown.first, trace.first)
    }
}

extension GuideExampleTests {
    /// Guides/Performance.md: its table is the latest stream-bench run's (Benchmarks/results/latest.md),
    /// each cell the median ratio (or, for idle pairs, the bytes per pair) of that client and workload.
    func testPerformanceGuideShowsTheLatestBenchmarkRun() throws {
        func rows(_ markdown: String) -> [[String]] {
            markdown.split(separator: "\n").filter { $0.hasPrefix("| ") }.map {
                $0.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast().map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
            }
        }
        let latest = try String(
            contentsOf: packageRoot.appendingPathComponent("Benchmarks/results/latest.md"), encoding: .utf8)
        var results: [String: [String: String]] = [:]
        var workload = ""
        for row in rows(latest).dropFirst() where row.count >= 5 {
            if !row[0].isEmpty { workload = row[0] }
            let median = row[2]
            let ratio = String(row[4].prefix { $0 != " " })
            results[workload, default: [:]][row[1]] = workload.hasPrefix("idle") ? median : ratio
        }
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/Performance.md"), encoding: .utf8)
        // The first table (the operations' table further down has its own test).
        let firstTable = guide.components(separatedBy: "\n\n").first { $0.hasPrefix("| Workload |") } ?? ""
        let table = rows(firstTable)
        XCTAssertEqual(table.first, ["Workload", "delegate", "stream thread", "dispatch queue", "polling"])
        XCTAssertEqual(Set(table.dropFirst().map { $0[0] }), Set(results.keys), "the guide's workloads differ from latest.md's")
        let clients = ["streams-delegate", "streams-thread", "streams-queue", "streams-polling"]
        for row in table.dropFirst() {
            XCTAssertEqual(Array(row.dropFirst()), clients.map { results[row[0]]?[$0] ?? "?" }, "Guides/Performance.md, \(row[0])")
        }
        let date = try XCTUnwrap(latest.range(of: #"Date: [0-9T:-]+Z"#, options: .regularExpression))
        XCTAssertTrue(guide.contains(latest[date].dropFirst("Date: ".count)), "the guide names another run's date")
    }
}

extension GuideExampleTests {
    /// Guides/AsyncAndQueuedOperations.md: the queued-operations and async-await programs print what
    /// the guide shows (the queued client's last read times out on purpose; the async client's last
    /// read is cancelled by its deadline).
    func testQueuedAndAsyncExamplesPrintWhatTheGuideShows() throws {
        let guide = try String(
            contentsOf: packageRoot.appendingPathComponent("Guides/AsyncAndQueuedOperations.md"), encoding: .utf8)
        let expected = [
            "queued-operations": """
            connected to 127.0.0.1
            greeting: HELLO queued
            reply: HELLO
            reply: QUEUED
            reply: WORLD
            no reply yet: extending the read once
            still no reply: giving up
            disconnected: readTimedOut(tag: 2)

            """,
            "async-await": """
            greeting: HELLO async
            reply: HELLO
            reply: ASYNC
            reply: WORLD
            downloaded 100000 bytes
            no reply within 0.2 s: the read was cancelled
            afterwards: CancellationError()

            """,
        ]
        for (program, output) in expected {
            let result = try runCommand(try builtExecutable(program), [], timeout: 60)
            XCTAssertEqual(result.status, 0, "\(program): \(result.stderr)")
            XCTAssertEqual(result.stdoutText, output, program)
            XCTAssertTrue(guide.contains("```text\n" + output + "```"), "the guide's sample output of \(program) drifted")
        }
    }
}

extension GuideExampleTests {
    /// Guides/Performance.md's async/await and queued-operations table is the run in
    /// Benchmarks/results/operations/latest.md: each client's median ratio, and the ratio of each to the
    /// delegate client's.
    func testPerformanceGuideShowsTheOperationsRun() throws {
        let latest = try String(
            contentsOf: packageRoot.appendingPathComponent("Benchmarks/results/operations/latest.md"), encoding: .utf8)
        var ratios: [String: [String: Double]] = [:]
        var workload = ""
        for line in latest.split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count > 5 else { continue }
            if !cells[1].isEmpty { workload = cells[1] }
            if let ratio = Double(cells[5].prefix { $0 != " " }) { ratios[workload, default: [:]][cells[2]] = ratio }
        }
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/Performance.md"), encoding: .utf8)
        let table = try XCTUnwrap(guide.components(separatedBy: "\n\n").first { $0.hasPrefix("| Workload | delegate | async |") })
        var checked = 0
        for line in table.split(separator: "\n").dropFirst(2) {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            let row = try XCTUnwrap(ratios[cells[1]], "no \(cells[1]) in operations/latest.md")
            let delegate = try XCTUnwrap(row["streams-delegate"])
            let async = try XCTUnwrap(row["streams-async"])
            let queued = try XCTUnwrap(row["streams-queued"])
            let expected = [delegate, async, queued, async / delegate, queued / delegate].map { String(format: "%.2f", $0) }
            XCTAssertEqual(Array(cells[2...6]), expected, cells[1])
            checked += 1
        }
        XCTAssertEqual(checked, ratios.count, "the table and operations/latest.md have different workloads")
    }
}

extension GuideExampleTests {
    /// Guides/Performance.md's scale table is the recorded scale run (Benchmarks/results/scale.md): for
    /// each face, the bytes per idle connection at the smallest and largest N and their slope, the CPU
    /// per round trip at both, and the CPU per open at 1,000, 10,000 and the largest N.
    func testPerformanceGuideShowsTheRecordedScaleRun() throws {
        func cells(_ line: Substring) -> [String] {
            line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast().map {
                $0.trimmingCharacters(in: .whitespaces)
            }
        }
        let scale = try String(contentsOf: packageRoot.appendingPathComponent("Benchmarks/results/scale.md"), encoding: .utf8)
        // face → N → (open CPU, idle bytes, CPU per round trip); face → slope.
        var samples: [String: [String: (open: String, idle: String, roundTrip: String)]] = [:]
        var slopes: [String: String] = [:]
        for line in scale.split(separator: "\n") where line.hasPrefix("| ") {
            let row = cells(line)
            let face = row[0].replacingOccurrences(of: " (timeouts)", with: "")
            if row.count == 7, Int(row[1]) != nil {
                let idle = String(row[4].prefix { $0 != " " })
                samples[face, default: [:]][row[1]] = (row[2], idle, row[6])
            } else if row.count == 6, row[4] != "slope B/conn" {
                slopes[face] = String(row[4].prefix { $0 != " " })
            }
        }
        let sizes = try XCTUnwrap(samples["baseline"]?.keys.compactMap { Int($0) }.sorted())
        let (smallest, largest) = (String(try XCTUnwrap(sizes.first)), String(try XCTUnwrap(sizes.last)))
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/Performance.md"), encoding: .utf8)
        let table = try XCTUnwrap(guide.components(separatedBy: "\n\n").first { $0.hasPrefix("| Face | B per idle conn at 1,000 |") })
        var checked = 0
        for line in table.split(separator: "\n").dropFirst(2) {
            let row = cells(line)
            let face = row[0]
            let at = try XCTUnwrap(samples[face], "no \(face) in scale.md")
            let expected = [
                at[smallest]?.idle, at[largest]?.idle, slopes[face], at[smallest]?.roundTrip, at[largest]?.roundTrip,
                at[smallest]?.open, at["10000"]?.open, at[largest]?.open,
            ].map { $0 ?? "?" }
            XCTAssertEqual(Array(row.dropFirst()), expected, "Guides/Performance.md scale table, \(face)")
            checked += 1
        }
        XCTAssertEqual(checked, samples.count, "the guide's scale table and scale.md have different faces")
        let date = try XCTUnwrap(scale.range(of: #"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]+Z"#, options: .regularExpression))
        XCTAssertTrue(guide.contains(scale[date]), "the guide names another scale run's date")
    }
}

extension GuideExampleTests {
    /// Guides/Datagrams.md: the datagrams program prints what the guide shows (a GCDAsyncUdpSocket echo,
    /// a datagram too large that fails alone, a close after sending, then the async exchange).
    func testDatagramsExamplePrintsWhatTheGuideShows() throws {
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/Datagrams.md"), encoding: .utf8)
        let output = """
            reply: HELLO
            reply: UDP
            reply: WORLD
            datagram 9 not sent: NSPOSIXErrorDomain 90
            reply: AGAIN
            closed, error: nil
            async reply: HELLO
            async reply: ASYNC

            """
        let result = try runCommand(try builtExecutable("datagrams"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, output)
        XCTAssertTrue(guide.contains("```text\n" + output + "```"), "the guide's sample output drifted")
    }
}

extension GuideExampleTests {
    /// Guides/NetworkFramework.md: the network-framework program prints what the guide shows (an
    /// NWListener echo, a final message's half-close, a refused connect that waits until cancelled).
    func testNetworkFrameworkExamplePrintsWhatTheGuideShows() throws {
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/NetworkFramework.md"), encoding: .utf8)
        let output = """
            listener: ready
            client: ready
            client: sent, sending side closed, error: nil
            client: reply ["HELLO", "NETWORK FRAMEWORK"]
            client: cancelled
            refused: waiting, POSIXErrorCode(rawValue: 111): Connection refused
            refused: cancelled

            """
        let result = try runCommand(try builtExecutable("network-framework"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, output)
        XCTAssertTrue(guide.contains("```text\n" + output + "```"), "the guide's sample output drifted")
    }
}
