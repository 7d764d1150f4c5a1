// streams-queued: `QueuedSocket` (GCDAsyncSocket-style queued reads and writes) with a serial
// dispatch queue as its delegate queue, GCDAsyncSocket's own model (`initWithDelegate:delegateQueue:`):
// code written that way runs on delegate queues, and a pair on a queue needs no run-loop pass. (The
// run-loop variant, a socket on the main run loop, is the delegate client's territory:
// streams-delegate measures that path.) The benchmark thread only starts each workload and waits.
// Each workload is a small delegate that queues the next operation from the completion of the last.

import Foundation
import SocketStreams

struct StreamsQueuedClient: BenchmarkClient {
    /// The delegate queue: one per measurement process, so the warm-up starts the machinery (the
    /// queue's reactor) that the measurement then uses.
    static let queue = DispatchQueue(label: "stream-bench.streams-queued")

    /// A delegate that records completion or failure; subclasses queue the workload's operations.
    class Driver: QueueDriver, QueuedSocketDelegate, @unchecked Sendable {
        var sockets: [QueuedSocket] = []

        init() { super.init(queue: StreamsQueuedClient.queue, name: "QueuedSocket") }

        /// A socket delivering to this driver on the delegate queue, connected, with TLS or the SOCKS
        /// proxy when asked for.
        func connect(port: UInt16) throws -> QueuedSocket {
            let socket = QueuedSocket(delegate: self, delegateQueue: StreamsQueuedClient.queue)
            var proxyError: Error?
            try socket.connect(toHost: "127.0.0.1", onPort: Int(port)) { input, output in
                BenchTLS.apply(to: input)
                do { try BenchSOCKS.apply(to: input) } catch { proxyError = error }
                _ = output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
            }
            if let proxyError { throw proxyError }
            return socket
        }

        // Every delegate method a subclass uses is declared here: a protocol's default implementation
        // is what a class's conformance binds to, so a method only a subclass declares is never called.
        func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) { events += 1 }
        func socket(_ socket: QueuedSocket, didWriteDataWithTag tag: Int) { events += 1 }

        func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
            events += 1
            if !done, failure == nil { failure = "disconnected: \(error.map { String(describing: $0) } ?? "no error")" }
        }
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    final class Download: Driver, @unchecked Sendable {
        var received = 0
        var expected = 0

        override func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
            events += 1
            received += data.count
            socket.readAvailable(maxLength: Payload.chunkSize)
        }

        override func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
            // The server's FIN ends the download: the pending read ends with nothing unread.
            if let failure = error as? StreamOperationError, failure.code == .closedByPeer, failure.unread.isEmpty, received == expected {
                done = true
                return
            }
            super.socketDidDisconnect(socket, withError: error)
        }
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        let driver = Download()
        driver.expected = totalBytes
        let stopwatch = Stopwatch()
        let socket = try driver.connect(port: port)
        socket.write(Request.download(bytes: UInt64(totalBytes)).encoded)
        socket.readAvailable(maxLength: Payload.chunkSize)
        try driver.run()
        try verifyCount("download", received: driver.received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    final class Upload: Driver, @unchecked Sendable {
        var count: UInt64?

        override func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
            events += 1
            count = Payload.decodeCount(data)
            done = true
        }

    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        let chunk = (0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) }
        let driver = Upload()
        let stopwatch = Stopwatch()
        let socket = try driver.connect(port: port)
        socket.write(Request.upload(bytes: UInt64(totalBytes)).encoded)
        var remaining = totalBytes
        while remaining > 0 {
            let count = min(chunk.count, remaining)
            socket.write(count == chunk.count ? chunk : Array(chunk[..<count]))
            remaining -= count
        }
        socket.read(toLength: 8)
        try driver.run()
        socket.disconnect()
        try verifyCount("upload (server's count)", received: Int(driver.count ?? 0), expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    final class PingPong: Driver, @unchecked Sendable {
        var messages: [[UInt8]] = []
        var remaining = 0

        override func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
            events += 1
            if !Payload.same(data, messages[tag & 1]) {
                failure = "ping-pong: echo \(tag) differs from the message sent"
                return
            }
            remaining -= 1
            if remaining == 0 {
                done = true
                return
            }
            socket.write(messages[(tag + 1) & 1], tag: tag + 1)
            socket.read(toLength: data.count, tag: tag + 1)
        }
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let driver = PingPong()
        driver.messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        driver.remaining = roundTrips
        let stopwatch = Stopwatch()
        let socket = try driver.connect(port: port)
        socket.write(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded)
        socket.write(driver.messages[0], tag: 0)
        socket.read(toLength: messageSize, tag: 0)
        try driver.run()
        socket.disconnect()
        return stopwatch.elapsedSeconds
    }

    final class Connect: Driver, @unchecked Sendable {
        var port: UInt16 = 0
        var remaining = 0
        var current: QueuedSocket?

        func next() {
            do {
                let socket = try connect(port: port)
                current = socket
                socket.write(Request.connect.encoded)
                socket.read(toLength: 1)
            } catch {
                failure = "connect: \(error)"
            }
        }

        override func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
            events += 1
            if data[0] != Request.connectReply {
                failure = "connect: unexpected reply byte \(data[0])"
                return
            }
            socket.disconnect()
            remaining -= 1
            if remaining == 0 { done = true } else { next() }
        }

        override func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
            if error == nil { return }  // our own disconnect after the reply
            super.socketDidDisconnect(socket, withError: error)
        }
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let driver = Connect()
        driver.port = port
        driver.remaining = count
        let stopwatch = Stopwatch()
        Self.queue.async { driver.next() }  // each connection opens the next from the queue
        try driver.run()
        return stopwatch.elapsedSeconds
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.streamsQueued, .many1k)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.streamsQueued, .idle)
    }
}
