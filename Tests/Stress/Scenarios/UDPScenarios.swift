import CocoaAsyncSocket
import Dispatch
import Foundation
import SocketStreams

/// A GCDAsyncUdpSocket delegate that records every callback, for the run's end checks: exactly one
/// `udpSocketDidClose`, with no error, and nothing after it.
final class UdpProbe: NSObject, GCDAsyncUdpSocketDelegate, StressProbe {
    let log: ProbeLog
    /// Echoes every datagram back to its sender (the server's probe) until `stopEchoing`: a send after
    /// the close would open the socket again, as GCDAsyncUdpSocket's sends do.
    private let echoing: Guarded<Bool>

    init(log: ProbeLog, echoes: Bool) {
        self.log = log
        echoing = Guarded(echoes)
    }

    func stopEchoing() { echoing.withLock { $0 = false } }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didSendDataWithTag tag: Int) { log.note("sent \(tag)") }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
        log.note("not sent \(tag): \(error.map(describe) ?? "nil")")
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
        log.note("received \(data.count)")
        if echoing.withLock({ $0 }) { sock.send(data, toAddress: address, withTimeout: 5, tag: 0) }
    }

    func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) { log.noteDisconnect(error) }

    func problems() -> [String] { log.problems() }
}

extension StressScenario {
    /// `GCDAsyncUdpSocket.close()` while datagrams flow both ways (an echo GCDAsyncUdpSocket), from this
    /// task, from another thread, or from a block given to `perform`, with the socket on the stream
    /// thread, a queue of its own or the delegate queue: `udpSocketDidClose` must come exactly once, with
    /// no error, nothing after it; the socket is then reusable (a bind after the close works, and its
    /// close is the second `udpSocketDidClose`).
    static let udpClose = StressScenario(
        name: "udp-close", summary: "GCDAsyncUdpSocket.close() from another thread or perform while datagrams flow both ways",
        transports: [.plain], copies: 4
    ) { iteration in
        let environment = iteration.environment
        let label = "iteration \(iteration.index) copy \(iteration.copy)"
        let serverProbe = UdpProbe(log: ProbeLog(label: "\(label) server"), echoes: true)
        iteration.run.keep(serverProbe)
        let server = GCDAsyncUdpSocket(delegate: serverProbe, delegateQueue: environment.delegateQueue, socketQueue: nil)
        try server.bind(toPort: 0, interface: "127.0.0.1")
        try server.beginReceiving()
        let (queue, queueName) = udpSocketQueue(&iteration)
        let probe = UdpProbe(log: ProbeLog(label: "\(label) client (\(queueName))", expectedDisconnects: 2), echoes: false)
        iteration.run.keep(probe)
        let client = GCDAsyncUdpSocket(delegate: probe, delegateQueue: environment.delegateQueue, socketQueue: queue)
        try client.bind(toPort: 0, interface: "127.0.0.1")
        try client.beginReceiving()
        let count = Int.random(in: 1...64, using: &iteration.random)
        for tag in 0..<count {
            let size = Int.random(in: 1...1_400, using: &iteration.random)
            client.send(Data(payload(size, &iteration.random)), toHost: "127.0.0.1", port: server.localPort(), withTimeout: 5, tag: tag)
        }
        let after = Int.random(in: 0...(2 * count), using: &iteration.random)
        await probe.log.progress.wait(until: after)
        let inPerform = Int.random(in: 0...2, using: &iteration.random) == 0
        await atRandomPoint(&iteration.random) {
            if inPerform { client.perform { client.close() } } else { client.close() }
        }
        if !client.isClosed() { iteration.fail("isClosed() is false after close() returned (\(queueName))") }
        guard await probe.log.disconnected.wait(timeout: 10) else {
            return iteration.fail("udpSocketDidClose did not come within 10 s of close() (\(queueName)); callbacks: \(probe.log.events)")
        }
        // Reusable: the same object binds and closes again (the probe expects that second close).
        try client.bind(toPort: 0, interface: "127.0.0.1")
        client.close()
        // The server stops on the delegate queue, where its echoes are sent, so that none follows its close.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            environment.delegateQueue.async {
                serverProbe.stopEchoing()
                server.close()
                continuation.resume()
            }
        }
        // Both closes' calls come after close() returns: from the delegate queue, the call takes a turn
        // of that queue's reactor, which one `delegateQueue.sync {}` at the run's end need not outlast.
        // A close that never reports hangs the iteration, which the runner reports.
        await probe.log.disconnects.wait(until: 2)
        await serverProbe.log.disconnects.wait(until: 1)
    }

    /// Where a GCDAsyncUdpSocket scenario's socket works, chosen at random (as `socketQueue` for TCP).
    private static func udpSocketQueue(_ iteration: inout StressIteration) -> (DispatchQueue?, String) {
        switch Int.random(in: 0...2, using: &iteration.random) {
        case 0: return (nil, "no socket queue")
        case 1: return (DispatchQueue(label: "socketstreams-stress.udp"), "a socket queue of its own")
        default: return (iteration.environment.delegateQueue, "the delegate queue as socket queue")
        }
    }
}
