import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest
import TestPeers

// The README's examples. Every Swift block in it is marked with the file that compiles and runs it:
// an example program in Guides/Examples (built with the package, run here) or a test below, which
// holds the block word for word (apart from indentation) between its own set-up and checks.

final class ReadmeExampleTests: SocketStreamsTestCase {
    /// Whether `code`'s lines occur in `source` one after another, each the same apart from its
    /// indentation (a block from the README inside a test function is indented there).
    static func contains(_ source: String, _ code: String) -> Bool {
        let wanted = code.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let lines = source.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !wanted.isEmpty, lines.count >= wanted.count else { return false }
        return (0...(lines.count - wanted.count)).contains { Array(lines[$0..<($0 + wanted.count)]) == wanted }
    }

    /// The README's ```swift blocks preceded by `<!-- example: PATH -->`, with their paths.
    static func markedBlocks(in markdown: String) -> [(path: String, code: String)] {
        var blocks: [(String, String)] = []
        let lines = markdown.components(separatedBy: "\n")
        var index = 0
        while index < lines.count {
            let line = lines[index].trimmingCharacters(in: .whitespaces)
            index += 1
            guard line.hasPrefix("<!-- example: "), line.hasSuffix(" -->"), index < lines.count,
                lines[index] == "```swift"
            else { continue }
            let path = String(line.dropFirst("<!-- example: ".count).dropLast(" -->".count))
            var code: [String] = []
            index += 1
            while index < lines.count, lines[index] != "```" {
                code.append(lines[index])
                index += 1
            }
            blocks.append((path, code.joined(separator: "\n") + "\n"))
        }
        return blocks
    }

    func testEveryReadmeSwiftBlockIsCompiledAndRunByATestOrAnExample() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let blocks = Self.markedBlocks(in: readme)
        XCTAssertGreaterThanOrEqual(blocks.count, 9, "README blocks lost their example markers")
        for block in blocks {
            let source = try String(contentsOf: packageRoot.appendingPathComponent(block.path), encoding: .utf8)
            XCTAssertTrue(Self.contains(source, block.code), "README block not found word for word in \(block.path):\n\(block.code)")
        }
        // Every Swift block in the README is one of them.
        XCTAssertEqual(
            readme.components(separatedBy: "\n").filter { $0 == "```swift" }.count, blocks.count + 1,
            "a README Swift block without an example marker (the one more is the manifest block)")
    }

    /// The guides hold to the same rule: each ```swift block is marked with the example program (or
    /// library source) that contains it, and is found there word for word.
    func testEveryGuideSwiftBlockIsCompiledAndRunByATestOrAnExample() throws {
        let guides = packageRoot.appendingPathComponent("Guides")
        let names = try FileManager.default.contentsOfDirectory(atPath: guides.path).filter { $0.hasSuffix(".md") }.sorted()
        XCTAssertGreaterThanOrEqual(names.count, 8, "the guides went missing: \(names)")
        for name in names {
            let markdown = try String(contentsOf: guides.appendingPathComponent(name), encoding: .utf8)
            let blocks = Self.markedBlocks(in: markdown)
            for block in blocks {
                let source = try String(contentsOf: packageRoot.appendingPathComponent(block.path), encoding: .utf8)
                XCTAssertTrue(Self.contains(source, block.code), "\(name): block not found word for word in \(block.path):\n\(block.code)")
            }
            XCTAssertEqual(
                markdown.components(separatedBy: "\n").filter { $0 == "```swift" }.count, blocks.count,
                "\(name) has a Swift block without an example marker")
        }
    }

    /// The README's "Guides" section links every guide, and the DocC catalogue lists them as articles in
    /// the same order (Scripts/docs adds the files as articles and fails on a link to a missing one).
    func testReadmeAndDocCListEveryGuideInOneOrder() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let section = try XCTUnwrap(readme.range(of: "## Guides\n"), "the README lost its Guides section")
        let end = readme.range(of: "\n## ", range: section.upperBound..<readme.endIndex)?.lowerBound ?? readme.endIndex
        let linked = readme[section.upperBound..<end].matches(of: /\(Guides\/([A-Za-z]+)\.md\)/).map { String($0.1) }
        let files = try FileManager.default.contentsOfDirectory(atPath: packageRoot.appendingPathComponent("Guides").path)
            .filter { $0.hasSuffix(".md") }.map { String($0.dropLast(3)) }
        XCTAssertEqual(Set(linked), Set(files), "the README's guide list and Guides/*.md differ")
        XCTAssertEqual(linked.count, files.count, "a guide is linked twice")
        let catalogue = try String(
            contentsOf: packageRoot.appendingPathComponent("Sources/SocketStreams/SocketStreams.docc/SocketStreams.md"), encoding: .utf8)
        XCTAssertEqual(catalogue.matches(of: /- <doc:([A-Za-z]+)>/).map { String($0.1) }, linked)
    }

    /// The README's dependency lines, as the arguments of a consumer's `Package(...)` next to a
    /// checkout named SocketStreams: SwiftPM must load the graph (identity and product names
    /// resolved; `swift package describe` does it without building). And the pitfall the README
    /// warns of: the same lines next to a checkout named otherwise fail.
    func testManifestLinesWorkInAConsumerPackage() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let marker = try XCTUnwrap(readme.range(of: "<!-- manifest-example -->\n```swift\n"), "the manifest block lost its marker")
        let end = try XCTUnwrap(readme.range(of: "\n```\n", range: marker.upperBound..<readme.endIndex))
        let lines = String(readme[marker.upperBound..<end.lowerBound])
        let swift = try Peer.locate("swift", hint: "the Swift toolchain")
        for (checkoutName, shouldLoad) in [("SocketStreams", true), ("socket-streams", false)] {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("consumer-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let consumer = directory.appendingPathComponent("consumer")
            try FileManager.default.createDirectory(
                at: consumer.appendingPathComponent("Sources/MyClient"), withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(
                at: directory.appendingPathComponent(checkoutName), withDestinationURL: packageRoot)
            // The negative case points the README's path at the differently named checkout.
            let dependency = lines.replacingOccurrences(of: "\"../SocketStreams\"", with: "\"../\(checkoutName)\"")
            XCTAssertTrue(lines.contains("\"../SocketStreams\""), "the README's path dependency changed: \(lines)")
            let manifest =
                "// swift-tools-version:6.0\nimport PackageDescription\nlet package = Package(\n    name: \"consumer\",\n\(dependency)\n)\n"
            try manifest.write(to: consumer.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
            try "import SocketStreams\n".write(
                to: consumer.appendingPathComponent("Sources/MyClient/main.swift"), atomically: true, encoding: .utf8)
            let result = try runCommand(swift, ["package", "--package-path", consumer.path, "describe", "--type", "json"], timeout: 120)
            if shouldLoad {
                XCTAssertEqual(result.status, 0, "the README's lines do not load:\n\(manifest)\n\(result.stderr)")
            } else {
                XCTAssertNotEqual(result.status, 0, "a checkout named \(checkoutName) loaded with package: \"SocketStreams\"")
                XCTAssertTrue(result.stderr.contains("unknown package 'SocketStreams'"), result.stderr)
            }
        }
    }

    func testDelegateProgramFetchesItsOwnPageOffline() throws {
        let result = try runCommand(try builtExecutable("getting-started-delegate"), [], timeout: 30)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.hasPrefix("HTTP/1.0 200 OK\r\n"), result.stdoutText)
        XCTAssertTrue(result.stdoutText.hasSuffix("\r\n\r\nHello from SocketStreams.\n"), result.stdoutText)
    }

    func testDelegateProgramFetchesFromAGivenServer() throws {
        let port = try startHTTPServer(files: ["index.html": Data("readme page\n".utf8)])
        let result = try runCommand(try builtExecutable("getting-started-delegate"), ["127.0.0.1", String(port)], timeout: 30)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.hasPrefix("HTTP/1.0 200"), result.stdoutText)
        XCTAssertTrue(result.stdoutText.hasSuffix("readme page\n"), result.stdoutText)
    }

    func testDelegateProgramReportsARefusedConnectionAndExits() throws {
        let result = try runCommand(
            try builtExecutable("getting-started-delegate"), ["127.0.0.1", String(try RawSocket.unusedPort())], timeout: 30)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertTrue(result.stdoutText.hasPrefix("error: "), result.stdoutText)
        XCTAssertTrue(result.stdoutText.contains("refused"), result.stdoutText)
    }

    func testPollingProgramEchoes() throws {
        let result = try runCommand(try builtExecutable("getting-started-polling"), [], timeout: 30)
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(result.stdoutText, "hello, polling\n")
    }

    /// The TLS section: both client spellings against a listener made TLS server as shown.
    func testTLSExamples() throws {
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        addCleanup { listener.close() }
        let served = UncheckedBox<[(StreamPair, DelegateRecorder)]>([])
        // (the test's server code: echo what arrives, one reply per event)
        @Sendable func serve(_ input: SocketInputStream, _ output: SocketOutputStream) {
            let echo = DelegateRecorder()
            echo.onEvent = { _, event in
                guard event == .hasBytesAvailable || event == .hasSpaceAvailable else { return }
                let pending = echo.received.dropFirst(echo.snapshot.bytesWritten)
                if !pending.isEmpty { echo.send(Data(pending)) }
            }
            served.value.append(((input, output), echo))
            echo.start((input, output))
        }
        let (identity, certificatePEM) = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"])
        listener.start(in: .current) { input, output in
            input.setProperty(TLSSettings.server(identity: identity), forKey: .tlsSettingsKey)
            serve(input, output)  // your code: delegates, schedule, open, as for any pair
        }
        let host = "localhost"
        let port = listener.port
        let caCertificatePEM = certificatePEM

        let (input, output) = createStreamPair(host: host, port: port)
        input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey)  // Apple code, unchanged

        var tls = TLSSettings()  // the defaults: the system trust store, the host name verified, TLS 1.2 or newer
        tls.trustRoots = [.system, .pem(caCertificatePEM)]
        tls.alpnProtocols = ["http/1.1"]
        input.setProperty(tls, forKey: .tlsSettingsKey)

        closeAfterTest((input, output))
        let recorder = startRecorder((input, output), recorder: DelegateRecorder(sending: "over TLS"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "over TLS" }, recorder.trace)
        for ((input, output), _) in served.value {
            input.close()
            output.close()
        }
    }

    /// The proxy section: Apple's SOCKS dictionary through microsocks (with a username and password), and
    /// the typed CONNECT proxy through tinyproxy, each to an echo target.
    func testProxyExamples() throws {
        let echo = try startSocatEcho()
        let (socksPeer, socksPort) = try Peer.microsocks(user: "user", password: "secret")
        addCleanup { socksPeer.stop() }
        let (httpPeer, httpPort) = try Peer.tinyproxy(directory: try makeTemporaryDirectory(), user: "user", password: "secret")
        addCleanup { httpPeer.stop() }
        let host = "127.0.0.1"
        let port = echo
        let proxyHost = "127.0.0.1"

        do {
            let proxyPort = socksPort
            let (input, output) = createStreamPair(host: host, port: port)
            let socks: [StreamSOCKSProxyConfiguration: Any] = [
                .hostKey: proxyHost, .portKey: proxyPort,
                .userKey: "user", .passwordKey: "secret",
            ]
            input.setProperty(socks, forKey: .socksProxyConfigurationKey)  // Apple code, unchanged (SOCKS5 by default)
            try assertEchoes((input, output))
        }
        do {
            let proxyPort = httpPort
            let (input, output) = createStreamPair(host: host, port: port)
            input.setProperty(
                ProxyConfiguration.httpConnect(host: proxyHost, port: proxyPort, username: "user", password: "secret"),
                forKey: .proxyConfigurationKey)
            try assertEchoes((input, output))
        }
    }

    private func assertEchoes(_ pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) throws {
        closeAfterTest(pair)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "through the proxy"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "through the proxy" },
            recorder.trace, file: file, line: line)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)", file: file, line: line)
    }

    /// The CoreFoundation section: a CF-created pair, its events on a dispatch queue, echoing.
    func testCoreFoundationAndQueueExample() throws {
        let host = "127.0.0.1"
        let port = try startSocatEcho()
        let delegate = DelegateRecorder(sending: "on a queue")

        var readStream: Unmanaged<CFReadStream>?
        var writeStream: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(kCFAllocatorDefault, host as CFString, UInt32(port), &readStream, &writeStream)
        let input: InputStream = readStream!.takeRetainedValue()
        let output: OutputStream = writeStream!.takeRetainedValue()
        CFReadStreamSetProperty(input, CFStreamPropertyKey(rawValue: kCFStreamPropertyShouldCloseNativeSocket), kCFBooleanTrue)
        delegate.attach(input: input, output: output)  // (the test: the recorder remembers which stream is which)
        input.delegate = delegate
        output.delegate = delegate
        let queue = DispatchQueue(label: "network")
        CFReadStreamSetDispatchQueue(input, queue)  // events arrive on `queue`, one at a time
        CFWriteStreamSetDispatchQueue(output, queue)
        input.open()
        output.open()

        closeAfterTest((input as! SocketInputStream, output as! SocketOutputStream))
        XCTAssertTrue(delegate.wait(timeout: shortTimeout) { $0.receivedString == "on a queue" }, delegate.trace)
        XCTAssertTrue(delegate.snapshot.errors.isEmpty)
    }
}
