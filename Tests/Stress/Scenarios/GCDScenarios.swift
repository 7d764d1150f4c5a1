import CocoaAsyncSocket
import Dispatch
import Foundation

/// A `GCDAsyncSocketDelegate` that logs every callback (``ProbeLog``), drives the SOCKS5 handshake
/// (checking its replies), and decides the TLS trust by pinning the peer server's certificate.
final class GCDProbe: GCDAsyncSocketDelegate, StressProbe {
    /// The tags of the SOCKS5 handshake's reads (the scenarios' own tags are not negative).
    static let greetingReplyTag = -1
    static let connectReplyTag = -2

    let log: ProbeLog
    /// Raised when the SOCKS5 proxy has connected to the target.
    let proxied = StressFlag()
    /// The SOCKS5 CONNECT request, written once the greeting's reply has come (microsocks, as many
    /// proxies, reads a request only after it has replied to the one before).
    private let proxyRequest: Data?
    private let pinned: Data

    init(log: ProbeLog, pinned: Data, proxyRequest: Data? = nil) {
        self.log = log
        self.pinned = pinned
        self.proxyRequest = proxyRequest
    }

    func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt16) { log.noteConnect() }

    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
        log.note("read \(tag)")
        switch tag {
        case Self.greetingReplyTag:
            guard data == Data([5, 0]), let request = proxyRequest else { return log.problem("SOCKS5 greeting reply \(Array(data))") }
            sock.write(request, withTimeout: 10, tag: Self.connectReplyTag)
            sock.readData(toLength: 10, withTimeout: 10, tag: Self.connectReplyTag)
        case Self.connectReplyTag:
            guard data.count == 10, data.prefix(2) == Data([5, 0]) else { return log.problem("SOCKS5 connect reply \(Array(data))") }
            proxied.raise()
        default: break
        }
    }

    func socket(_ sock: GCDAsyncSocket, didWriteDataWithTag tag: Int) { log.note("wrote \(tag)") }

    func socketDidSecure(_ sock: GCDAsyncSocket) { log.note("secure") }

    func socket(_ sock: GCDAsyncSocket, didReceive trust: SecTrust, completionHandler: @escaping (Bool) -> Void) {
        log.note("trust")
        completionHandler(trust.certificateChain.first == pinned)
    }

    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) { log.noteDisconnect(err) }

    func problems() -> [String] { log.problems() }
}

extension StressScenario {
    /// Where a GCDAsyncSocket scenario's socket works, chosen at random: no socket queue (the stream
    /// thread, as ported code nearly always does it), a queue of its own, or the delegate queue.
    private static func socketQueue(_ iteration: inout StressIteration) -> (DispatchQueue?, String) {
        switch Int.random(in: 0...2, using: &iteration.random) {
        case 0: return (nil, "no socket queue")
        case 1: return (DispatchQueue(label: "socketstreams-stress.socket"), "a socket queue of its own")
        default: return (iteration.environment.delegateQueue, "the delegate queue as socket queue")
        }
    }

    /// A GCDAsyncSocket connected to `mode` over the iteration's transport, its delegate on the run's
    /// shared queue, as GCDAsyncSocket code does each: TLS with `startTLS` and a trust decision that pins
    /// the peer's certificate; SOCKS5 by hand, as proxying code over GCDAsyncSocket (which has no proxy
    /// setting) does it: the greeting, then the CONNECT request once its reply has come; returns once
    /// the proxy has connected, so that what the scenario queues follows the handshake.
    fileprivate static func gcdSocket(
        _ iteration: inout StressIteration, _ mode: PeerServer.Mode, expectedDisconnects: Int
    ) async throws -> (GCDAsyncSocket, GCDProbe, String) {
        let environment = iteration.environment
        let (queue, queueName) = socketQueue(&iteration)
        let (host, port) = environment.target(mode, iteration.transport)
        let label = "iteration \(iteration.index) copy \(iteration.copy) (\(queueName))"
        let request = Data([5, 1, 0, 1, 127, 0, 0, 1, UInt8(port >> 8), UInt8(port & 0xFF)])
        let probe = GCDProbe(
            log: ProbeLog(label: label, expectedDisconnects: expectedDisconnects), pinned: environment.certificateDER,
            proxyRequest: iteration.transport == .socks5 ? request : nil)
        iteration.run.keep(probe)
        let socket = GCDAsyncSocket(delegate: probe, delegateQueue: environment.delegateQueue, socketQueue: queue)
        switch iteration.transport {
        case .plain:
            try socket.connect(toHost: host, onPort: UInt16(port), withTimeout: 10)
        case .tls:
            try socket.connect(toHost: host, onPort: UInt16(port), withTimeout: 10)
            socket.startTLS([GCDAsyncSocketManuallyEvaluateTrust: NSNumber(value: true)])
        case .socks5:
            try socket.connect(toHost: "127.0.0.1", onPort: UInt16(environment.proxyPort ?? 0), withTimeout: 10)
            socket.write(Data([5, 1, 0]), withTimeout: 10, tag: GCDProbe.greetingReplyTag)
            socket.readData(toLength: 2, withTimeout: 10, tag: GCDProbe.greetingReplyTag)
            guard await probe.proxied.wait(timeout: 10) else {
                socket.disconnect()
                throw StressError("\(label): the SOCKS5 handshake did not finish within 10 s; callbacks: \(probe.log.events)")
            }
        }
        return (socket, probe, queueName)
    }

    /// `GCDAsyncSocket.disconnect()` while reads and writes are queued and data flows (an echo peer),
    /// from this task, from another thread, or from a block given to `perform` (on the socket's queue or
    /// the stream thread), with the socket on the stream thread, a queue of its own or the delegate
    /// queue: `socketDidDisconnect` must come exactly once, with no error, and nothing after it.
    static let gcdDisconnect = StressScenario(
        name: "gcd-disconnect", summary: "GCDAsyncSocket.disconnect() from another thread or perform with reads and writes queued"
    ) { iteration in
        let (socket, probe, queueName) = try await gcdSocket(&iteration, .echo, expectedDisconnects: 1)
        let operations = Int.random(in: 1...4, using: &iteration.random)
        for tag in 0..<operations {
            let size = Int.random(in: 1_024...262_144, using: &iteration.random)
            socket.write(Data(payload(size, &iteration.random)), withTimeout: -1, tag: tag)
            socket.readData(toLength: UInt(size), withTimeout: -1, tag: 100 + tag)
        }
        let after = Int.random(in: 0...(2 * operations + 1), using: &iteration.random)
        await probe.log.progress.wait(until: after)
        let inPerform = Int.random(in: 0...2, using: &iteration.random) == 0
        await atRandomPoint(&iteration.random) {
            if inPerform { socket.perform { socket.disconnect() } } else { socket.disconnect() }
        }
        if !socket.isDisconnected { iteration.fail("isDisconnected is false after disconnect() returned (\(queueName))") }
        guard await probe.log.disconnected.wait(timeout: 10) else {
            return iteration.fail(
                "socketDidDisconnect did not come within 10 s of disconnect() (\(queueName)); callbacks: \(probe.log.events)")
        }
    }

    /// The last reference to a connected GCDAsyncSocket dropped (no `disconnect()`) while reads of a
    /// flooding peer are queued and completing: nothing may crash, no delegate call may follow
    /// `socketDidDisconnect` (none is due: GCDAsyncSocket's dealloc makes none), the socket must be
    /// freed once the delegate calls posted for it have run (each holds it, as GCDAsyncSocket's blocks
    /// hold `self`), and closed (the run's end checks that the peer saw every connection end and no
    /// socket was left).
    static let gcdRelease = StressScenario(
        name: "gcd-release", summary: "dropping the last reference to connected GCDAsyncSockets while a peer floods them",
        copies: 8
    ) { iteration in
        let reads = Int.random(in: 1...4, using: &iteration.random)
        let releaseAfter = Int.random(in: 0...reads, using: &iteration.random)
        let yields = Int.random(in: 0...3, using: &iteration.random)
        let (freed, probe, queueName) = try await readThenRelease(&iteration, reads: reads, releaseAfter: releaseAfter, yields: yields)
        // Freed once the delegate queue has run what was posted for it and the engine has let it go:
        // checked every millisecond for up to 10 s.
        let deadline = DispatchTime.now().uptimeNanoseconds + 10_000_000_000
        while !freed.isFreed && DispatchTime.now().uptimeNanoseconds < deadline {
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        if !freed.isFreed {
            iteration.fail("a released GCDAsyncSocket (\(queueName)) was not freed within 10 s; callbacks: \(probe.log.events)")
        }
    }

    /// A weak reference to a socket, readable from any task.
    final class FreedWatch: Sendable {
        private let socket: Guarded<Weak>
        struct Weak { weak var value: GCDAsyncSocket? }
        init(_ socket: GCDAsyncSocket) { self.socket = Guarded(Weak(value: socket)) }
        var isFreed: Bool { socket.withLock { $0.value == nil } }
    }

    /// Makes the only strong reference to a socket, queues `reads` reads of the flood, waits for
    /// `releaseAfter` callbacks and `yields` yields, and lets the socket go when it returns.
    private static func readThenRelease(
        _ iteration: inout StressIteration, reads: Int, releaseAfter: Int, yields: Int
    ) async throws -> (FreedWatch, GCDProbe, String) {
        let (socket, probe, queueName) = try await gcdSocket(&iteration, .flood, expectedDisconnects: 0)
        for tag in 0..<reads { socket.readData(withTimeout: -1, tag: tag) }
        await probe.log.progress.wait(until: releaseAfter)
        await yieldTimes(yields)
        return (FreedWatch(socket), probe, queueName)
    }
}
