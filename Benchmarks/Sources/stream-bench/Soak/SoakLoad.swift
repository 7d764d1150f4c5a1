// The soak's load: lanes that run side by side in one process for the whole soak, each doing one kind
// of operation again and again with a pause in between (so the load is steady and moderate, not a
// saturation test). Delegate lanes open the sessions of Clients/StreamSessions.swift and
// Soak/SoakSessions.swift on a run loop or a queue, the next one from the previous one's last callout;
// polling lanes each have a thread making blocking calls on unscheduled pairs. See `SoakLoad.start`
// for the mix.

import Foundation
import SocketStreams
import Synchronization

/// A thread that runs its own run loop in the default mode until `stop()`: the soak's delegate
/// thread (Apple's guide: streams scheduled on the current thread's run loop) and its listener thread.
final class SoakRunLoopThread: @unchecked Sendable {
    /// Set by the thread before `init` returns, never changed.
    private(set) var runLoop: RunLoop!
    private let stopping = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)

    init(name: String) {
        let ready = DispatchSemaphore(value: 0)
        let thread = Thread { [unowned self] in
            runLoop = RunLoop.current
            // A mode without sources makes run(mode:before:) return at once; this timer keeps the
            // mode from ever being empty.
            let keepAlive = Timer(timeInterval: 3600, repeats: true) { _ in }
            RunLoop.current.add(keepAlive, forMode: .default)
            ready.signal()
            while !stopping.load(ordering: .relaxed) {
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
            }
            keepAlive.invalidate()
            exited.signal()
        }
        thread.name = name
        thread.start()
        ready.wait()
    }

    /// Ends the thread's run loop and waits (up to 10 s) for the thread to exit.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        // A timer that fires inside run(mode:before:) makes that call return (a stop from this
        // thread could come between two calls and be lost).
        EventHome.runLoop(runLoop).after(0) { CFRunLoopStop(CFRunLoopGetCurrent()) }
        _ = exited.wait(timeout: .now() + 10)
    }
}

/// Delegate sessions, `width` at a time: each opened `pause` seconds after the previous one on its
/// slot ended. Touched only on `home` (the timers and callouts run there).
final class SessionLane: @unchecked Sendable {
    let lane: SoakLane
    /// The lane's index in the counters, from `start()` on.
    private var index = -1
    private let home: EventHome
    private let pause: Double
    private let width: Int
    private let load: SoakLoad
    private let makeSession: (SessionLane, Int) -> StreamSession
    let monitor = SessionMonitor()
    /// Sessions in progress (a stream's delegate is weak). Home only.
    private var sessions: [ObjectIdentifier: StreamSession] = [:]
    /// Sessions opened so far, for lanes that alternate (download/upload, IPv4/IPv6).
    private var opened = 0

    init(
        _ lane: SoakLane, home: EventHome, pause: Double, width: Int = 1, load: SoakLoad,
        makeSession: @escaping (SessionLane, Int) -> StreamSession
    ) {
        self.lane = lane
        self.home = home
        self.pause = pause
        self.width = width
        self.load = load
        self.makeSession = makeSession
    }

    /// Registers the lane and opens its first `width` sessions, one a second (from any thread: they
    /// are opened on `home`).
    func start() {
        index = load.counters.register(lane)
        for slot in 0..<width {
            home.after(Double(slot)) { [self] in next() }
        }
    }

    private func next() {
        guard !load.isStopping else { return }
        let session = makeSession(self, opened)
        opened += 1
        sessions[ObjectIdentifier(session)] = session
        load.counters.began(index)
        session.onFinish = { [unowned self, unowned session] in ended(session, failure: nil) }
        session.onFailure = { [unowned self, unowned session] message in ended(session, failure: message) }
        session.open(on: home)
    }

    private func ended(_ session: StreamSession, failure: String?) {
        sessions[ObjectIdentifier(session)] = nil
        if let failure {
            let kind = SoakErrorKind.of(session.inputStream, session.outputStream) ?? SoakErrorKind.of(message: failure)
            load.counters.failed(index, kind: kind, message: "\(type(of: session)): \(failure)")
        } else {
            load.counters.completed(index)
        }
        home.after(pause) { [self] in next() }
    }
}

/// A thread doing one blocking operation after another on unscheduled pairs, `pause` seconds apart.
final class PollingLane: @unchecked Sendable {
    /// A failure whose kind is known exactly (the polling refused and reset operations).
    struct Failure: Error {
        var kind: String
        var message: String
    }

    let lane: SoakLane
    /// The lane's index in the counters, from `start()` on.
    private var index = -1
    private let pause: Double
    private let load: SoakLoad
    private let operation: @Sendable (Int) throws -> Void

    /// `operation` gets the number of operations done so far (for lanes that alternate) and throws
    /// on anything unexpected.
    init(_ lane: SoakLane, pause: Double, load: SoakLoad, operation: @escaping @Sendable (Int) throws -> Void) {
        self.lane = lane
        self.pause = pause
        self.load = load
        self.operation = operation
    }

    /// Registers the lane and starts its thread.
    func start() {
        index = load.counters.register(lane)
        load.threads.enter()
        let thread = Thread { [self] in
            var done = 0
            while !load.isStopping {
                load.counters.began(index)
                do {
                    try operation(done)
                    load.counters.completed(index)
                } catch let failure as Failure {
                    load.counters.failed(index, kind: failure.kind, message: failure.message)
                } catch {
                    load.counters.failed(index, kind: SoakErrorKind.of(message: "\(error)"), message: "\(error)")
                }
                done += 1
                Thread.sleep(forTimeInterval: pause)
            }
            load.threads.leave()
        }
        thread.name = "soak polling"
        thread.start()
    }
}

/// Every lane of the soak, and the switch that stops them.
final class SoakLoad: @unchecked Sendable {
    /// Where the lanes connect.
    struct Ports {
        /// The epoll server's plain and TLS ports.
        var server: UInt16
        var serverTLS: UInt16
        /// The listener peer's ports (127.0.0.1, ::1, 127.0.0.1 with TLS).
        var listener: UInt16
        var listener6: UInt16
        var listenerTLS: UInt16
        /// Ports nobody listens on (bound, not listening) on 127.0.0.1 and ::1.
        var refused: UInt16
        var refused6: UInt16
    }

    let counters: SoakCounters
    /// The polling lanes' threads, until they have seen `isStopping` and ended.
    let threads = DispatchGroup()
    private let stopping = Atomic<Bool>(false)
    private var sessionLanes: [SessionLane] = []
    private var pollingLanes: [PollingLane] = []

    /// Bytes per bulk transfer and before a reset; round trips per echo and TLS operation.
    static let bulkBytes = 2 << 20
    static let resetBytes = 32 * 1024
    static let echoRoundTrips = 50
    static let tlsRoundTrips = 10
    /// Long-lived connections: round trips per connection and the gap between them (seconds), so
    /// one stays open for 40 s to 8 min (3 min on average).
    static let longRoundTrips = 20...60
    static let longGaps = 2.0...8.0

    init(counters: SoakCounters) {
        self.counters = counters
    }

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// Lanes stop opening new operations; those in flight run to their end (long-lived connections
    /// drop their gaps), so `counters.inFlight` falls to 0.
    func stop() {
        stopping.store(true, ordering: .relaxed)
    }

    /// Starts every lane of the `kinds` given. `delegate` is the soak's run loop thread, `queue` its
    /// serial queue; `tls` trusts the certificate of both TLS peers.
    func start(ports p: Ports, delegate: RunLoop, queue: DispatchQueue, tls: TLSSettings, kinds: Set<SoakLane.Kind>) {
        let onDelegate = EventHome.runLoop(delegate)
        let onThread = EventHome.runLoop(.socketStreams)
        let onQueue = EventHome.queue(queue)
        let isStopping: @Sendable () -> Bool = { [unowned self] in self.isStopping }
        func lane(_ kind: SoakLane.Kind, _ style: String, _ peer: String, expecting error: String? = nil) -> SoakLane {
            SoakLane(kind: kind, style: style, peer: peer, expectedError: error)
        }
        func bulk(_ port: UInt16, _ n: Int, _ monitor: SessionMonitor) -> StreamSession {
            n % 2 == 0
                ? DownloadSession(port: port, totalBytes: Self.bulkBytes, monitor: monitor)
                : UploadSession(port: port, totalBytes: Self.bulkBytes, monitor: monitor)
        }
        func long(_ port: UInt16, _ home: EventHome, _ monitor: SessionMonitor) -> StreamSession {
            PacedEchoSession(
                port: port, home: home, roundTrips: Int.random(in: Self.longRoundTrips), gaps: Self.longGaps,
                monitor: monitor, isStopping: isStopping)
        }
        func secured(_ session: StreamSession) -> StreamSession {
            _ = session.inputStream.setProperty(tls, forKey: .tlsSettingsKey)
            return session
        }

        // The delegate thread: Apple's guide, streams scheduled on the current thread's run loop.
        sessionLanes += [
            SessionLane(lane(.short, "delegate", "server"), home: onDelegate, pause: 0.02, load: self) { lane, _ in
                ConnectSession(port: p.server, monitor: lane.monitor)
            },
            SessionLane(lane(.short, "delegate", "listener"), home: onDelegate, pause: 0.05, load: self) { lane, _ in
                ConnectSession(port: p.listener, monitor: lane.monitor)
            },
            SessionLane(lane(.echo, "delegate", "server"), home: onDelegate, pause: 0.05, load: self) { lane, _ in
                EchoSession(port: p.server, roundTrips: Self.echoRoundTrips, messageSize: Payload.messageSize, monitor: lane.monitor)
            },
            SessionLane(lane(.bulk, "delegate", "server"), home: onDelegate, pause: 0.5, load: self) { lane, n in
                bulk(p.server, n, lane.monitor)
            },
            SessionLane(lane(.long, "delegate", "server"), home: onDelegate, pause: 0.5, width: 8, load: self) { lane, _ in
                long(p.server, onDelegate, lane.monitor)
            },
            SessionLane(
                lane(.refused, "delegate", "127.0.0.1 and ::1", expecting: "ECONNREFUSED"), home: onDelegate,
                pause: 0.05, load: self
            ) { lane, n in
                RefusedSession(
                    host: n % 2 == 0 ? "127.0.0.1" : "::1", port: n % 2 == 0 ? p.refused : p.refused6,
                    monitor: lane.monitor)
            },
            SessionLane(
                lane(.reset, "delegate", "server", expecting: "ECONNRESET"), home: onDelegate, pause: 0.05,
                load: self
            ) { lane, _ in
                ResetSession(port: p.server, bytes: Self.resetBytes, monitor: lane.monitor)
            },
        ]
        // The package's stream thread.
        sessionLanes += [
            SessionLane(lane(.echo, "thread", "listener ::1"), home: onThread, pause: 0.05, load: self) { lane, _ in
                EchoSession(
                    host: "::1", port: p.listener6, roundTrips: Self.echoRoundTrips, messageSize: Payload.messageSize,
                    monitor: lane.monitor)
            },
            SessionLane(
                lane(.reset, "thread", "listener", expecting: "ECONNRESET"), home: onThread, pause: 0.05,
                load: self
            ) { lane, _ in
                ResetSession(port: p.listener, bytes: Self.resetBytes, monitor: lane.monitor)
            },
            SessionLane(lane(.long, "thread", "listener"), home: onThread, pause: 0.5, width: 8, load: self) { lane, _ in
                long(p.listener, onThread, lane.monitor)
            },
            SessionLane(lane(.tls, "thread", "listener"), home: onThread, pause: 0.25, load: self) { lane, _ in
                secured(
                    EchoSession(
                        port: p.listenerTLS, roundTrips: Self.tlsRoundTrips, messageSize: Payload.messageSize,
                        monitor: lane.monitor))
            },
        ]
        // A serial dispatch queue (CFReadStreamSetDispatchQueue).
        sessionLanes += [
            SessionLane(lane(.short, "queue", "server"), home: onQueue, pause: 0.02, load: self) { lane, _ in
                ConnectSession(port: p.server, monitor: lane.monitor)
            },
            SessionLane(lane(.bulk, "queue", "listener"), home: onQueue, pause: 0.5, load: self) { lane, n in
                bulk(p.listener, n, lane.monitor)
            },
            SessionLane(lane(.long, "queue", "server"), home: onQueue, pause: 0.5, width: 8, load: self) { lane, _ in
                long(p.server, onQueue, lane.monitor)
            },
            SessionLane(lane(.tls, "queue", "server"), home: onQueue, pause: 0.25, load: self) { lane, _ in
                secured(
                    EchoSession(
                        port: p.serverTLS, roundTrips: Self.tlsRoundTrips, messageSize: Payload.messageSize,
                        monitor: lane.monitor))
            },
        ]
        // Unscheduled pairs with blocking calls, a thread per lane.
        let client = StreamsPollingClient()
        pollingLanes += [
            PollingLane(lane(.short, "polling", "server"), pause: 0.02, load: self) { _ in
                _ = try client.connect(port: p.server, count: 1)
            },
            PollingLane(lane(.echo, "polling", "listener"), pause: 0.05, load: self) { _ in
                _ = try client.pingPong(port: p.listener, roundTrips: Self.echoRoundTrips, messageSize: Payload.messageSize)
            },
            PollingLane(lane(.bulk, "polling", "server"), pause: 0.5, load: self) { n in
                _ =
                    n % 2 == 0
                    ? try client.download(port: p.server, totalBytes: Self.bulkBytes)
                    : try client.upload(port: p.server, totalBytes: Self.bulkBytes)
            },
            PollingLane(lane(.refused, "polling", "127.0.0.1 and ::1", expecting: "ECONNREFUSED"), pause: 0.05, load: self) { n in
                try Self.pollRefused(host: n % 2 == 0 ? "127.0.0.1" : "::1", port: n % 2 == 0 ? p.refused : p.refused6)
            },
            PollingLane(lane(.reset, "polling", "listener", expecting: "ECONNRESET"), pause: 0.05, load: self) { _ in
                try Self.pollReset(port: p.listener)
            },
        ]
        sessionLanes.removeAll { !kinds.contains($0.lane.kind) }
        pollingLanes.removeAll { !kinds.contains($0.lane.kind) }
        sessionLanes.forEach { $0.start() }
        pollingLanes.forEach { $0.start() }
    }

    /// A blocking read on a pair to a port nobody listens on must fail with ECONNREFUSED.
    private static func pollRefused(host: String, port: UInt16) throws {
        let pair = try StreamsPollingClient.Pair(host: host, port: port)
        defer { pair.close() }
        var byte: UInt8 = 0
        let n = pair.input.read(&byte, maxLength: 1)
        let kind = SoakErrorKind.of(pair.input, pair.output)
        guard n < 0, kind == "ECONNREFUSED" else {
            throw PollingLane.Failure(
                kind: kind ?? "no error",
                message: "read on a connection to [\(host)]:\(port) returned \(n), error \(kind ?? "none"), expected ECONNREFUSED")
        }
    }

    /// 'X' with blocking calls: every byte sent before the reset arrives, then a read fails with ECONNRESET.
    private static func pollReset(port: UInt16) throws {
        let pair = try StreamsPollingClient.Pair(port: port)
        defer { pair.close() }
        var data = [UInt8](repeating: 0, count: resetBytes)
        do {
            try pair.writeAll(Request.reset(bytes: UInt64(resetBytes)).encoded)
            try pair.readExactly(&data)
            try pair.writeAll([1])
        } catch {
            throw PollingLane.Failure(
                kind: SoakErrorKind.of(pair.input, pair.output) ?? SoakErrorKind.of(message: "\(error)"),
                message: "before the reset: \(error)")
        }
        var byte: UInt8 = 0
        let n = pair.input.read(&byte, maxLength: 1)
        let kind = SoakErrorKind.of(pair.input, pair.output)
        guard n < 0, kind == "ECONNRESET" else {
            throw PollingLane.Failure(
                kind: n == 0 ? "end of stream" : kind ?? "no error",
                message: "read after the reset returned \(n), error \(kind ?? "none"), expected ECONNRESET")
        }
    }
}
