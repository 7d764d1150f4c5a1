// The soak's own delegate sessions, beside those of Clients/StreamSessions.swift: a long-lived
// connection that exchanges a message every few seconds, a connect that must be refused, and a
// transfer that the peer must end with a reset. Like the benchmark's sessions, each is the delegate
// of both of its streams and runs on one run loop or serial queue (its `EventHome`).

import Foundation
import Glibc
import SocketStreams
import Synchronization

extension EventHome {
    /// Runs `body` on this home after `seconds`: from the run loop's `RunLoopTicker`, or with
    /// `asyncAfter` on the queue. May be called from any thread.
    func after(_ seconds: Double, _ body: @escaping @Sendable () -> Void) {
        switch self {
        case .runLoop(let runLoop): RunLoopTicker.of(runLoop).after(seconds, body)
        case .queue(let queue): queue.asyncAfter(deadline: .now() + seconds, execute: body)
        }
    }
}

/// Runs closures on a run loop's thread once they are due, from one repeating Timer per run loop
/// (every 10 ms, in the default mode). Not a one-shot Timer per pause: swift-corelibs-foundation
/// never frees a block-based Timer (Scripts/sanitizers/lsan.supp), so the soak's own timers grew the
/// heap by ~150 bytes per operation (heaptrack), which would hide anything the library did.
final class RunLoopTicker: @unchecked Sendable {
    private static let tickers = Mutex<[ObjectIdentifier: RunLoopTicker]>([:])
    private static let tick = 0.01

    private let lock = NSLock()
    /// Due times (monotonic nanoseconds) and work, in no particular order.
    private var pending: [(deadline: UInt64, body: @Sendable () -> Void)] = []

    /// The ticker of `runLoop`, made (and its timer added) on first use. The run loop must be one
    /// that lives as long as the process (the soak's threads, the stream thread).
    static func of(_ runLoop: RunLoop) -> RunLoopTicker {
        let (ticker, isNew) = tickers.withLock { tickers -> (RunLoopTicker, Bool) in
            if let existing = tickers[ObjectIdentifier(runLoop)] { return (existing, false) }
            let ticker = RunLoopTicker()
            tickers[ObjectIdentifier(runLoop)] = ticker
            return (ticker, true)
        }
        if isNew {
            runLoop.add(Timer(fire: Date(), interval: tick, repeats: true) { _ in ticker.runDue() }, forMode: .default)
        }
        return ticker
    }

    func after(_ seconds: Double, _ body: @escaping @Sendable () -> Void) {
        let deadline = Posix.monotonicNanoseconds() + UInt64(max(0, seconds) * 1e9)
        lock.withLock { pending.append((deadline, body)) }
    }

    private func runDue() {
        let now = Posix.monotonicNanoseconds()
        let due = lock.withLock { () -> [@Sendable () -> Void] in
            guard pending.contains(where: { $0.deadline <= now }) else { return [] }
            let due = pending.filter { $0.deadline <= now }.map(\.body)
            pending.removeAll { $0.deadline <= now }
            return due
        }
        for body in due { body() }
    }
}

/// Carries an object that is only touched on one home into a `@Sendable` closure that runs there
/// (a timer on the same run loop, a block on the same serial queue).
struct HomeBound<Value: AnyObject>: @unchecked Sendable {
    let value: Value
}

/// A long-lived connection: 'E' for `roundTrips` messages of 64 bytes, one round trip every few
/// seconds (a random gap in `gaps`), so the pair stays open for minutes with little traffic. Once the
/// soak is stopping, the remaining round trips go without gaps, so the connection ends cleanly.
final class PacedEchoSession: StreamSession {
    private let home: EventHome
    private let roundTrips: Int
    private let gaps: ClosedRange<Double>
    private let isStopping: @Sendable () -> Bool
    private var roundTrip = 0
    private var echo = [UInt8](repeating: 0, count: Payload.messageSize)
    private var received = 0

    init(
        port: UInt16, home: EventHome, roundTrips: Int, gaps: ClosedRange<Double>, monitor: SessionMonitor,
        isStopping: @escaping @Sendable () -> Bool
    ) {
        self.home = home
        self.roundTrips = roundTrips
        self.gaps = gaps
        self.isStopping = isStopping
        super.init(port: port, monitor: monitor)
        enqueue(Request.echo(bytes: UInt64(roundTrips * Payload.messageSize)).encoded)
        enqueue(Payload.message(roundTrip: 0))
    }

    override var progressDescription: String { "long-lived: round trip \(roundTrip) of \(roundTrips)" }

    override func bytesAvailable() {
        guard let n = read(into: &echo, offset: received, count: echo.count - received) else { return }
        received += n
        guard received == echo.count else { return }
        guard echo == Payload.message(roundTrip: roundTrip) else { return fail("echo \(roundTrip) differs from the message sent") }
        received = 0
        roundTrip += 1
        if roundTrip == roundTrips { return finish() }
        let this = HomeBound(value: self)
        home.after(isStopping() ? 0 : Double.random(in: gaps)) {
            let session = this.value
            guard !session.isDone else { return }
            session.send(Payload.message(roundTrip: session.roundTrip))
        }
    }
}

/// A connect to a port nobody listens on: errorOccurred with ECONNREFUSED finishes it; an
/// `openCompleted`, any other error, or the streams becoming usable fails it.
final class RefusedSession: StreamSession {
    override func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard !isDone else { return }
        switch eventCode {
        case .errorOccurred:
            monitor.noteEvent()
            let kind = SoakErrorKind.of(aStream.streamError)
            if kind == "ECONNREFUSED" { return finish() }
            fail("stream error \(kind ?? "none"), expected ECONNREFUSED: \(aStream.streamError.map { "\($0)" } ?? "no error")")
        case .openCompleted, .hasSpaceAvailable, .hasBytesAvailable:
            monitor.noteEvent()
            fail("event \(eventCode.rawValue) on a connection to a port nobody listens on")
        default:
            super.stream(aStream, handle: eventCode)
        }
    }

    override var progressDescription: String { "refused: waiting for ECONNREFUSED" }
}

/// 'X': reads the `bytes` the peer sends, answers one byte, and must then see errorOccurred with
/// ECONNRESET (the peer closes with SO_LINGER {1, 0}), never an end of stream, and only after every
/// byte sent before the reset has been read.
final class ResetSession: StreamSession {
    private let expected: Int
    private var received = 0
    private var buffer = [UInt8](repeating: 0, count: 16 * 1024)

    init(port: UInt16, bytes: Int, monitor: SessionMonitor) {
        expected = bytes
        super.init(port: port, monitor: monitor)
        enqueue(Request.reset(bytes: UInt64(bytes)).encoded)
    }

    override var progressDescription: String { "reset: \(received) of \(expected) bytes before the reset" }

    override func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard eventCode == .errorOccurred, !isDone else { return super.stream(aStream, handle: eventCode) }
        monitor.noteEvent()
        let kind = SoakErrorKind.of(aStream.streamError)
        if kind == "ECONNRESET" && received == expected { return finish() }
        fail("stream error \(kind ?? "none") after \(received) of \(expected) bytes, expected ECONNRESET after all of them")
    }

    override func bytesAvailable() {
        let n = buffer.withUnsafeMutableBufferPointer { inputStream.read($0.baseAddress!, maxLength: $0.count) }
        if n < 0 && received == expected && SoakErrorKind.of(inputStream.streamError) == "ECONNRESET" {
            // A reset makes the socket readable, so it comes as hasBytesAvailable and this read fails
            // with it (CFSocketStream does the same); errorOccurred would follow.
            return finish()
        }
        if n == 0 { return endEncountered() }
        if n < 0 {
            return fail("read failed after \(received) of \(expected) bytes: \(inputStream.streamError.map { "\($0)" } ?? "no error")")
        }
        received += n
        if received > expected { return fail("\(received) bytes, more than the \(expected) sent before the reset") }
        if received == expected { send([1]) }  // everything is read: the peer may reset now
    }

    override func endEncountered() {
        fail("end of stream after \(received) of \(expected) bytes, expected ECONNRESET")
    }
}
