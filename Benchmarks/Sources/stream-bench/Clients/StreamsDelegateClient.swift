// streams-delegate and streams-thread: the sessions of StreamSessions.swift, scheduled either on
// the benchmark thread's own run loop (driven with `RunLoop.current.run(mode:before:)` until done)
// or on `RunLoop.socketStreams`, the package's stream thread, while the benchmark thread blocks on
// a DispatchSemaphore.

import CoreFoundation
import Foundation
import SocketStreams

/// Makes `RunLoop.current.run(mode:before: .distantFuture)` return once a second, so the stall check
/// runs, without giving the run loop a deadline per call (a finite deadline makes CoreFoundation arm
/// and disarm its timeout timer on every call, i.e. on every stream event, which would be measured).
/// One timer per process (each measurement is its own process), added on first use.
private let stallCheckTimer: Void = {
    let timer = Timer(timeInterval: 1, repeats: true) { _ in CFRunLoopStop(CFRunLoopGetCurrent()) }
    RunLoop.current.add(timer, forMode: .default)
}()

enum StreamScheduling {
    /// streams-delegate: the current thread's run loop, default mode.
    case currentRunLoop
    /// streams-thread: the package's dedicated stream run-loop thread.
    case streamThread

    var runLoop: RunLoop {
        switch self {
        case .currentRunLoop: return RunLoop.current
        case .streamThread: return RunLoop.socketStreams
        }
    }

    /// Returns once `ready`/`finished` sessions reached the counts; throws the first session failure.
    /// If no stream event arrives for `stallTimeout` seconds, throws a stall report describing where
    /// the unfinished `sessions` are (a lost stream event would otherwise hang until the harness
    /// kills the measurement).
    @discardableResult
    func wait(for monitor: SessionMonitor, ready: Int = .max, finished: Int = .max,
              sessions: @autoclosure () -> [StreamSession]) throws -> SessionMonitor.Snapshot {
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
                throw BenchError("stalled: no stream event for \(Int(stallTimeout)) s; "
                                 + StreamSession.stallReport(sessions()))
            }
            switch self {
            case .currentRunLoop:
                stallCheckTimer
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
            case .streamThread:
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
        session.open(in: scheduling.runLoop)
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
        for i in 0..<count {
            let session = ConnectSession(port: port, monitor: monitor)
            session.open(in: scheduling.runLoop)
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
            EchoSession(port: port, group: group, groupSize: connections, roundTrips: roundTrips,
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
        release.open(in: scheduling.runLoop)
        try scheduling.wait(for: monitor, finished: pairs + 1, sessions: sessions)
        return (memoryBefore, memoryOpen)
    }

    /// Opens `count` sessions, never more than `maxConnectsInFlight` ahead of the server's '+'.
    private func openPaced(count: Int, monitor: SessionMonitor, into sessions: inout [StreamSession],
                           _ makeSession: () -> StreamSession) throws {
        for i in 0..<count {
            if i >= maxConnectsInFlight {
                try scheduling.wait(for: monitor, ready: i - maxConnectsInFlight + 1, sessions: sessions)
            }
            let session = makeSession()
            sessions.append(session)
            session.open(in: scheduling.runLoop)
        }
    }
}
