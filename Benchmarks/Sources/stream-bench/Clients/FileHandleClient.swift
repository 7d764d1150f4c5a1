// filehandle: what a Linux Swift user without SocketStreams would write: connect a socket with
// Glibc, wrap it in Foundation's FileHandle, and use its Data-based read/write.

import Foundation

struct FileHandleClient: BenchmarkClient {
    private func connectHandle(port: UInt16) throws -> FileHandle {
        FileHandle(fileDescriptor: try Posix.connectToLoopback(port: port), closeOnDealloc: true)
    }

    func warmUp(port: UInt16) throws {
        let handle = try connectHandle(port: port)
        defer { try? handle.close() }
        try handle.write(contentsOf: Data(Request.connect.encoded))
        guard try handle.read(upToCount: 1) == Data([Request.connectReply]) else {
            throw BenchError("warm-up: unexpected reply")
        }
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        let stopwatch = Stopwatch()
        let handle = try connectHandle(port: port)
        defer { try? handle.close() }
        try handle.write(contentsOf: Data(Request.download(bytes: UInt64(totalBytes)).encoded))
        var received = 0
        while let chunk = try handle.read(upToCount: Payload.chunkSize), !chunk.isEmpty {
            received += chunk.count
        }
        try verifyCount("download", received: received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let messages = (0..<2).map { Data(Payload.message(roundTrip: $0, size: messageSize)) }
        let stopwatch = Stopwatch()
        let handle = try connectHandle(port: port)
        defer { try? handle.close() }
        try handle.write(contentsOf: Data(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded))
        for i in 0..<roundTrips {
            try handle.write(contentsOf: messages[i & 1])
            var echo = Data()
            while echo.count < messageSize {
                guard let part = try handle.read(upToCount: messageSize - echo.count), !part.isEmpty else {
                    throw BenchError("ping-pong: short read, \(echo.count) of \(messageSize) bytes")
                }
                echo.append(part)
            }
            if echo != messages[i & 1] { throw BenchError("ping-pong: echo \(i) differs from the message sent") }
        }
        return stopwatch.elapsedSeconds
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        throw unsupported(.filehandle, .upload)
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        throw unsupported(.filehandle, .connect)
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.filehandle, .many1k)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.filehandle, .idle)
    }
}
