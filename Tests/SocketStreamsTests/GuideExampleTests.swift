import Foundation
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
