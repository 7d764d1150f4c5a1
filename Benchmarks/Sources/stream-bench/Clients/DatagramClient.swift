// What the UDP clients (baseline-udp, baseline-udp-batch, gcdasyncudpsocket) implement, and the control
// connection every one of them uses to start and end a session with the server's UDP peers (a blocking
// TCP socket on the benchmark thread, the same for every client: only the datagrams go through the
// code under test).

import Glibc

/// What one UDP measurement saw.
struct DatagramOutcome {
    /// From the start of the session to its end (see each workload).
    var seconds: Double
    /// Datagrams sent: by the blast (udp-receive), the peers (udp-fanin) or the client (udp-send), or round trips.
    var count: Int
    /// Datagrams that arrived: at the client (udp-receive, udp-fanin) or at the sink (udp-send).
    var received: Int
    /// Of those, the ones that came after a later one.
    var outOfOrder: Int
    /// udp-receive, udp-fanin: the seconds the blast or the peers took to send their datagrams (the rate
    /// offered to the client).
    var senderSeconds: Double?
    /// udp-fanin: the peers the client saw datagrams from.
    var senders: Int?
}

/// What one UDP client family implements. Every method checks sizes, sequence numbers and echoes,
/// throws on a mismatch or a stall, and times the measured phase only.
protocol DatagramBenchmarkClient {
    /// A few round trips with the echo peer before measuring, so that one-time set-up (the package's
    /// stream thread, the reactor, the delegate queue's thread, lazy binding) is not timed.
    func warmUp(port: UInt16) throws
    /// udp-receive: binds a socket on 127.0.0.1, has the blast send `count` datagrams of `size` bytes
    /// to it and receives until the end marker. Timed from the request to the end marker's arrival;
    /// `received` counts the blast's datagrams that arrived (the rest the kernel dropped, the client's
    /// receive buffer being full).
    func receive(port: UInt16, count: Int, size: Int) throws -> DatagramOutcome
    /// udp-send: sends `count` datagrams of `size` bytes to the sink as fast as it can, each with its own
    /// completion (`completions`) or without; timed from the first send to the sink's count, which
    /// comes once every send is done (the last completion, or the socket's close after sending).
    func send(port: UInt16, count: Int, size: Int, completions: Bool) throws -> DatagramOutcome
    /// udp-pingpong: `roundTrips` datagrams of `size` bytes, each sent once the echo of the last has
    /// arrived and matched; returns the seconds from the first send to the last echo.
    func pingPong(port: UInt16, roundTrips: Int, size: Int) throws -> Double
    /// udp-fanin: binds a socket on 127.0.0.1, has `peers` sockets of the server send `count` datagrams
    /// of `size` bytes each to it, interleaved, and receives until every peer's end marker has come
    /// (`FanInTracker` checks each datagram's sender and sequence number). Timed from the start ('G') to
    /// the first end marker; `received` counts the peers' datagrams that arrived.
    func fanIn(port: UInt16, peers: Int, count: Int, size: Int) throws -> DatagramOutcome
}

/// How long a UDP client waits for a datagram before it reports a stall.
let datagramStallSeconds = 30

/// The client's side of a UDP session's control connection (see Protocol/WireProtocol.swift).
final class DatagramControl {
    private let fd: Int32

    /// Connects to the server's plain `port` and sends `request`.
    init(port: UInt16, request: Request) throws {
        fd = try Posix.connectToLoopback(port: port)
        do {
            try Posix.sendAll(fd, request.encoded)
        } catch {
            Posix.close(fd)
            throw error
        }
    }

    deinit {
        Posix.close(fd)
    }

    /// A sink or echo session's UDP port, the server's first answer.
    func readPort() throws -> UInt16 {
        var reply = [UInt8](repeating: 0, count: 2)
        try reply.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
        let port = UInt16(reply[0]) << 8 | UInt16(reply[1])
        if port == 0 { throw BenchError("the server answered UDP port 0") }
        return port
    }

    /// The counts of a sink or echo session, after the client's 'F'.
    struct Report {
        var received: Int
        var lost: Int
        var outOfOrder: Int
        var wrong: Int
    }

    /// Ends a sink or echo session: sends 'F' and reads the server's four counts.
    func finish() throws -> Report {
        try Posix.sendAll(fd, [Request.datagramFinish])
        var reply = [UInt8](repeating: 0, count: Request.datagramReportLength)
        try reply.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
        var reader = BigEndianReader(reply[...])
        let report = Report(
            received: Int(reader.u64()), lost: Int(reader.u64()), outOfOrder: Int(reader.u64()), wrong: Int(reader.u64()))
        if report.wrong > 0 { throw BenchError("the sink got \(report.wrong) datagram(s) of the wrong size or sequence") }
        return report
    }

    /// Ends a blast: sends 'F' (the end marker has arrived), checks the server's count sent and returns
    /// the seconds the blast took to send them.
    func finishBlast(expected: Int) throws -> Double {
        try Posix.sendAll(fd, [Request.datagramFinish])
        var reply = [UInt8](repeating: 0, count: 16)
        try reply.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
        var reader = BigEndianReader(reply[...])
        let sent = Int(reader.u64())
        if sent != expected { throw BenchError("the blast sent \(sent) of \(expected) datagrams") }
        return Double(reader.u64()) / 1e9
    }

    /// A fan-in's peers' ports, the server's first answer.
    func readPorts(count: Int) throws -> [UInt16] {
        var reply = [UInt8](repeating: 0, count: 2 * count)
        try reply.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
        var reader = BigEndianReader(reply[...])
        let ports = (0..<count).map { _ in reader.u16() }
        if ports.contains(0) { throw BenchError("the server answered UDP port 0") }
        return ports
    }

    /// Starts the fan-in ('G'): the peers' datagrams follow.
    func startFanIn() throws {
        try Posix.sendAll(fd, [Request.fanInStart])
    }

    /// Ends a fan-in: sends 'F' (every end marker has arrived), checks the server's count sent and
    /// returns the seconds the peers took to send them.
    func finishFanIn(expected: Int) throws -> Double {
        try Posix.sendAll(fd, [Request.datagramFinish])
        var reply = [UInt8](repeating: 0, count: Request.fanInReportLength)
        try reply.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
        var reader = BigEndianReader(reply[...])
        let sent = Int(reader.u64())
        if sent != expected { throw BenchError("the fan-in's peers sent \(sent) of \(expected) datagrams") }
        return Double(reader.u64()) / 1e9
    }
}

extension DatagramBenchmarkClient {
    func warmUp(port: UInt16) throws {
        _ = try pingPong(port: port, roundTrips: 10, size: DatagramPayload.defaultSize)
    }
}

/// A received datagram's check: the session's size, and a sequence number of the session or the end
/// marker. Returns the sequence number.
@inline(__always)
func checkedSequence(_ bytes: UnsafeRawPointer, length: Int, size: Int) throws -> UInt64 {
    guard length == size else { throw BenchError("a datagram of \(length) bytes arrived; the session's are \(size)") }
    return DatagramPayload.sequence(at: bytes)
}

/// Raised when a receive saw a sequence number that is neither the session's nor the end marker.
func foreignDatagram(_ tracker: SequenceTracker) throws {
    if tracker.foreign > 0 { throw BenchError("\(tracker.foreign) datagram(s) with a sequence number beyond the session's") }
}

/// The ping-pong's messages: the round trip's index as the sequence number, so a stale or misordered
/// echo is caught (the two kept alternate, as the TCP ping-pong's do).
func pingPongMessages(size: Int) -> [[UInt8]] {
    (0..<2).map { DatagramPayload.message(sequence: UInt64($0), size: size) }
}
