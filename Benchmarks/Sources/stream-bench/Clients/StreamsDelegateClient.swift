// streams-delegate, streams-thread and streams-queue: the sessions of StreamSessions.swift,
// scheduled on the benchmark thread's own run loop (driven with `RunLoop.current.run(mode:before:)`
// until done), on `RunLoop.socketStreams`, the package's stream thread, or on a serial DispatchQueue
// with `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue`. In the last two the delegate
// callouts run on another thread, and the benchmark thread blocks on the monitor's DispatchSemaphore;
// everything it reads from the sessions goes through the monitor's lock.

import CoreFoundation
import Foundation
import SocketStreams

/// Makes `RunLoop.current.run(mode:before: .distantFuture)` return once a second, so the stall check
/// runs, without giving the run loop a deadline per call (a finite deadline makes CoreFoundation arm
/// and disarm its timeout timer on every call, i.e. on every stream event, which would be measured).
/// One timer per process (each measurement is its own process), added on first use.
let stallCheckTimer: Void = {
    let timer = Timer(timeInterval: 1, repeats: true) { _ in CFRunLoopStop(CFRunLoopGetCurrent()) }
    RunLoop.current.add(timer, forMode: .default)
}()

enum StreamScheduling {
    /// streams-delegate: the current thread's run loop, default mode.
    case currentRunLoop
    /// streams-thread: the package's dedicated stream run-loop thread.
    case streamThread
    /// streams-queue: a serial dispatch queue (one per measurement process, so the warm-up's pair
    /// starts the same queue's machinery that the measurement then uses); no run loop involved.
    case dispatchQueue(DispatchQueue)

    /// Where the sessions' streams deliver their events.
    var home: EventHome {
        switch self {
        case .currentRunLoop: return .runLoop(RunLoop.current)
        case .streamThread: return .runLoop(RunLoop.socketStreams)
        case .dispatchQueue(let queue): return .queue(queue)
        }
    }

    /// Returns once `ready`/`finished` sessions reached the counts; throws the first session failure.
    /// If no stream event arrives for `stallTimeout` seconds, throws a stall report describing where
    /// the unfinished `sessions` are (a lost stream event would otherwise hang until the harness
    /// kills the measurement).
    @discardableResult
    func wait(
        for monitor: SessionMonitor, ready: Int = .max, finished: Int = .max,
        sessions: @autoclosure () -> [StreamSession]
    ) throws -> SessionMonitor.Snapshot {
        var lastEvents = -1
        var lastProgressTime = Posix.monotonicNanoseconds()
        while true {
            let snapshot = monitor.want(ready: ready, finished: finished)
            if let failure = snapshot.failure { throw BenchError(failure) }
            if snapshot.ready >= ready || snapshot.finished >= finished { return snapshot }
            let now = Posix.monotonicNanoseconds()
            let events = monitor.events
            if events != lastEvents {
                lastEvents = events
                lastProgressTime = now
            } else if Stopwatch.seconds(from: lastProgressTime, to: now) > stallTimeout {
                throw BenchError(
                    "stalled: no stream event for \(Int(stallTimeout)) s; "
                        + StreamSession.stallReport(sessions()))
            }
            switch self {
            case .currentRunLoop:
                stallCheckTimer
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
            case .streamThread, .dispatchQueue:
                // Signalled by the session callouts (on the stream thread or the queue) when the
                // threshold registered by `want` is reached or a session fails; the 1 s timeout
                // only runs the stall check.
                _ = monitor.changed.wait(timeout: .now() + 1)
            }
        }
    }
}

/// How long the delegate drivers wait without any stream event before they give up with a stall report.
let stallTimeout = 60.0

struct StreamsDelegateClient: BenchmarkClient {
    let scheduling: StreamScheduling

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    /// Opens one session and waits until it has finished.
    private func runSession(_ makeSession: (SessionMonitor) -> StreamSession) throws -> Double {
        let stopwatch = Stopwatch()
        let monitor = SessionMonitor()
        let session = makeSession(monitor)
        session.open(on: scheduling.home)
        try scheduling.wait(for: monitor, finished: 1, sessions: [session])
        return stopwatch.elapsedSeconds
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        try runSession { DownloadSession(port: port, totalBytes: totalBytes, monitor: $0) }
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        try runSession { UploadSession(port: port, totalBytes: totalBytes, monitor: $0) }
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        try runSession { EchoSession(port: port, roundTrips: roundTrips, messageSize: messageSize, monitor: $0) }
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let stopwatch = Stopwatch()
        let monitor = SessionMonitor()
        guard case .currentRunLoop = scheduling else {
            // On the stream thread or a queue, each session opens the next from its own last callout,
            // as code living on that thread or queue would: waking the benchmark thread between
            // connections would measure a thread hand-off per connection, not the library.
            let chain = ConnectChain(port: port, count: count, home: scheduling.home, monitor: monitor)
            chain.start()
            try scheduling.wait(for: monitor, finished: count, sessions: chain.current.map { [$0] } ?? [])
            return stopwatch.elapsedSeconds
        }
        for i in 0..<count {
            let session = ConnectSession(port: port, monitor: monitor)
            session.open(on: scheduling.home)
            try scheduling.wait(for: monitor, finished: i + 1, sessions: [session])
        }
        return stopwatch.elapsedSeconds
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        let monitor = SessionMonitor()
        let group = UInt64.random(in: 1...UInt64.max)
        var sessions: [StreamSession] = []
        sessions.reserveCapacity(connections)
        try openPaced(count: connections, monitor: monitor, into: &sessions) {
            EchoSession(
                port: port, group: group, groupSize: connections, roundTrips: roundTrips,
                messageSize: messageSize, monitor: monitor)
        }
        let done = try scheduling.wait(for: monitor, finished: connections, sessions: sessions)
        guard let start = done.firstGo, let end = done.lastFinish else { throw BenchError("many: no timing recorded") }
        return Stopwatch.seconds(from: start, to: end)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        let monitor = SessionMonitor()
        let group = UInt64.random(in: 1...UInt64.max)
        var sessions: [StreamSession] = []
        sessions.reserveCapacity(pairs + 1)
        let memoryBefore = try ProcessMemory.snapshot()
        try openPaced(count: pairs, monitor: monitor, into: &sessions) {
            IdleSession(port: port, group: group, monitor: monitor)
        }
        try scheduling.wait(for: monitor, ready: pairs, sessions: sessions)
        let memoryOpen = try ProcessMemory.snapshot()

        let release = ReleaseSession(port: port, group: group, monitor: monitor)
        sessions.append(release)
        release.open(on: scheduling.home)
        try scheduling.wait(for: monitor, finished: pairs + 1, sessions: sessions)
        return (memoryBefore, memoryOpen)
    }

    /// Opens `count` sessions, never more than `maxConnectsInFlight` ahead of the server's '+'.
    private func openPaced(
        count: Int, monitor: SessionMonitor, into sessions: inout [StreamSession],
        _ makeSession: () -> StreamSession
    ) throws {
        for i in 0..<count {
            if i >= maxConnectsInFlight {
                try scheduling.wait(for: monitor, ready: i - maxConnectsInFlight + 1, sessions: sessions)
            }
            let session = makeSession()
            sessions.append(session)
            session.open(on: scheduling.home)
        }
    }
}

/// Connect sessions opened one after another from the previous one's callout. Holds the session in
/// progress (stream delegates are weak); touched only on the delivering thread or queue, except
/// `current` read for a stall report just before the measurement fails.
final class ConnectChain: @unchecked Sendable {
    private let port: UInt16
    private let home: EventHome
    private let monitor: SessionMonitor
    private var remaining: Int
    private(set) var current: ConnectSession?

    init(port: UInt16, count: Int, home: EventHome, monitor: SessionMonitor) {
        self.port = port
        self.home = home
        self.monitor = monitor
        remaining = count
    }

    /// Opens the next session, if any is left.
    func start() {
        guard remaining > 0 else {
            current = nil
            return
        }
        remaining -= 1
        let session = ConnectSession(port: port, monitor: monitor)
        session.onFinish = { [self] in start() }
        current = session
        session.open(on: home)
    }
}
