import Foundation
import SocketStreams
import XCTest

// The README's examples, kept here verbatim (apart from host and port) so they cannot rot.

final class ReadmeDelegateClient: NSObject, StreamDelegate {
    var input: InputStream?
    var output: OutputStream?
    var request = Data("GET / HTTP/1.0\r\nHost: example.com\r\n\r\n".utf8)
    var received = Data()   // (the README prints instead)
    var finished = false    // (not in the README)
    let host: String
    let port: Int

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    func start() {
        Stream.getStreamsToHost(withName: host, port: port, inputStream: &input, outputStream: &output)
        for stream in [input!, output!] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable where !request.isEmpty:
            let n = request.withUnsafeBytes { output!.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: $0.count) }
            if n > 0 { request.removeFirst(n) }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input!.read(&buffer, maxLength: buffer.count)
            if n > 0 { received.append(contentsOf: buffer[..<n]) }
        case .endEncountered, .errorOccurred:
            if let error = stream.streamError { print("error:", error.localizedDescription) }
            input?.close(); output?.close()
            finished = true
        default:
            break
        }
    }
}

final class ReadmeExampleTests: SocketStreamsTestCase {
    func testDelegateExampleFetchesAPage() throws {
        let port = try startHTTPServer(files: ["index.html": Data("readme page\n".utf8)])
        let client = ReadmeDelegateClient(host: "127.0.0.1", port: port)
        client.start()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { client.finished })
        let text = String(decoding: client.received, as: UTF8.self)
        XCTAssertTrue(text.hasPrefix("HTTP/1.0 200"), text)
        XCTAssertTrue(text.hasSuffix("readme page\n"), text)
    }

    func testPollingExampleEchoes() throws {
        let port = try startSocatEcho()
        let (input, output) = createStreamPair(host: "127.0.0.1", port: port)
        input.open(); output.open()
        let message = Array("hello".utf8)
        while !output.hasSpaceAvailable { if output.streamStatus == .error { fatalError("\(output.streamError!)") } }
        _ = output.write(message, maxLength: message.count)   // blocks until at least one byte fits
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = input.read(&buffer, maxLength: buffer.count)   // blocks until at least one byte arrives; 0 = end
        XCTAssertGreaterThan(n, 0)
        XCTAssertEqual(Array(buffer[..<n]), Array(message[..<n]))
        input.close(); output.close()
    }

    /// The TLS section: both client spellings against a listener made TLS server as shown.
    func testTLSExamples() throws {
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        addCleanup { listener.close() }
        let (identity, certificatePEM) = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"])
        let served = UncheckedBox<[(StreamPair, DelegateRecorder)]>([])
        listener.start(in: .current) { input, output in
            input.setProperty(TLSSettings.server(identity: identity), forKey: .tlsSettingsKey)
            // (the test: echo what arrives, one reply per event)
            let echo = DelegateRecorder()
            echo.onEvent = { _, event in
                guard event == .hasBytesAvailable || event == .hasSpaceAvailable else { return }
                let pending = echo.received.dropFirst(echo.snapshot.bytesWritten)
                if !pending.isEmpty { echo.send(Data(pending)) }
            }
            served.value.append(((input, output), echo))
            echo.start((input, output))
        }
        let host = "localhost", port = listener.port
        let caCertificatePEM = certificatePEM

        let (input, output) = createStreamPair(host: host, port: port)
        input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey)   // Apple code, unchanged

        var tls = TLSSettings()          // the defaults: the system trust store, the host name verified, TLS 1.2 or newer
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
        let proxyHost = "127.0.0.1", proxyPort = socksPort

        do {
            let (input, output) = createStreamPair(host: "127.0.0.1", port: echo)
            let socks: [StreamSOCKSProxyConfiguration: Any] = [.hostKey: proxyHost, .portKey: proxyPort,
                                                               .userKey: "user", .passwordKey: "secret"]
            input.setProperty(socks, forKey: .socksProxyConfigurationKey)   // Apple code, unchanged (SOCKS5 by default)
            try assertEchoes((input, output))
        }
        do {
            let (input, output) = createStreamPair(host: "127.0.0.1", port: echo)
            input.setProperty(ProxyConfiguration.httpConnect(host: proxyHost, port: httpPort, username: "user", password: "secret"),
                              forKey: .proxyConfigurationKey)               // or typed: .socks4, .socks5, .httpConnect
            try assertEchoes((input, output))
        }
    }

    private func assertEchoes(_ pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) throws {
        closeAfterTest(pair)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "through the proxy"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "through the proxy" },
                      recorder.trace, file: file, line: line)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)", file: file, line: line)
    }

    /// The CoreFoundation section: a CF-created pair, its events on a dispatch queue, echoing.
    func testCoreFoundationAndQueueExample() throws {
        let host = "127.0.0.1", port = try startSocatEcho()
        let delegate = DelegateRecorder(sending: "on a queue")

        var readStream: Unmanaged<CFReadStream>?
        var writeStream: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(kCFAllocatorDefault, host as CFString, UInt32(port), &readStream, &writeStream)
        let input: InputStream = readStream!.takeRetainedValue()
        let output: OutputStream = writeStream!.takeRetainedValue()
        CFReadStreamSetProperty(input, CFStreamPropertyKey(rawValue: kCFStreamPropertyShouldCloseNativeSocket), kCFBooleanTrue)

        delegate.attach(input: input, output: output)   // (the test: the recorder remembers which stream is which)
        input.delegate = delegate
        output.delegate = delegate
        let queue = DispatchQueue(label: "network")
        CFReadStreamSetDispatchQueue(input, queue)     // events arrive on `queue`, one at a time
        CFWriteStreamSetDispatchQueue(output, queue)
        input.open()
        output.open()

        closeAfterTest((input as! SocketInputStream, output as! SocketOutputStream))
        XCTAssertTrue(delegate.wait(timeout: shortTimeout) { $0.receivedString == "on a queue" }, delegate.trace)
        XCTAssertTrue(delegate.snapshot.errors.isEmpty)
    }
}
