// gcdasyncudpsocket: GCDAsyncUdpSocket (the CocoaAsyncSocket product) as code written for Apple
// platforms uses it: `GCDAsyncUdpSocket(delegate:delegateQueue:)` with no socket queue (its work then
// runs on the delegate queue's reactor), a delegate on a serial delegate queue, `bind(toPort:interface:)`
// and `beginReceiving()` to receive, `send(_:toHost:port:withTimeout:tag:)` to the sink and
// `send(_:toAddress:withTimeout:tag:)` to the echo peer's address, `Data` in and out (the sender's
// address too, which udp-fanin checks on every datagram), one `Data` of its own per datagram sent.
// (`STREAM_BENCH_GCD_SOCKET_QUEUE=delegate` passes the delegate queue as the socket queue too, as for
// gcdasyncsocket.) The benchmark thread starts each workload and waits.
//
// Each workload has a delegate class of its own, declaring only the methods it uses: GCDAsyncUdpSocket
// posts a call to the delegate queue only for the methods a delegate implements (for
// `udpSocket(_:didSendDataWithTag:)`, once its default has run: `DelegateDefaults`), so the
// delegate's methods are part of what is measured. udp-send-quiet's delegate has no
// `didSendDataWithTag`; udp-send's has.

import CocoaAsyncSocket
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

struct GCDAsyncUdpSocketClient: DatagramBenchmarkClient {
    /// The delegate queue: one per measurement process, so that the warm-up starts the machinery the
    /// measurement then uses.
    static let queue = DispatchQueue(label: "stream-bench.gcdasyncudpsocket")

    /// A socket calling `delegate` on the delegate queue and working there (or with the delegate queue
    /// given as its socket queue too, see the file's comment).
    private static func makeSocket(_ delegate: GCDAsyncUdpSocketDelegate) -> GCDAsyncUdpSocket {
        GCDAsyncUdpSocket(delegate: delegate, delegateQueue: queue, socketQueue: GCDAsyncSocketClient.sharesQueue ? queue : nil)
    }

    /// The reason a socket closed or a send failed, for a failure message.
    private static func describe(_ error: Error?) -> String { error.map { String(describing: $0) } ?? "no error" }

    // MARK: udp-receive

    // @unchecked Sendable: its fields are touched only on the delegate queue (the serial `queue`), and
    // read by the benchmark thread only after the wait that the last delegate call ends.
    final class Receiver: QueueDriver, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
        let size: Int
        var tracker: SequenceTracker
        /// When the end marker arrived (CLOCK_MONOTONIC nanoseconds).
        var end: UInt64 = 0

        init(count: Int, size: Int) {
            self.size = size
            tracker = SequenceTracker(count: UInt64(count))
            super.init(queue: GCDAsyncUdpSocketClient.queue, name: "GCDAsyncUdpSocket")
        }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
            events += 1
            guard !done, failure == nil else { return }
            let sequence = data.withUnsafeBytes { bytes -> UInt64? in
                guard bytes.count == size else { return nil }
                return DatagramPayload.sequence(at: bytes.baseAddress!)
            }
            guard let sequence else {
                failure = "udp-receive: a datagram of \(data.count) bytes arrived; the session's are \(size)"
                return
            }
            if sequence == DatagramPayload.endMarker {
                end = Posix.monotonicNanoseconds()
                done = true
                return
            }
            tracker.record(sequence)
        }

        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
            events += 1
            if !done, failure == nil { failure = "udp-receive: the socket closed (\(GCDAsyncUdpSocketClient.describe(error)))" }
        }
    }

    func receive(port: UInt16, count: Int, size: Int) throws -> DatagramOutcome {
        let receiver = Receiver(count: count, size: size)
        let socket = Self.makeSocket(receiver)
        defer { socket.close() }
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        try socket.beginReceiving()
        let clientPort = socket.localPort()
        let start = Posix.monotonicNanoseconds()
        let control = try DatagramControl(port: port, request: .blast(count: UInt64(count), size: UInt32(size), port: clientPort))
        try receiver.run()
        socket.close()
        let senderSeconds = try control.finishBlast(expected: count)
        let (end, tracker) = Self.queue.sync { (receiver.end, receiver.tracker) }
        try foreignDatagram(tracker)
        return DatagramOutcome(
            seconds: Stopwatch.seconds(from: start, to: end), count: count, received: tracker.received, outOfOrder: tracker.outOfOrder,
            senderSeconds: senderSeconds)
    }

    // MARK: udp-fanin

    // @unchecked Sendable: its fields are touched only on the delegate queue (the serial `queue`), the
    // tracker set there before the fan-in starts, and read by the benchmark thread only after the wait
    // that the last delegate call ends.
    final class FanInReceiver: QueueDriver, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
        let size: Int
        /// Set once the server has answered its peers' ports, before any of them sends.
        var tracker: FanInTracker?

        init(size: Int) {
            self.size = size
            super.init(queue: GCDAsyncUdpSocketClient.queue, name: "GCDAsyncUdpSocket")
        }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
            events += 1
            guard !done, failure == nil else { return }
            do {
                guard tracker != nil else { throw BenchError("udp-fanin: a datagram before the fan-in started") }
                let sequence = try data.withUnsafeBytes { try checkedSequence($0.baseAddress!, length: $0.count, size: size) }
                // Recorded in place: a copy of the tracker would copy its tables on every datagram.
                if try address.withUnsafeBytes({ try tracker!.record(sequence, from: $0.baseAddress!, length: $0.count) }) { done = true }
            } catch {
                failure = "\(error)"
            }
        }

        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
            events += 1
            if !done, failure == nil { failure = "udp-fanin: the socket closed (\(GCDAsyncUdpSocketClient.describe(error)))" }
        }
    }

    func fanIn(port: UInt16, peers: Int, count: Int, size: Int) throws -> DatagramOutcome {
        let receiver = FanInReceiver(size: size)
        let socket = Self.makeSocket(receiver)
        defer { socket.close() }
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        try socket.beginReceiving()
        let control = try DatagramControl(
            port: port, request: .fanIn(peers: UInt16(peers), count: UInt64(count), size: UInt32(size), port: socket.localPort()))
        let tracker = try FanInTracker(ports: try control.readPorts(count: peers), count: count)
        Self.queue.sync { receiver.tracker = tracker }
        let start = Posix.monotonicNanoseconds()
        try control.startFanIn()
        try receiver.run()
        socket.close()
        let senderSeconds = try control.finishFanIn(expected: peers * count)
        guard let finished = Self.queue.sync(execute: { receiver.tracker }) else { throw BenchError("udp-fanin: no tracker") }
        return try finished.outcome(seconds: Stopwatch.seconds(from: start, to: finished.end), senderSeconds: senderSeconds)
    }

    // MARK: udp-send, udp-send-quiet

    /// udp-send: a completion for every datagram, in send order; done at the last.
    // @unchecked Sendable: its fields are touched only on the delegate queue (the serial `queue`), and
    // read by the benchmark thread only after the wait that the last delegate call ends.
    final class CountingSender: QueueDriver, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
        let expected: Int
        var completed = 0

        init(expected: Int) {
            self.expected = expected
            super.init(queue: GCDAsyncUdpSocketClient.queue, name: "GCDAsyncUdpSocket")
        }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didSendDataWithTag tag: Int) {
            events += 1
            if tag != completed {
                failure = "udp-send: the completion of datagram \(tag) came where \(completed)'s was due"
                return
            }
            completed += 1
            if completed == expected { done = true }
        }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
            events += 1
            failure = "udp-send: datagram \(tag) not sent: \(GCDAsyncUdpSocketClient.describe(error))"
        }

        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
            events += 1
            if !done, failure == nil { failure = "udp-send: the socket closed (\(GCDAsyncUdpSocketClient.describe(error)))" }
        }
    }

    /// udp-send-quiet: no `didSendDataWithTag`; the sends are done when `closeAfterSending` closes.
    // @unchecked Sendable: its fields are touched only on the delegate queue (the serial `queue`), and
    // read by the benchmark thread only after the wait that the last delegate call ends.
    final class QuietSender: QueueDriver, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
        init() { super.init(queue: GCDAsyncUdpSocketClient.queue, name: "GCDAsyncUdpSocket") }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
            events += 1
            failure = "udp-send-quiet: datagram \(tag) not sent: \(GCDAsyncUdpSocketClient.describe(error))"
        }

        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
            events += 1
            if let error {
                failure = "udp-send-quiet: the socket closed (\(GCDAsyncUdpSocketClient.describe(error)))"
            } else {
                done = true
            }
        }
    }

    func send(port: UInt16, count: Int, size: Int, completions: Bool) throws -> DatagramOutcome {
        let control = try DatagramControl(port: port, request: .sink(count: UInt64(count), size: UInt32(size)))
        let sinkPort = try control.readPort()
        let driver: QueueDriver & GCDAsyncUdpSocketDelegate = completions ? CountingSender(expected: count) : QuietSender()
        let socket = Self.makeSocket(driver)
        defer { socket.close() }
        let template = Data(DatagramPayload.message(sequence: 0, size: size))
        let stopwatch = Stopwatch()
        for sequence in 0..<count {
            var datagram = template
            datagram.withUnsafeMutableBytes { DatagramPayload.setSequence(UInt64(sequence), at: $0.baseAddress!) }
            socket.send(datagram, toHost: "127.0.0.1", port: sinkPort, withTimeout: -1, tag: sequence)
        }
        if !completions { socket.closeAfterSending() }
        try driver.run()
        let report = try control.finish()
        return DatagramOutcome(seconds: stopwatch.elapsedSeconds, count: count, received: report.received, outOfOrder: report.outOfOrder)
    }

    // MARK: udp-pingpong

    // @unchecked Sendable: its fields are touched only on the delegate queue (the serial `queue`), and
    // read by the benchmark thread only after the wait that the last delegate call ends.
    final class PingPong: QueueDriver, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
        let messages: [Data]
        let roundTrips: Int
        let echoAddress: Data
        /// The round trip whose echo is awaited.
        var index = 0

        init(messages: [Data], roundTrips: Int, echoAddress: Data) {
            self.messages = messages
            self.roundTrips = roundTrips
            self.echoAddress = echoAddress
            super.init(queue: GCDAsyncUdpSocketClient.queue, name: "GCDAsyncUdpSocket")
        }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
            events += 1
            guard !done, failure == nil else { return }
            if data != messages[index & 1] {
                failure = "udp-pingpong: echo \(index) differs from the datagram sent"
                return
            }
            index += 1
            if index == roundTrips {
                done = true
                return
            }
            sock.send(messages[index & 1], toAddress: echoAddress, withTimeout: -1, tag: index)
        }

        func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
            events += 1
            failure = "udp-pingpong: datagram \(tag) not sent: \(GCDAsyncUdpSocketClient.describe(error))"
        }

        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
            events += 1
            if !done, failure == nil { failure = "udp-pingpong: the socket closed (\(GCDAsyncUdpSocketClient.describe(error)))" }
        }
    }

    func pingPong(port: UInt16, roundTrips: Int, size: Int) throws -> Double {
        let control = try DatagramControl(port: port, request: .datagramEcho(size: UInt32(size)))
        let echoPort = try control.readPort()
        let echoAddress = withUnsafeBytes(of: Posix.loopbackAddress(port: echoPort)) { Data($0) }
        let driver = PingPong(messages: pingPongMessages(size: size).map { Data($0) }, roundTrips: roundTrips, echoAddress: echoAddress)
        let socket = Self.makeSocket(driver)
        defer { socket.close() }
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        try socket.beginReceiving()
        let stopwatch = Stopwatch()
        socket.send(driver.messages[0], toAddress: echoAddress, withTimeout: -1, tag: 0)
        try driver.run()
        let seconds = stopwatch.elapsedSeconds
        socket.close()
        let report = try control.finish()
        if report.received != roundTrips { throw BenchError("udp-pingpong: the echo peer echoed \(report.received) of \(roundTrips)") }
        return seconds
    }
}
