// streams-polling: SocketStreams pairs that are never scheduled, used with blocking read/write
// (`read`/`write` block until at least one byte moves, waiting for the open first).

import Foundation
import SocketStreams

struct StreamsPollingClient: BenchmarkClient {
    /// An opened, unscheduled pair (also the soak's polling lanes' connection).
    struct Pair {
        let input: InputStream
        let output: OutputStream

        init(host: String = "127.0.0.1", port: UInt16) throws {
            let streams = createStreamPair(host: host, port: Int(port))
            BenchTLS.apply(to: streams.input)
            try BenchSOCKS.apply(to: streams.input)
            input = streams.input
            output = streams.output
            _ = output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
            input.open()
            output.open()
        }

        func writeAll(_ bytes: [UInt8], count: Int? = nil) throws {
            let total = count ?? bytes.count
            var offset = 0
            while offset < total {
                let n = bytes.withUnsafeBufferPointer { output.write($0.baseAddress! + offset, maxLength: total - offset) }
                guard n > 0 else {
                    throw BenchError("write returned \(n): \(output.streamError.map { String(describing: $0) } ?? "no error")")
                }
                offset += n
            }
        }

        /// Fills `buffer`; end of stream first is a short read.
        func readExactly(_ buffer: inout [UInt8]) throws {
            var offset = 0
            while offset < buffer.count {
                let n = buffer.withUnsafeMutableBufferPointer { input.read($0.baseAddress! + offset, maxLength: $0.count - offset) }
                if n == 0 { throw BenchError("short read: \(offset) of \(buffer.count) bytes before end of stream") }
                if n < 0 { throw BenchError("read failed: \(input.streamError.map { String(describing: $0) } ?? "no error")") }
                offset += n
            }
        }

        func close() {
            input.close()
            output.close()
        }
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        var buffer = [UInt8](repeating: 0, count: Payload.chunkSize)
        let stopwatch = Stopwatch()
        let pair = try Pair(port: port)
        defer { pair.close() }
        try pair.writeAll(Request.download(bytes: UInt64(totalBytes)).encoded)
        var received = 0
        while true {
            let n = pair.input.read(&buffer, maxLength: buffer.count)
            if n == 0 { break }
            if n < 0 { throw BenchError("read failed: \(pair.input.streamError.map { String(describing: $0) } ?? "no error")") }
            received += n
        }
        try verifyCount("download", received: received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        let chunk = (0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) }
        var reply = [UInt8](repeating: 0, count: 8)
        let stopwatch = Stopwatch()
        let pair = try Pair(port: port)
        defer { pair.close() }
        try pair.writeAll(Request.upload(bytes: UInt64(totalBytes)).encoded)
        var remaining = totalBytes
        while remaining > 0 {
            let count = min(chunk.count, remaining)
            try pair.writeAll(chunk, count: count)
            remaining -= count
        }
        try pair.readExactly(&reply)
        try verifyCount("upload (server's count)", received: Int(Payload.decodeCount(reply)), expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        var echo = [UInt8](repeating: 0, count: messageSize)
        let stopwatch = Stopwatch()
        let pair = try Pair(port: port)
        defer { pair.close() }
        try pair.writeAll(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded)
        for i in 0..<roundTrips {
            try pair.writeAll(messages[i & 1])
            try pair.readExactly(&echo)
            if !Payload.same(echo, messages[i & 1]) { throw BenchError("ping-pong: echo \(i) differs from the message sent") }
        }
        return stopwatch.elapsedSeconds
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let header = Request.connect.encoded
        var reply = [UInt8](repeating: 0, count: 1)
        let stopwatch = Stopwatch()
        for _ in 0..<count {
            let pair = try Pair(port: port)
            defer { pair.close() }
            try pair.writeAll(header)
            try pair.readExactly(&reply)
            if reply[0] != Request.connectReply { throw BenchError("connect: unexpected reply byte \(reply[0])") }
        }
        return stopwatch.elapsedSeconds
    }

    /// One thread, blocking I/O: connect all, then in each round send one message on every
    /// connection and read every echo back before the next round.
    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        let header = Request.groupEcho(
            group: UInt64.random(in: 1...UInt64.max), size: UInt32(connections),
            bytes: UInt64(roundTrips * messageSize)
        ).encoded
        let messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        var byte = [UInt8](repeating: 0, count: 1)
        var echo = [UInt8](repeating: 0, count: messageSize)
        var pairs: [Pair] = []
        pairs.reserveCapacity(connections)
        defer { pairs.forEach { $0.close() } }
        for _ in 0..<connections {
            let pair = try Pair(port: port)
            pairs.append(pair)
            try pair.writeAll(header)
            try pair.readExactly(&byte)
            if byte[0] != Request.ackReply { throw BenchError("many: expected '+', got \(byte[0])") }
        }
        var start: UInt64?
        for pair in pairs {
            try pair.readExactly(&byte)
            if start == nil { start = Posix.monotonicNanoseconds() }
            if byte[0] != Request.goReply { throw BenchError("many: expected 'G', got \(byte[0])") }
        }
        for round in 0..<roundTrips {
            let message = messages[round & 1]
            for pair in pairs { try pair.writeAll(message) }
            for pair in pairs {
                try pair.readExactly(&echo)
                if !Payload.same(echo, message) { throw BenchError("many: echo differs from the message sent") }
            }
        }
        return Stopwatch.seconds(from: start ?? 0, to: Posix.monotonicNanoseconds())
    }

    func idle(port: UInt16, pairs count: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        let group = UInt64.random(in: 1...UInt64.max)
        let header = Request.idle(group: group).encoded
        var byte = [UInt8](repeating: 0, count: 1)
        var pairs: [Pair] = []
        pairs.reserveCapacity(count)
        defer { pairs.forEach { $0.close() } }
        let memoryBefore = try ProcessMemory.snapshot()
        for _ in 0..<count {
            let pair = try Pair(port: port)
            pairs.append(pair)
            try pair.writeAll(header)
            try pair.readExactly(&byte)
            if byte[0] != Request.ackReply { throw BenchError("idle: expected '+', got \(byte[0])") }
        }
        let memoryOpen = try ProcessMemory.snapshot()

        let release = try Pair(port: port)
        defer { release.close() }
        try release.writeAll(Request.release(group: group).encoded)
        try release.readExactly(&byte)
        for pair in pairs where pair.input.read(&byte, maxLength: 1) != 0 {
            throw BenchError("idle: expected end of stream after the release")
        }
        return (memoryBefore, memoryOpen)
    }
}
