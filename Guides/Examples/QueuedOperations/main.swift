// `swift run queued-operations`: GCDAsyncSocket's style on SocketStreams. A server and a client, both
// `QueuedSocket`s on this thread's run loop, speak length-prefixed frames (a 4-byte big-endian length,
// then the payload) after a greeting line. The client queues its operations before it connects, and
// its last read times out on purpose. Guides/AsyncAndQueuedOperations.md walks through it.
import Foundation
import SocketStreams

/// Tags say which operation completed.
enum Tag {
    static let greeting = 1
    static let header = 2
    static let body = 3
    static let request = 4
}

/// A frame: the payload's length as 4 big-endian bytes, then the payload.
func frame(_ text: String) -> [UInt8] {
    let payload = Array(text.utf8)
    let length = UInt32(payload.count)
    return [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)] + payload
}

/// The length a frame's header announces.
func length(ofHeader header: [UInt8]) -> Int {
    header.reduce(0) { $0 << 8 | Int($1) }
}

/// The server's delegate: greets each client, then answers every frame with its payload in capitals,
/// except "silence", which it never answers.
final class Server: QueuedSocketDelegate {
    var clients: [QueuedSocket] = []

    func socket(_ socket: QueuedSocket, didAcceptNewSocket newSocket: QueuedSocket) {
        clients.append(newSocket)  // keep it: a released socket closes
        newSocket.write(Array("HELLO queued\r\n".utf8), tag: Tag.greeting)
        newSocket.read(toLength: 4, tag: Tag.header)
    }

    func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
        if tag == Tag.header {
            socket.read(toLength: length(ofHeader: data), tag: Tag.body)
            return
        }
        let text = String(decoding: data, as: UTF8.self)
        if text != "silence" { socket.write(frame(text.uppercased()), tag: Tag.request) }
        socket.read(toLength: 4, tag: Tag.header)
    }
}

/// The client's delegate: prints what happens, and queues the next read from the completion of the
/// last (a frame's body once its header says how long it is, then the next header).
final class Client: QueuedSocketDelegate {
    var finished = false
    var extended = false
    var repliesExpected = 3

    func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: Int) {
        print("connected to \(host)")
    }

    func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
        switch tag {
        case Tag.greeting:
            print("greeting: \(String(decoding: data.dropLast(2), as: UTF8.self))")
        case Tag.header:
            socket.read(toLength: length(ofHeader: data), timeout: 5, tag: Tag.body)
        default:
            print("reply: \(String(decoding: data, as: UTF8.self))")
            repliesExpected -= 1
            // The next header; the "silence" request gets no reply, so its read is given 0.2 s.
            socket.read(toLength: 4, timeout: repliesExpected > 0 ? 5 : 0.2, tag: Tag.header)
        }
    }

    func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval {
        if !extended {
            extended = true
            print("no reply yet: extending the read once")
            return 0.2
        }
        print("still no reply: giving up")
        return 0
    }

    func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
        print("disconnected: \(error.map { "\($0)" } ?? "no error")")
        finished = true
    }
}

let server = Server()
let listening = QueuedSocket(delegate: server, runLoop: .current)
try listening.accept(onInterface: "127.0.0.1", port: 0)

let client = Client()
let socket = QueuedSocket(delegate: client, runLoop: .current)
// Queued before the connection is up, run in order once it is: the greeting line, every request,
// and the first reply's header. Reads complete in the order they were queued, so each later read is
// queued when the one before it completes (above).
socket.read(toData: Array("\r\n".utf8), maxLength: 1024, tag: Tag.greeting)
for word in ["hello", "queued", "world", "silence"] {
    socket.write(frame(word), tag: Tag.request)
}
socket.read(toLength: 4, timeout: 5, tag: Tag.header)
try socket.connect(toHost: "127.0.0.1", onPort: listening.localPort)

while !client.finished && RunLoop.current.run(mode: .default, before: .distantFuture) {}
listening.disconnect()
