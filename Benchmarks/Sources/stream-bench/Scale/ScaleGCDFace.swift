// The scale run on `GCDAsyncSocket` (the CocoaAsyncSocket product) as ported code makes its sockets:
// every socket's delegate queue is one serial queue, and no socket is given a socket queue (so each
// works on the package's stream thread, where GCDAsyncSocket would make a private queue);
// `STREAM_BENCH_GCD_SOCKET_QUEUE=delegate` passes the delegate queue as every socket's socket queue, as
// the `gcdasyncsocket` client does (and as this face did for the recorded scale run of 2026-11-28T01:19Z).
// Every write with a timeout and a read always pending with one.

import CocoaAsyncSocket
import Foundation
import Synchronization

// @unchecked Sendable: each field says its owner (the delegate queue after `open`); `releasing` is atomic.
final class ScaleGCDFace: ScaleFace, GCDAsyncSocketDelegate, @unchecked Sendable {
    private let port: UInt16
    private let group: UInt64
    private let sources: ScaleSources
    private let monitor = ScaleMonitor()
    private let queue = ScaleQueues.gcd
    /// Every socket, by tag. Filled by `open` before any round trip of the measured phase starts;
    /// read then only on the queue.
    private var sockets: [GCDAsyncSocket] = []
    /// Which message each connection awaits; touched only on the queue (sized before any socket opens).
    private var awaited: [Int] = []
    private let releasing = Atomic<Bool>(false)
    private let messages = Scale.messages.map { Data($0) }

    init(port: UInt16, group: UInt64, sources: ScaleSources) {
        self.port = port
        self.group = group
        self.sources = sources
    }

    func open(count: Int, inFlight: Int) throws {
        sockets.reserveCapacity(count)
        awaited = [Int](repeating: 0, count: count)
        let header = Data(Request.heldEcho(group: group).encoded + Scale.messages[0])
        try monitor.openPaced(count: count, inFlight: inFlight) { i in
            let socket = GCDAsyncSocket(delegate: self, delegateQueue: queue, socketQueue: GCDAsyncSocketClient.sharesQueue ? queue : nil)
            sockets.append(socket)
            if let source = sources.address(i) {
                try socket.connect(toHost: "127.0.0.1", onPort: port, viaInterface: source, withTimeout: -1)
            } else {
                try socket.connect(toHost: "127.0.0.1", onPort: port)
            }
            socket.write(header, withTimeout: Scale.writeTimeout, tag: i)
            socket.readData(toLength: UInt(Scale.messageSize), withTimeout: Scale.readTimeout, tag: i)
        }
    }

    func roundTrips() throws {
        queue.async { [self] in startRoundTrip(0) }
        try monitor.wait(.roundTrips, reaches: sockets.count)
    }

    func release() throws {
        releasing.store(true, ordering: .releasing)
        try Scale.sendRelease(port: port, group: group)
        try monitor.wait(.closed, reaches: sockets.count)
        sockets = []
    }

    /// On the queue: the round trip of connection `index` (its read is pending already).
    private func startRoundTrip(_ index: Int) {
        guard index < sockets.count else { return }
        awaited[index] = 1
        sockets[index].write(messages[1], withTimeout: Scale.writeTimeout, tag: index)
    }

    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
        let message = awaited[tag]
        if let problem = Scale.check(data, message: message, connection: tag) { return monitor.fail(problem) }
        sock.readData(toLength: UInt(Scale.messageSize), withTimeout: Scale.readTimeout, tag: tag)  // idle, with a timeout
        if message == 0 { return monitor.add(.idle) }
        monitor.add(.roundTrips)
        startRoundTrip(tag + 1)
    }

    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
        if releasing.load(ordering: .acquiring), err != nil { return monitor.add(.closed) }  // the peer's FIN
        monitor.fail("GCDAsyncSocket disconnected: \(err.map { "\($0)" } ?? "no error")")
    }
}
