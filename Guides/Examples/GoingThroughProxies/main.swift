// `swift run going-through-proxies PROXY…`: reaches a line-echo server of its own, on 127.0.0.1 and ::1,
// through each proxy given in curl's form (socks4://, socks4a://, socks5://, socks5h:// or http://, with
// an optional user:password@ and :port), and prints one line per attempt: Apple's SOCKS dictionary, the
// typed ProxyConfiguration, TLS through the tunnel, and the failures the proxy reports for a port nobody
// listens on and for a wrong password. Guides/GoingThroughProxies.md walks through it.
import Foundation
import SocketStreams

/// Serves one accepted pair: answers each line with the line in capitals, until the client closes.
/// Stream delegates are weak, so it keeps itself alive until then.
final class LineEcho: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var received: [UInt8] = []
    private var unsent: [UInt8] = []
    private var keepAlive: LineEcho?

    init(_ input: InputStream, _ output: OutputStream) {
        self.input = input
        self.output = output
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
                unsent += Array(String(decoding: received[...end], as: UTF8.self).uppercased().utf8)
                received.removeSubrange(...end)
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

    private func send() {
        guard !unsent.isEmpty, output.hasSpaceAvailable else { return }
        let n = output.write(unsent, maxLength: unsent.count)
        if n > 0 { unsent.removeFirst(n) }
    }
}

/// Starts a line-echo server on 127.0.0.1, on a port the kernel picks, and on the same port on ::1 (a
/// proxy that resolves "localhost" may pick either address). With `tls`, each accepted pair is a TLS server.
func startEchoServer(tls: TLSSettings? = nil) throws -> (port: Int, listeners: [StreamListener]) {
    let v4 = try StreamListener(host: "127.0.0.1")
    let listeners = [v4] + [try? StreamListener(host: "::1", port: v4.port)].compactMap { $0 }
    for listener in listeners {
        listener.start(in: .current) { input, output in
            if let tls { input.setProperty(tls, forKey: .tlsSettingsKey) }
            _ = LineEcho(input, output)
        }
    }
    return (v4.port, listeners)
}

/// One client through a proxy: sends a line, waits for the answer, closes. Records how it went.
final class Attempt: NSObject, StreamDelegate {
    enum Outcome {
        case answered(String)
        case failed(NSError, afterOpenCompleted: Bool)
        case timedOut
    }

    private let input: InputStream
    private let output: OutputStream
    private var unsent: [UInt8]
    private var received: [UInt8] = []
    private var openCompleted = false
    private(set) var outcome: Outcome?

    init(_ pair: (input: SocketInputStream, output: SocketOutputStream), line: String) {
        (input, output) = (pair.input, pair.output)
        unsent = Array((line + "\n").utf8)
        super.init()
    }

    func run(timeout: TimeInterval = 10) -> Outcome {
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while outcome == nil && Date() < deadline && RunLoop.current.run(mode: .default, before: deadline) {}
        if outcome == nil { finish(.timedOut) }
        return outcome!
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .openCompleted:
            openCompleted = true  // TCP to the proxy is up; its handshake runs now
        case .hasSpaceAvailable where !unsent.isEmpty:
            // The first hasSpaceAvailable: the proxy has connected the target (and TLS is up, if asked for).
            let n = output.write(unsent, maxLength: unsent.count)
            if n > 0 { unsent.removeFirst(n) }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { received += buffer[..<n] }
            if received.last == UInt8(ascii: "\n") {
                finish(.answered(String(decoding: received.dropLast(), as: UTF8.self)))
            }
        case .errorOccurred:
            finish(.failed(stream.streamError! as NSError, afterOpenCompleted: openCompleted))
        case .endEncountered:
            finish(.answered("(closed without an answer)"))
        default:
            break
        }
    }

    private func finish(_ result: Outcome) {
        guard outcome == nil else { return }
        outcome = result
        input.close()
        output.close()
    }
}

/// A proxy as curl takes it on its command line: `SCHEME://[USER[:PASSWORD]@]HOST[:PORT]`.
struct ProxyURL {
    var scheme: String
    var host: String
    var port: Int
    var user: String?
    var password: String?

    init?(_ text: String) {
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
            ["socks4", "socks4a", "socks5", "socks5h", "http"].contains(scheme),
            let host = url.host, !host.isEmpty, url.path.isEmpty || url.path == "/"
        else { return nil }
        self.scheme = scheme
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host  // [::1] → ::1
        port = url.port ?? 1080  // curl's default for every kind of proxy
        user = url.user
        password = url.password
    }

    var isSOCKS4: Bool { scheme.hasPrefix("socks4") }
    var isSOCKS: Bool { scheme.hasPrefix("socks") }

    /// Whether the proxy resolves the target's name: socks4a, socks5h and http. With socks4 and socks5, curl
    /// resolves the name itself and sends the proxy an address.
    var proxyResolvesNames: Bool { !(scheme == "socks4" || scheme == "socks5") }

    /// Apple's spelling: the `kCFStreamPropertySOCKSProxy` dictionary, as code written for Apple platforms sets it.
    var socksDictionary: [StreamSOCKSProxyConfiguration: Any] {
        var socks: [StreamSOCKSProxyConfiguration: Any] = [
            .hostKey: host,
            .portKey: port,
            .versionKey: isSOCKS4 ? StreamSOCKSProxyVersion.version4 : StreamSOCKSProxyVersion.version5,
        ]
        if let user { socks[.userKey] = user }  // SOCKS4: the USERID field
        if let password { socks[.passwordKey] = password }
        return socks
    }

    /// The package's typed spelling, which also covers HTTP CONNECT.
    var configuration: ProxyConfiguration {
        switch scheme {
        case "socks4", "socks4a": return .socks4(host: host, port: port, userID: user)
        case "socks5", "socks5h": return .socks5(host: host, port: port, username: user, password: password)
        default: return .httpConnect(host: host, port: port, username: user, password: password)
        }
    }
}

/// "kCFErrorDomainCFNetwork 120 (kCFSOCKSStatusCodeKey 5)": what a program can act on, without the ports
/// the message names.
func describe(_ error: NSError) -> String {
    var text = "\(error.domain) \(error.code)"
    if let status = error.userInfo[kCFSOCKSStatusCodeKey as String] { text += " (kCFSOCKSStatusCodeKey \(status))" }
    if let status = error.userInfo[ProxyConfiguration.errorHTTPStatusCodeKey] { text += " (HTTP status \(status))" }
    return text
}

let arguments = Array(CommandLine.arguments.dropFirst())
let proxies = arguments.compactMap(ProxyURL.init)
guard !arguments.isEmpty, proxies.count == arguments.count else {
    let usage = "usage: going-through-proxies SCHEME://[USER[:PASSWORD]@]HOST[:PORT]…  (SCHEME: socks4, socks4a, socks5, socks5h, http)\n"
    FileHandle.standardError.write(Data(usage.utf8))
    exit(2)
}

// The targets: a line echo, and the same over TLS with a certificate made now for localhost, 127.0.0.1 and ::1.
let echo = try startEchoServer()
let (identity, certificatePEM) = try TLSIdentity.makeSelfSigned()
let tlsEcho = try startEchoServer(tls: .server(identity: identity))
var trustingClient = TLSSettings()
trustingClient.trustRoots = [.pem(certificatePEM)]
// A port nobody listens on: the kernel's pick for a listener closed at once.
let probe = try StreamListener(host: "127.0.0.1")
let closedPort = probe.port
probe.close()

/// Runs one attempt and prints its line. Returns whether it went as `expectAnswer` says it should.
func attempt(
    _ label: String, _ pair: (input: SocketInputStream, output: SocketOutputStream), line: String, expectAnswer: Bool
) -> Bool {
    switch Attempt(pair, line: line).run() {
    case .answered(let answer):
        print("\(label): echo: \(answer)")
        return expectAnswer && answer == line.uppercased()
    case .failed(let error, let afterOpenCompleted):
        print("\(label): \(afterOpenCompleted ? "openCompleted, then " : "")errorOccurred: \(describe(error))")
        return !expectAnswer
    case .timedOut:
        print("\(label): no answer within 10 seconds")
        return false
    }
}

var asExpected = true

for proxy in proxies {
    let name = proxy.scheme
    // The target's name as the pair is created with it. For socks4 and socks5 it is resolved here, which
    // for this local target is simply 127.0.0.1; the others hand "localhost" to the proxy to resolve.
    let host = proxy.proxyResolvesNames ? "localhost" : "127.0.0.1"

    if proxy.isSOCKS {
        // Apple's dictionary, set exactly as on Apple platforms.
        let (input, output) = createStreamPair(host: host, port: echo.port)
        input.setProperty(proxy.socksDictionary, forKey: .socksProxyConfigurationKey)
        asExpected = attempt("\(name) (dictionary)", (input, output), line: "hello", expectAnswer: true) && asExpected
    }
    do {
        // The typed configuration.
        let (input, output) = createStreamPair(host: host, port: echo.port)
        input.setProperty(proxy.configuration, forKey: .proxyConfigurationKey)
        asExpected = attempt("\(name) (typed)", (input, output), line: "hello", expectAnswer: true) && asExpected
    }
    do {
        // TLS to the target through the tunnel: the certificate is checked against the pair's host.
        let (input, output) = createStreamPair(host: host, port: tlsEcho.port)
        input.setProperty(proxy.configuration, forKey: .proxyConfigurationKey)
        input.setProperty(trustingClient, forKey: .tlsSettingsKey)
        asExpected = attempt("\(name) (TLS)", (input, output), line: "secret", expectAnswer: true) && asExpected
    }
    do {
        // The proxy reaches the target's host, but nothing listens on the port.
        let (input, output) = createStreamPair(host: host, port: closedPort)
        input.setProperty(proxy.configuration, forKey: .proxyConfigurationKey)
        asExpected = attempt("\(name), closed port", (input, output), line: "hello", expectAnswer: false) && asExpected
    }
    if let password = proxy.password {
        // A proxy that wants a username and password (SOCKS5, HTTP): a wrong one, then none at all.
        var wrong = proxy.configuration
        wrong.password = "not-" + password
        var anonymous = proxy.configuration
        (anonymous.username, anonymous.password) = (nil, nil)
        for (label, configuration) in [("wrong password", wrong), ("no credentials", anonymous)] {
            let (input, output) = createStreamPair(host: host, port: echo.port)
            input.setProperty(configuration, forKey: .proxyConfigurationKey)
            asExpected = attempt("\(name), \(label)", (input, output), line: "hello", expectAnswer: false) && asExpected
        }
    }
}

for listener in echo.listeners + tlsEcho.listeners { listener.close() }
exit(asExpected ? 0 : 1)
