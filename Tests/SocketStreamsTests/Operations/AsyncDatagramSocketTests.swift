import Foundation
import Glibc
import SocketStreams
import SocketStreamsTestSupport
import XCTest

/// `AsyncDatagramSocket` as Swift concurrency code uses it: an echo between two of them, a refused
/// datagram failing only its send, and the end of the datagrams once closed.
final class AsyncDatagramSocketTests: SocketStreamsTestCase {
    func testEchoAndAFailedSendAndClose() async throws {
        let server = try AsyncDatagramSocket(host: "127.0.0.1", port: 0)
        let port = server.localPort
        XCTAssertNotEqual(port, 0)
        let serving = Task {
            var served = 0
            for try await datagram in server.datagrams {
                try await server.send(datagram.bytes, to: datagram.sender)
                served += 1
                if served == 50 { break }
            }
            return served
        }
        let client = try await AsyncDatagramSocket(connectingTo: "localhost", port: port)
        var iterator = client.datagrams.makeAsyncIterator()
        for index in 0..<50 {
            try await client.send(Array("hello \(index)".utf8))
            let echo = try await iterator.next()
            XCTAssertEqual(echo.map { String(decoding: $0.bytes, as: UTF8.self) }, "hello \(index)")
            XCTAssertEqual(echo?.sender.port, port)
        }
        let served = try await serving.value
        XCTAssertEqual(served, 50)
        do {
            try await client.send([UInt8](repeating: 0, count: 70_000))
            XCTFail("a 70,000-byte datagram was sent")
        } catch let error as DatagramSocketError {
            XCTAssertEqual(error.code, .system)
            XCTAssertEqual(error.errorNumber, EMSGSIZE)
        }
        // The socket is still open after the refusal, and a new iteration picks up where the last left.
        try await client.send(Array("still open".utf8))
        var again = server.datagrams.makeAsyncIterator()
        let next = try await again.next()
        XCTAssertEqual(next.map { String(decoding: $0.bytes, as: UTF8.self) }, "still open")
        client.close()
        let ended = try await iterator.next()
        XCTAssertNil(ended, "a closed socket's datagrams end")
        do {
            try await client.send([1])
            XCTFail("a closed socket sent")
        } catch let error as DatagramSocketError {
            XCTAssertEqual(error.code, .closed)
        }
        server.close()
    }
}
