// The scale run on stream pairs: one delegate per connection, written as Apple's guide teaches (one
// read per has-bytes event, a write when there is space), scheduled on the package's stream thread or
// on a serial dispatch queue. Pairs have no per-operation timeouts.

import Foundation
import SocketStreams
import Synchronization

// @unchecked Sendable: each field says its owner (filled by `open` before the measured phase, then
// reached only where the events are delivered); `releasing` is atomic.
final class ScalePairsFace: ScaleFace, @unchecked Sendable {
    let port: UInt16
    let group: UInt64
    let home: EventHome
    let sources: ScaleSources
    let monitor = ScaleMonitor()
    /// Every connection's session (stream delegates are weak). Filled by `open` before any round trip
    /// of the measured phase starts; read then only where the events are delivered.
    private var sessions: [ScalePairSession] = []
    /// Set before the release is sent: an end of stream is then expected.
    let releasing = Atomic<Bool>(false)
    /// The read buffer, used only where the events are delivered.
    var scratch = [UInt8](repeating: 0, count: 256)

    init(port: UInt16, group: UInt64, home: EventHome, sources: ScaleSources) {
        self.port = port
        self.group = group
        self.home = home
        self.sources = sources
    }

    func open(count: Int, inFlight: Int) throws {
        sessions.reserveCapacity(count)
        let header = Request.heldEcho(group: group).encoded + Scale.messages[0]
        try monitor.openPaced(count: count, inFlight: inFlight) { i in
            let session = ScalePairSession(face: self, index: i)
            sessions.append(session)
            session.start(sending: header, awaiting: 0)
        }
    }

    func roundTrips() throws {
        switch home {
        case .queue(let queue): queue.async { [self] in startRoundTrip(0) }
        case .runLoop(let runLoop):
            // A timer: the one way into another thread's run loop that wakes it on Linux.
            runLoop.add(Timer(timeInterval: 0, repeats: false) { [self] _ in startRoundTrip(0) }, forMode: .default)
        }
        try monitor.wait(.roundTrips, reaches: sessions.count)
    }

    func release() throws {
        releasing.store(true, ordering: .releasing)  // before the FINs can arrive
        try Scale.sendRelease(port: port, group: group)
        try monitor.wait(.closed, reaches: sessions.count)
        sessions = []
    }

    /// Where the events are delivered: the round trip of connection `index`.
    func startRoundTrip(_ index: Int) {
        guard index < sessions.count else { return }
        sessions[index].send(Scale.messages[1], awaiting: 1)
    }

    /// Where the events are delivered: connection `index` has its echo.
    func echoed(_ index: Int, message: Int) {
        if message == 0 { return monitor.add(.idle) }
        monitor.add(.roundTrips)
        startRoundTrip(index + 1)
    }
}

/// One connection of the pairs faces: the delegate of both of its streams.
// @unchecked Sendable: its state is reached only where its streams' events are delivered (the stream
// thread or the face's queue), after `open` set it up.
final class ScalePairSession: NSObject, StreamDelegate, @unchecked Sendable {
    private unowned let face: ScalePairsFace
    private let index: Int
    private let input: InputStream
    private let output: OutputStream
    private var pending: [UInt8] = []
    private var sent = 0
    /// The message whose echo is awaited (-1: none), and how much of it has arrived.
    private var awaited = -1
    private var received = 0
    private var closed = false

    init(face: ScalePairsFace, index: Int) {
        self.face = face
        self.index = index
        let pair = createStreamPair(host: "127.0.0.1", port: Int(face.port))
        input = pair.input
        output = pair.output
        _ = output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey)
        if let binding = face.sources.binding(index) { _ = input.setProperty(binding as AnyObject, forKey: .localBindingKey) }
        super.init()
    }

    /// Schedules and opens the pair, with `bytes` to send once it has space.
    func start(sending bytes: [UInt8], awaiting message: Int) {
        pending = bytes
        awaited = message
        input.delegate = self
        output.delegate = self
        switch face.home {
        case .runLoop(let runLoop):
            input.schedule(in: runLoop, forMode: .default)
            output.schedule(in: runLoop, forMode: .default)
        case .queue(let queue):
            CFReadStreamSetDispatchQueue(input, queue)
            CFWriteStreamSetDispatchQueue(output, queue)
        }
        input.open()
        output.open()
    }

    /// Where the events are delivered: sends `bytes` (now if the stream has space, else on its event).
    func send(_ bytes: [UInt8], awaiting message: Int) {
        pending = bytes
        sent = 0
        awaited = message
        received = 0
        if output.hasSpaceAvailable { write() }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable:
            if sent < pending.count { write() }
        case .hasBytesAvailable:
            read()
        case .endEncountered:
            end()
        case .errorOccurred:
            fail("\(stream.streamError.map { "\($0)" } ?? "unknown error")")
        default:
            break
        }
    }

    private func write() {
        let n = pending.withUnsafeBufferPointer { output.write($0.baseAddress! + sent, maxLength: $0.count - sent) }
        guard n >= 0 else { return fail("write failed: \(output.streamError.map { "\($0)" } ?? "")") }
        sent += n
        if sent == pending.count {
            pending = []
            sent = 0
        }
    }

    private func read() {
        let n = input.read(&face.scratch, maxLength: face.scratch.count)
        if n == 0 { return end() }
        guard n > 0 else { return fail("read failed: \(input.streamError.map { "\($0)" } ?? "")") }
        guard awaited >= 0, received + n <= Scale.messageSize,
            face.scratch[..<n].elementsEqual(Scale.messages[awaited][received..<(received + n)])
        else { return fail("connection \(index): \(n) bytes that are not the awaited echo") }
        received += n
        guard received == Scale.messageSize else { return }
        let message = awaited
        awaited = -1
        received = 0
        face.echoed(index, message: message)
    }

    private func end() {
        guard face.releasing.load(ordering: .acquiring) else { return fail("connection \(index): end of stream before the release") }
        guard !closed else { return }
        closed = true
        for stream in [input, output] as [Stream] {
            stream.delegate = nil
            stream.close()
        }
        face.monitor.add(.closed)
    }

    private func fail(_ message: String) {
        face.monitor.fail("pairs connection \(index): \(message)")
    }
}
