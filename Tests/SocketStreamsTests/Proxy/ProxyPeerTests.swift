#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest
import TestPeers

/// The proxy peers themselves (Support/ProxyPeers.swift), checked with curl before the library is
/// tested against them: each one carries a request to a python http.server on loopback, and each
/// refuses a target outside loopback at once (curl fails well within its 5 s limit, so the refusal is
/// the proxy's or the kernel's, not a timeout).
final class ProxyPeerTests: SocketStreamsTestCase {
    private let body = "through the proxy\n"
    /// TEST-NET-1: never a target the tests may reach.
    private let outsideTarget = "http://192.0.2.1:80/"

    /// An http.server on the family's loopback address serving `index.html` (= `body`).
    private func startTarget(_ family: IPFamily = .v4) throws -> (peer: Peer, port: Int) {
        let directory = try makeTemporaryDirectory()
        try Data(body.utf8).write(to: directory.appendingPathComponent("index.html"))
        let target = try Peer.httpServer(family: family, directory: directory)
        addCleanup { target.peer.stop() }
        return target
    }

    private func curl(_ arguments: [String]) throws -> (result: CommandResult, seconds: TimeInterval) {
        let started = Date()
        let result = try runCommand("curl", ["-sS", "--max-time", "5"] + arguments, timeout: 15)
        return (result, Date().timeIntervalSince(started))
    }

    /// curl through the proxy (`proxyArguments`) to `url` returns `body`.
    private func assertFetches(_ proxyArguments: [String], _ url: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let (result, _) = try curl(proxyArguments + [url])
        XCTAssertEqual(result.status, 0, "curl \(proxyArguments) \(url): \(result.stderr)", file: file, line: line)
        XCTAssertEqual(result.stdoutText, body, "curl \(proxyArguments) \(url)", file: file, line: line)
    }

    /// curl through the proxy to `outsideTarget` fails, and not by timing out; returns its stderr.
    @discardableResult
    private func assertRefusesOutside(_ proxyArguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let (result, seconds) = try curl(proxyArguments + [outsideTarget])
        XCTAssertNotEqual(result.status, 0, "curl \(proxyArguments) \(outsideTarget) succeeded", file: file, line: line)
        XCTAssertNotEqual(result.status, 28, "curl timed out: \(result.stderr)", file: file, line: line)
        XCTAssertLessThan(seconds, 4, "refusal took \(seconds) s: \(result.stderr)", file: file, line: line)
        return result.stderr
    }

    /// Waits (output arrives asynchronously) until `peer` printed `text`.
    private func assertEventuallyPrinted(_ peer: Peer, _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(
            peer.waitForOutput(containing: text, timeout: shortTimeout), "\(peer.name) did not print \"\(text)\":\n\(peer.printed)",
            file: file, line: line)
    }

    func testDanteSOCKS4AndSOCKS5OnBothFamilies() throws {
        let target = try startTarget()
        let target6 = try startTarget(.v6)
        let (dante, port) = try Peer.dante(directory: try makeTemporaryDirectory())
        addCleanup { dante.stop() }

        try assertFetches(["--socks4", "127.0.0.1:\(port)"], "http://127.0.0.1:\(target.port)/index.html")
        try assertFetches(["--socks5", "[::1]:\(port)"], "http://127.0.0.1:\(target.port)/index.html")
        try assertFetches(["--socks5-hostname", "127.0.0.1:\(port)"], "http://localhost:\(target.port)/index.html")
        assertEventuallyPrinted(target.peer, "\(Peer.proxyEgressAddress) - -")
        try assertFetches(["--socks5", "127.0.0.1:\(port)"], "http://[::1]:\(target6.port)/index.html")

        // Its own rules: SOCKS5 reply 2 (not allowed by ruleset), SOCKS4 reply 91, logged as block(…).
        XCTAssertTrue(try assertRefusesOutside(["--socks5", "127.0.0.1:\(port)"]).contains("(2)"))
        XCTAssertTrue(try assertRefusesOutside(["--socks4", "127.0.0.1:\(port)"]).contains("(91)"))
        assertEventuallyPrinted(dante, "192.0.2.1.80")
        XCTAssertTrue(dante.printed.contains("block("), dante.printed)
    }

    func testMicrosocksWithAndWithoutPassword() throws {
        let target = try startTarget()
        let (open, openPort) = try Peer.microsocks()
        addCleanup { open.stop() }
        try assertFetches(["--socks5-hostname", "127.0.0.1:\(openPort)"], "http://localhost:\(target.port)/index.html")
        assertEventuallyPrinted(target.peer, "\(Peer.proxyEgressAddress) - -")
        try assertRefusesOutside(["--socks5", "127.0.0.1:\(openPort)"])

        let (locked, lockedPort) = try Peer.microsocks(user: "ms-user", password: "ms-pass", family: .v6)
        addCleanup { locked.stop() }
        try assertFetches(["--socks5", "ms-user:ms-pass@[::1]:\(lockedPort)"], "http://127.0.0.1:\(target.port)/index.html")
        let (wrong, _) = try curl(["--socks5", "ms-user:wrong@[::1]:\(lockedPort)", "http://127.0.0.1:\(target.port)/"])
        XCTAssertNotEqual(wrong.status, 0, "a wrong password was accepted")
        try assertRefusesOutside(["--socks5", "ms-user:ms-pass@[::1]:\(lockedPort)"])
    }

    func testSSHDynamicForwardingSOCKS4aAndSOCKS5() throws {
        let target = try startTarget()
        let target6 = try startTarget(.v6)
        let (ssh, port) = try Peer.sshSOCKS(directory: try makeTemporaryDirectory())
        addCleanup { ssh.stop() }

        try assertFetches(["--socks4", "127.0.0.1:\(port)"], "http://127.0.0.1:\(target.port)/index.html")
        try assertFetches(["--socks4a", "127.0.0.1:\(port)"], "http://localhost:\(target.port)/index.html")
        try assertFetches(["--socks5-hostname", "127.0.0.1:\(port)"], "http://localhost:\(target.port)/index.html")
        try assertFetches(["--socks5", "127.0.0.1:\(port)"], "http://[::1]:\(target6.port)/index.html")

        // PermitOpen: sshd denies the channel, ssh closes the SOCKS connection without a reply.
        try assertRefusesOutside(["--socks5", "127.0.0.1:\(port)"])
        try assertRefusesOutside(["--socks4a", "127.0.0.1:\(port)"])
        assertEventuallyPrinted(ssh, "to connect to host 192.0.2.1 port 80, but the request was denied")
    }

    func testTinyproxyCONNECTWithBasicAuthentication() throws {
        let target = try startTarget()
        let target6 = try startTarget(.v6)
        let (open, openPort) = try Peer.tinyproxy(directory: try makeTemporaryDirectory())
        addCleanup { open.stop() }
        try assertFetches(["-p", "-x", "http://127.0.0.1:\(openPort)"], "http://127.0.0.1:\(target.port)/index.html")
        assertEventuallyPrinted(target.peer, "\(Peer.proxyEgressAddress) - -")

        let (locked, port) = try Peer.tinyproxy(directory: try makeTemporaryDirectory(), user: "tp-user", password: "tp-pass")
        addCleanup { locked.stop() }
        try assertFetches(["-p", "-x", "http://tp-user:tp-pass@[::1]:\(port)"], "http://localhost:\(target.port)/index.html")
        try assertFetches(["-p", "-x", "http://tp-user:tp-pass@127.0.0.1:\(port)"], "http://[::1]:\(target6.port)/index.html")
        let (anonymous, _) = try curl(["-p", "-x", "http://127.0.0.1:\(port)", "http://127.0.0.1:\(target.port)/"])
        XCTAssertTrue(anonymous.stderr.contains("407"), anonymous.stderr)

        // The Filter: 403, "Proxying refused on filtered domain".
        XCTAssertTrue(try assertRefusesOutside(["-p", "-x", "http://tp-user:tp-pass@127.0.0.1:\(port)"]).contains("403"))
        assertEventuallyPrinted(locked, #"filtered domain "192.0.2.1""#)
    }

    /// With `connectPorts`, CONNECT to any other port is refused (403, "Access violation").
    func testTinyproxyConnectPorts() throws {
        let target = try startTarget()
        let (proxy, port) = try Peer.tinyproxy(directory: try makeTemporaryDirectory(), connectPorts: [target.port])
        addCleanup { proxy.stop() }
        try assertFetches(["-p", "-x", "http://127.0.0.1:\(port)"], "http://127.0.0.1:\(target.port)/index.html")
        let other = try RawSocket.unusedPort()
        let (refused, _) = try curl(["-p", "-x", "http://127.0.0.1:\(port)", "http://127.0.0.1:\(other)/"])
        XCTAssertTrue(refused.stderr.contains("403"), refused.stderr)
    }
}
