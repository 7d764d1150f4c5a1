// `swift run secure-streams`: TLS on stream pairs, end to end and offline. The program starts its own
// TLS servers on 127.0.0.1 with certificates made at run time, then runs one client per topic of
// Guides/SecuringStreamsWithTLS.md and prints one line for each: Apple's spelling with a certificate
// checked by hand, typed settings with ALPN, an untrusted server, client certificates, STARTTLS and
// public-key pinning. It exits with status 1 if any line is not the one the guide shows.
import Foundation
import SocketStreams

/// Serves one accepted pair: answers each line with the line in capitals, followed by the subject of
/// the client's certificate when the client presented one. With `startTLS`, the line "STARTTLS" is
/// answered "GO" in plain text, and the pair then becomes a TLS server in place.
/// Stream delegates are weak, so it keeps itself alive until the client closes.
final class LineEcho: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var startTLS: TLSSettings?
    private var upgradeWhenSent = false
    private var received: [UInt8] = []
    private var unsent: [UInt8] = []
    private var keepAlive: LineEcho?

    init(_ input: InputStream, _ output: OutputStream, startTLS: TLSSettings? = nil) {
        self.input = input
        self.output = output
        self.startTLS = startTLS
        super.init()
        keepAlive = self
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input.read(&buffer, maxLength: buffer.count)
            guard n > 0 else { return }
            received += buffer[..<n]
            while let end = received.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: received[..<end], as: UTF8.self)
                received.removeSubrange(...end)
                if line == "STARTTLS", startTLS != nil {
                    unsent += Array("GO\n".utf8)
                    upgradeWhenSent = true
                    received.removeAll()  // plain bytes sent after the command are not to be trusted
                    break
                }
                unsent += Array((answer(to: line) + "\n").utf8)
            }
            send()
        case .hasSpaceAvailable:
            send()
        case .endEncountered, .errorOccurred:
            input.close()
            output.close()
            keepAlive = nil
        default:
            break
        }
    }

    private func answer(to line: String) -> String {
        // On a server, the peer's certificates are the client's: none unless it was asked for one.
        let key = Stream.PropertyKey(kCFStreamPropertySSLPeerCertificates as String)
        guard let certificates = input.property(forKey: key) as? [Data], let leaf = certificates.first,
            let certificate = TLSCertificate(der: leaf)
        else { return line.uppercased() }
        return line.uppercased() + ", " + certificate.subject
    }

    private func send() {
        guard !unsent.isEmpty, output.hasSpaceAvailable else { return }
        let n = output.write(unsent, maxLength: unsent.count)
        if n > 0 { unsent.removeFirst(n) }
        if unsent.isEmpty, upgradeWhenSent, let settings = startTLS {
            // "GO" has gone out in plain text: from here on both ends speak TLS.
            upgradeWhenSent = false
            startTLS = nil
            input.setProperty(settings, forKey: .tlsSettingsKey)
        }
    }
}

/// A client that sends lines and waits for each answer, running the current run loop meanwhile.
final class LineClient: NSObject, StreamDelegate {
    let input: InputStream
    let output: OutputStream
    private var unsent: [UInt8] = []
    private var received: [UInt8] = []
    private var failure: NSError?
    private var ended = false

    init(_ pair: (input: SocketInputStream, output: SocketOutputStream)) {
        (input, output) = (pair.input, pair.output)
        super.init()
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    /// Waits for the first `hasSpaceAvailable`: with TLS, the handshake is then done and the peer's
    /// certificates can be read. Throws the pair's error if it failed instead.
    func waitForHandshake() throws {
        while failure == nil && !ended && !output.hasSpaceAvailable && RunLoop.current.run(mode: .default, before: .distantFuture) {}
        if let failure { throw failure }
    }

    /// Sends `line` and returns the line that comes back. Throws the pair's error if it fails first.
    func ask(_ line: String) throws -> String {
        unsent += Array((line + "\n").utf8)
        send()
        while failure == nil && !ended && !received.contains(UInt8(ascii: "\n"))
            && RunLoop.current.run(mode: .default, before: .distantFuture)
        {}
        if let failure { throw failure }
        guard let end = received.firstIndex(of: UInt8(ascii: "\n")) else { return "(closed without an answer)" }
        defer { received.removeSubrange(...end) }
        return String(decoding: received[..<end], as: UTF8.self)
    }

    /// STARTTLS: secures the open pair in place. Plain bytes that arrived after the server's go-ahead
    /// are dropped: they were not protected, so they may not be the server's.
    func startTLS(_ settings: TLSSettings) {
        received.removeAll()
        input.setProperty(settings, forKey: .tlsSettingsKey)
    }

    func close() {
        input.close()
        output.close()
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { received += buffer[..<n] }
        case .hasSpaceAvailable:
            send()
        case .errorOccurred:
            failure = stream.streamError.map { $0 as NSError }
        case .endEncountered:
            ended = true
        default:
            break
        }
    }

    private func send() {
        guard !unsent.isEmpty, output.hasSpaceAvailable else { return }
        let n = output.write(unsent, maxLength: unsent.count)
        if n > 0 { unsent.removeFirst(n) }
    }
}

/// What a client's exchange came to: the line it returns, or the error that ended it, shown as the
/// event, the domain and the code.
func outcome(_ exchange: () throws -> String) -> String {
    do {
        return try exchange()
    } catch {
        let error = error as NSError
        return "errorOccurred: \(error.domain) \(error.code)"
    }
}

/// Prints each result and counts the ones that differ from what the guide shows.
struct Tally {
    private(set) var surprises = 0

    mutating func show(_ label: String, _ result: String, expected: String) {
        print("\(label): \(result)")
        if result != expected {
            surprises += 1
            FileHandle.standardError.write(Data("\(label): expected \(expected)\n".utf8))
        }
    }
}

/// Starts a line-echo listener on 127.0.0.1 whose accepted pairs `configure` secures before they open.
func startServer(_ configure: @escaping @Sendable (InputStream) -> Void) throws -> StreamListener {
    let listener = try StreamListener(host: "127.0.0.1")
    listener.start(in: .current) { input, output in
        configure(input)
        _ = LineEcho(input, output)
    }
    return listener
}

/// A client of the server on `port`, secured with `settings`. TLS settings go on before `open()`.
func secureClient(port: Int, _ settings: TLSSettings) -> LineClient {
    let pair = createStreamPair(host: "localhost", port: port)
    pair.input.setProperty(settings, forKey: .tlsSettingsKey)
    return LineClient(pair)
}

var tally = Tally()

// The server's identity: a new key and a self-signed certificate for "localhost", and the
// certificate's PEM, which the clients below trust (or pin) explicitly.
let (serverIdentity, serverCertificatePEM) = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"])

// 1. Apple's spelling, both ends. The server: kCFStreamSSLIsServer and kCFStreamSSLCertificates.
let appleServer = try startServer { input in
    let serverSettings: [String: Any] = [
        kCFStreamSSLIsServer as String: true,
        kCFStreamSSLCertificates as String: [serverIdentity],  // a TLSIdentity where Darwin takes a SecIdentity
    ]
    input.setProperty(serverSettings, forKey: Stream.PropertyKey(kCFStreamPropertySSLSettings as String))
}
// The client: no kCFStreamSSL… key names extra roots, so, as on Darwin, it turns the automatic check off
// and checks the certificate itself at the first hasSpaceAvailable, before it sends a byte.
let applePair = createStreamPair(host: "localhost", port: appleServer.port)
applePair.input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey)
let clientSettings: [String: Any] = [kCFStreamSSLValidatesCertificateChain as String: false]
applePair.input.setProperty(clientSettings, forKey: Stream.PropertyKey(kCFStreamPropertySSLSettings as String))
let apple = LineClient(applePair)
let appleResult = outcome {
    try apple.waitForHandshake()
    let key = Stream.PropertyKey(kCFStreamPropertySSLPeerCertificates as String)
    let leaf = (apple.input.property(forKey: key) as? [Data])?.first.map { [UInt8]($0) }
    let known = TLSCertificate(pem: serverCertificatePEM).map { [UInt8]($0.der) }
    guard let leaf, leaf == known, let subject = TLSCertificate(der: Data(leaf))?.subject else {
        return "not the certificate we expect: closed without sending a byte"
    }
    return "\(subject) is the certificate we expect; answer: \(try apple.ask("apple spelling"))"
}
tally.show("dictionary", appleResult, expected: "CN=localhost is the certificate we expect; answer: APPLE SPELLING")
apple.close()

// 2. Typed settings: the server also offers ALPN protocols; the client trusts exactly the server's
// certificate (instead of the system store), wants TLS 1.3, and offers "http/1.1".
let typedServer = try startServer { input in
    var settings = TLSSettings.server(identity: serverIdentity)
    settings.alpnProtocols = ["h2", "http/1.1"]
    input.setProperty(settings, forKey: .tlsSettingsKey)
}
var trusting = TLSSettings()
trusting.trustRoots = [.pem(serverCertificatePEM)]  // list .system too to keep the system's roots
var typed = trusting
typed.minimumVersion = .v1_3
typed.alpnProtocols = ["http/1.1"]
let typedClient = secureClient(port: typedServer.port, typed)
let typedResult = outcome {
    let answer = try typedClient.ask("typed settings")
    // What the handshake settled on, readable from the first hasSpaceAvailable/hasBytesAvailable on.
    guard let info = typedClient.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo else { return "no TLS" }
    let server = info.peerCertificates.first.flatMap { TLSCertificate(der: $0) }?.subject ?? "?"
    return "\(info.protocolVersion), ALPN \(info.alpnProtocol ?? "none"), server \(server); answer: \(answer)"
}
tally.show("typed", typedResult, expected: "TLSv1.3, ALPN http/1.1, server CN=localhost; answer: TYPED SETTINGS")
typedClient.close()

// 3. The defaults trust the system store only, which has never heard of this certificate.
let untrusted = secureClient(port: typedServer.port, TLSSettings())
tally.show("untrusted", outcome { "answer: " + (try untrusted.ask("hello")) }, expected: "errorOccurred: NSOSStatusErrorDomain -9812")
untrusted.close()

// 4. Client certificates. The server requires one and trusts the client's self-signed certificate;
// a client presents its identity when asked.
let (clientIdentity, clientCertificatePEM) = try TLSIdentity.makeSelfSigned(commonName: "alice", dnsNames: [], ipAddresses: [])
let mutualServer = try startServer { input in
    var settings = TLSSettings.server(identity: serverIdentity)
    settings.clientCertificates = .require
    settings.trustRoots = [.pem(clientCertificatePEM)]  // whose client certificates are accepted
    input.setProperty(settings, forKey: .tlsSettingsKey)
}
let anonymous = secureClient(port: mutualServer.port, trusting)
let anonymousResult = outcome { "answer: " + (try anonymous.ask("anonymous")) }
tally.show("no client certificate", anonymousResult, expected: "errorOccurred: NSOSStatusErrorDomain -9863")
anonymous.close()
var withCertificate = trusting
withCertificate.identity = clientIdentity
let alice = secureClient(port: mutualServer.port, withCertificate)
tally.show("client certificate", outcome { "answer: " + (try alice.ask("hello")) }, expected: "answer: HELLO, CN=alice")
alice.close()

// 5. STARTTLS: a plain exchange, then both ends secure the same open connection and go on.
let startTLSServer = try StreamListener(host: "127.0.0.1")
startTLSServer.start(in: .current) { input, output in
    _ = LineEcho(input, output, startTLS: TLSSettings.server(identity: serverIdentity))
}
let upgrading = LineClient(createStreamPair(host: "localhost", port: startTLSServer.port))
let upgradeResult = outcome {
    let plain = try upgrading.ask("plain text")
    let goAhead = try upgrading.ask("STARTTLS")
    upgrading.startTLS(trusting)
    let secured = try upgrading.ask("encrypted")
    let info = upgrading.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
    return "\(plain), \(goAhead), then over \(info?.protocolVersion ?? "plain text"): \(secured)"
}
tally.show("starttls", upgradeResult, expected: "PLAIN TEXT, GO, then over TLSv1.3: ENCRYPTED")
upgrading.close()

// 6. Public-key pinning: the SHA-256 of the server key's SubjectPublicKeyInfo. Here the pin alone
// decides (the chain check is off), as for a server known by its key rather than through a CA.
let otherCertificatePEM = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"]).certificatePEM  // another key
for (label, pinSource, expected) in [
    ("right pin", serverCertificatePEM, "answer: PINNED"), ("wrong pin", otherCertificatePEM, "errorOccurred: NSOSStatusErrorDomain -9807"),
] {
    var pinned = TLSSettings()
    pinned.validatesCertificateChain = false  // never without a pin: it would accept any certificate
    pinned.pinnedPublicKeySHA256 = [TLSSettings.publicKeyPin(certificatePEM: pinSource)!]
    let client = secureClient(port: typedServer.port, pinned)
    tally.show(label, outcome { "answer: " + (try client.ask("pinned")) }, expected: expected)
    client.close()
}

for listener in [appleServer, typedServer, mutualServer, startTLSServer] { listener.close() }
exit(tally.surprises == 0 ? 0 : 1)
