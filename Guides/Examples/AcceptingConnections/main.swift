// `swift run accepting-connections`: a line-echo server on a StreamListener, plain and TLS (with a
// certificate made at run time), and clients that connect to it, send a line, and print the answer.
// Guides/AcceptingConnections.md walks through it.
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
            stream.open()  // an accepted pair is connected already: openCompleted comes at once
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
                let line = String(decoding: received[...end], as: UTF8.self)
                received.removeSubrange(...end)
                unsent += Array(line.uppercased().utf8)
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

/// A client: sends one line, prints the first line that comes back, closes.
final class Asker: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var question: [UInt8]
    private var answer: [UInt8] = []
    private(set) var result: String?

    init(_ pair: (input: SocketInputStream, output: SocketOutputStream), line: String) {
        (input, output) = (pair.input, pair.output)
        question = Array((line + "\n").utf8)
        super.init()
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable where !question.isEmpty:
            let n = output.write(question, maxLength: question.count)
            if n > 0 { question.removeFirst(n) }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { answer += buffer[..<n] }
            if answer.last == UInt8(ascii: "\n") { finish(String(decoding: answer.dropLast(), as: UTF8.self)) }
        case .errorOccurred:
            finish("error: \(stream.streamError!.localizedDescription)")
        case .endEncountered:
            finish("closed without an answer")
        default:
            break
        }
    }

    private func finish(_ text: String) {
        guard result == nil else { return }
        result = text
        input.close()
        output.close()
    }
}

/// Runs the current run loop until every asker has its answer.
func answers(_ askers: [Asker]) -> [String] {
    while askers.contains(where: { $0.result == nil }) && RunLoop.current.run(mode: .default, before: .distantFuture) {}
    return askers.map { $0.result! }
}

// A plain listener on the loopback interface, on a port the kernel picks.
let plain = try StreamListener(host: "127.0.0.1")
plain.start(in: .current) { input, output in _ = LineEcho(input, output) }
print("plain on \(plain.localAddress)")
for answer in answers((1...3).map { Asker(createStreamPair(host: "127.0.0.1", port: plain.port), line: "hello \($0)") }) {
    print("  ", answer)
}

// A TLS listener: the same server, with a server identity set on each accepted pair before it opens.
let (identity, certificatePEM) = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"])
let secure = try StreamListener(host: "127.0.0.1")
secure.start(in: .current) { input, output in
    input.setProperty(TLSSettings.server(identity: identity), forKey: .tlsSettingsKey)
    _ = LineEcho(input, output)
}
print("TLS on \(secure.localAddress)")
var trustingClient = TLSSettings()
trustingClient.trustRoots = [.pem(certificatePEM)]  // the clients trust exactly this certificate
let secureAskers = (1...3).map { index -> Asker in
    let pair = createStreamPair(host: "localhost", port: secure.port)
    pair.input.setProperty(trustingClient, forKey: .tlsSettingsKey)
    return Asker(pair, line: "secret \(index)")
}
for answer in answers(secureAskers) {
    print("  ", answer)
}

plain.close()
secure.close()
