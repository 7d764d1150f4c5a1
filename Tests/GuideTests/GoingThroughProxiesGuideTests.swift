import Foundation
import SocketStreamsTestSupport
import XCTest
import TestPeers

/// Guides/GoingThroughProxies.md: the going-through-proxies example through real proxies (Support/ProxyPeers.swift,
/// each kept to loopback targets): danted for SOCKS5 and SOCKS4, microsocks with a username and password for
/// SOCKS5 with the name resolved by the proxy, `ssh -D` for SOCKS4a, tinyproxy with Basic authentication for
/// HTTP CONNECT. The guide's sample output is this run's output.
final class GoingThroughProxiesGuideTests: SocketStreamsTestCase {
    /// What the example prints for the proxies below, in this order: the guide shows the same lines.
    static let expectedOutput = """
        socks5 (dictionary): echo: HELLO
        socks5 (typed): echo: HELLO
        socks5 (TLS): echo: SECRET
        socks5, closed port: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 120 (kCFSOCKSStatusCodeKey 5)
        socks5h (dictionary): echo: HELLO
        socks5h (typed): echo: HELLO
        socks5h (TLS): echo: SECRET
        socks5h, closed port: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 120 (kCFSOCKSStatusCodeKey 5)
        socks5h, wrong password: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 122 (kCFSOCKSStatusCodeKey 2)
        socks5h, no credentials: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 124 (kCFSOCKSStatusCodeKey 255)
        socks4 (dictionary): echo: HELLO
        socks4 (typed): echo: HELLO
        socks4 (TLS): echo: SECRET
        socks4, closed port: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 110 (kCFSOCKSStatusCodeKey 91)
        socks4a (dictionary): echo: HELLO
        socks4a (typed): echo: HELLO
        socks4a (TLS): echo: SECRET
        socks4a, closed port: openCompleted, then errorOccurred: NSPOSIXErrorDomain \(ENOTCONN)
        http (typed): echo: HELLO
        http (TLS): echo: SECRET
        http, closed port: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 311 (HTTP status 500)
        http, wrong password: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 307 (HTTP status 401)
        http, no credentials: openCompleted, then errorOccurred: kCFErrorDomainCFNetwork 307 (HTTP status 407)

        """

    func testEveryProxyKindAnswersAndRefusesAsTheGuideSays() throws {
        let (dante, dantePort) = try Peer.dante(directory: try makeTemporaryDirectory())
        addCleanup { dante.stop() }
        let (microsocks, microsocksPort) = try Peer.microsocks(user: "user", password: "secret")
        addCleanup { microsocks.stop() }
        let (ssh, sshPort) = try Peer.sshSOCKS(directory: try makeTemporaryDirectory())
        addCleanup { ssh.stop() }
        let (tinyproxy, tinyproxyPort) = try Peer.tinyproxy(directory: try makeTemporaryDirectory(), user: "user", password: "secret")
        addCleanup { tinyproxy.stop() }

        let proxies = [
            "socks5://127.0.0.1:\(dantePort)",
            "socks5h://user:secret@127.0.0.1:\(microsocksPort)",
            "socks4://127.0.0.1:\(dantePort)",
            "socks4a://127.0.0.1:\(sshPort)",
            "http://user:secret@127.0.0.1:\(tinyproxyPort)",
        ]
        let result = try runCommand(try builtExecutable("going-through-proxies"), proxies, timeout: 60)
        XCTAssertEqual(result.status, 0, result.stdoutText + result.stderr)
        XCTAssertEqual(result.stdoutText, Self.expectedOutput)

        // The guide's sample output is the same, in its ```text block.
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/GoingThroughProxies.md"), encoding: .utf8)
        XCTAssertTrue(guide.contains("```text\n" + result.stdoutText + "```\n"), "the guide's sample output drifted:\n\(result.stdoutText)")
    }

    /// Without a proxy, or with something that is not a proxy URL, it prints its usage and exits 2.
    func testUsage() throws {
        for arguments in [[], ["ftp://127.0.0.1:21"], ["socks5://127.0.0.1:1080", "127.0.0.1:1080"]] {
            let result = try runCommand(try builtExecutable("going-through-proxies"), arguments, timeout: 30)
            XCTAssertEqual(result.status, 2, "\(arguments)")
            XCTAssertEqual(result.stdoutText, "", "\(arguments)")
            XCTAssertTrue(result.stderr.hasPrefix("usage: going-through-proxies "), "\(arguments): \(result.stderr)")
        }
    }

    /// Every ```swift block of the guide occurs word for word in the example program.
    func testGuideSwiftBlocksAreInTheExample() throws {
        let guide = try String(contentsOf: packageRoot.appendingPathComponent("Guides/GoingThroughProxies.md"), encoding: .utf8)
        let blocks = ReadmeExampleTests.markedBlocks(in: guide)
        XCTAssertEqual(
            guide.components(separatedBy: "\n").filter { $0 == "```swift" }.count, blocks.count,
            "a Swift block without its example marker")
        for block in blocks {
            XCTAssertEqual(block.path, "Guides/Examples/GoingThroughProxies/main.swift")
            let source = try String(contentsOf: packageRoot.appendingPathComponent(block.path), encoding: .utf8)
            XCTAssertTrue(ReadmeExampleTests.contains(source, block.code), "not in \(block.path) word for word:\n\(block.code)")
        }
    }
}
