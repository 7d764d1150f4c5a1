#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import HTTPParsing
import SocketStreams
@testable import StreamGetCore
import XCTest
import TestPeers

/// `stream-get`'s curl-style transfer options without the network: ports, Locations, options, request headers, `-w`.
final class StreamGetTransferOptionTests: XCTestCase {
    /// Ports are read as curl reads them: digits, leading zeros allowed, 0 to 65535.
    func testPortsAsCurlReadsThem() throws {
        for (text, port) in [("08000", 8000), ("0", 0), ("65535", 65535), ("00000000000080", 80), ("1", 1)] {
            XCTAssertEqual(try HTTPURL(parsing: "http://127.0.0.1:\(text)/").port, port, text)
        }
        for text in ["65536", "99999999999999999999", "-1", "+80", "8o", "0x50", "١٢"] {
            XCTAssertThrowsError(try HTTPURL(parsing: "http://127.0.0.1:\(text)/"), text) { error in
                XCTAssertEqual(error as? HTTPURLError, .invalidPort(text))
            }
        }
        XCTAssertFalse(try HTTPURL(parsing: "http://h/").hasExplicitPort)
        XCTAssertFalse(try HTTPURL(parsing: "http://h:/").hasExplicitPort)
        XCTAssertTrue(try HTTPURL(parsing: "http://h:80/").hasExplicitPort)
        XCTAssertEqual(try HTTPURL(parsing: "http://h:80/"), try HTTPURL(parsing: "http://h/"), "the same URL either way")
    }

    /// A proxy's port is its own (08000 is 8000, not the default 1080); a proxy without one gets 1080.
    func testProxyPorts() throws {
        for (text, port) in [
            ("127.0.0.1:08000", 8000), ("127.0.0.1:8000", 8000), ("proxy", 1080), ("proxy:", 1080), ("[::1]:00080", 80),
            ("socks5h://u:p@proxy:01080", 1080), ("proxy:0", 0), ("http://proxy:080/", 80),
        ] {
            XCTAssertEqual(try StreamGetProxyRoute.parse(text).configuration.port, port, text)
        }
        for text in ["127.0.0.1:65536", "proxy:99999", "proxy:-1", "[::1]:123456"] {
            XCTAssertThrowsError(try StreamGetProxyRoute.parse(text), text) { error in
                XCTAssertTrue("\(error)".contains("expected a decimal number from 0 to 65535"), "\(error)")
            }
        }
    }

    /// Locations resolve against the URL as RFC 3986 §5.2 says.
    func testResolvesLocations() throws {
        let base = try HTTPURL(parsing: "http://example.com:8080/a/b/c?q=1")
        let cases: [(String, String)] = [
            ("d", "http://example.com:8080/a/b/d"),
            ("./d", "http://example.com:8080/a/b/d"),
            ("../d", "http://example.com:8080/a/d"),
            ("../../../../d", "http://example.com:8080/d"),
            ("/x/./y/../z", "http://example.com:8080/x/z"),
            ("?r=2", "http://example.com:8080/a/b/c?r=2"),
            ("d?r=2#frag", "http://example.com:8080/a/b/d?r=2"),
            ("", "http://example.com:8080/a/b/c?q=1"),
            ("//other.example/p", "http://other.example/p"),
            ("https://other.example:8443/p", "https://other.example:8443/p"),
            ("HTTP://other.example/", "http://other.example/"),
            ("a b", "http://example.com:8080/a/b/a%20b"),
            ("..", "http://example.com:8080/a/"),
            ("/é", "http://example.com:8080/%C3%A9"),
        ]
        for (location, expected) in cases {
            XCTAssertEqual(try base.resolving(location).description, expected, location)
        }
        XCTAssertThrowsError(try base.resolving("ftp://example.com/")) { XCTAssertEqual($0 as? HTTPURLError, .unsupportedScheme("ftp")) }
        XCTAssertThrowsError(try base.resolving("http://example.com:70000/")) {
            XCTAssertEqual($0 as? HTTPURLError, .invalidPort("70000"))
        }
        for location in ["/a\tb", "x\u{7F}", "/\r\nX-Injected: 1"] {
            XCTAssertThrowsError(try base.resolving(location), location.debugDescription) {
                XCTAssertEqual($0 as? HTTPURLError, .invalidCharacter)
            }
        }
        XCTAssertEqual(try HTTPURL(parsing: "http://h/dir/file.tar.gz?x=1").remoteFileName, "file.tar.gz")
        XCTAssertEqual(try HTTPURL(parsing: "http://h/dir/").remoteFileName, "")
    }

    /// The transfer options parse in curl's spellings, short ones grouped (a value flag last in its group).
    func testParsesTransferOptions() throws {
        let options = try StreamGetOptions(arguments: [
            "-sSLfI", "-o", "a", "-O", "--create-dirs", "-H", "X-A: 1", "--header", "Accept;", "-A", "agent/1", "-#",
            "--max-redirs", "3", "-w", "%{http_code}", "-u", "u:p", "-m", "7", "http://h/1", "http://h/2", "-so", "b",
        ])
        var expected = StreamGetTransferOptions()
        expected.outputs = [.file("a"), .remoteName, .file("b")]
        (expected.silent, expected.showError, expected.followRedirects, expected.failOnHTTPError, expected.head) = (
            true, true, true, true, true
        )
        (expected.createDirectories, expected.progressBar, expected.maxRedirects) = (true, true, 3)
        (expected.headers, expected.userAgent, expected.writeOut, expected.user) = (
            ["X-A: 1", "Accept;"], "agent/1", "%{http_code}", "u:p"
        )
        XCTAssertEqual(options.transfer, expected)
        XCTAssertEqual(options.urls, ["http://h/1", "http://h/2"])
        XCTAssertEqual(options.timeout, 7)
        XCTAssertEqual(try StreamGetOptions(arguments: ["--max-time", "2.5"]).timeout, 2.5)
        XCTAssertEqual(try StreamGetOptions(arguments: ["--max-redirs", "-1"]).transfer.maxRedirects, -1)
        let bad: [([String], String)] = [
            (["-o"], "-o needs a value"),
            (["-ov", "x"], "-o takes a value: give it as a separate argument"),
            (["--max-redirs", "many"], "invalid --max-redirs \"many\": expected a number (-1: no limit)"),
            (["-H", "no colon"], "invalid header \"no colon\": expected \"Name: value\", \"Name:\" or \"Name;\""),
            (["-H", "X: a\r\nEvil: 1"], "invalid header \"X: a\r\nEvil: 1\": expected \"Name: value\", \"Name:\" or \"Name;\""),
        ]
        for (arguments, message) in bad {
            XCTAssertThrowsError(try StreamGetOptions(arguments: arguments), "\(arguments)") { error in
                XCTAssertEqual((error as? StreamGetUsageError)?.message, message)
            }
        }
    }

    /// -H replaces, removes or adds request headers as curl's does; Connection: close only when asked.
    func testRequestHeaders() throws {
        let url = try HTTPURL(parsing: "http://h:8080/p")
        let request = String(
            decoding: HTTPRequest.make(
                method: "HEAD", url: url, headers: ["Accept: text/plain", "User-Agent:", "X-Empty;", "X-New:  v  "],
                closesConnection: false), as: UTF8.self)
        XCTAssertEqual(request, "HEAD /p HTTP/1.1\r\nHost: h:8080\r\nAccept: text/plain\r\nX-Empty:\r\nX-New: v\r\n\r\n")
        XCTAssertEqual(HTTPRequest.make(method: "GET", url: url, closesConnection: true), HTTPRequest.get(url))
    }

    /// -w expands curl's variables, %% and escapes; unknown variables expand to nothing and are reported.
    func testWriteOutExpansion() {
        var report = TransferReport(start: 1_000_000_000, effectiveURL: "http://h/")
        report.timings = FetchTimings(start: 1_000_000_000, usesTLS: false)
        report.timings.nameResolved = 1_001_000_000
        report.timings.connected = 1_002_000_000
        report.timings.handshakesDone = 1_003_000_000
        report.timings.firstByte = 1_004_000_000
        report.timings.end = 1_500_000_000
        (report.statusCode, report.bodyBytes, report.connectionsOpened) = (200, 1000, 1)
        report.remoteEndpoint = ("127.0.0.1", 8080)
        var unknown: [String] = []
        let line = report.expand(
            "%{time_namelookup} %{time_connect} %{time_appconnect} %{time_pretransfer} %{time_starttransfer} %{time_total}"
                + " %{speed_download} %{http_code} %{num_connects} %{remote_ip}:%{remote_port} %{nope}100%%\\t\\n",
            unknown: &unknown)
        XCTAssertEqual(line, "0.001000 0.002000 0.000000 0.003000 0.004000 0.500000 2000 200 1 127.0.0.1:8080 100%\t\n")
        XCTAssertEqual(unknown, ["nope"])
        report.statusCode = 0
        XCTAssertEqual(report.expand("%{http_code}", unknown: &unknown), "000")
    }
}

/// `stream-get` against real local servers: several URLs over one connection, redirects, files, exit codes, the
/// progress meter and `-w`.
final class StreamGetTransferTests: SocketStreamsTestCase {
    func runStreamGet(_ arguments: [String], timeout: TimeInterval = 60) throws -> CommandResult {
        let environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
        return try runCommand(
            try streamGetExecutable().path, ["--timeout", "30"] + arguments, timeout: timeout, environment: environment)
    }

    func startScriptedPeer() throws -> ScriptedHTTPPeer {
        let peer = try ScriptedHTTPPeer(directory: try makeTemporaryDirectory())
        addCleanup { peer.peer.stop() }
        return peer
    }

    /// Three URLs to one server go over one connection: the server counts one accept, -w's num_connects 1, 0, 0.
    func testThreeURLsOverOneConnection() throws {
        let server = try startScriptedPeer()
        let result = try runStreamGet([
            "-w", "[%{http_code} %{num_connects}]\\n", server.url("/text/a"), server.url("/chunked"), server.url("/count"),
        ])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "a\n[200 1]\nonetwo[200 0]\n1\n[200 0]\n", "the third saw one accepted connection")

        // Connection: close ends the reuse; the next URL opens a new connection.
        let closing = try runStreamGet(["-w", "%{num_connects}\\n", server.url("/close"), server.url("/text/b"), server.url("/text/c")])
        XCTAssertEqual(closing.status, 0, closing.stderr)
        XCTAssertEqual(closing.stdoutText, "closed\n1\nb\n1\nc\n0\n")
        XCTAssertTrue(server.peer.waitForOutput(containing: "ACCEPT 3"), server.peer.printed)
    }

    /// Over TLS too: two https:// URLs share one connection and one handshake (the server counts one accept).
    func testHTTPSURLsShareOneConnection() throws {
        let pki = try self.pki
        let server = try ScriptedHTTPPeer(directory: try makeTemporaryDirectory(), tls: (pki.serverChain, pki.serverKey))
        addCleanup { server.peer.stop() }
        let result = try runStreamGet([
            "--cacert", pki.caCertificate, "-w", " %{num_connects} %{ssl_verify_result}\n", server.url("/text/one"), server.url("/count"),
        ])
        XCTAssertEqual(result.status, 0, result.stderr + server.peer.printed)
        XCTAssertEqual(result.stdoutText, "one\n 1 0\n1\n 0 0\n")
    }

    /// Through an HTTP proxy the tunnel is the connection: two URLs, one CONNECT.
    func testURLsShareOneProxyTunnel() throws {
        let server = try startScriptedPeer()
        let result = try runStreamGet([
            "-x", "127.0.0.1:\(server.port)", "-w", " %{num_connects}\n", "http://example.invalid/text/a", "http://example.invalid/count",
        ])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "a\n 1\n1\n 0\n")
        XCTAssertTrue(server.peer.waitForOutput(containing: "REQUEST GET /count"), "the peer logs in order")
        XCTAssertEqual(server.requests.filter { $0.hasPrefix("CONNECT ") }, ["CONNECT example.invalid:80"])
    }

    /// -L follows relative and absolute Locations with each redirect status, stops at --max-redirs (exit 47), and
    /// sends credentials to the original host only.
    func testRedirects() throws {
        let server = try startScriptedPeer()
        let relative = "/redirect?status=301&to=" + "../text/relative".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let result = try runStreamGet(["-L", "-w", "%{num_redirects} %{url_effective}\\n", server.url(relative)])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "relative\n1 \(server.url("/text/relative"))\n")

        for status in [302, 303, 307, 308] {
            let target = server.url("/text/s\(status)").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let followed = try runStreamGet(["-L", "-I", server.url("/redirect?status=\(status)&to=\(target)")])
            XCTAssertEqual(followed.status, 0, followed.stderr)
            XCTAssertTrue(followed.stdoutText.contains("HTTP/1.1 200 OK"), "\(status): \(followed.stdoutText)")
            XCTAssertTrue(server.peer.waitForOutput(containing: "REQUEST HEAD /text/s\(status)"), "\(status) keeps HEAD")
        }

        // Without -L the redirect is the answer (exit 0); -w shows where it pointed.
        let unfollowed = try runStreamGet(["-w", "%{http_code} %{redirect_url}", server.url("/redirect?to=/text/x")])
        XCTAssertEqual(unfollowed.status, 0, unfollowed.stderr)
        XCTAssertEqual(unfollowed.stdoutText, "moved\n302 \(server.url("/text/x"))")

        // Credentials: kept on the same host, dropped for another (localhost is another host than 127.0.0.1).
        let echo = "/redirect?to=" + "/echo".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let same = try runStreamGet(["-L", "-u", "user:secret", "-H", "Cookie: c=1", server.url(echo)])
        XCTAssertEqual(same.status, 0, same.stderr)
        XCTAssertTrue(same.stdoutText.contains("\r\nAuthorization: Basic dXNlcjpzZWNyZXQ=\r\n"), same.stdoutText)
        XCTAssertTrue(same.stdoutText.contains("\r\nCookie: c=1\r\n"), same.stdoutText)
        let elsewhere = "http://localhost:\(server.port)/echo".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        let other = try runStreamGet([
            "-L", "-u", "user:secret", "-H", "Authorization: Bearer t", "-H", "Cookie: c=1", "-H", "X-Kept: 1",
            server.url("/redirect?to=\(elsewhere)"),
        ])
        XCTAssertEqual(other.status, 0, other.stderr)
        XCTAssertTrue(other.stdoutText.hasPrefix("GET /echo HTTP/1.1\r\nHost: localhost:\(server.port)\r\n"), other.stdoutText)
        XCTAssertFalse(other.stdoutText.contains("Authorization"), other.stdoutText)
        XCTAssertFalse(other.stdoutText.contains("Cookie"), other.stdoutText)
        XCTAssertTrue(other.stdoutText.contains("\r\nX-Kept: 1\r\n"), other.stdoutText)

        // A loop stops at the limit: the first request and three redirects followed, then exit 47.
        let before = server.requests.filter { $0 == "GET /loop" }.count
        let loop = try runStreamGet(["-L", "--max-redirs", "3", server.url("/loop")])
        XCTAssertEqual(loop.status, 47, loop.stderr)
        XCTAssertTrue(loop.stderr.contains("Maximum (3) redirects followed"), loop.stderr)
        XCTAssertEqual(loop.stdoutText, "", "a redirect's body is not written")
        let after = try runStreamGet([server.url("/text/after")])  // the peer logs in order: the loop's lines come first
        XCTAssertEqual(after.status, 0, after.stderr)
        XCTAssertTrue(server.peer.waitForOutput(containing: "REQUEST GET /text/after"))
        XCTAssertEqual(server.requests.filter { $0 == "GET /loop" }.count - before, 4)
        let unsupported = try runStreamGet(["-L", server.url("/redirect?to=ftp%3A%2F%2Fh%2F")])
        XCTAssertEqual(unsupported.status, 1, unsupported.stderr)
    }

    /// -I sends HEAD and writes the head; -f fails a 404 with exit 22 and writes no body (and no file); -H and -A
    /// reach the server.
    func testHeadFailAndHeaders() throws {
        let server = try startScriptedPeer()
        let head = try runStreamGet(["-I", server.url("/text/hello"), server.url("/text/again")])
        XCTAssertEqual(head.status, 0, head.stderr)
        XCTAssertEqual(head.stdoutText.components(separatedBy: "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n").count, 3, head.stdoutText)
        let count = try runStreamGet([server.url("/count")])
        XCTAssertEqual(count.stdoutText, "2\n", "a HEAD response leaves the connection reusable: one for both")

        let directory = try makeTemporaryDirectory()
        let failed = try runStreamGet(["-f", "-o", directory.appendingPathComponent("out").path, server.url("/status/404")])
        XCTAssertEqual(failed.status, 22, failed.stderr)
        XCTAssertTrue(failed.stderr.contains("The requested URL returned error: 404"), failed.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory.path), [])
        let unfailed = try runStreamGet([server.url("/status/404")])
        XCTAssertEqual(unfailed.status, 0, unfailed.stderr)
        XCTAssertEqual(unfailed.stdoutText, "status 404\n")

        let echo = try runStreamGet(["-H", "X-Test: yes", "-H", "Accept: text/plain", "-A", "tester/2", server.url("/echo")])
        XCTAssertEqual(echo.status, 0, echo.stderr)
        for line in ["\r\nX-Test: yes\r\n", "\r\nAccept: text/plain\r\n", "\r\nUser-Agent: tester/2\r\n", "\r\nConnection: close\r\n"] {
            XCTAssertTrue(echo.stdoutText.contains(line), "no \(line.debugDescription) in \(echo.stdoutText)")
        }
        XCTAssertFalse(echo.stdoutText.contains("*/*"), echo.stdoutText)
    }

    /// A 256 MiB file served by python's http.server arrives in a file equal to it, through --create-dirs, and
    /// -O names the file after the URL.
    func testLargeDownloadToAFile() throws {
        let source = try makeTemporaryDirectory()
        let file = source.appendingPathComponent("big.bin")
        XCTAssertTrue(FileManager.default.createFile(atPath: file.path, contents: nil))
        let handle = try FileHandle(forWritingTo: file)
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for index in 0..<256 {
            for offset in stride(from: 0, to: block.count, by: 4096) {
                block[offset] = UInt8(truncatingIfNeeded: index &* 31 &+ offset >> 12)
            }
            try handle.write(contentsOf: block)
        }
        try handle.close()
        let (peer, port) = try Peer.httpServer(family: .v4, directory: source)
        addCleanup { peer.stop() }

        let target = try makeTemporaryDirectory()
        let output = target.appendingPathComponent("new/dirs/copy.bin")
        let result = try runStreamGet(
            ["-s", "--create-dirs", "-o", output.path, "-w", "%{size_download} %{http_code}", "http://127.0.0.1:\(port)/big.bin"],
            timeout: 300)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "\(256 << 20) 200")
        XCTAssertTrue(FileManager.default.contentsEqual(atPath: output.path, andPath: file.path), "the copy differs")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: output.deletingLastPathComponent().path), ["copy.bin"])

        let small = source.appendingPathComponent("small.txt")
        try Data("small\n".utf8).write(to: small)
        let named = try runCommand(
            "/bin/sh",
            [
                "-c", "cd \"$1\" && exec \"$2\" -s -O \"$3\"", "sh", target.path, try streamGetExecutable().path,
                "http://127.0.0.1:\(port)/small.txt?query=1",
            ], timeout: 60)
        XCTAssertEqual(named.status, 0, named.stderr)
        XCTAssertEqual(try String(contentsOf: target.appendingPathComponent("small.txt"), encoding: .utf8), "small\n")
        let nameless = try runStreamGet(["-O", "http://127.0.0.1:\(port)/"])
        XCTAssertEqual(nameless.status, 23, nameless.stderr)
        let unwritable = try runStreamGet(["-o", target.appendingPathComponent("missing/dir/f").path, "http://127.0.0.1:\(port)/small.txt"])
        XCTAssertEqual(unwritable.status, 23, unwritable.stderr)
    }

    /// A body cut short fails with exit 18 and leaves nothing under the final name (nor the temporary one).
    func testFailureMidBodyLeavesNoFile() throws {
        let server = try startScriptedPeer()
        let directory = try makeTemporaryDirectory()
        let output = directory.appendingPathComponent("partial.bin")
        let result = try runStreamGet(["-o", output.path, server.url("/cut")])
        XCTAssertEqual(result.status, 18, result.stderr)
        XCTAssertTrue(result.stderr.contains("received 50000 of 100000 bytes"), result.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory.path), [])
        // An existing file of that name is left as it was.
        try Data("old\n".utf8).write(to: output)
        XCTAssertEqual(try runStreamGet(["-o", output.path, server.url("/cut")]).status, 18)
        XCTAssertEqual(try String(contentsOf: output, encoding: .utf8), "old\n")
    }

    /// Each failure class exits with curl's code.
    func testCurlExitCodes() throws {
        let server = try startScriptedPeer()
        let refusedPort = try RawSocket.unusedPort()
        let cases: [([String], Int32, String)] = [
            (["http://127.0.0.1:\(refusedPort)/"], 7, "Connection refused"),
            (["http://no-such-host.invalid/"], 6, "Could not resolve host"),
            (["http://127.0.0.1:65536/"], 3, "invalid port \"65536\""),
            (["http://[::1/"], 3, "invalid host"),
            (["ftp://127.0.0.1/"], 1, "unsupported URL scheme"),
            (["-x", "127.0.0.1:65536", server.url("/text/a")], 5, "invalid port \"65536\""),
            (["--socks5-hostname", "127.0.0.1:99999", server.url("/text/a")], 5, "invalid port \"99999\""),
            (["-x", "ftp://127.0.0.1:1", server.url("/text/a")], 5, "unknown scheme"),
            (["-x", "no-such-proxy.invalid:1", server.url("/text/a")], 5, "Could not resolve host"),
            (["-x", "127.0.0.1:\(refusedPort)", server.url("/text/a")], 7, "Connection refused"),
            ([server.url("/empty")], 52, "without sending a response"),
            ([server.url("/garbage")], 8, "malformed"),
            ([server.url("/cut")], 18, "truncated"),
            (["-f", server.url("/status/500")], 22, "returned error: 500"),
            (["-L", "--max-redirs", "0", server.url("/loop")], 47, "Maximum (0) redirects"),
            (["-o", "/proc/no/such/dir/f", server.url("/text/a")], 23, "cannot create"),
            (["--bogus"], 2, "unknown option"),
        ]
        for (arguments, code, message) in cases {
            let result = try runStreamGet(arguments)
            XCTAssertEqual(result.status, code, "\(arguments): \(result.stderr)")
            XCTAssertTrue(result.stderr.contains(message), "\(arguments): no \"\(message)\" in \(result.stderr)")
        }
        let written = try runStreamGet(["-w", "%{http_code} %{exitcode}", "http://127.0.0.1:\(refusedPort)/"])
        XCTAssertEqual(written.stdoutText, "000 7", "-w is written after a failure too")
        let silent = try runStreamGet(["-s", "http://127.0.0.1:\(refusedPort)/"])
        XCTAssertEqual(silent.status, 7)
        XCTAssertEqual(silent.stderr, "", "-s hides the error")
        let shown = try runStreamGet(["-sS", "http://127.0.0.1:\(refusedPort)/"])
        XCTAssertTrue(shown.stderr.contains("Connection refused"), "-S shows it: \(shown.stderr)")

        // A timeout: a listener that accepts and never answers.
        let silentServer = try CannedHTTPServer(responsePieces: [], holdOpen: true)
        defer { silentServer.stop() }
        let timedOut = try runCommand(
            try streamGetExecutable().path, ["-m", "1", "http://127.0.0.1:\(silentServer.port)/"], timeout: 60)
        XCTAssertEqual(timedOut.status, 28, timedOut.stderr)
    }

    /// `-x 127.0.0.1:0PORT` goes to PORT (curl reads the leading zero away), not to the default 1080.
    func testProxyPortWithALeadingZero() throws {
        let server = try startScriptedPeer()
        let result = try runStreamGet(["-x", "127.0.0.1:0\(server.port)", "-w", "%{remote_port}", "http://example.invalid/text/tunnelled"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "tunnelled\n\(server.port)")
        XCTAssertTrue(server.peer.waitForOutput(containing: "REQUEST CONNECT example.invalid:80"), server.peer.printed)
    }

    /// On a terminal the progress meter is drawn on stderr (to 100% when the length is known); -s and a pipe have none.
    func testProgressMeterOnlyOnATerminal() throws {
        let source = try makeTemporaryDirectory()
        try Data(repeating: 7, count: 3 << 20).write(to: source.appendingPathComponent("file.bin"))
        let (peer, port) = try Peer.httpServer(family: .v4, directory: source)
        addCleanup { peer.stop() }
        let target = try makeTemporaryDirectory()
        let executable = try streamGetExecutable().path
        func throughTerminal(_ flags: String) throws -> CommandResult {
            // script(1) runs the command on a pseudo-terminal and copies what it wrote there to its stdout.
            let command = "\(executable) \(flags) -o \(target.path)/out.bin http://127.0.0.1:\(port)/file.bin"
            return try runCommand("/usr/bin/script", ["-q", "-e", "-c", command, "/dev/null"], timeout: 60)
        }
        let meter = try throughTerminal("")
        XCTAssertEqual(meter.status, 0, meter.stdoutText)
        XCTAssertTrue(meter.stdoutText.contains("\r3.0M of 3.0M 100%"), meter.stdoutText.debugDescription)
        XCTAssertTrue(meter.stdoutText.contains("/s  0:00:0"), meter.stdoutText.debugDescription)
        let bar = try throughTerminal("-#")
        XCTAssertTrue(bar.stdoutText.contains(String(repeating: "#", count: 60) + "  100.0%"), bar.stdoutText.debugDescription)
        let silent = try throughTerminal("-s")
        XCTAssertEqual(silent.status, 0)
        XCTAssertFalse(silent.stdoutText.contains("%"), silent.stdoutText.debugDescription)
        let piped = try runStreamGet(["-o", "\(target.path)/piped.bin", "http://127.0.0.1:\(port)/file.bin"])
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertEqual(piped.stderr, "HTTP/1.0 200 OK\n", "only the status line when stderr is not a terminal")
    }

    /// -w's timings come in order (each at least the one before), time_appconnect is 0 without TLS and set with it,
    /// and the other variables describe the transfer.
    func testWriteOutTimings() throws {
        let format =
            "%{time_namelookup} %{time_connect} %{time_appconnect} %{time_pretransfer} %{time_starttransfer} %{time_total}"
            + " %{speed_download} %{http_code} %{num_connects} %{remote_ip} %{remote_port} %{ssl_verify_result} %{size_download}\\n"
        func fields(_ result: CommandResult) -> [[String]] {
            result.stdoutText.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }.filter { $0.count == 13 }
        }
        let server = try startScriptedPeer()
        let plain = try runStreamGet([
            "-s", "-o", "/dev/null", "-w", format, server.url("/text/timed"), "-o", "/dev/null", server.url("/text/again"),
        ])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        let lines = fields(plain)
        XCTAssertEqual(lines.count, 2, plain.stdoutText)
        for (index, line) in lines.enumerated() {
            let times = line[0..<6].compactMap(Double.init)
            XCTAssertEqual(times.count, 6, "\(line)")
            XCTAssertEqual(times[2], 0, "no TLS: time_appconnect is 0")
            for (earlier, later) in [(0, 1), (1, 3), (3, 4), (4, 5)] {
                XCTAssertLessThanOrEqual(times[earlier], times[later], "\(line)")
            }
            XCTAssertGreaterThan(times[5], 0)
            XCTAssertEqual(Array(line[7...12]), ["200", index == 0 ? "1" : "0", "127.0.0.1", "\(server.port)", "0", "6"])
        }

        let tls = try BuiltInPageServer(
            runLoop: .socketStreams,
            tls: .server(identity: TLSIdentity(certificateChainFile: try pki.serverChain, privateKeyFile: try pki.serverKey)))
        tls.start()
        addCleanup { tls.stop() }
        let secure = try runStreamGet(["-s", "--cacert", try pki.caCertificate, "-w", format, "https://localhost:\(tls.port)/"])
        XCTAssertEqual(secure.status, 0, secure.stderr)
        let line = try XCTUnwrap(fields(secure).first, secure.stdoutText)
        let times = line[0..<6].compactMap(Double.init)
        XCTAssertEqual(times.count, 6, "\(line)")
        for (earlier, later) in [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)] {
            XCTAssertLessThanOrEqual(times[earlier], times[later], "\(line)")
        }
        XCTAssertGreaterThan(times[2], times[1], "the TLS handshake takes time after TCP is up")
        XCTAssertEqual(line[7], "200")
        XCTAssertEqual(line[11], "0", "the certificate was verified")
        XCTAssertEqual(line[10], "\(tls.port)")
    }
}
