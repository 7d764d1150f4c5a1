import Foundation
import SocketStreams

/// The two streams of a pair.
package typealias StreamPair = (input: SocketInputStream, output: SocketOutputStream)

/// Which stream of the pair an entry is about.
package enum StreamRole: String, Sendable {
    case input, output, unknown
}

/// One thing the recorder saw or did, in order.
package enum RecordedEntry: Equatable, CustomStringConvertible {
    /// A delegate callback.
    case event(StreamRole, Stream.Event)
    /// The recorder's own `read` on the input stream, with its return value.
    case read(Int)
    /// The recorder's own `write` on the output stream, with its return value.
    case wrote(Int)
    /// The recorder (or the test, through `close(_:)`) closed that stream.
    case closed(StreamRole)

    package var description: String {
        switch self {
        case let .event(role, event): return "\(role).\(event.name)"
        case let .read(n): return "read(\(n))"
        case let .wrote(n): return "write(\(n))"
        case let .closed(role): return "\(role).close()"
        }
    }
}

extension Stream.Event {
    package var name: String {
        switch self {
        case .openCompleted: return "openCompleted"
        case .hasBytesAvailable: return "hasBytesAvailable"
        case .hasSpaceAvailable: return "hasSpaceAvailable"
        case .errorOccurred: return "errorOccurred"
        case .endEncountered: return "endEncountered"
        default: return "event(\(rawValue))"
        }
    }
}

extension Stream.Status {
    package var name: String {
        switch self {
        case .notOpen: return "notOpen"
        case .opening: return "opening"
        case .open: return "open"
        case .reading: return "reading"
        case .writing: return "writing"
        case .atEnd: return "atEnd"
        case .closed: return "closed"
        case .error: return "error"
        @unknown default: return "status(\(rawValue))"
        }
    }
}

/// An immutable copy of what a recorder has seen, safe to inspect on any thread.
package struct RecorderSnapshot {
    package var entries: [RecordedEntry] = []
    /// The thread each delegate callback ran on, parallel to the `.event` entries.
    package var eventThreads: [Thread] = []
    /// Bytes the recorder read from the input stream.
    package var received = Data()
    /// Bytes of `outgoing` the recorder has written so far.
    package var bytesWritten = 0
    /// `streamError` captured when each stream got `errorOccurred`.
    package var errors: [StreamRole: NSError] = [:]

    package func events(_ role: StreamRole) -> [Stream.Event] {
        entries.compactMap { entry in
            if case let .event(r, event) = entry, r == role { return event }
            return nil
        }
    }

    package func count(_ event: Stream.Event, on role: StreamRole) -> Int {
        events(role).filter { $0 == event }.count
    }

    package func has(_ event: Stream.Event, on role: StreamRole) -> Bool {
        count(event, on: role) > 0
    }

    /// Index in `entries` of the first entry matching `predicate`.
    package func firstIndex(where predicate: (RecordedEntry) -> Bool) -> Int? {
        entries.firstIndex(where: predicate)
    }

    package var receivedString: String { String(decoding: received, as: UTF8.self) }
}

/// A `StreamDelegate` that records every callback (which stream, which event, on which thread)
/// in order and, optionally, acts like the Stream Programming Guide's client:
/// - `hasBytesAvailable`: one `read` of at most `readChunk` bytes per event, appended to `received`;
/// - `hasSpaceAvailable`: one `write` of at most `writeChunk` bytes of `outgoing` per event (using the
///   returned count, so short writes are fine); with nothing to write it remembers that space is
///   available so that `send(_:)` can write at once;
/// - `endEncountered`: `close()` then `remove(from:forMode:)`, as the guide does;
/// - `errorOccurred`: the stream's error is captured; closing is optional.
/// Thread-safe: callbacks may run on any run-loop thread while the test inspects `snapshot`.
package final class DelegateRecorder: NSObject, StreamDelegate, @unchecked Sendable {
    // @unchecked: the switches are set before the streams open and only read after; what the
    // callbacks record is kept under `condition` (see `snapshot`).
    // Behaviour switches (set before the streams are opened).
    package var readsOnHasBytes = true
    package var readChunk = 1024
    package var writeChunk = 1024
    package var closesOutputAfterWriting = false
    package var closesOnEnd = true
    package var closesOnError = false
    /// The mode the pair is scheduled in (used by remove(from:forMode:) on end).
    package var mode: RunLoop.Mode = .default
    /// Extra behaviour, run after recording and the default action, on the delegate's thread.
    package var onEvent: ((Stream, Stream.Event) -> Void)?

    private let condition = NSCondition()
    private var state = RecorderSnapshot()
    private var outgoing = Data()
    private var spaceAvailable = false
    private var inputID: ObjectIdentifier?
    private var outputID: ObjectIdentifier?
    // Strong, as an Apple-guide client retains its streams: the run loop does not keep them alive.
    private var input: InputStream?
    private var output: OutputStream?

    package init(outgoing: Data = Data()) {
        self.outgoing = outgoing
        super.init()
    }

    package convenience init(sending text: String) {
        self.init(outgoing: Data(text.utf8))
    }

    // MARK: wiring

    /// Remembers which stream is which (without retaining them).
    package func attach(_ pair: StreamPair) {
        attach(input: pair.input, output: pair.output)
    }

    package func attach(input: InputStream?, output: OutputStream?) {
        condition.lock()
        inputID = input.map(ObjectIdentifier.init)
        outputID = output.map(ObjectIdentifier.init)
        self.input = input
        self.output = output
        condition.unlock()
    }

    /// The Apple-guide set-up: delegate on both, schedule both, open both.
    /// Must run on `runLoop`'s thread when that is not the library's own run loop.
    package func start(_ pair: StreamPair, on runLoop: RunLoop = .current, mode: RunLoop.Mode = .default) {
        schedule(pair, on: runLoop, mode: mode)
        pair.input.open()
        pair.output.open()
    }

    /// `start` for a dispatch queue: attaches `pair`, becomes both streams' delegate, sets `queue` as
    /// their dispatch queue (`CFReadStreamSetDispatchQueue`, `CFWriteStreamSetDispatchQueue`) and opens them.
    package func start(_ pair: StreamPair, on queue: DispatchQueue) {
        attach(pair)
        pair.input.delegate = self
        pair.output.delegate = self
        CFReadStreamSetDispatchQueue(pair.input, queue)
        CFWriteStreamSetDispatchQueue(pair.output, queue)
        pair.input.open()
        pair.output.open()
    }

    /// `start` without the opens: attaches `pair`, becomes both streams' delegate and schedules them
    /// on `runLoop` in `mode`.
    package func schedule(_ pair: StreamPair, on runLoop: RunLoop = .current, mode: RunLoop.Mode = .default) {
        attach(pair)
        self.mode = mode
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: mode)
        }
    }

    package func role(of stream: Stream) -> StreamRole {
        let id = ObjectIdentifier(stream)
        condition.lock()
        defer { condition.unlock() }
        if id == inputID { return .input }
        if id == outputID { return .output }
        return .unknown
    }

    // MARK: inspecting

    package var snapshot: RecorderSnapshot {
        condition.lock()
        defer { condition.unlock() }
        return state
    }

    package func has(_ event: Stream.Event, on role: StreamRole) -> Bool { snapshot.has(event, on: role) }
    package func count(_ event: Stream.Event, on role: StreamRole) -> Int { snapshot.count(event, on: role) }
    package var received: Data { snapshot.received }

    /// Blocks the calling thread (not a run loop) until `predicate` holds for the recorded
    /// state or `timeout` passes. For streams scheduled on another thread's run loop.
    package func wait(timeout: TimeInterval, until predicate: (RecorderSnapshot) -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate(state) {
            if !condition.wait(until: deadline) { return predicate(state) }
        }
        return true
    }

    /// The entries as one line, for failure messages.
    package var trace: String { snapshot.entries.map(\.description).joined(separator: ", ") }

    // MARK: acting (call on the delegate's run-loop thread)

    /// Queues `data` for the output stream; writes at once if a `hasSpaceAvailable` is unused.
    package func send(_ data: Data) {
        condition.lock()
        outgoing.append(data)
        let writeNow = spaceAvailable
        spaceAvailable = false
        let stream = output
        condition.unlock()
        if writeNow, let stream { writeNext(to: stream) }
    }

    package func send(_ text: String) { send(Data(text.utf8)) }

    /// Closes `stream` and records that it did, so tests can check nothing arrives afterwards.
    package func close(_ stream: Stream) {
        stream.close()
        record(.closed(role(of: stream)))
    }

    // MARK: StreamDelegate

    package func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        let role = role(of: aStream)
        condition.lock()
        state.entries.append(.event(role, eventCode))
        state.eventThreads.append(Thread.current)
        if eventCode == .errorOccurred, let error = aStream.streamError {
            state.errors[role] = error as NSError
        }
        condition.broadcast()
        let (reads, closeOnEnd, closeOnError) = (readsOnHasBytes, closesOnEnd, closesOnError)
        condition.unlock()

        switch eventCode {
        case .hasBytesAvailable:
            if reads, let input = aStream as? InputStream { readOnce(from: input) }
        case .hasSpaceAvailable:
            if let output = aStream as? OutputStream { writeNext(to: output) }
        case .endEncountered:
            if closeOnEnd { closeAndRemove(aStream) }
        case .errorOccurred:
            if closeOnError { closeAndRemove(aStream) }
        default:
            break
        }
        onEvent?(aStream, eventCode)
    }

    // MARK: private

    private func record(_ entry: RecordedEntry) {
        condition.lock()
        state.entries.append(entry)
        condition.broadcast()
        condition.unlock()
    }

    private func readOnce(from input: InputStream) {
        let chunk = readChunk
        var buffer = [UInt8](repeating: 0, count: chunk)
        let count = input.read(&buffer, maxLength: chunk)
        condition.lock()
        state.entries.append(.read(count))
        if count > 0 { state.received.append(contentsOf: buffer[0..<count]) }
        condition.broadcast()
        condition.unlock()
    }

    private func writeNext(to output: OutputStream) {
        condition.lock()
        let start = state.bytesWritten
        let end = min(outgoing.count, start + writeChunk)
        let chunk = outgoing.subdata(in: start..<end)
        let closeWhenDone = closesOutputAfterWriting
        // Nothing (more) to write: remember the unused space event, as the guide advises.
        if chunk.isEmpty { spaceAvailable = true }
        condition.unlock()
        if chunk.isEmpty { return }
        let written = chunk.withUnsafeBytes { raw in
            output.write(raw.bindMemory(to: UInt8.self).baseAddress!, maxLength: chunk.count)
        }
        condition.lock()
        state.entries.append(.wrote(written))
        if written > 0 { state.bytesWritten += written }
        let finished = state.bytesWritten == outgoing.count
        condition.broadcast()
        condition.unlock()
        if finished && written > 0 && closeWhenDone { closeAndRemove(output) }
    }

    private func closeAndRemove(_ stream: Stream) {
        close(stream)
        stream.remove(from: .current, forMode: mode)
    }
}
