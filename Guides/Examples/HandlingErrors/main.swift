// `swift run handling-errors`: provokes the failures a client meets most often, against servers this
// program starts on 127.0.0.1 (or ports nobody listens on), and prints what each stream reports: the
// event, `streamError`'s domain, code and message. Guides/HandlingErrors.md explains each line.
import Foundation
import SocketStreams

/// Runs one pair until it fails or ends, and describes how.
final class Outcome: NSObject, StreamDelegate {
    private var input: InputStream?
    private var output: OutputStream?
    private var received: [UInt8] = []
    private(set) var report: String?

    init(_ pair: (input: SocketInputStream, output: SocketOutputStream)) {
        super.init()
        (input, output) = (pair.input, pair.output)
        for stream in [pair.input, pair.output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        guard report == nil else { return }
        switch event {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input!.read(&buffer, maxLength: buffer.count)
            if n > 0 { received.append(contentsOf: buffer[..<n]) }
        case .endEncountered:
            // Everything the peer sent before it closed was readable first.
            finish("endEncountered after \(received.count) bytes (\(String(decoding: received, as: UTF8.self)))")
        case .errorOccurred:
            let error = stream.streamError! as NSError
            var line = "errorOccurred: \(error.domain) \(error.code)"
            if let lookup = error.userInfo["kCFGetAddrInfoFailureKey"] { line += " (kCFGetAddrInfoFailureKey \(lookup))" }
            finish(line + ": \(error.localizedDescription)")
        default:
            break
        }
    }

    private func finish(_ text: String) {
        report = text
        input?.close()
        output?.close()
    }

    /// Runs the current run loop until the pair has failed or ended.
    func wait() -> String {
        while report == nil && RunLoop.current.run(mode: .default, before: .distantFuture) {}
        return report!
    }
}

/// Serves one accepted connection: sends `greeting`, then closes. Keeps itself alive until then.
final class Greeter: NSObject, StreamDelegate {
    private let output: OutputStream
    private let greeting: [UInt8]
    private var keepAlive: Greeter?

    init(_ input: InputStream, _ output: OutputStream, greeting: String) {
        self.output = output
        self.greeting = Array(greeting.utf8)
        super.init()
        keepAlive = self
        input.open()  // opened so that closing it later releases the socket
        output.delegate = self
        output.schedule(in: .current, forMode: .default)
        output.open()
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable:
            _ = output.write(greeting, maxLength: greeting.count)
            output.close()
            keepAlive = nil
        case .errorOccurred, .endEncountered:
            output.close()
            keepAlive = nil
        default:
            break
        }
    }
}

func unusedPort() throws -> Int {
    let probe = try StreamListener(host: "127.0.0.1")
    defer { probe.close() }
    return probe.port
}

// 1. Nobody listens on the port: ECONNREFUSED.
print("refused:", Outcome(createStreamPair(host: "127.0.0.1", port: try unusedPort())).wait())

// 2. The name does not resolve (`.invalid` never does): kCFErrorDomainCFNetwork code 2.
print("name:", Outcome(createStreamPair(host: "no-such-host.invalid", port: 80)).wait())

// 3. The server sends a few bytes and closes: they are read first, then endEncountered.
let plain = try StreamListener(host: "127.0.0.1")
plain.start(in: .current) { input, output in _ = Greeter(input, output, greeting: "bye") }
print("end:", Outcome(createStreamPair(host: "127.0.0.1", port: plain.port)).wait())

// 4. TLS to a server whose certificate nobody trusts: the handshake fails.
let (identity, certificatePEM) = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"])
let secure = try StreamListener(host: "127.0.0.1")
secure.start(in: .current) { input, output in
    input.setProperty(TLSSettings.server(identity: identity), forKey: .tlsSettingsKey)
    _ = Greeter(input, output, greeting: "secret")
}
let untrusted = createStreamPair(host: "localhost", port: secure.port)
untrusted.input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey)
print("untrusted:", Outcome(untrusted).wait())

// 5. TLS with the certificate trusted, but checked against another name than the one it carries.
var settings = TLSSettings()
settings.trustRoots = [.pem(certificatePEM)]
var elsewhere = settings
elsewhere.peerName = .name("www.example.com")  // kCFStreamSSLPeerName
let wrongName = createStreamPair(host: "localhost", port: secure.port)
wrongName.input.setProperty(elsewhere, forKey: .tlsSettingsKey)
print("wrong name:", Outcome(wrongName).wait())

// 6. The same, checked against its own name (the pair's host): no error at all.
let trusted = createStreamPair(host: "localhost", port: secure.port)
trusted.input.setProperty(settings, forKey: .tlsSettingsKey)
print("trusted:", Outcome(trusted).wait())

plain.close()
secure.close()
