import Foundation
import SocketStreamsTestSupport
import XCTest

/// Guides/SecuringStreamsWithTLS.md and its example program, `secure-streams`.
final class SecuringStreamsGuideTests: SocketStreamsTestCase {
    /// What the example prints: one line per topic, with no port or time in any of them.
    static let expectedOutput = """
        dictionary: CN=localhost is the certificate we expect; answer: APPLE SPELLING
        typed: TLSv1.3, ALPN http/1.1, server CN=localhost; answer: TYPED SETTINGS
        untrusted: errorOccurred: NSOSStatusErrorDomain -9812
        no client certificate: errorOccurred: NSOSStatusErrorDomain -9863
        client certificate: answer: HELLO, CN=alice
        starttls: PLAIN TEXT, GO, then over TLSv1.3: ENCRYPTED
        right pin: answer: PINNED
        wrong pin: errorOccurred: NSOSStatusErrorDomain -9807

        """

    private var guide: String {
        get throws {
            try String(contentsOf: packageRoot.appendingPathComponent("Guides/SecuringStreamsWithTLS.md"), encoding: .utf8)
        }
    }

    /// Each client does what the guide says: the certificate checked by hand, TLS 1.3 with ALPN, the
    /// untrusted server refused, client certificates required, STARTTLS, pinning; and it exits 0.
    func testExamplePrintsWhatTheGuideSays() throws {
        let result = try runCommand(try builtExecutable("secure-streams"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        let lines = result.stdoutText.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let expected = Self.expectedOutput.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(lines.count, expected.count, result.stdoutText)
        for (line, wanted) in zip(lines, expected) {
            XCTAssertEqual(line, wanted)
        }
    }

    /// The guide's sample output is the example's output, word for word.
    func testGuideShowsTheExampleOutput() throws {
        let guide = try self.guide
        let marker = try XCTUnwrap(guide.range(of: "```text\n"), "the guide has no ```text block")
        let end = try XCTUnwrap(guide.range(of: "```\n", range: marker.upperBound..<guide.endIndex))
        XCTAssertEqual(String(guide[marker.upperBound..<end.lowerBound]), Self.expectedOutput, "the guide's sample output drifted")
    }

    /// Every Swift block in the guide is marked with the example and occurs in it word for word
    /// (indentation aside); every relative link points at a file that exists.
    func testGuideSwiftBlocksAndLinksMatchTheSources() throws {
        let guide = try self.guide
        let blocks = ReadmeExampleTests.markedBlocks(in: guide)
        XCTAssertEqual(
            guide.components(separatedBy: "\n").filter { $0 == "```swift" }.count, blocks.count,
            "a Swift block in the guide without an example marker")
        for block in blocks {
            XCTAssertEqual(block.path, "Guides/Examples/SecuringStreams/main.swift")
            let source = try String(contentsOf: packageRoot.appendingPathComponent(block.path), encoding: .utf8)
            XCTAssertTrue(
                ReadmeExampleTests.contains(source, block.code), "guide block not found word for word in \(block.path):\n\(block.code)")
        }
        // Links in the prose: outside code blocks and `code` spans.
        let prose = guide.components(separatedBy: "```").enumerated().filter { $0.offset % 2 == 0 }.map(\.element)
            .joined().components(separatedBy: "`").enumerated().filter { $0.offset % 2 == 0 }.map(\.element).joined()
        let guides = packageRoot.appendingPathComponent("Guides")
        var rest = prose[...]
        while let open = rest.range(of: "](") {
            guard let close = rest[open.upperBound...].firstIndex(of: ")") else { break }
            let target = String(rest[open.upperBound..<close])
            rest = rest[close...]
            guard !target.hasPrefix("http"), !target.hasPrefix("#") else { continue }
            let path = String(target.split(separator: "#", maxSplits: 1)[0])
            XCTAssertTrue(FileManager.default.fileExists(atPath: guides.appendingPathComponent(path).path), "broken link \(target)")
        }
    }
}
