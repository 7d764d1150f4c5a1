// streams-queued: `QueuedSocket` (GCDAsyncSocket-style queued reads and writes) on the benchmark
// thread's run loop, driven with `RunLoop.current.run(mode:before:)` until the workload is done. Each
// workload is a small delegate that queues the next operation from the completion of the last.

import Foundation
import SocketStreams

struct StreamsQueuedClient: BenchmarkClient {
    /// A delegate that records completion or failure; subclasses queue the workload's operations.
    class Driver: QueuedSocketDelegate {
        var done = false
        var failure: String?
        var sockets: [QueuedSocket] = []

        /// A socket on this thread's run loop, connected, with TLS or the SOCKS proxy when asked for.
        func connect(port: UInt16) throws -> QueuedSocket {
            let socket = QueuedSocket(delegate: self, runLoop: .current)
            var proxyError: Error?
            try socket.connect(toHost: "127.0.0.1", onPort: Int(port)) { input, output in
                BenchTLS.apply(to: input)
                do { try BenchSOCKS.apply(to: input) } catch { proxyError = error }
                _ = output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
            }
            if let proxyError { throw proxyError }
            return socket
        }

        /// Runs this thread's run loop until the workload is done or failed.
        func run() throws {
            stallCheckTimer
            var lastProgress = Posix.monotonicNanoseconds()
            var lastEvents = events
            while !done && failure == nil {
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
                let now = Posix.monotonicNanoseconds()
                if events != lastEvents {
                    lastEvents = events
                    lastProgress = now
                } else if Stopwatch.seconds(from: lastProgress, to: now) > stallTimeout {
                    throw BenchError("stalled: no QueuedSocket callback for \(Int(stallTimeout)) s")
                }
            }
            if let failure { throw BenchError(failure) }
        }

        var events = 0

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

    final class Download: Driver {
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

    final class Upload: Driver {
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

    final class PingPong: Driver {
        var messages: [[UInt8]] = []
        var remaining = 0

        override func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
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

    final class Connect: Driver {
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
        driver.next()
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
