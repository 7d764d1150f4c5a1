// gcdasyncsocket: GCDAsyncSocket's own API (the CocoaAsyncSocket product) as code ported from Apple
// platforms uses it: `GCDAsyncSocket(delegate:delegateQueue:)`, given no socket queue (so the socket
// works on its serial delegate queue, where GCDAsyncSocket would make a private queue), calling the
// delegate on that queue, `Data` in and out, one delegate per workload queueing the next
// operation from the completion of the last. (`STREAM_BENCH_GCD_SOCKET_QUEUE=delegate` passes the
// delegate queue as the socket queue, which GCDAsyncSocket allows.) The benchmark thread only starts
// each workload and waits.

import CocoaAsyncSocket
import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

struct GCDAsyncSocketClient: BenchmarkClient {
    /// The delegate queue: one per measurement process, so the warm-up starts the machinery that the
    /// measurement then uses.
    static let queue = DispatchQueue(label: "stream-bench.gcdasyncsocket")
    /// Whether the socket queue is the delegate queue (see the file's comment).
    static let sharesQueue = ProcessInfo.processInfo.environment["STREAM_BENCH_GCD_SOCKET_QUEUE"] == "delegate"

    /// A delegate that records completion or failure; subclasses queue the workload's operations.
    class Driver: QueueDriver, GCDAsyncSocketDelegate, @unchecked Sendable {
        init() { super.init(queue: GCDAsyncSocketClient.queue, name: "GCDAsyncSocket") }

        /// A socket delivering to this driver on the delegate queue, connecting to the server, with
        /// TCP_NODELAY set once connected (GCDAsyncSocket has no property for it: its users set it on
        /// `socketFD()` inside `perform`).
        func connect(port: UInt16) throws -> GCDAsyncSocket {
            let socket = GCDAsyncSocket(delegate: self, delegateQueue: queue, socketQueue: GCDAsyncSocketClient.sharesQueue ? queue : nil)
            try socket.connect(toHost: "127.0.0.1", onPort: port)
            return socket
        }

        // Every delegate method a subclass uses is declared here: a protocol's default implementation
        // is what a class's conformance binds to, so a method only a subclass declares is never called.
        func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt16) {
            events += 1
            sock.perform {
                var on: Int32 = 1
                _ = setsockopt(sock.socketFD(), Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
            }
        }

        func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) { events += 1 }
        func socket(_ sock: GCDAsyncSocket, didWriteDataWithTag tag: Int) { events += 1 }

        func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
            events += 1
            if !done, failure == nil { failure = "disconnected: \(err.map { String(describing: $0) } ?? "no error")" }
        }
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    final class Download: Driver, @unchecked Sendable {
        var received = 0
        var expected = 0

        override func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
            events += 1
            received += data.count
            sock.readData(withTimeout: -1, buffer: nil, bufferOffset: 0, maxLength: UInt(Payload.chunkSize), tag: 0)
        }

        override func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
            // The server's FIN ends the download: GCDAsyncSocket disconnects with its closed error.
            if (err as NSError?)?.code == GCDAsyncSocketError.Code.closedError.rawValue, received == expected {
                done = true
                return
            }
            super.socketDidDisconnect(sock, withError: err)
        }
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        let driver = Download()
        driver.expected = totalBytes
        let stopwatch = Stopwatch()
        let socket = try driver.connect(port: port)
        socket.write(Data(Request.download(bytes: UInt64(totalBytes)).encoded), withTimeout: -1, tag: 0)
        socket.readData(withTimeout: -1, buffer: nil, bufferOffset: 0, maxLength: UInt(Payload.chunkSize), tag: 0)
        try driver.run()
        try verifyCount("download", received: driver.received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    final class Upload: Driver, @unchecked Sendable {
        var count: UInt64?

        override func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
            events += 1
            count = Payload.decodeCount([UInt8](data))
            done = true
        }
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        let chunk = Data((0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) })
        let driver = Upload()
        let stopwatch = Stopwatch()
        let socket = try driver.connect(port: port)
        socket.write(Data(Request.upload(bytes: UInt64(totalBytes)).encoded), withTimeout: -1, tag: 0)
        var remaining = totalBytes
        while remaining > 0 {
            let count = min(chunk.count, remaining)
            socket.write(count == chunk.count ? chunk : chunk.prefix(count), withTimeout: -1, tag: 0)
            remaining -= count
        }
        socket.readData(toLength: 8, withTimeout: -1, tag: 0)
        try driver.run()
        socket.disconnect()
        try verifyCount("upload (server's count)", received: Int(driver.count ?? 0), expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    final class PingPong: Driver, @unchecked Sendable {
        var messages: [Data] = []
        var remaining = 0

        override func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
            events += 1
            if data != messages[tag & 1] {
                failure = "ping-pong: echo \(tag) differs from the message sent"
                return
            }
            remaining -= 1
            if remaining == 0 {
                done = true
                return
            }
            sock.write(messages[(tag + 1) & 1], withTimeout: -1, tag: tag + 1)
            sock.readData(toLength: UInt(data.count), withTimeout: -1, tag: tag + 1)
        }
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let driver = PingPong()
        driver.messages = (0..<2).map { Data(Payload.message(roundTrip: $0, size: messageSize)) }
        driver.remaining = roundTrips
        let stopwatch = Stopwatch()
        let socket = try driver.connect(port: port)
        socket.write(Data(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded), withTimeout: -1, tag: 0)
        socket.write(driver.messages[0], withTimeout: -1, tag: 0)
        socket.readData(toLength: UInt(messageSize), withTimeout: -1, tag: 0)
        try driver.run()
        socket.disconnect()
        return stopwatch.elapsedSeconds
    }

    final class Connect: Driver, @unchecked Sendable {
        var port: UInt16 = 0
        var remaining = 0
        var current: GCDAsyncSocket?

        func next() {
            do {
                let socket = try connect(port: port)
                current = socket
                socket.write(Data(Request.connect.encoded), withTimeout: -1, tag: 0)
                socket.readData(toLength: 1, withTimeout: -1, tag: 0)
            } catch {
                failure = "connect: \(error)"
            }
        }

        override func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
            events += 1
            if data.first != Request.connectReply {
                failure = "connect: unexpected reply byte \(data.first.map(String.init) ?? "none")"
                return
            }
            sock.disconnect()
            remaining -= 1
            if remaining == 0 { done = true } else { next() }
        }

        override func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
            if err == nil { return }  // our own disconnect after the reply
            super.socketDidDisconnect(sock, withError: err)
        }
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let driver = Connect()
        driver.port = port
        driver.remaining = count
        let stopwatch = Stopwatch()
        Self.queue.async { driver.next() }  // each connection opens the next from the delegate queue
        try driver.run()
        return stopwatch.elapsedSeconds
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.gcdAsyncSocket, .many1k)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.gcdAsyncSocket, .idle)
    }
}
