// `swift run datagrams`: UDP on SocketStreams, both ways. GCDAsyncUdpSocket code as it is written on
// Apple platforms (an echo server and a client on loopback, a datagram too large to send, a close after
// the last send), then the same exchange with `AsyncDatagramSocket`. Guides/Datagrams.md walks through it.
import CocoaAsyncSocket
import Foundation

/// The server's delegate: sends every datagram back to its sender, in capitals.
final class EchoServer: NSObject, GCDAsyncUdpSocketDelegate {
    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
        let reply = Data(String(decoding: data, as: UTF8.self).uppercased().utf8)
        sock.send(reply, toAddress: address, withTimeout: 5, tag: 0)
    }
}

/// The client's delegate: prints what happens, and says when the last reply came and the socket closed.
final class Client: NSObject, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
    // @unchecked Sendable: `replies` is touched only on the delegate queue, `done` is a semaphore.
    var replies = 0
    let done = DispatchSemaphore(value: 0)

    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
        print("reply: \(String(decoding: data, as: UTF8.self))")
        replies += 1
        if replies >= 3 { done.signal() }
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
        let error = error as NSError?
        print("datagram \(tag) not sent: \(error?.domain ?? "") \(error?.code ?? 0)")
    }

    func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
        print("closed, error: \(String(describing: error))")
        done.signal()
    }
}

let server = EchoServer()
let serverSocket = GCDAsyncUdpSocket(delegate: server, delegateQueue: DispatchQueue(label: "server"))
try serverSocket.bind(toPort: 0, interface: "127.0.0.1")
try serverSocket.beginReceiving()
let port = serverSocket.localPort()

let client = Client()
let socket = GCDAsyncUdpSocket(delegate: client, delegateQueue: DispatchQueue(label: "client"))
try socket.bind(toPort: 0)
try socket.beginReceiving()
for (tag, word) in ["hello", "udp", "world"].enumerated() {
    socket.send(Data(word.utf8), toHost: "localhost", port: port, withTimeout: 5, tag: tag)
}
client.done.wait()
// Too large for a datagram: that one fails, and the socket goes on.
socket.send(Data(count: 70_000), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: 9)
socket.send(Data("again".utf8), toHost: "127.0.0.1", port: port, withTimeout: 5, tag: 10)
client.done.wait()
socket.closeAfterSending()
client.done.wait()
serverSocket.close()

// The same with Swift concurrency.
func exchange() async throws {
    let echo = try AsyncDatagramSocket(host: "127.0.0.1", port: 0)
    let serving = Task {
        for try await datagram in echo.datagrams {
            try await echo.send(Array(String(decoding: datagram.bytes, as: UTF8.self).uppercased().utf8), to: datagram.sender)
        }
    }
    let asyncClient = try await AsyncDatagramSocket(connectingTo: "127.0.0.1", port: echo.localPort)
    var replies = asyncClient.datagrams.makeAsyncIterator()
    for word in ["hello", "async"] {
        try await asyncClient.send(Array(word.utf8))
        if let reply = try await replies.next() { print("async reply: \(String(decoding: reply.bytes, as: UTF8.self))") }
    }
    asyncClient.close()
    echo.close()
    _ = await serving.result
}

try await exchange()
