@testable import SocketStreams
import SocketStreamsTestSupport
import XCTest

/// Unit tests of the proxy client codecs (`ProxyClientHandshake`): the exact bytes of every request, every
/// reply split at every byte boundary, every malformed reply, and random replies, without sockets.
final class ProxyProtocolTests: XCTestCase {

    // MARK: - A driver that plays the proxy's side

    /// What one handshake did.
    struct Run {
        /// Everything the client sent, in order.
        var sent: [UInt8] = []
        /// The error, if the handshake failed.
        var error: ProxyError?
        var established = false
        /// Bytes handed to the stream (read past an HTTP head).
        var leftover: [UInt8] = []
        /// The proxy's bytes the client never read (they stay in the socket for the stream).
        var unread: [UInt8] = []
        /// The size of each read.
        var reads: [Int] = []
    }

    /// Runs a handshake against `reply`, delivered in `pieces` (one read never spans two pieces, as
    /// when they arrive in separate segments). Reads take at most `wanted` bytes, as the stage does;
    /// `closes`: the proxy closes once its bytes are all read.
    func run(
        _ configuration: ProxyConfiguration, target: ProxyTarget, pieces: [[UInt8]], closes: Bool = true,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Run {
        var machine = ProxyClientHandshake(configuration: configuration, target: target)
        var result = Run()
        var queue = pieces.filter { !$0.isEmpty }
        var steps = 0
        while true {
            steps += 1
            if steps > 100_000 {
                XCTFail("no progress", file: file, line: line)
                return result
            }
            result.sent += machine.takeOutput()
            if case .established = machine.state {
                result.established = true
                result.leftover = machine.leftover
                break
            }
            let wanted = machine.wanted
            XCTAssertGreaterThan(wanted, 0, "waiting for nothing in \(machine.state)", file: file, line: line)
            guard !queue.isEmpty else {
                if closes { result.error = machine.endOfStream() }
                break
            }
            let count = min(wanted, queue[0].count)
            let bytes = queue[0][..<count]
            queue[0].removeFirst(count)
            if queue[0].isEmpty { queue.removeFirst() }
            result.reads.append(count)
            do {
                try machine.receive(bytes)
            } catch {
                result.error = error
                break
            }
        }
        result.unread = queue.flatMap { $0 }
        return result
    }

    /// `run` with `reply` cut at every byte boundary into two pieces, and byte by byte: the outcome must
    /// not depend on how the bytes arrive.
    func runSplitEverywhere(
        _ configuration: ProxyConfiguration, target: ProxyTarget, reply: [UInt8],
        file: StaticString = #filePath, line: UInt = #line
    ) -> Run {
        let whole = run(configuration, target: target, pieces: [reply], file: file, line: line)
        for cut in 1..<max(reply.count, 1) {
            let split = run(
                configuration, target: target, pieces: [Array(reply[..<cut]), Array(reply[cut...])],
                file: file, line: line)
            assertSame(split, whole, "cut at \(cut)", file: file, line: line)
        }
        let bytewise = run(configuration, target: target, pieces: reply.map { [$0] }, file: file, line: line)
        assertSame(bytewise, whole, "byte by byte", file: file, line: line)
        return whole
    }

    func assertSame(_ a: Run, _ b: Run, _ what: String, file: StaticString, line: UInt) {
        XCTAssertEqual(a.sent, b.sent, what, file: file, line: line)
        XCTAssertEqual(a.error, b.error, what, file: file, line: line)
        XCTAssertEqual(a.established, b.established, what, file: file, line: line)
        if a.established {
            XCTAssertEqual(a.leftover + a.unread, b.leftover + b.unread, what, file: file, line: line)
        }
    }

    let nameTarget = ProxyTarget(address: .name("example.com"), port: 443, host: "example.com")
    let v4Target = ProxyTarget(address: .ipv4([127, 0, 0, 1]), port: 8080, host: "127.0.0.1")
    let v6Target = ProxyTarget(address: .ipv6(Array(repeating: 0, count: 15) + [1]), port: 80, host: "::1")
    let socks5 = ProxyConfiguration.socks5(host: "127.0.0.1", port: 1080)
    let socks5Auth = ProxyConfiguration.socks5(host: "127.0.0.1", port: 1080, username: "user", password: "secret")
    let socks4 = ProxyConfiguration.socks4(host: "127.0.0.1", port: 1080, userID: "me")
    let http = ProxyConfiguration.httpConnect(host: "127.0.0.1", port: 3128)

    static let payload = Array("HELLO from the target".utf8)

    // MARK: - SOCKS5

    func testSOCKS5NoAuthenticationNameTarget() {
        let reply: [UInt8] = [5, 0] + [5, 0, 0, 1, 10, 0, 0, 1, 0x1F, 0x90] + Self.payload
        let result = runSplitEverywhere(socks5, target: nameTarget, reply: reply)
        XCTAssertNil(result.error)
        XCTAssertTrue(result.established)
        XCTAssertEqual(result.sent, [5, 1, 0] + [5, 1, 0, 3, 11] + Array("example.com".utf8) + [0x01, 0xBB])
        XCTAssertEqual(result.unread, Self.payload, "not a byte of the target's data may be read by the handshake")
        XCTAssertEqual(result.leftover, [])
        XCTAssertEqual(result.reads, [2, 5, 5])
    }

    func testSOCKS5AddressTargetsUseATYP1And4() {
        let reply: [UInt8] = [5, 0] + [5, 0, 0, 4] + Array(repeating: 0, count: 16) + [0, 80]
        let v6 = runSplitEverywhere(socks5, target: v6Target, reply: reply)
        XCTAssertTrue(v6.established)
        XCTAssertEqual(v6.sent, [5, 1, 0] + [5, 1, 0, 4] + Array(repeating: 0, count: 15) + [1, 0, 80])
        XCTAssertEqual(v6.reads, [2, 5, 17])
        let v4 = run(socks5, target: v4Target, pieces: [[5, 0, 5, 0, 0, 1, 127, 0, 0, 1, 0, 1]])
        XCTAssertTrue(v4.established)
        XCTAssertEqual(v4.sent, [5, 1, 0] + [5, 1, 0, 1, 127, 0, 0, 1, 0x1F, 0x90])
    }

    func testSOCKS5ReplyWithDomainNameBoundAddress() {
        let bound = Array("proxy.local".utf8)
        let reply: [UInt8] = [5, 0] + [5, 0, 0, 3, UInt8(bound.count)] + bound + [4, 0] + Self.payload
        let result = runSplitEverywhere(socks5, target: nameTarget, reply: reply)
        XCTAssertTrue(result.established)
        XCTAssertEqual(result.unread, Self.payload)
        let empty = run(socks5, target: nameTarget, pieces: [[5, 0, 5, 0, 0, 3, 0, 0, 0] + Self.payload])
        XCTAssertTrue(empty.established, "a zero-length bound name is still a complete reply")
        XCTAssertEqual(empty.unread, Self.payload)
    }

    func testSOCKS5UsernamePassword() {
        let reply: [UInt8] = [5, 2] + [1, 0] + [5, 0, 0, 1, 0, 0, 0, 0, 0, 0]
        let result = runSplitEverywhere(socks5Auth, target: nameTarget, reply: reply)
        XCTAssertTrue(result.established)
        XCTAssertEqual(
            result.sent,
            [5, 2, 0, 2] + [1, 4] + Array("user".utf8) + [6] + Array("secret".utf8)
                + [5, 1, 0, 3, 11] + Array("example.com".utf8) + [1, 187])
        // With credentials offered, the proxy may still choose no authentication.
        let none = run(socks5Auth, target: nameTarget, pieces: [[5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0]])
        XCTAssertTrue(none.established)
        XCTAssertEqual(none.sent, [5, 2, 0, 2] + [5, 1, 0, 3, 11] + Array("example.com".utf8) + [1, 187])
        // Some servers answer the sub-negotiation with version 5 rather than 1.
        let five = run(socks5Auth, target: nameTarget, pieces: [[5, 2, 5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0]])
        XCTAssertTrue(five.established)
    }

    func testSOCKS5Failures() {
        let cases: [(ProxyConfiguration, [UInt8], ProxyError)] = [
            (socks5, [5, 0xFF], .noAcceptableMethod(offeredCredentials: false)),
            (socks5Auth, [5, 0xFF], .noAcceptableMethod(offeredCredentials: true)),
            (socks5, [5, 2], .unexpectedMethod(2)),  // username/password without credentials offered
            (socks5Auth, [5, 1], .unexpectedMethod(1)),  // GSSAPI was never offered
            (socks5, [4, 0], .wrongVersion(got: 4, expected: 5, phase: .methodSelection)),
            (socks5, Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8), .wrongVersion(got: 0x48, expected: 5, phase: .methodSelection)),
            (socks5Auth, [5, 2, 1, 1], .badCredentials(status: 1)),
            (socks5Auth, [5, 2, 1, 0xFF], .badCredentials(status: 0xFF)),
            (socks5Auth, [5, 2, 2, 0], .wrongVersion(got: 2, expected: 1, phase: .authentication)),
            (socks5, [5, 0, 5, 5, 0, 1, 0, 0, 0, 0, 0, 0], .socks5Refused(reply: 5)),
            (socks5, [5, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0], .socks5Refused(reply: 2)),
            (socks5, [5, 0, 5, 1, 0, 1, 0, 0], .socks5Refused(reply: 1)),  // truncated after REP (tiny-proxy does)
            (socks5, [5, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], .wrongVersion(got: 0, expected: 5, phase: .connectReply)),
            (socks5, [5, 0, 5, 0, 0, 9, 0, 0, 0, 0, 0, 0], .badAddressType(9)),
            (socks5, [5, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0], .badAddressType(0)),
        ]
        for (configuration, reply, expected) in cases {
            let result = runSplitEverywhere(configuration, target: nameTarget, reply: reply)
            XCTAssertEqual(result.error, expected, "reply \(reply)")
            XCTAssertFalse(result.established)
        }
    }

    func testSOCKS5TruncatedRepliesEndInClosedNotAHang() {
        let full: [UInt8] = [5, 2] + [1, 0] + [5, 0, 0, 3, 4] + Array("host".utf8) + [0, 80]
        for length in 0..<full.count {
            let result = run(socks5Auth, target: nameTarget, pieces: [Array(full[..<length])], closes: true)
            XCTAssertEqual(result.error, .closed, "reply cut after \(length) bytes")
        }
        XCTAssertTrue(run(socks5Auth, target: nameTarget, pieces: [full]).established)
    }

    func testSOCKS5ReplyLengthsAreBoundedByTheProtocol() {
        // The largest reply the client will ever read: ATYP 3 with a 255-byte name.
        let reply: [UInt8] = [5, 0] + [5, 0, 0, 3, 255] + Array(repeating: 0x61, count: 255) + [0, 1]
        let result = run(socks5, target: nameTarget, pieces: [reply + Self.payload])
        XCTAssertTrue(result.established)
        XCTAssertEqual(result.reads, [2, 5, 257])
        XCTAssertEqual(result.unread, Self.payload)
    }

    // MARK: - SOCKS4 and 4a

    func testSOCKS4AddressTarget() {
        let reply: [UInt8] = [0, 90, 0, 0, 0, 0, 0, 0] + Self.payload
        let result = runSplitEverywhere(socks4, target: v4Target, reply: reply)
        XCTAssertTrue(result.established)
        XCTAssertEqual(result.sent, [4, 1, 0x1F, 0x90, 127, 0, 0, 1] + Array("me".utf8) + [0])
        XCTAssertEqual(result.unread, Self.payload)
        XCTAssertEqual(result.reads, [8])
    }

    func testSOCKS4aNameTarget() {
        let result = run(ProxyConfiguration.socks4(host: "p", port: 1), target: nameTarget, pieces: [[0, 90, 0, 0, 0, 0, 0, 0]])
        XCTAssertTrue(result.established)
        XCTAssertEqual(result.sent, [4, 1, 1, 187, 0, 0, 0, 1, 0] + Array("example.com".utf8) + [0])
    }

    func testSOCKS4Failures() {
        let cases: [([UInt8], ProxyError)] = [
            ([0, 91, 0, 0, 0, 0, 0, 0], .socks4Rejected(code: 91)),
            ([0, 92, 0, 0, 0, 0, 0, 0], .socks4Rejected(code: 92)),
            ([0, 93, 0, 0, 0, 0, 0, 0], .socks4Rejected(code: 93)),
            ([0, 1, 0, 0, 0, 0, 0, 0], .socks4Rejected(code: 1)),
            ([4, 90, 0, 0, 0, 0, 0, 0], .wrongVersion(got: 4, expected: 0, phase: .connectReply)),
            ([5, 0], .closed),  // a SOCKS5 proxy's answer to a SOCKS4 request, then a close
            ([0, 90, 0], .closed),
        ]
        for (reply, expected) in cases {
            XCTAssertEqual(runSplitEverywhere(socks4, target: v4Target, reply: reply).error, expected, "reply \(reply)")
        }
    }

    // MARK: - HTTP CONNECT

    func testCONNECTRequestAndLeftover() {
        let authenticated = ProxyConfiguration.httpConnect(
            host: "proxy", port: 3128, username: "tpuser", password: "tppass",
            additionalHeaders: [("User-Agent", "test/1")])
        let reply = Array("HTTP/1.1 200 Connection established\r\nProxy-Agent: x\r\n\r\n".utf8) + Self.payload
        let result = runSplitEverywhere(authenticated, target: nameTarget, reply: reply)
        XCTAssertTrue(result.established)
        XCTAssertEqual(
            String(decoding: result.sent, as: UTF8.self),
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n"
                + "Proxy-Authorization: Basic dHB1c2VyOnRwcGFzcw==\r\nUser-Agent: test/1\r\n\r\n")
        XCTAssertEqual(result.leftover + result.unread, Self.payload, "the target's bytes after the head belong to the stream")
    }

    func testCONNECTAuthorities() {
        let v6 = run(http, target: v6Target, pieces: [Array("HTTP/1.0 200 OK\r\n\r\n".utf8)])
        XCTAssertTrue(v6.established)
        XCTAssertTrue(String(decoding: v6.sent, as: UTF8.self).hasPrefix("CONNECT [::1]:80 HTTP/1.1\r\nHost: [::1]:80\r\n"))
        let v4 = run(http, target: v4Target, pieces: [Array("HTTP/1.1 200 OK\n\n".utf8)])
        XCTAssertTrue(v4.established, "bare LF line endings are accepted")
        XCTAssertTrue(String(decoding: v4.sent, as: UTF8.self).hasPrefix("CONNECT 127.0.0.1:8080 HTTP/1.1\r\n"))
    }

    func testCONNECTSkipsInformationalResponses() {
        let reply = Array("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n".utf8) + Self.payload
        let result = runSplitEverywhere(http, target: nameTarget, reply: reply)
        XCTAssertTrue(result.established)
        XCTAssertEqual(result.leftover + result.unread, Self.payload)
    }

    func testCONNECTFailures() {
        let refused = runSplitEverywhere(
            http, target: nameTarget,
            reply: Array(
                "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 5\r\n\r\nnope!".utf8
            ))
        guard case .httpRefused(407, "Proxy Authentication Required", let head)? = refused.error else {
            return XCTFail("\(String(describing: refused.error))")
        }
        XCTAssertTrue(head.hasPrefix("HTTP/1.1 407"))
        XCTAssertEqual(
            runSplitEverywhere(http, target: nameTarget, reply: Array("HTTP/1.1 403 Filtered\r\n\r\n".utf8)).error,
            .httpRefused(status: 403, reason: "Filtered", head: "HTTP/1.1 403 Filtered\r\n\r\n"))
        let malformed: [(String, String)] = [
            ("SSH-2.0-OpenSSH_9.2\r\n", "malformed status line"),
            ("\u{5}\u{0}\n", "malformed status line"),
            ("HTTP/2 200\r\n\r\n", "unsupported HTTP version"),
            ("HTTP/1.1 200 OK\r\nBad Field\r\n\r\n", "malformed header field"),
            ("HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", "carriage return"),
            ("HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
        ]
        for (reply, expected) in malformed {
            let result = runSplitEverywhere(http, target: nameTarget, reply: Array(reply.utf8))
            guard case .httpMalformed(let description)? = result.error else {
                XCTFail("\(reply.debugDescription): \(String(describing: result.error))")
                continue
            }
            XCTAssertTrue(description.contains(expected), "\(reply.debugDescription): \(description)")
        }
        XCTAssertEqual(run(http, target: nameTarget, pieces: [Array("HTTP/1.1 200 OK\r\nA: b\r\n".utf8)]).error, .closed)
        XCTAssertEqual(run(http, target: nameTarget, pieces: []).error, .closed)
    }

    func testCONNECTHeadIsBounded() {
        let huge = Array(("HTTP/1.1 200 OK\r\n" + String(repeating: "X-Filler: aaaaaaaaaaaaaaaa\r\n", count: 1000)).utf8)
        let result = run(http, target: nameTarget, pieces: [huge], closes: false)
        guard case .httpMalformed(let description)? = result.error else { return XCTFail("\(String(describing: result.error))") }
        XCTAssertTrue(description.contains("larger than \(ProxyClientHandshake.httpMaxHeadSize)"), description)
        let consumed = huge.count - result.unread.count
        XCTAssertLessThanOrEqual(consumed, ProxyClientHandshake.httpMaxHeadSize + 4096, "stops reading soon after the limit")
    }

    // MARK: - random replies

    /// Random bytes (and random mutations of good replies) as the proxy's side: every run ends
    /// (established or an error), never reads more than it was allowed, never traps.
    func testRandomRepliesNeverTrapOrOverread() {
        var generator = SplitMix64(seed: 0x5EED_0F_5_0C45)
        let good: [(ProxyConfiguration, ProxyTarget, [UInt8])] = [
            (socks5, nameTarget, [5, 0, 5, 0, 0, 3, 3, 0x61, 0x62, 0x63, 0, 80]),
            (socks5Auth, v6Target, [5, 2, 1, 0, 5, 0, 0, 4] + Array(repeating: 0, count: 18)),
            (socks4, v4Target, [0, 90, 0, 0, 0, 0, 0, 0]),
            (http, nameTarget, Array("HTTP/1.1 200 OK\r\nA: b\r\n\r\n".utf8)),
        ]
        for round in 0..<4000 {
            let (configuration, target, template) = good[round % good.count]
            var reply = template
            switch generator.next() % 3 {
            case 0:
                reply = (0..<Int(generator.next() % 64)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            case 1:
                for _ in 0...Int(generator.next() % 3) where !reply.isEmpty {
                    reply[Int(generator.next() % UInt64(reply.count))] = UInt8(truncatingIfNeeded: generator.next())
                }
            default:
                reply = Array(reply.prefix(Int(generator.next() % UInt64(reply.count + 1))))
            }
            var pieces: [[UInt8]] = []
            var rest = reply[...]
            while !rest.isEmpty {
                let size = 1 + Int(generator.next() % UInt64(rest.count))
                pieces.append(Array(rest.prefix(size)))
                rest = rest.dropFirst(size)
            }
            let result = run(configuration, target: target, pieces: pieces)
            XCTAssertTrue(result.established != (result.error != nil), "round \(round): \(reply)")
        }
    }

    // MARK: - helpers

    func testBase64() {
        let vectors = [
            "": "", "f": "Zg==", "fo": "Zm8=", "foo": "Zm9v", "foob": "Zm9vYg==", "fooba": "Zm9vYmE=",
            "foobar": "Zm9vYmFy",
        ]
        for (plain, encoded) in vectors {
            XCTAssertEqual(Base64.encode(Array(plain.utf8)), encoded)
        }
        XCTAssertEqual(Base64.encode([0xFF, 0xFE, 0xFD]), "//79")
    }

    func testTargetsFromEndpoints() {
        XCTAssertEqual(ProxyTarget(.host("example.com", port: 443)), nameTarget)
        XCTAssertEqual(ProxyTarget(.host("127.0.0.1", port: 8080)), v4Target)
        XCTAssertEqual(ProxyTarget(.host("::1", port: 80)), v6Target)
        XCTAssertEqual(ProxyTarget(.host("[::1]", port: 80)), v6Target)
        XCTAssertNil(ProxyTarget(.host("example.com", port: 65536 + 443)), "a port is never masked to 16 bits")
        XCTAssertNil(ProxyTarget(.unix(path: "/tmp/x")))
        XCTAssertNil(ProxyTarget(.native(fd: 3)))
    }
}
