// `swift run getting-started-delegate [host port]`: fetches a page with Apple-guide delegate code, prints
// it, and exits. With no arguments it starts a small page server of its own first (a
// `StreamListener` on 127.0.0.1), so it runs offline. The README shows the client and the driver.
import Foundation
import SocketStreams

// MARK: The client (Apple's Stream Programming Guide, unchanged)

final class Client: NSObject, StreamDelegate {
    var input: InputStream?
    var output: OutputStream?
    var request: [UInt8] = []
    var finished = false

    func start(host: String, port: Int) {
        request = Array("GET / HTTP/1.0\r\nHost: \(host)\r\n\r\n".utf8)
        Stream.getStreamsToHost(withName: host, port: port, inputStream: &input, outputStream: &output)
        for stream in [input!, output!] as [Stream] {
            stream.delegate = self  // delegates are weak: whoever calls start keeps the client alive
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable where !request.isEmpty:
            let n = output!.write(request, maxLength: request.count)
            if n > 0 { request.removeFirst(n) }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input!.read(&buffer, maxLength: buffer.count)
            if n > 0 { print(String(decoding: buffer[..<n], as: UTF8.self), terminator: "") }
        case .endEncountered, .errorOccurred:
            if let error = stream.streamError { print("error:", error.localizedDescription) }
            input?.close()
            output?.close()
            finished = true
        default:
            break
        }
    }
}

// MARK: A page server, so the example needs no network

/// Answers one accepted connection: reads the request, sends a short page, closes. Stream delegates
/// are weak, so it keeps itself alive until it is done.
final class PageResponder: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var request: [UInt8] = []
    private var keepAlive: PageResponder?

    init(input: InputStream, output: OutputStream) {
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
            if n > 0 { request.append(contentsOf: buffer[..<n]) }
            guard request.suffix(4) == Array("\r\n\r\n".utf8) else { return }  // the request's end
            let page = Array("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nHello from SocketStreams.\n".utf8)
            _ = output.write(page, maxLength: page.count)  // small: one write takes it all
            finish()
        case .endEncountered, .errorOccurred:
            finish()
        default:
            break
        }
    }

    private func finish() {
        input.close()
        output.close()
        keepAlive = nil
    }
}

// MARK: The driver

let arguments = CommandLine.arguments.dropFirst()
var server: StreamListener?
let host: String
let port: Int
if arguments.count == 2, let given = Int(arguments.last!) {
    (host, port) = (arguments.first!, given)
} else {
    let listener = try StreamListener(host: "127.0.0.1")  // port 0: any free port
    listener.start(in: .current) { input, output in _ = PageResponder(input: input, output: output) }
    (server, host, port) = (listener, "127.0.0.1", listener.port)
}

let client = Client()  // kept alive here for as long as the run loop runs
client.start(host: host, port: port)
while !client.finished && RunLoop.current.run(mode: .default, before: .distantFuture) {}
server?.close()
