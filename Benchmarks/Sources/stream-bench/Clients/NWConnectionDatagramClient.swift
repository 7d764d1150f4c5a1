// nwconnection over UDP: Network.framework's `NWConnection` and `NWListener` (SocketStreamsNetwork) as
// Apple-platform code uses them for datagrams, on the same serial queue as the TCP workloads'
// (`NWConnectionClient.queue`): `NWConnection(host:port:using: .udp)` to the sink and to the echo peer,
// `receiveMessage` loops, each receive issued from the completion of the last; udp-receive and
// udp-fanin receive through `NWListener(using: .udp)` on 127.0.0.1, which hands over one connection per
// sender (the blast's one; the fan-in's 1,000 peers, one each), started and read as they come. Sends
// are `.idempotent` (fire and forget) except udp-send's, which each have a `.contentProcessed`
// completion; udp-send-quiet's last one has one too, which tells that every send before it is done
// (completions run in send order). One `Data` of its own per datagram sent, as for gcdasyncudpsocket.
// The benchmark thread starts each workload and waits.

import Foundation
import SocketStreamsNetwork

#if canImport(Glibc)
    import Glibc
#endif

struct NWConnectionDatagramClient: DatagramBenchmarkClient {
    static var queue: DispatchQueue { NWConnectionClient.queue }

    /// A workload's state, touched only on the queue (see `QueueDriver`).
    // @unchecked Sendable: its state is reached only on `queue`, where every handler and completion
    // runs; the benchmark thread only starts the workload and waits (`QueueDriver.run`).
    class Driver: QueueDriver, @unchecked Sendable {
        init() { super.init(queue: NWConnectionDatagramClient.queue, name: "NWConnection") }

        /// Records the first failure (the workload fails).
        func fail(_ reason: String) {
            if !done, failure == nil { failure = reason }
        }

        /// Records an error a completion got; false if there was one.
        func check(_ error: NWError?, _ what: String) -> Bool {
            guard let error else { return true }
            fail("\(what): \(error)")
            return false
        }

        /// A failure of `connection` fails the workload.
        func watch(_ connection: NWConnection, _ what: String) {
            connection.stateUpdateHandler = { [self] state in
                switch state {
                case .waiting(let error), .failed(let error): fail("\(what): the connection went \(state) (\(error))")
                default: break
                }
            }
        }

        /// A UDP connection to 127.0.0.1:`port`, started on the queue.
        func connect(port: UInt16, _ what: String) -> NWConnection {
            let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: port)!, using: .udp)
            watch(connection, what)
            connection.start(queue: NWConnectionDatagramClient.queue)
            return connection
        }

        /// A UDP listener on 127.0.0.1 and a port the system picks, `accepted` given each new connection
        /// (on the queue); returns once it is ready, with its port.
        func listen(_ what: String, accepted: @escaping @Sendable (NWConnection) -> Void) throws -> (NWListener, UInt16) {
            let parameters = NWParameters.udp
            parameters.requiredLocalEndpoint = .hostPort(host: "127.0.0.1", port: .any)
            let listener = try NWListener(using: parameters)
            let ready = DispatchSemaphore(value: 0)
            listener.stateUpdateHandler = { [self] state in
                switch state {
                case .ready: ready.signal()
                case .failed(let error):
                    fail("\(what): the listener failed (\(error))")
                    ready.signal()
                default: break
                }
            }
            listener.newConnectionHandler = accepted
            listener.start(queue: NWConnectionDatagramClient.queue)
            if ready.wait(timeout: .now() + .seconds(datagramStallSeconds)) == .timedOut {
                listener.cancel()
                throw BenchError("\(what): the listener never became ready")
            }
            guard let port = listener.port?.rawValue, port != 0 else {
                listener.cancel()
                throw BenchError(NWConnectionDatagramClient.queue.sync { failure } ?? "\(what): the listener has no port")
            }
            return (listener, port)
        }
    }

    // MARK: udp-receive

    // @unchecked Sendable: as `Driver`, its state only on `queue`.
    final class Receiver: Driver, @unchecked Sendable {
        let size: Int
        var tracker: SequenceTracker
        /// When the end marker arrived (CLOCK_MONOTONIC nanoseconds).
        var end: UInt64 = 0
        /// The blast's flow, the one sender expected.
        var blast: NWConnection?

        init(count: Int, size: Int) {
            self.size = size
            tracker = SequenceTracker(count: UInt64(count))
        }

        func accept(_ connection: NWConnection) {
            events += 1
            guard blast == nil else {
                connection.cancel()
                return fail("udp-receive: datagrams from a second sender, \(connection.endpoint)")
            }
            blast = connection
            watch(connection, "udp-receive")
            connection.start(queue: queue)
            receive(connection)
        }

        func receive(_ connection: NWConnection) {
            connection.receiveMessage { [self] data, _, _, error in
                events += 1
                guard !done, check(error, "udp-receive") else { return }
                let sequence = data?.withUnsafeBytes { bytes -> UInt64? in
                    guard bytes.count == size else { return nil }
                    return DatagramPayload.sequence(at: bytes.baseAddress!)
                }
                guard let sequence else {
                    return fail("udp-receive: a datagram of \(data?.count ?? 0) bytes arrived; the session's are \(size)")
                }
                if sequence == DatagramPayload.endMarker {
                    end = Posix.monotonicNanoseconds()
                    done = true
                    return
                }
                tracker.record(sequence)
                receive(connection)
            }
        }
    }

    func receive(port: UInt16, count: Int, size: Int) throws -> DatagramOutcome {
        let receiver = Receiver(count: count, size: size)
        let (listener, clientPort) = try receiver.listen("udp-receive") { receiver.accept($0) }
        defer { listener.cancel() }
        let start = Posix.monotonicNanoseconds()
        let control = try DatagramControl(port: port, request: .blast(count: UInt64(count), size: UInt32(size), port: clientPort))
        try receiver.run()
        listener.cancel()
        let senderSeconds = try control.finishBlast(expected: count)
        let (end, tracker) = Self.queue.sync { (receiver.end, receiver.tracker) }
        try foreignDatagram(tracker)
        return DatagramOutcome(
            seconds: Stopwatch.seconds(from: start, to: end), count: count, received: tracker.received, outOfOrder: tracker.outOfOrder,
            senderSeconds: senderSeconds)
    }

    // MARK: udp-fanin

    // @unchecked Sendable: as `Driver`, its state only on `queue`.
    final class FanInReceiver: Driver, @unchecked Sendable {
        let size: Int
        /// Set once the server has answered its peers' ports, before any of them sends.
        var tracker: FanInTracker?

        init(size: Int) { self.size = size }

        /// A peer's flow: started, and read with its sender's address (the connection's endpoint, as a
        /// `sockaddr_in`, which the tracker checks on every datagram).
        func accept(_ connection: NWConnection) {
            events += 1
            guard case .hostPort(let host, let port) = connection.endpoint, case .ipv4(let address) = host else {
                connection.cancel()
                return fail("udp-fanin: datagrams from \(connection.endpoint), not an IPv4 address")
            }
            var sender = sockaddr_in()
            sender.sin_family = sa_family_t(AF_INET)
            sender.sin_port = port.rawValue.bigEndian
            address.rawValue.withUnsafeBytes { sender.sin_addr.s_addr = $0.loadUnaligned(as: in_addr_t.self) }
            watch(connection, "udp-fanin")
            connection.start(queue: queue)
            receive(connection, from: sender)
        }

        func receive(_ connection: NWConnection, from sender: sockaddr_in) {
            connection.receiveMessage { [self] data, _, _, error in
                events += 1
                guard !done, check(error, "udp-fanin") else { return }
                do {
                    guard tracker != nil else { throw BenchError("udp-fanin: a datagram before the fan-in started") }
                    guard let data else { throw BenchError("udp-fanin: a receive completed with no datagram") }
                    let sequence = try data.withUnsafeBytes { try checkedSequence($0.baseAddress!, length: $0.count, size: size) }
                    // Recorded in place: a copy of the tracker would copy its tables on every datagram.
                    if try withUnsafeBytes(of: sender, { try tracker!.record(sequence, from: $0.baseAddress!, length: $0.count) }) {
                        done = true
                        return
                    }
                } catch {
                    return fail("\(error)")
                }
                receive(connection, from: sender)
            }
        }
    }

    func fanIn(port: UInt16, peers: Int, count: Int, size: Int) throws -> DatagramOutcome {
        let receiver = FanInReceiver(size: size)
        let (listener, clientPort) = try receiver.listen("udp-fanin") { receiver.accept($0) }
        defer { listener.cancel() }
        let control = try DatagramControl(
            port: port, request: .fanIn(peers: UInt16(peers), count: UInt64(count), size: UInt32(size), port: clientPort))
        let tracker = try FanInTracker(ports: try control.readPorts(count: peers), count: count)
        Self.queue.sync { receiver.tracker = tracker }
        let start = Posix.monotonicNanoseconds()
        try control.startFanIn()
        try receiver.run()
        listener.cancel()
        let senderSeconds = try control.finishFanIn(expected: peers * count)
        guard let finished = Self.queue.sync(execute: { receiver.tracker }) else { throw BenchError("udp-fanin: no tracker") }
        return try finished.outcome(seconds: Stopwatch.seconds(from: start, to: finished.end), senderSeconds: senderSeconds)
    }

    // MARK: udp-send, udp-send-quiet

    // @unchecked Sendable: as `Driver`, its state only on `queue`.
    final class Sender: Driver, @unchecked Sendable {
        let expected: Int
        /// The completions that have come, in send order.
        var completed = 0

        init(expected: Int) { self.expected = expected }

        /// udp-send's completion of datagram `sequence`.
        func sent(_ sequence: Int, _ error: NWError?) {
            events += 1
            if let error { return fail("udp-send: datagram \(sequence) not sent: \(error)") }
            guard sequence == completed else {
                return fail("udp-send: the completion of datagram \(sequence) came where \(completed)'s was due")
            }
            completed += 1
            if completed == expected { done = true }
        }

        /// udp-send-quiet's one completion, the last datagram's.
        func lastSent(_ error: NWError?) {
            events += 1
            guard check(error, "udp-send-quiet: the last datagram not sent") else { return }
            done = true
        }
    }

    func send(port: UInt16, count: Int, size: Int, completions: Bool) throws -> DatagramOutcome {
        let control = try DatagramControl(port: port, request: .sink(count: UInt64(count), size: UInt32(size)))
        let sinkPort = try control.readPort()
        let sender = Sender(expected: count)
        let what = completions ? "udp-send" : "udp-send-quiet"
        let template = Data(DatagramPayload.message(sequence: 0, size: size))
        let connection = sender.connect(port: sinkPort, what)
        defer { connection.cancel() }
        let stopwatch = Stopwatch()
        for sequence in 0..<count {
            var datagram = template
            datagram.withUnsafeMutableBytes { DatagramPayload.setSequence(UInt64(sequence), at: $0.baseAddress!) }
            if completions {
                connection.send(content: datagram, completion: .contentProcessed { sender.sent(sequence, $0) })
            } else if sequence == count - 1 {
                connection.send(content: datagram, completion: .contentProcessed { sender.lastSent($0) })
            } else {
                connection.send(content: datagram, completion: .idempotent)
            }
        }
        try sender.run()
        let report = try control.finish()
        return DatagramOutcome(seconds: stopwatch.elapsedSeconds, count: count, received: report.received, outOfOrder: report.outOfOrder)
    }

    // MARK: udp-pingpong

    // @unchecked Sendable: as `Driver`, its state only on `queue`.
    final class PingPong: Driver, @unchecked Sendable {
        let messages: [Data]
        let roundTrips: Int
        /// The round trip whose echo is awaited.
        var index = 0

        init(messages: [Data], roundTrips: Int) {
            self.messages = messages
            self.roundTrips = roundTrips
        }

        func round(_ connection: NWConnection) {
            connection.send(content: messages[index & 1], completion: .idempotent)
            connection.receiveMessage { [self] data, _, _, error in
                events += 1
                guard !done, check(error, "udp-pingpong") else { return }
                guard data == messages[index & 1] else { return fail("udp-pingpong: echo \(index) differs from the datagram sent") }
                index += 1
                if index == roundTrips {
                    done = true
                } else {
                    round(connection)
                }
            }
        }
    }

    func pingPong(port: UInt16, roundTrips: Int, size: Int) throws -> Double {
        let control = try DatagramControl(port: port, request: .datagramEcho(size: UInt32(size)))
        let echoPort = try control.readPort()
        let driver = PingPong(messages: pingPongMessages(size: size).map { Data($0) }, roundTrips: roundTrips)
        let connection = driver.connect(port: echoPort, "udp-pingpong")
        defer { connection.cancel() }
        let stopwatch = Stopwatch()
        Self.queue.async { driver.round(connection) }
        try driver.run()
        let seconds = stopwatch.elapsedSeconds
        connection.cancel()
        let report = try control.finish()
        if report.received != roundTrips { throw BenchError("udp-pingpong: the echo peer echoed \(report.received) of \(roundTrips)") }
        return seconds
    }
}
