// `swift run reading-and-writing [megabytes]`: sends a payload (8 MiB unless told) through a stream pair
// the Apple-guide way (a write per hasSpaceAvailable, keeping what did not fit), to a server this program
// starts, which counts what it receives and answers with the count once the agreed length has arrived.
// Guides/ReadingAndWriting.md walks through it.
import Foundation
import SocketStreams

/// The sender: a length header, then the payload; then reads the server's 8-byte count.
final class Sender: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var pending: [UInt8]
    private var offset = 0
    private(set) var writes = 0
    private(set) var partialWrites = 0
    private var reply: [UInt8] = []
    private(set) var result: String?

    init(_ pair: (input: SocketInputStream, output: SocketOutputStream), payload: [UInt8]) {
        input = pair.input
        output = pair.output
        // No half-close with stream pairs: closing the output stream closes the socket once the input
        // stream is closed too. So the receiver is told the length up front.
        pending = withUnsafeBytes(of: UInt64(payload.count).bigEndian, Array.init) + payload
        super.init()
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable:
            writeSome()
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 8)
            let n = input.read(&buffer, maxLength: 8 - reply.count)
            if n > 0 { reply += buffer[..<n] }
            if reply.count == 8 {
                let count = reply.reduce(0) { $0 << 8 | UInt64($1) }
                finish("the server received \(count) bytes")
            }
        case .errorOccurred:
            finish("error: \(stream.streamError!.localizedDescription)")
        case .endEncountered:
            finish("the server closed before answering")
        default:
            break
        }
    }

    /// One write of what is left. A write takes what fits in the socket now (often less than asked):
    /// the rest waits for the next hasSpaceAvailable, which comes once the socket has room again.
    private func writeSome() {
        guard offset < pending.count else { return }
        let n = pending[offset...].withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
        guard n > 0 else { return finish("write failed: \(String(describing: output.streamError))") }
        writes += 1
        if n < pending.count - offset { partialWrites += 1 }
        offset += n
    }

    private func finish(_ text: String) {
        guard result == nil else { return }
        result = text
        input.close()
        output.close()
    }
}

/// The receiver: reads the 8-byte length, then counts bytes until that many came, then answers with
/// the count. Keeps itself alive until the sender closes.
final class Counter: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var header: [UInt8] = []
    private var expected: UInt64?
    private var received: UInt64 = 0
    private var keepAlive: Counter?
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

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
            // One read per event: if more is left, hasBytesAvailable comes again.
            let n = input.read(&buffer, maxLength: buffer.count)
            guard n > 0 else { return }
            var bytes = buffer[..<n]
            while header.count < 8, let byte = bytes.first {
                header.append(byte)
                bytes = bytes.dropFirst()
                if header.count == 8 { expected = header.reduce(0) { $0 << 8 | UInt64($1) } }
            }
            received += UInt64(bytes.count)
            if let expected, received == expected {
                let answer = withUnsafeBytes(of: received.bigEndian, Array.init)
                _ = output.write(answer, maxLength: answer.count)  // 8 bytes into an empty socket: all of them
            }
        case .endEncountered, .errorOccurred:
            input.close()
            output.close()
            keepAlive = nil
        default:
            break
        }
    }
}

let megabytes = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 8
let payload = [UInt8]((0..<(megabytes << 20)).lazy.map { UInt8(truncatingIfNeeded: $0) })

let server = try StreamListener(host: "127.0.0.1")
server.start(in: .current) { input, output in _ = Counter(input, output) }

let sender = Sender(createStreamPair(host: "127.0.0.1", port: server.port), payload: payload)
while sender.result == nil && RunLoop.current.run(mode: .default, before: .distantFuture) {}
print("sent \(payload.count) bytes; \(sender.result!)")
print("writes: \(sender.writes), of which partial: \(sender.partialWrites)")
server.close()
