// The scale run on `AsyncConnection`, in tasks on `AsyncConnection.executor` (where the connections'
// events are delivered). Opens run as a task group, at most `--in-flight` at once; the idle
// connections have no read pending (no task waits), and no timeouts: AsyncConnection has none.

import Foundation
import SocketStreams

// @unchecked Sendable: `connections` is written by `open` and read by the later phases, one after
// another on the benchmark thread (each phase waits for the one before).
final class ScaleAsyncFace: ScaleFace, @unchecked Sendable {
    private let port: UInt16
    private let group: UInt64
    private let sources: ScaleSources
    private var connections: [AsyncConnection] = []

    init(port: UInt16, group: UInt64, sources: ScaleSources) {
        self.port = port
        self.group = group
        self.sources = sources
    }

    func open(count: Int, inFlight limit: Int) throws {
        let port = port
        let sources = sources
        let header = Request.heldEcho(group: group).encoded + Scale.messages[0]
        connections = try runTask {
            try await withThrowingTaskGroup(of: (Int, AsyncConnection).self) { tasks in
                var opened = [AsyncConnection?](repeating: nil, count: count)
                var next = 0
                var inFlight = 0
                while next < count || inFlight > 0 {
                    while next < count, inFlight < limit {
                        let index = next
                        tasks.addTask {
                            let pair = createStreamPair(host: "127.0.0.1", port: Int(port))
                            _ = pair.output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
                            if let binding = sources.binding(index) {
                                _ = pair.input.setProperty(binding as AnyObject, forKey: .localBindingKey)
                            }
                            let connection = AsyncConnection(input: pair.input, output: pair.output)
                            try await connection.open()
                            try await connection.write(header)
                            let echo = try await connection.read(exactly: Scale.messageSize)
                            if let problem = Scale.check(echo, message: 0, connection: index) { throw BenchError(problem) }
                            return (index, connection)
                        }
                        next += 1
                        inFlight += 1
                    }
                    if let (index, connection) = try await tasks.next() {
                        opened[index] = connection
                        inFlight -= 1
                    }
                }
                return opened.map { $0! }
            }
        }
    }

    func roundTrips() throws {
        let connections = connections
        try runTask {
            for (index, connection) in connections.enumerated() {
                try await connection.write(Scale.messages[1])
                let echo = try await connection.read(exactly: Scale.messageSize)
                if let problem = Scale.check(echo, message: 1, connection: index) { throw BenchError(problem) }
            }
        }
    }

    func release() throws {
        try Scale.sendRelease(port: port, group: group)
        let connections = connections
        try runTask {
            for (index, connection) in connections.enumerated() {
                if let bytes = try await connection.read() {
                    throw BenchError("connection \(index): \(bytes.count) bytes instead of the end of stream")
                }
                connection.close()
            }
        }
        self.connections = []
    }

    /// Runs `body` as a task preferring the connections' executor and blocks this thread until it ends.
    private func runTask<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) throws -> Result {
        let outcome = TaskOutcome<Result>()
        Task {
            do {
                outcome.finish(.success(try await withTaskExecutorPreference(AsyncConnection.executor) { try await body() }))
            } catch {
                outcome.finish(.failure(error))
            }
        }
        return try outcome.wait().get()
    }
}
