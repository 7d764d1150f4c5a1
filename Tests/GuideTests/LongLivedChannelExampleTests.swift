import Foundation
import SocketStreamsTestSupport
import XCTest

extension GuideExampleTests {
    /// What `long-lived-channel` prints: the same every run (no ports, times or random delays).
    static let longLivedChannelOutput = """
        the server drops the connection, then comes back
          connected (attempt 1)
          reply 1: HELLO
          reply 2: WORLD
          connection lost: the peer closed the connection
          server stopped
          request 3 failed: the peer closed the connection
          attempt 1 in at most 0.05 s
          attempt 1 failed: Connection refused
          attempt 2 in at most 0.1 s
          attempt 2 failed: Connection refused
          server restarted on the same port
          attempt 3 in at most 0.2 s
          connected (attempt 3)
          reply 4: AGAIN
        the server stops answering
          connected (attempt 1)
          reply 1: HELLO
          connection lost: no answer to 3 heartbeats
          request 2 failed: no answer to 3 heartbeats
          attempt 1 in at most 0.05 s
          connected (attempt 1)

        """

    /// Guides/LongLivedChannel.md: the channel across a dropped and restarted server, and across a
    /// server that goes silent; the guide shows the same output.
    func testLongLivedChannelSurvivesADropAndASilentServer() throws {
        let result = try runCommand(try builtExecutable("long-lived-channel"), [], timeout: 60)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, Self.longLivedChannelOutput)
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/LongLivedChannel.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains("```text\n" + Self.longLivedChannelOutput + "```\n"), "the guide's sample output drifted")
    }

    /// Guides/LongLivedChannel.md: each ```swift block is preceded by `<!-- example: PATH -->` and
    /// found word for word (indentation aside) in that file.
    func testLongLivedChannelGuideCodeIsTheExamplesCode() throws {
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/LongLivedChannel.md"), encoding: .utf8)
        let blocks = ReadmeExampleTests.markedBlocks(in: guide)
        let swiftBlocks = guide.components(separatedBy: "\n").filter { $0 == "```swift" }.count
        XCTAssertEqual(swiftBlocks, blocks.count, "a Swift block without a marker")
        XCTAssertGreaterThan(blocks.count, 0)
        for block in blocks {
            let source = try String(contentsOf: packageRoot.appendingPathComponent(block.path), encoding: .utf8)
            XCTAssertTrue(ReadmeExampleTests.contains(source, block.code), "not found word for word in \(block.path):\n\(block.code)")
        }
    }
}
