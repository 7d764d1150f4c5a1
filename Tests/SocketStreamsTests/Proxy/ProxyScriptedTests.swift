#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Proxies that misbehave on purpose: a raw loopback server plays the proxy byte by byte (a correct
/// handshake with the target's bytes in the same segment, every reply code, truncation, wrong versions,
/// unknown address types, oversized lengths, garbage, silence), and each outcome is checked as the
/// client sees it: the events, the `streamError` (domain, code, userInfo, message) and the bytes.
final class ProxyScriptedTests: SocketStreamsTestCase {
    /// The target the pair is created for: a name nothing here resolves, so only a proxy can reach it.
    let targetHost = "target.example"
    let targetPort = 4242

    /// A pair for the target, through `proxy`.
    func proxiedPair(_ proxy: ProxyConfiguration) -> StreamPair {
        let pair = makePair(host: targetHost, port: targetPort)
        XCTAssertTrue(pair.input.setProperty(proxy, forKey: .proxyConfigurationKey))
        return pair
    }

    /// Opens the pair with a recorder and waits until both streams have failed; returns the error.
    func failure(of pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) -> (NSError?, DelegateRecorder) {
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "hello"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace, file: file, line: line)
        XCTAssertFalse(
            recorder.has(.hasSpaceAvailable, on: .output), "has-events before the proxy connected: \(recorder.trace)",
            file: file, line: line)
        XCTAssertFalse(recorder.has(.hasBytesAvailable, on: .input), recorder.trace, file: file, line: line)
        XCTAssertEqual(pair.input.streamStatus, .error, file: file, line: line)
        XCTAssertEqual(pair.output.streamStatus, .error, file: file, line: line)
        return (pair.output.streamError as NSError?, recorder)
    }

    /// Reads a SOCKS5 request (VER CMD RSV ATYP address port) and returns it.
    static func readSOCKS5Request(_ connection: RawConnection) throws -> [UInt8] {
        var request = [UInt8](try connection.readExactly(5))
        switch request[3] {
        case 1: request += try connection.readExactly(3 + 2)
        case 4: request += try connection.readExactly(15 + 2)
        default: request += try connection.readExactly(Int(request[4]) + 2)
        }
        return request
    }

    /// Reads up to the end of an HTTP head.
    static func readHead(_ connection: RawConnection) throws -> String {
        var head = [UInt8]()
        while head.suffix(4) != [13, 10, 13, 10] { head += try connection.readExactly(1) }
        return String(decoding: head, as: UTF8.self)
    }

    // MARK: - a correct exchange

    /// The SOCKS5 exchange byte for byte; the reply and the target's first bytes come in one segment, and
    /// the stream gets those bytes; has-events only once the proxy connected.
    func testSOCKS5ReplyAndTargetBytesInOneSegment() throws {
        let request = Locked<[UInt8]>([])
        let server = try startRawServer { connection in
            guard let greeting = try? connection.readExactly(3), Array(greeting) == [5, 1, 0] else { return }
            try? connection.write(Data([5, 0]))
            guard let connect = try? Self.readSOCKS5Request(connection) else { return }
            request.value = connect
            try? connection.write(Data([5, 0, 0, 1, 127, 0, 0, 1, 0x12, 0x34] + Array("WELCOME\n".utf8)))
            guard let ping = try? connection.readExactly(5), ping == Data("hello".utf8) else { return }
            try? connection.write("PONG\n")
            connection.shutdownWrite()
            _ = try? connection.readToEOF()
        }
        let pair = proxiedPair(.socks5(host: "127.0.0.1", port: server.port))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "hello"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.receivedString, "WELCOME\nPONG\n")
        XCTAssertEqual(request.value, [5, 1, 0, 3, UInt8(targetHost.utf8.count)] + Array(targetHost.utf8) + [0x10, 0x92])
        XCTAssertEqual(recorder.snapshot.events(.output).first, .openCompleted)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        // The pair still names the target, not the proxy.
        XCTAssertEqual(
            pair.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemoteHostName as String)) as? String, targetHost)
    }

    /// The longest reply SOCKS5 allows (a 255-byte bound name) is read exactly: not a byte of the
    /// target's data is taken with it.
    func testSOCKS5LongestReplyIsReadExactly() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readExactly(3)
            try? connection.write(Data([5, 0]))
            _ = try? Self.readSOCKS5Request(connection)
            try? connection.write(Data([5, 0, 0, 3, 255] + Array(repeating: 0x61, count: 255) + [0, 1] + Array("DATA".utf8)))
            connection.shutdownWrite()
            _ = try? connection.readToEOF()
        }
        let pair = proxiedPair(.socks5(host: "127.0.0.1", port: server.port))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.receivedString, "DATA")
    }

    /// HTTP CONNECT: the request as sent, and the tunnel's first bytes in the segment of the 200.
    func testHTTPConnectTunnelBytesInTheResponseSegment() throws {
        let head = Locked("")
        let server = try startRawServer { connection in
            guard let request = try? Self.readHead(connection) else { return }
            head.value = request
            try? connection.write("HTTP/1.1 200 Connection established\r\n\r\nWELCOME\n")
            connection.shutdownWrite()
            _ = try? connection.readToEOF()
        }
        let pair = proxiedPair(.httpConnect(host: "127.0.0.1", port: server.port, username: "tpuser", password: "tppass"))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.receivedString, "WELCOME\n")
        XCTAssertEqual(
            head.value,
            "CONNECT target.example:4242 HTTP/1.1\r\nHost: target.example:4242\r\n"
                + "Proxy-Authorization: Basic dHB1c2VyOnRwcGFzcw==\r\n\r\n")
    }

    // MARK: - failures

    struct Expected {
        var domain = "kCFErrorDomainCFNetwork"
        var code: Int
        var status: String?
        var message: String
    }

    /// Runs a SOCKS5 proxy that answers the greeting with `method`, then (if it gets that far) the
    /// request with `reply`, then closes; checks the error.
    func checkSOCKS5(
        method: [UInt8], reply: [UInt8]? = nil, credentials: Bool = false, _ expected: Expected,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let server = try startRawServer { connection in
            _ = try? connection.readExactly(credentials ? 4 : 3)
            try? connection.write(Data(method))
            if credentials && method == [5, 2] {
                _ = try? connection.readExactly(1 + 1 + 4 + 1 + 6)
                try? connection.write(Data(reply ?? []))
                return
            }
            guard let reply, (try? Self.readSOCKS5Request(connection)) != nil else { return }
            try? connection.write(Data(reply))
        }
        let proxy = ProxyConfiguration.socks5(
            host: "127.0.0.1", port: server.port,
            username: credentials ? "user" : nil, password: credentials ? "secret" : nil)
        let (error, _) = failure(of: proxiedPair(proxy), file: file, line: line)
        check(error, expected, proxyPort: server.port, file: file, line: line)
    }

    func check(_ error: NSError?, _ expected: Expected, proxyPort: Int, file: StaticString = #filePath, line: UInt = #line) {
        guard let error else { return XCTFail("no error", file: file, line: line) }
        XCTAssertEqual(error.domain, expected.domain, "\(error)", file: file, line: line)
        XCTAssertEqual(error.code, expected.code, "\(error)", file: file, line: line)
        XCTAssertEqual(
            error.localizedDescription, expected.message.replacingOccurrences(of: "PORT", with: "\(proxyPort)"),
            file: file, line: line)
        if let status = expected.status {
            XCTAssertEqual(error.userInfo[kCFSOCKSStatusCodeKey as String] as? String, status, file: file, line: line)
        }
        if expected.domain != NSPOSIXErrorDomain {
            XCTAssertEqual(error.userInfo[ProxyConfiguration.errorProxyHostKey] as? String, "127.0.0.1", file: file, line: line)
            XCTAssertEqual(intValue(error.userInfo[ProxyConfiguration.errorProxyPortKey]), proxyPort, file: file, line: line)
        }
    }

    func testSOCKS5RefusedTargetReportsTheReplyCode() throws {
        try checkSOCKS5(
            method: [5, 0], reply: [5, 5, 0, 1, 0, 0, 0, 0, 0, 0],
            Expected(
                code: 120, status: "5",
                message: "SOCKS5 proxy 127.0.0.1 port PORT refused the connection to target.example port 4242: "
                    + "connection refused by destination host (reply 5)"))
        try checkSOCKS5(
            method: [5, 0], reply: [5, 2, 0, 1, 0, 0, 0, 0, 0, 0],
            Expected(
                code: 120, status: "2",
                message: "SOCKS5 proxy 127.0.0.1 port PORT refused the connection to target.example port 4242: "
                    + "connection not allowed by ruleset (reply 2)"))
    }

    func testSOCKS5MethodAndCredentialFailures() throws {
        try checkSOCKS5(
            method: [5, 0xFF],
            Expected(
                code: 124, status: "255",
                message: "SOCKS5 proxy 127.0.0.1 port PORT requires authentication, and no username and password were given"))
        try checkSOCKS5(
            method: [5, 2],
            Expected(
                code: 123, status: "2", message: "SOCKS5 proxy 127.0.0.1 port PORT chose authentication method 2, which was not offered"))
        try checkSOCKS5(
            method: [5, 2], reply: [1, 1], credentials: true,
            Expected(
                code: 122, status: "1", message: "SOCKS5 proxy 127.0.0.1 port PORT rejected the username and password (status 1)"))
    }

    func testSOCKS5MalformedReplies() throws {
        try checkSOCKS5(
            method: Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8),
            Expected(
                code: 101, status: "72",
                message: "SOCKS5 proxy 127.0.0.1 port PORT does not speak SOCKS5: its reply to the greeting has version 72, not 5"))
        try checkSOCKS5(
            method: [5, 0], reply: [5, 0, 0, 7, 0, 0, 0, 0, 0, 0],
            Expected(
                code: 121, status: "7", message: "SOCKS5 proxy 127.0.0.1 port PORT replied with an unknown address type (7)"))
        try checkSOCKS5(
            method: [5, 0], reply: [5, 0, 0],
            Expected(
                domain: NSPOSIXErrorDomain, code: Int(ENOTCONN),
                message: "SOCKS5 proxy 127.0.0.1 port PORT closed the connection before it had connected target.example port 4242"))
        var generator = SplitMix64(seed: 42)
        let garbage = (0..<64).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        try checkSOCKS5(
            method: garbage,
            Expected(
                code: 101, status: "\(garbage[0])",
                message:
                    "SOCKS5 proxy 127.0.0.1 port PORT does not speak SOCKS5: its reply to the greeting has version \(garbage[0]), not 5"))
    }

    func testSOCKS4RejectionCodes() throws {
        let requestLength = 8 + 1 + targetHost.utf8.count + 1  // SOCKS4a: empty USERID, then the name
        for (code, expected) in [(91, 110), (92, 111), (93, 112), (17, 113)] {
            let server = try startRawServer { connection in
                _ = try? connection.readExactly(requestLength)
                try? connection.write(Data([0, UInt8(code), 0, 0, 0, 0, 0, 0]))
            }
            let (error, _) = failure(of: proxiedPair(.socks4(host: "127.0.0.1", port: server.port)))
            XCTAssertEqual(error?.domain, "kCFErrorDomainCFNetwork")
            XCTAssertEqual(error?.code, expected)
            XCTAssertEqual(error?.userInfo[kCFSOCKSStatusCodeKey as String] as? String, "\(code)")
            XCTAssertTrue(
                error?.localizedDescription.hasPrefix(
                    "SOCKS4 proxy 127.0.0.1 port \(server.port) rejected the connection to target.example port 4242: ") == true,
                error?.localizedDescription ?? "")
        }
    }

    func testHTTPConnectFailures() throws {
        let cases: [(String, Expected)] = [
            (
                "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n",
                Expected(code: 307, message: "HTTP proxy 127.0.0.1 port PORT requires authentication (407 Proxy Authentication Required)")
            ),
            (
                "HTTP/1.0 403 Filtered\r\n\r\n",
                Expected(code: 311, message: "HTTP proxy 127.0.0.1 port PORT refused the tunnel to target.example port 4242: 403 Filtered")
            ),
            (
                "HTTP/1.1 500 Unable to connect\r\n\r\n",
                Expected(
                    code: 311,
                    message: "HTTP proxy 127.0.0.1 port PORT refused the tunnel to target.example port 4242: 500 Unable to connect")
            ),
            (
                "\u{5}\u{0}\r\n\r\n",
                Expected(
                    code: 303,
                    message: "HTTP proxy 127.0.0.1 port PORT sent a malformed reply to CONNECT target.example:4242: "
                        + "malformed status line \"\\u{5}\\u{0}\"")
            ),
            (
                "HTTP/1.1 200 OK\r\n" + String(repeating: "X: y\r\n", count: 4000),
                Expected(
                    code: 303,
                    message: "HTTP proxy 127.0.0.1 port PORT sent a malformed reply to CONNECT target.example:4242: "
                        + "response head larger than 16384 bytes")
            ),
            (
                "HTTP/1.1 200 OK\r\n",
                Expected(
                    domain: NSPOSIXErrorDomain, code: Int(ENOTCONN),
                    message: "HTTP proxy 127.0.0.1 port PORT closed the connection before it had connected target.example port 4242")
            ),
        ]
        for (reply, expected) in cases {
            let server = try startRawServer { connection in
                _ = try? Self.readHead(connection)
                try? connection.write(reply)
            }
            let (error, _) = failure(of: proxiedPair(.httpConnect(host: "127.0.0.1", port: server.port)))
            check(error, expected, proxyPort: server.port)
            if expected.code == 307 || expected.code == 311 {
                XCTAssertEqual(intValue(error?.userInfo[ProxyConfiguration.errorHTTPStatusCodeKey]), Int(reply.dropFirst(9).prefix(3)))
            }
        }
    }

    /// A proxy that never answers: the open deadline covers the proxy handshake (time advanced by hand).
    func testSilentProxyHitsTheOpenDeadline() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = proxiedPair(.socks5(host: "127.0.0.1", port: server.port))
        let clock = ManualTime()
        pair.input.connection.someOptions.time = clock
        XCTAssertTrue(pair.input.setProperty(3.0, forKey: .connectTimeoutKey))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.openCompleted, on: .output) }, recorder.trace)
        XCTAssertEqual(clock.pending, [3.0], "the open's deadline is the only timer")
        clock.advance(by: 2.999)
        settle()
        XCTAssertEqual(pair.output.streamStatus, .open)
        clock.advance(by: 0.001)
        let (error, _) = failure(of: pair)
        XCTAssertEqual(error?.domain, NSPOSIXErrorDomain)
        XCTAssertEqual(error?.code, Int(ETIMEDOUT))
        XCTAssertEqual(
            error?.localizedDescription,
            "SOCKS5 handshake via proxy 127.0.0.1 port \(server.port) with target.example port 4242 "
                + "failed: Connection timed out")
    }

    /// Nothing listens at the proxy's address: the error names the proxy.
    func testProxyNotListening() throws {
        let port = try RawSocket.unusedPort()
        let (error, _) = failure(of: proxiedPair(.socks5(host: "127.0.0.1", port: port)))
        assertPOSIXError(error, [ECONNREFUSED])
        XCTAssertEqual(error?.localizedDescription, "Could not connect to SOCKS5 proxy 127.0.0.1 port \(port): Connection refused")
    }

    /// The proxy resets the connection mid-handshake.
    func testProxyResetMidHandshake() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readExactly(3)
            try? connection.resetOnClose()
            connection.close()
        }
        let (error, _) = failure(of: proxiedPair(.socks5(host: "127.0.0.1", port: server.port)))
        assertPOSIXError(error, [ECONNRESET, ENOTCONN])
        XCTAssertTrue(error?.localizedDescription.hasPrefix("SOCKS5") == true, error?.localizedDescription ?? "")
    }
}
