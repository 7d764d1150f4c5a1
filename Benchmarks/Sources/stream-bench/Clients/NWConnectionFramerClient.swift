// nwconnection-framer: `NWConnection` with a length-prefixed `NWProtocolFramer` in its stack, as
// Apple-platform code frames its messages (a 4-byte big-endian length, then the message), each
// message sent with the framer's metadata and read back with `receiveMessage`. The echo server
// returns the bytes it gets, so each round trip's framed message, header included, is the
// ping-pong's size on the wire, the same bytes the other clients send: what it costs beyond
// `nwconnection` is the framer's.

import Foundation
import SocketStreamsNetwork

/// The framer: a 4-byte big-endian length before each message, a message of the kind `raw` written
/// as it is (the request that starts a workload, which the server reads unframed).
final class BenchLengthFramer: NWProtocolFramerImplementation {
    static let definition = NWProtocolFramer.Definition(implementation: BenchLengthFramer.self)
    static var label: String { "BenchLength" }
    static let headerSize = 4

    init(framer: NWProtocolFramer.Instance) {}
    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult { .ready }
    func wakeup(framer: NWProtocolFramer.Instance) {}
    func stop(framer: NWProtocolFramer.Instance) -> Bool { true }
    func cleanup(framer: NWProtocolFramer.Instance) {}

    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {
        if message["raw"] as? Bool != true {
            let length = UInt32(truncatingIfNeeded: messageLength)
            framer.writeOutput(
                data: Data([UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff)]))
        }
        // Fails only when the connection is going away, whose error the receive reports.
        try? framer.writeOutputNoCopy(length: messageLength)
    }

    func handleInput(framer: NWProtocolFramer.Instance) -> Int {
        while true {
            var length: Int?
            let parsed = framer.parseInput(minimumIncompleteLength: Self.headerSize, maximumLength: Self.headerSize) { buffer, _ in
                guard let buffer, buffer.count >= Self.headerSize else { return 0 }
                length = buffer.prefix(Self.headerSize).reduce(0) { $0 << 8 | Int($1) }
                return Self.headerSize
            }
            guard parsed, let length else { return Self.headerSize }
            let message = NWProtocolFramer.Message(definition: Self.definition)
            if !framer.deliverInputNoCopy(length: length, message: message, isComplete: true) { return 0 }
        }
    }

    /// A context whose message the framer writes with its header (`raw` false) or as it is.
    static func context(raw: Bool) -> NWConnection.ContentContext {
        let message = NWProtocolFramer.Message(definition: definition)
        message["raw"] = raw
        return NWConnection.ContentContext(identifier: raw ? "raw" : "message", metadata: [message])
    }
}

struct NWConnectionFramerClient: BenchmarkClient {
    static let framed = BenchLengthFramer.context(raw: false)
    static let raw = BenchLengthFramer.context(raw: true)

    final class PingPong: NWConnectionClient.Driver, @unchecked Sendable {
        // @unchecked: touched only on the queue, as every driver's state (`QueueDriver`).
        var messages: [Data] = []
        var bytes: [[UInt8]] = []
        var remaining = 0

        func connectFramed(port: UInt16, ready: @escaping @Sendable (NWConnection) -> Void) -> NWConnection {
            connect(port: port, framed: true, ready: ready)
        }

        func round(_ connection: NWConnection, _ index: Int) {
            connection.send(
                content: messages[index & 1], contentContext: NWConnectionFramerClient.framed, isComplete: true, completion: .idempotent)
            connection.receiveMessage { [self] data, context, _, error in
                events += 1
                guard check(error, "framer ping-pong") else { return }
                guard let data, Payload.same(data, bytes[index & 1]),
                    context?.protocolMetadata(definition: BenchLengthFramer.definition) is NWProtocolFramer.Message
                else {
                    failure = "framer ping-pong: message \(index) differs from the one sent"
                    return
                }
                remaining -= 1
                if remaining == 0 {
                    done = true
                } else {
                    round(connection, index + 1)
                }
            }
        }
    }

    func warmUp(port: UInt16) throws {
        _ = try pingPong(port: port, roundTrips: 1, messageSize: 64)
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        // The framed message, its header included, is the workload's message size on the wire.
        let payload = max(messageSize - BenchLengthFramer.headerSize, 0)
        let driver = PingPong()
        driver.bytes = (0..<2).map { Payload.message(roundTrip: $0, size: payload) }
        driver.messages = driver.bytes.map { Data($0) }
        driver.remaining = roundTrips
        let stopwatch = Stopwatch()
        let connection = driver.connectFramed(port: port) { _ in }
        let wire = roundTrips * (payload + BenchLengthFramer.headerSize)
        connection.send(
            content: Request.echo(bytes: UInt64(wire)).encoded, contentContext: Self.raw, isComplete: true, completion: .idempotent)
        driver.round(connection, 0)
        try driver.run()
        connection.cancel()
        return stopwatch.elapsedSeconds
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double { throw unsupported(.nwConnectionFramer, .download) }
    func upload(port: UInt16, totalBytes: Int) throws -> Double { throw unsupported(.nwConnectionFramer, .upload) }
    func connect(port: UInt16, count: Int) throws -> Double { throw unsupported(.nwConnectionFramer, .connect) }
    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.nwConnectionFramer, .many1k)
    }
    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.nwConnectionFramer, .idle)
    }
}
