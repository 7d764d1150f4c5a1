// `swift run getting-started-polling`: polling style (no run loop in the client): a blocking write
// and blocking reads against a small echo server this program starts on the package's stream thread.
import Foundation
import SocketStreams

/// Echoes what one accepted connection sends until the client closes; keeps itself alive till then.
final class Echo: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var keepAlive: Echo?

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
            if n > 0 { _ = output.write(buffer, maxLength: n) }  // an echo of a few bytes: one write
        case .endEncountered, .errorOccurred:
            input.close()
            output.close()
            keepAlive = nil
        default:
            break
        }
    }
}

let server = try StreamListener(host: "127.0.0.1")
// The accept handler and the echo run on the package's stream thread, which runs by itself.
server.start(in: .socketStreams) { input, output in _ = Echo(input: input, output: output) }
let port = server.port

// The client: unscheduled streams, polling style. Nothing spins while the connection opens:
// write blocks until the pair is open and at least one byte fits, read until a byte arrives.
let (input, output) = createStreamPair(host: "127.0.0.1", port: port)
input.open()
output.open()
let message = Array("hello, polling\n".utf8)
var sent = 0
while sent < message.count {
    let n = message[sent...].withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
    guard n > 0 else { fatalError("write failed: \(String(describing: output.streamError))") }
    sent += n
}
var echo: [UInt8] = []
var buffer = [UInt8](repeating: 0, count: 64)
while echo.count < message.count {
    let n = input.read(&buffer, maxLength: buffer.count)  // 0: end of stream, -1: error
    guard n > 0 else { fatalError("read returned \(n): \(String(describing: input.streamError))") }
    echo += buffer[..<n]
}
print(String(decoding: echo, as: UTF8.self), terminator: "")
input.close()
output.close()
server.close()
