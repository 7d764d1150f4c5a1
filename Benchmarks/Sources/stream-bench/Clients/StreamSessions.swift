// The SocketStreams delegate code, written the way Apple's "Stream Programming Guide" teaches it:
// one object per connection is the delegate of both streams, schedules them on a run loop, reads on
// `.hasBytesAvailable` (one read per event), writes on `.hasSpaceAvailable` (one write per event, or
// at once when there is something to send and the output stream reports space), and closes and
// unschedules both streams itself when it is done. The same classes serve streams-delegate (current
// thread's run loop), streams-thread (`RunLoop.socketStreams`) and streams-queue (a serial
// DispatchQueue set with `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue` instead of
// a run loop); see StreamsDelegateClient.swift.

import Foundation
import SocketStreams
import Synchronization

/// Progress of the sessions of one measurement. Sessions report on the thread whose run loop (or
/// the dispatch queue that) delivers their events; the benchmark thread waits for thresholds. A lock keeps the two apart,
/// and `changed` is signalled only when a waited-for threshold is reached (or on failure), so a
/// benchmark thread blocked on it is not woken for every session.
final class SessionMonitor: @unchecked Sendable {
    struct Snapshot {
        var ready = 0
        var finished = 0
        var failure: String?
        /// When the first group member received 'G' (many).
        var firstGo: UInt64?
        /// When the most recent session finished.
        var lastFinish: UInt64?
    }

    let changed = DispatchSemaphore(value: 0)
    /// Delegate callbacks so far (for stall detection; relaxed, a few ns per event).
    private let eventCount = Atomic<Int>(0)
    private let lock = NSLock()
    private var state = Snapshot()
    private var wantedReady = Int.max
    private var wantedFinished = Int.max

    var snapshot: Snapshot {
        lock.lock()
        defer { lock.unlock() }
        return state
    }

    func noteEvent() {
        eventCount.wrappingAdd(1, ordering: .relaxed)
    }

    var events: Int { eventCount.load(ordering: .relaxed) }

    func sessionReady() {
        update { state in
            state.ready += 1
            return state.ready >= wantedReady
        }
    }

    func sessionGo() {
        let now = Posix.monotonicNanoseconds()
        update { state in
            if state.firstGo == nil { state.firstGo = now }
            return false
        }
    }

    func sessionFinished() {
        let now = Posix.monotonicNanoseconds()
        update { state in
            state.finished += 1
            state.lastFinish = now
            return state.finished >= wantedFinished
        }
    }

    func sessionFailed(_ message: String) {
        update { state in
            if state.failure == nil { state.failure = message }
            return true
        }
    }

    /// Registers what the waiter needs; returns the current snapshot.
    func want(ready: Int = .max, finished: Int = .max) -> Snapshot {
        lock.lock()
        defer { lock.unlock() }
        wantedReady = ready
        wantedFinished = finished
        return state
    }

    private func update(_ body: (inout Snapshot) -> Bool) {
        lock.lock()
        let signal = body(&state)
        if signal {
            wantedReady = .max
            wantedFinished = .max
        }
        lock.unlock()
        if signal { changed.signal() }
    }
}

/// Where a session's two streams deliver their events.
enum EventHome {
    /// `schedule(in:forMode: .default)` on a run loop (streams-delegate, streams-thread).
    case runLoop(RunLoop)
    /// `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue` (streams-queue): the delegate
    /// is called on the queue, one event at a time.
    case queue(DispatchQueue)
}

/// One connection: the delegate of both of its streams.
///
/// The state its callouts change is `@exclusivity(unchecked)`: a session's events are delivered one at
/// a time on one thread or queue, so no two accesses can overlap, and Swift's dynamic exclusivity check
/// of a class's `var` (made at every access that spans a call it cannot see into, such as passing an
/// array to `read(_:maxLength:)`) costs about 100 instructions each: 6 a ping-pong round trip, 640
/// instructions, a seventh of the round trip (callgrind, `Benchmarks/instructions`; the Performance
/// guide's "Your delegate's share").
class StreamSession: NSObject, StreamDelegate {
    let inputStream: InputStream
    let outputStream: OutputStream
    let monitor: SessionMonitor
    /// Set in `open` before the streams are scheduled, read in `close` on the delivering thread.
    private var home: EventHome?
    @exclusivity(unchecked) private var pendingOutput: [UInt8] = []
    @exclusivity(unchecked) private var pendingIndex = 0
    @exclusivity(unchecked) private(set) var isDone = false
    /// Why the pair could not be set up (the proxy refused by `setProperty`); `open` then fails the session.
    private var setupFailure: String?

    init(host: String = "127.0.0.1", port: UInt16, monitor: SessionMonitor) {
        let streams = createStreamPair(host: host, port: Int(port))
        BenchTLS.apply(to: streams.input)
        do {
            try BenchSOCKS.apply(to: streams.input)
        } catch {
            setupFailure = "\(error)"
        }
        inputStream = streams.input
        outputStream = streams.output
        self.monitor = monitor
        super.init()
    }

    /// Sets the delegates, schedules both streams on `home` (a run loop's default mode, or a dispatch
    /// queue) and opens them. On a queue, events may arrive there as soon as `open` is called.
    func open(on home: EventHome) {
        if let setupFailure { return fail(setupFailure) }
        self.home = home
        inputStream.delegate = self
        outputStream.delegate = self
        _ = outputStream.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
        switch home {
        case .runLoop(let runLoop):
            inputStream.schedule(in: runLoop, forMode: .default)
            outputStream.schedule(in: runLoop, forMode: .default)
        case .queue(let queue):
            CFReadStreamSetDispatchQueue(inputStream, queue)
            CFWriteStreamSetDispatchQueue(outputStream, queue)
        }
        inputStream.open()
        outputStream.open()
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        monitor.noteEvent()
        guard !isDone else { return }
        switch eventCode {
        case .hasBytesAvailable:
            bytesAvailable()
        case .hasSpaceAvailable:
            spaceAvailable()
        case .endEncountered:
            endEncountered()
        case .errorOccurred:
            fail("stream error: \(aStream.streamError.map { String(describing: $0) } ?? "unknown")")
        case .openCompleted:
            break
        default:
            // CFNetwork delivers one event per callback; anything else would leave this session
            // waiting forever, so fail loudly instead.
            fail("unexpected event \(eventCode.rawValue) on the \(aStream === inputStream ? "input" : "output") stream")
        }
    }

    // MARK: Diagnostics

    /// Where this session is in its exchange, for stall reports.
    var progressDescription: String { "open" }

    /// Groups unfinished sessions by where they are and what their input stream reports. On the
    /// streams-thread and streams-queue clients this reads session state from another thread; it only
    /// runs once the sessions have made no progress for a long time, just before the measurement fails.
    static func stallReport(_ sessions: [StreamSession]) -> String {
        let pending = sessions.filter { !$0.isDone }
        var groups: [String: Int] = [:]
        for session in pending {
            let input = session.inputStream
            let key =
                "\(session.progressDescription), input status \(input.streamStatus.rawValue), "
                + "hasBytesAvailable \(input.hasBytesAvailable), output hasSpaceAvailable \(session.outputStream.hasSpaceAvailable)"
            groups[key, default: 0] += 1
        }
        let summary = groups.sorted { $0.value > $1.value }.prefix(4).map { "\($0.value)× [\($0.key)]" }
        return "\(pending.count) of \(sessions.count) session(s) unfinished: " + summary.joined(separator: "; ")
    }

    // MARK: Subclass hooks

    func bytesAvailable() {}

    func spaceAvailable() {
        writePending()
    }

    func endEncountered() {
        fail("short read: end of stream before the exchange was complete")
    }

    // MARK: Writing

    /// Queues bytes for the next `.hasSpaceAvailable` (use before `open`).
    func enqueue(_ bytes: [UInt8]) {
        pendingOutput.append(contentsOf: bytes)
    }

    /// Queues bytes and writes them at once if the output stream has space.
    func send(_ bytes: [UInt8]) {
        enqueue(bytes)
        if outputStream.hasSpaceAvailable { writePending() }
    }

    var hasPendingOutput: Bool { pendingIndex < pendingOutput.count }

    /// One write of whatever is queued; the rest waits for the next `.hasSpaceAvailable`.
    func writePending() {
        guard hasPendingOutput else { return }
        let written = pendingOutput.withUnsafeBufferPointer {
            outputStream.write($0.baseAddress! + pendingIndex, maxLength: $0.count - pendingIndex)
        }
        guard written > 0 else { return writeFailed(written) }
        pendingIndex += written
        if pendingIndex == pendingOutput.count {
            pendingOutput.removeAll(keepingCapacity: true)
            pendingIndex = 0
        }
    }

    func writeFailed(_ result: Int) {
        fail("write returned \(result): \(outputStream.streamError.map { String(describing: $0) } ?? "no error")")
    }

    // MARK: Reading

    /// One read into `buffer[offset...]`, at most `count` bytes. Returns the byte count (> 0), or nil
    /// after failing the session on end of stream (a short read) or an error.
    func read(into buffer: inout [UInt8], offset: Int = 0, count: Int) -> Int? {
        let n = buffer.withUnsafeMutableBufferPointer { inputStream.read($0.baseAddress! + offset, maxLength: count) }
        if n > 0 { return n }
        if n == 0 {
            endEncountered()
        } else {
            fail("read failed: \(inputStream.streamError.map { String(describing: $0) } ?? "no error")")
        }
        return nil
    }

    // MARK: Ending

    /// Runs after a successful finish, on the delivering thread (the connect chain opens the next session).
    var onFinish: (() -> Void)?
    /// Runs after a failure, on the delivering thread, with the message (the soak counts it and goes on).
    var onFailure: ((String) -> Void)?

    func finish() {
        guard !isDone else { return }
        close()
        monitor.sessionFinished()
        onFailure = nil
        if let next = onFinish {
            onFinish = nil
            next()
        }
    }

    func fail(_ message: String) {
        guard !isDone else { return }
        close()
        monitor.sessionFailed("\(type(of: self)): \(message)")
        onFinish = nil
        if let handler = onFailure {
            onFailure = nil
            handler(message)
        }
    }

    private func close() {
        isDone = true
        inputStream.close()
        outputStream.close()
        switch home {
        case .runLoop(let runLoop)?:
            inputStream.remove(from: runLoop, forMode: .default)
            outputStream.remove(from: runLoop, forMode: .default)
        case .queue?:
            CFReadStreamSetDispatchQueue(inputStream, nil)
            CFWriteStreamSetDispatchQueue(outputStream, nil)
        case nil:
            break
        }
        inputStream.delegate = nil
        outputStream.delegate = nil
    }
}

/// Sends 'D' and reads to end of stream with a 64 KiB buffer.
final class DownloadSession: StreamSession {
    private let expected: Int
    @exclusivity(unchecked) private var received = 0
    @exclusivity(unchecked) private var buffer = [UInt8](repeating: 0, count: Payload.chunkSize)

    init(port: UInt16, totalBytes: Int, monitor: SessionMonitor) {
        expected = totalBytes
        super.init(port: port, monitor: monitor)
        enqueue(Request.download(bytes: UInt64(totalBytes)).encoded)
    }

    override func bytesAvailable() {
        let n = inputStream.read(&buffer, maxLength: buffer.count)
        if n > 0 {
            received += n
        } else if n == 0 {
            endEncountered()
        } else {
            fail("read failed: \(inputStream.streamError.map { String(describing: $0) } ?? "no error")")
        }
    }

    override var progressDescription: String { "download: \(received) of \(expected) bytes received" }

    override func endEncountered() {
        if received == expected {
            finish()
        } else {
            fail("short read: \(received) of \(expected) bytes")
        }
    }
}

/// Sends 'U' and the payload in 64 KiB writes, then reads the server's 8-byte count.
final class UploadSession: StreamSession {
    private let total: Int
    @exclusivity(unchecked) private var remaining: Int
    private let chunk: [UInt8]
    @exclusivity(unchecked) private var reply = [UInt8](repeating: 0, count: 8)
    @exclusivity(unchecked) private var replyCount = 0

    init(port: UInt16, totalBytes: Int, monitor: SessionMonitor) {
        total = totalBytes
        remaining = totalBytes
        chunk = (0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) }
        super.init(port: port, monitor: monitor)
        enqueue(Request.upload(bytes: UInt64(totalBytes)).encoded)
    }

    override var progressDescription: String {
        "upload: \(total - remaining) of \(total) bytes sent, \(replyCount) of 8 reply bytes"
    }

    override func spaceAvailable() {
        if hasPendingOutput {
            writePending()
        } else if remaining > 0 {
            let written = outputStream.write(chunk, maxLength: min(chunk.count, remaining))
            guard written > 0 else { return writeFailed(written) }
            remaining -= written
        }
    }

    override func bytesAvailable() {
        guard let n = read(into: &reply, offset: replyCount, count: reply.count - replyCount) else { return }
        replyCount += n
        guard replyCount == reply.count else { return }
        let counted = Payload.decodeCount(reply)
        if remaining == 0 && counted == UInt64(total) {
            finish()
        } else {
            fail("server counted \(counted) of \(total) bytes (\(remaining) unsent)")
        }
    }
}

/// Echo round trips: ping-pong ('E', starts at once) or a member of a "many" group ('G', starts
/// when the server says go). The next message is sent only after the full echo arrived.
final class EchoSession: StreamSession {
    private enum Phase { case awaitingAck, awaitingGo, echoing }

    private let roundTrips: Int
    private let messages: [[UInt8]]
    @exclusivity(unchecked) private var phase: Phase
    @exclusivity(unchecked) private var roundTrip = 0
    @exclusivity(unchecked) private var echo: [UInt8]
    @exclusivity(unchecked) private var received = 0
    @exclusivity(unchecked) private var control = [UInt8](repeating: 0, count: 1)

    /// Ping-pong: header and first message go out together on the first `.hasSpaceAvailable`.
    init(host: String = "127.0.0.1", port: UInt16, roundTrips: Int, messageSize: Int, monitor: SessionMonitor) {
        self.roundTrips = roundTrips
        messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        echo = [UInt8](repeating: 0, count: messageSize)
        phase = .echoing
        super.init(host: host, port: port, monitor: monitor)
        enqueue(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded)
        enqueue(messages[0])
    }

    /// Group member: '+' makes it ready, 'G' starts the round trips.
    init(port: UInt16, group: UInt64, groupSize: Int, roundTrips: Int, messageSize: Int, monitor: SessionMonitor) {
        self.roundTrips = roundTrips
        messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        echo = [UInt8](repeating: 0, count: messageSize)
        phase = .awaitingAck
        super.init(port: port, monitor: monitor)
        enqueue(Request.groupEcho(group: group, size: UInt32(groupSize), bytes: UInt64(roundTrips * messageSize)).encoded)
    }

    override var progressDescription: String {
        switch phase {
        case .awaitingAck: return "waiting for '+'"
        case .awaitingGo: return "waiting for 'G'"
        case .echoing: return "round trip \(roundTrip) of \(roundTrips), \(received) of \(echo.count) echo bytes"
        }
    }

    override func bytesAvailable() {
        switch phase {
        case .awaitingAck:
            guard read(into: &control, count: 1) != nil else { return }
            guard control[0] == Request.ackReply else { return fail("expected '+', got \(control[0])") }
            phase = .awaitingGo
            monitor.sessionReady()
        case .awaitingGo:
            guard read(into: &control, count: 1) != nil else { return }
            guard control[0] == Request.goReply else { return fail("expected 'G', got \(control[0])") }
            phase = .echoing
            monitor.sessionGo()
            send(messages[0])
        case .echoing:
            guard let n = read(into: &echo, offset: received, count: echo.count - received) else { return }
            received += n
            guard received == echo.count else { return }
            guard Payload.same(echo, messages[roundTrip & 1]) else { return fail("echo \(roundTrip) differs from the message sent") }
            received = 0
            roundTrip += 1
            if roundTrip == roundTrips {
                finish()
            } else {
                send(messages[roundTrip & 1])
            }
        }
    }
}

/// Sends 'C', reads the one-byte answer, closes.
final class ConnectSession: StreamSession {
    @exclusivity(unchecked) private var reply = [UInt8](repeating: 0, count: 1)

    override init(host: String = "127.0.0.1", port: UInt16, monitor: SessionMonitor) {
        super.init(host: host, port: port, monitor: monitor)
        enqueue(Request.connect.encoded)
    }

    override var progressDescription: String { "connect: waiting for 'c'" }

    override func bytesAvailable() {
        guard read(into: &reply, count: 1) != nil else { return }
        if reply[0] == Request.connectReply {
            finish()
        } else {
            fail("unexpected reply byte \(reply[0])")
        }
    }
}

/// Sends 'I', becomes ready on '+', then sits idle until the server's FIN after a release.
final class IdleSession: StreamSession {
    private var acknowledged = false
    private var byte = [UInt8](repeating: 0, count: 1)

    init(port: UInt16, group: UInt64, monitor: SessionMonitor) {
        super.init(port: port, monitor: monitor)
        enqueue(Request.idle(group: group).encoded)
    }

    override func bytesAvailable() {
        let n = inputStream.read(&byte, maxLength: 1)
        if n == 0 { return endEncountered() }
        if n < 0 { return fail("read failed: \(inputStream.streamError.map { String(describing: $0) } ?? "no error")") }
        if acknowledged || byte[0] != Request.ackReply { return fail("unexpected byte \(byte[0]) on an idle connection") }
        acknowledged = true
        monitor.sessionReady()
    }

    override var progressDescription: String { acknowledged ? "idle, waiting for the release" : "idle: waiting for '+'" }

    override func endEncountered() {
        if acknowledged {
            finish()
        } else {
            fail("end of stream before '+'")
        }
    }
}

/// Sends 'R' for a group of idle connections and waits for '+'.
final class ReleaseSession: StreamSession {
    private var reply = [UInt8](repeating: 0, count: 1)

    init(port: UInt16, group: UInt64, monitor: SessionMonitor) {
        super.init(port: port, monitor: monitor)
        enqueue(Request.release(group: group).encoded)
    }

    override var progressDescription: String { "release: waiting for '+'" }

    override func bytesAvailable() {
        guard read(into: &reply, count: 1) != nil else { return }
        if reply[0] == Request.ackReply {
            finish()
        } else {
            fail("unexpected reply byte \(reply[0])")
        }
    }
}
