// The scale run on `QueuedSocket`: every socket on one serial delegate queue, every write with a
// timeout and a read always pending with one (the idle connection's read too), as a server that
// drops silent peers keeps them.

import Foundation
import SocketStreams
import Synchronization

// @unchecked Sendable: each field says its owner (the delegate queue after `open`); `releasing` is atomic.
final class ScaleQueuedFace: ScaleFace, QueuedSocketDelegate, @unchecked Sendable {
    private let port: UInt16
    private let group: UInt64
    private let sources: ScaleSources
    private let monitor = ScaleMonitor()
    private let queue = ScaleQueues.queued
    /// Every socket, by tag. Filled by `open` before any round trip of the measured phase starts;
    /// read then only on the queue.
    private var sockets: [QueuedSocket] = []
    /// Which message each connection awaits; touched only on the queue (sized before any socket opens).
    private var awaited: [Int] = []
    private let releasing = Atomic<Bool>(false)

    init(port: UInt16, group: UInt64, sources: ScaleSources) {
        self.port = port
        self.group = group
        self.sources = sources
    }

    func open(count: Int, inFlight: Int) throws {
        sockets.reserveCapacity(count)
        awaited = [Int](repeating: 0, count: count)
        let header = Request.heldEcho(group: group).encoded + Scale.messages[0]
        try monitor.openPaced(count: count, inFlight: inFlight) { i in
            let socket = QueuedSocket(delegate: self, delegateQueue: queue)
            sockets.append(socket)
            let binding = sources.binding(i)
            try socket.connect(toHost: "127.0.0.1", onPort: Int(port)) { input, output in
                if let binding { _ = input.setProperty(binding as AnyObject, forKey: .localBindingKey) }
                _ = output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
            }
            socket.write(header, timeout: Scale.writeTimeout, tag: i)
            socket.read(toLength: Scale.messageSize, timeout: Scale.readTimeout, tag: i)
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
        sockets[index].write(Scale.messages[1], timeout: Scale.writeTimeout, tag: index)
    }

    func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
        let message = awaited[tag]
        if let problem = Scale.check(data, message: message, connection: tag) { return monitor.fail(problem) }
        socket.read(toLength: Scale.messageSize, timeout: Scale.readTimeout, tag: tag)  // idle, with a timeout
        if message == 0 { return monitor.add(.idle) }
        monitor.add(.roundTrips)
        startRoundTrip(tag + 1)
    }

    func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
        if releasing.load(ordering: .acquiring), let failure = error as? StreamOperationError, failure.code == .closedByPeer,
            failure.unread.isEmpty
        {
            return monitor.add(.closed)
        }
        monitor.fail("QueuedSocket disconnected: \(error.map { "\($0)" } ?? "no error")")
    }
}
