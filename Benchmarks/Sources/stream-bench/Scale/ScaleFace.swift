// The faces the scale run compares, and what each implements: open many connections that each make
// one round trip and then wait idle (a read pending, with a timeout where the face has timeouts),
// then a round trip on every connection in turn, then the server's release (FIN) of all of them.

import Foundation
import SocketStreams
import Synchronization

/// The programming interfaces the scale run compares; each measurement is one of them in its own process.
enum ScaleFaceKind: String, CaseIterable, Codable {
    /// Raw sockets from Swift (Glibc): blocking connects and one epoll set, the physical limit.
    case baseline
    /// Stream pairs with an Apple-guide delegate, on `RunLoop.socketStreams`.
    case pairsThread = "pairs-thread"
    /// The same pairs on a serial dispatch queue (`CFReadStreamSetDispatchQueue`).
    case pairsQueue = "pairs-queue"
    /// `QueuedSocket` on a serial dispatch queue, read and write timeouts armed.
    case queued
    /// `AsyncConnection` (no per-operation timeouts: a caller bounds waits with its own task deadline).
    case async
    /// `GCDAsyncSocket` (the CocoaAsyncSocket product), all sockets on one serial queue, timeouts armed.
    case gcd

    /// Whether the face arms a timeout on every read and write (pairs, the baseline and
    /// `AsyncConnection` have no per-operation timeouts to arm).
    var armsTimeouts: Bool { self == .queued || self == .gcd }

    func makeFace(port: UInt16, group: UInt64, sources: Int = 1) -> any ScaleFace {
        let from = ScaleSources(count: sources)
        switch self {
        case .baseline: return ScaleBaselineFace(port: port, group: group, sources: from)
        case .pairsThread:
            return ScalePairsFace(port: port, group: group, home: .runLoop(RunLoop.socketStreams), sources: from)
        case .pairsQueue: return ScalePairsFace(port: port, group: group, home: .queue(ScaleQueues.pairs), sources: from)
        case .queued: return ScaleQueuedFace(port: port, group: group, sources: from)
        case .async: return ScaleAsyncFace(port: port, group: group, sources: from)
        case .gcd: return ScaleGCDFace(port: port, group: group, sources: from)
        }
    }
}

/// The source addresses the connections come from (`--sources N`): with one, the kernel picks the
/// source as ever (127.0.0.1, no bind); with more, connection i is bound to 127.0.0.(1 + i mod N) with
/// port 0 before it connects (the library's `LocalBinding`, GCDAsyncSocket's `viaInterface:`, a
/// `bind(2)` for the baseline), so each address's ephemeral ports serve only its share.
struct ScaleSources: Sendable {
    /// How many addresses, 1...254.
    let count: Int

    /// The most `--sources` takes: 127.0.0.1 … 127.0.0.254.
    static let most = 254

    /// The numeric source of connection `index`, nil for the kernel's choice (one source).
    func address(_ index: Int) -> String? {
        count > 1 ? "127.0.0.\(1 + index % count)" : nil
    }

    /// The library's binding for connection `index`, nil for the kernel's choice.
    func binding(_ index: Int) -> LocalBinding? {
        address(index).flatMap { LocalBinding(address: $0) }
    }
}

/// One queue per face and process, shared by the warm-up and the measurement, so the measurement does
/// not pay for the queue's reactor (its epoll set) being made.
enum ScaleQueues {
    static let pairs = DispatchQueue(label: "stream-bench.scale.pairs")
    static let queued = DispatchQueue(label: "stream-bench.scale.queued")
    static let gcd = DispatchQueue(label: "stream-bench.scale.gcd")
}

/// What every face implements. Each call returns once its phase is complete, or throws.
protocol ScaleFace: AnyObject {
    /// Opens `count` connections to the server's held-echo protocol (`H group`), each sending the
    /// header and message 0 and reading its echo, then leaving a read pending: at most `inFlight`
    /// unanswered at once (the raw-socket baseline opens one at a time).
    func open(count: Int, inFlight: Int) throws
    /// One round trip (message 1) on each connection, one after another: each starts when the one
    /// before it has its echo.
    func roundTrips() throws
    /// Asks the server to release the group (`R group`: FIN on every connection) and waits until each
    /// connection has seen its end and closed.
    func release() throws
}

/// The scale run's constants.
enum Scale {
    /// The message size of every round trip.
    static let messageSize = Payload.messageSize
    /// Message 0 (the open's round trip) and message 1 (the measured one).
    static let messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
    /// The timeout of every write, where the face has timeouts (seconds).
    static let writeTimeout = 30.0
    /// The timeout of every read, the idle one included (seconds): far beyond the run.
    static let readTimeout = 600.0

    /// Sends `R group` on a connection of its own and waits for the server's '+'.
    static func sendRelease(port: UInt16, group: UInt64) throws {
        let fd = try Posix.connectToLoopback(port: port)
        defer { Posix.close(fd) }
        try Posix.sendAll(fd, Request.release(group: group).encoded)
        var reply: UInt8 = 0
        try withUnsafeMutableBytes(of: &reply) { try Posix.readExactly(fd, into: $0) }
        if reply != Request.ackReply { throw BenchError("release: unexpected reply byte \(reply)") }
    }

    /// Checks an echo against the message sent.
    static func check(_ echo: some Collection<UInt8>, message: Int, connection: Int) -> String? {
        echo.elementsEqual(messages[message]) ? nil : "connection \(connection): echo of message \(message) differs from what was sent"
    }
}

/// Progress of one face's connections, counted on whatever thread delivers their events; the
/// benchmark thread waits for a count to reach a target (woken only then, or on a failure).
// @unchecked Sendable: the counts are reached only under `lock`.
final class ScaleMonitor: @unchecked Sendable {
    enum Counter: Int {
        /// Connections open, their first round trip done, idle.
        case idle
        /// Round trips done in the measured phase.
        case roundTrips
        /// Connections that saw the release's end of stream and closed.
        case closed
    }

    private let lock = NSLock()
    private let changed = DispatchSemaphore(value: 0)
    private var counts = [0, 0, 0]
    private var target: (Counter, Int)?
    private var failure: String?
    /// Callbacks so far, for the stall check.
    private let events = Atomic<Int>(0)

    func add(_ counter: Counter) {
        events.wrappingAdd(1, ordering: .relaxed)
        lock.lock()
        counts[counter.rawValue] += 1
        var signal = false
        if let (wanted, value) = target, wanted == counter, counts[counter.rawValue] >= value {
            target = nil
            signal = true
        }
        lock.unlock()
        if signal { changed.signal() }
    }

    func fail(_ message: String) {
        lock.lock()
        if failure == nil { failure = message }
        lock.unlock()
        changed.signal()
    }

    func count(_ counter: Counter) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return counts[counter.rawValue]
    }

    /// Returns once `counter` has reached `value`; throws the first failure, or a stall report when
    /// nothing has happened for `stallTimeout` seconds.
    func wait(_ counter: Counter, reaches value: Int) throws {
        var lastEvents = -1
        var lastProgress = Posix.monotonicNanoseconds()
        while true {
            lock.lock()
            let current = counts[counter.rawValue]
            let failure = self.failure
            if failure == nil, current < value { target = (counter, value) }
            lock.unlock()
            if let failure { throw BenchError(failure) }
            if current >= value { return }
            _ = changed.wait(timeout: .now() + 1)
            let now = Posix.monotonicNanoseconds()
            let seen = events.load(ordering: .relaxed)
            if seen != lastEvents {
                lastEvents = seen
                lastProgress = now
            } else if Stopwatch.seconds(from: lastProgress, to: now) > stallTimeout {
                throw BenchError("stalled: \(counter) at \(current) of \(value), no event for \(Int(stallTimeout)) s")
            }
        }
    }

    /// Opens `count` connections with `open(i)`, never more than `inFlight` ahead of the idle count
    /// (checked in batches, so the benchmark thread is not woken per connection).
    func openPaced(count: Int, inFlight: Int, _ open: (Int) throws -> Void) throws {
        for i in 0..<count {
            if i >= inFlight, i - self.count(.idle) >= inFlight {
                try wait(.idle, reaches: i - inFlight * 3 / 4)
            }
            try open(i)
        }
        try wait(.idle, reaches: count)
    }
}
