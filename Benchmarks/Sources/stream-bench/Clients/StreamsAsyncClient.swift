// streams-async: `AsyncConnection` (async/await over a SocketStreams pair). Each measurement runs in
// one task; the benchmark thread, which is not one of Swift's cooperative threads, waits for it.

import Foundation
import SocketStreams

struct StreamsAsyncClient: BenchmarkClient {
    /// Runs `body` as a task and blocks this thread until it finishes.
    private func run<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) throws -> Result {
        let outcome = TaskOutcome<Result>()
        let onConnectionsExecutor = ProcessInfo.processInfo.environment["STREAM_BENCH_ASYNC_GLOBAL"] == nil
        Task {
            do {
                if onConnectionsExecutor {
                    outcome.finish(.success(try await withTaskExecutorPreference(AsyncConnection.executor) { try await body() }))
                } else {
                    outcome.finish(.success(try await body()))
                }
            } catch {
                outcome.finish(.failure(error))
            }
        }
        return try outcome.wait().get()
    }

    /// An open connection, with TLS or the SOCKS proxy when the workload asks for them.
    private static func open(port: UInt16) async throws -> AsyncConnection {
        let pair = createStreamPair(host: "127.0.0.1", port: Int(port))
        BenchTLS.apply(to: pair.input)
        try BenchSOCKS.apply(to: pair.input)
        _ = pair.output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
        let connection = AsyncConnection(input: pair.input, output: pair.output)
        try await connection.open()
        return connection
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        try run {
            let stopwatch = Stopwatch()
            let connection = try await Self.open(port: port)
            defer { connection.close() }
            try await connection.write(Request.download(bytes: UInt64(totalBytes)).encoded)
            var received = 0
            for try await chunk in connection.chunks(maxLength: Payload.chunkSize) { received += chunk.count }
            try verifyCount("download", received: received, expected: totalBytes)
            return stopwatch.elapsedSeconds
        }
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        try run {
            let chunk = (0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) }
            let stopwatch = Stopwatch()
            let connection = try await Self.open(port: port)
            defer { connection.close() }
            try await connection.write(Request.upload(bytes: UInt64(totalBytes)).encoded)
            var remaining = totalBytes
            while remaining > 0 {
                let count = min(chunk.count, remaining)
                try await connection.write(count == chunk.count ? chunk : Array(chunk[..<count]))
                remaining -= count
            }
            let reply = try await connection.read(exactly: 8)
            try verifyCount("upload (server's count)", received: Int(Payload.decodeCount(reply)), expected: totalBytes)
            return stopwatch.elapsedSeconds
        }
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        try run {
            let messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
            let stopwatch = Stopwatch()
            let connection = try await Self.open(port: port)
            defer { connection.close() }
            try await connection.write(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded)
            for i in 0..<roundTrips {
                try await connection.write(messages[i & 1])
                let echo = try await connection.read(exactly: messageSize)
                if !Payload.same(echo, messages[i & 1]) { throw BenchError("ping-pong: echo \(i) differs from the message sent") }
            }
            return stopwatch.elapsedSeconds
        }
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        try run {
            let header = Request.connect.encoded
            let stopwatch = Stopwatch()
            for _ in 0..<count {
                let connection = try await Self.open(port: port)
                try await connection.write(header)
                let reply = try await connection.read(exactly: 1)
                connection.close()
                if reply[0] != Request.connectReply { throw BenchError("connect: unexpected reply byte \(reply[0])") }
            }
            return stopwatch.elapsedSeconds
        }
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.streamsAsync, .many1k)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.streamsAsync, .idle)
    }
}

/// A task's result, handed to a thread that waits for it.
final class TaskOutcome<Value: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<Value, Error>?

    func finish(_ result: Result<Value, Error>) {
        self.result = result
        done.signal()
    }

    func wait() -> Result<Value, Error> {
        done.wait()
        return result!
    }
}
