// A TCP relay on loopback that sits between a client under test and a real peer and does to the
// connection what a user's network does: trickles bytes, stalls, resets, closes early, swallows
// everything, stops reading, or truncates TLS. It is made of plain sockets and threads (nothing of
// the library under test), and every fault is a value of `FaultRelay.Fault`.
//
// The relay listens on 127.0.0.1 on an ephemeral port and is accepting as soon as `init` returns (the
// listening socket exists before it), so a test needs no other readiness signal. Each accepted
// connection gets an upstream connection to the peer (except `.acceptAndNeverAnswer`) and two pump
// threads, one per direction, that read with poll(2) slices so that `stop()` ends them promptly. Both
// sockets of a connection have TCP_NODELAY, so a segment written is a segment sent.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation

package final class FaultRelay: @unchecked Sendable {
    // @unchecked: `port`, `upstreamPort`, `fault` and `listenFD` are immutable; everything else is
    // read and written only under `condition`.

    /// Which way bytes flow: from the client to the peer, or from the peer to the client.
    package enum Direction: String, Sendable, Hashable, CustomStringConvertible {
        case upstream, downstream
        package var description: String { rawValue }
    }

    /// What the relay does to every connection it accepts.
    package enum Fault: Sendable, Hashable, CustomStringConvertible {
        /// Forward everything unchanged.
        case none
        /// Split every read into segments of 1...`maxSegment` bytes (sizes from a seeded generator),
        /// each written on its own, with `delay` seconds before each, both ways.
        case segment(maxSegment: Int, delay: TimeInterval = 0)
        /// After `after` bytes forwarded in `direction`, forward nothing for `duration` seconds, then
        /// carry on.
        case stall(after: Int, direction: Direction, duration: TimeInterval)
        /// After `after` bytes forwarded in `direction` (and sent: the send queue drained), reset the
        /// client's connection (SO_LINGER 0, close) and close the peer's.
        case reset(after: Int, direction: Direction)
        /// After `after` bytes forwarded in `direction`, send the client a FIN (shutdown SHUT_WR) and
        /// forward nothing more either way; the client's later bytes are read and dropped, so its
        /// close stays a FIN too.
        case close(after: Int, direction: Direction)
        /// Accept and never connect to the peer, read or write: the connection stays open, silent.
        case acceptAndNeverAnswer
        /// Forward the peer's bytes but never read the client's: its writes fill the buffers.
        case stopReading
        /// Forward `after` bytes downstream (and whatever the client sends until then), then nothing
        /// either way, with both connections kept open: a peer that died without a FIN or RST.
        case deadPeer(after: Int)
        /// Forward the peer's bytes as whole TLS records only; at the first record boundary at or after
        /// `afterRecordBytes` bytes of records downstream, send the client a FIN (no close_notify ever
        /// reaches it) and forward nothing more, as `.close` does. The first `plainPrefix` bytes
        /// downstream (a proxy's replies) are forwarded as they come, and the records begin after them.
        case truncateTLS(afterRecordBytes: Int, plainPrefix: Int = 0)
        /// A link of `bytesPerSecond` each way: a token bucket per direction, `burst` bytes deep and full
        /// at the start; each write is at most what the bucket holds, and the relay waits for tokens.
        case bandwidth(bytesPerSecond: Int, burst: Int)

        package var description: String {
            switch self {
            case .none: return "none"
            case .segment(let size, let delay): return delay > 0 ? "segment(1...\(size), \(delay) s)" : "segment(1...\(size))"
            case .stall(let after, let direction, let duration): return "stall(\(direction) after \(after), \(duration) s)"
            case .reset(let after, let direction): return "reset(\(direction) after \(after))"
            case .close(let after, let direction): return "close(\(direction) after \(after))"
            case .acceptAndNeverAnswer: return "acceptAndNeverAnswer"
            case .stopReading: return "stopReading"
            case .deadPeer(let after): return "deadPeer(after \(after))"
            case .truncateTLS(let after, let prefix):
                return prefix > 0
                    ? "truncateTLS(after \(after) record bytes, \(prefix) B before)" : "truncateTLS(after \(after) record bytes)"
            case .bandwidth(let rate, let burst): return "bandwidth(\(rate) B/s, burst \(burst) B)"
            }
        }
    }

    /// What happened on the relay's connections so far, for the relay's own tests and for reports.
    package struct Counters: Sendable, Equatable {
        package var accepted = 0
        /// Bytes written onwards in each direction, summed over the connections.
        package var forwarded: [Direction: Int] = [:]
        /// Separate writes made in each direction (segments).
        package var writes: [Direction: Int] = [:]
        /// Faults that have fired (a reset sent, a FIN sent, a stall begun, a dead peer gone silent...).
        package var faultsFired = 0
        /// Connections whose pumps have all finished.
        package var finished = 0
    }

    package let port: Int
    package let upstreamPort: Int
    package let fault: Fault
    private let listenFD: Int32
    private let condition = NSCondition()
    private var counters = Counters()
    private var stopping = false
    private var acceptLoopDone = false
    private var openFDs: Set<Int32> = []
    private var threads = 0

    /// Listens on 127.0.0.1 (ephemeral port) and relays every connection to 127.0.0.1:`upstreamPort`.
    package init(upstreamPort: Int, fault: Fault) throws {
        self.upstreamPort = upstreamPort
        self.fault = fault
        listenFD = try RawSocket.listener(family: .v4, port: 0, backlog: 64)
        port = RawSocket.boundPort(listenFD)
        start("FaultRelay.accept") { $0.acceptLoop() }
    }

    deinit { stop() }

    package var snapshot: Counters {
        condition.lock()
        defer { condition.unlock() }
        return counters
    }

    /// Waits until `predicate` holds for the counters, at most `timeout` seconds.
    @discardableResult
    package func wait(timeout: TimeInterval, until predicate: (Counters) -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate(counters) {
            if !condition.wait(until: deadline) { return predicate(counters) }
        }
        return true
    }

    /// Stops accepting, ends every connection (closing its sockets) and waits for the threads.
    package func stop() {
        condition.lock()
        let already = stopping
        stopping = true
        condition.broadcast()
        let deadline = Date(timeIntervalSinceNow: 5)
        while (!acceptLoopDone || threads > 0) && condition.wait(until: deadline) {}
        let leftovers = openFDs
        openFDs.removeAll()
        condition.unlock()
        if !already { Glibc.close(listenFD) }
        for fd in leftovers { Glibc.close(fd) }
    }

    // MARK: threads and bookkeeping

    private func start(_ name: String, _ body: @escaping @Sendable (FaultRelay) -> Void) {
        condition.lock()
        threads += 1
        condition.unlock()
        let thread = Thread { [self] in
            body(self)
            condition.lock()
            threads -= 1
            condition.broadcast()
            condition.unlock()
        }
        thread.name = name
        thread.start()
    }

    private var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    private func update(_ body: (inout Counters) -> Void) {
        condition.lock()
        body(&counters)
        condition.broadcast()
        condition.unlock()
    }

    private func track(_ fd: Int32) {
        condition.lock()
        openFDs.insert(fd)
        condition.unlock()
    }

    /// Closes `fd` if the relay still owns it (stop() may have closed it already).
    private func release(_ fd: Int32) {
        condition.lock()
        let owned = openFDs.remove(fd) != nil
        condition.unlock()
        if owned { Glibc.close(fd) }
    }

    /// Sends RST on a connected TCP socket without closing it (connect(2) to AF_UNSPEC disconnects it,
    /// which Linux does with a reset), so the descriptor stays the relay's until its pumps are done.
    private func sendReset(_ fd: Int32) {
        var address = sockaddr()
        address.sa_family = sa_family_t(AF_UNSPEC)
        _ = connect(fd, &address, socklen_t(MemoryLayout<sockaddr>.size))
    }

    /// Waits until the relay stops (a fault that holds a connection open).
    private func holdUntilStopped() {
        condition.lock()
        while !stopping { condition.wait() }
        condition.unlock()
    }

    /// Sleeps `duration` seconds, or less if the relay stops: the fault's own behaviour (a stall, a
    /// delay), never synchronisation.
    private func pause(_ duration: TimeInterval) {
        let deadline = Date(timeIntervalSinceNow: duration)
        condition.lock()
        while !stopping && condition.wait(until: deadline) {}
        condition.unlock()
    }

    // MARK: accepting

    private func acceptLoop() {
        while !isStopping {
            guard let client = try? RawSocket.accept(listenFD, timeout: 0.05) else { continue }
            track(client)
            setNoDelay(client)
            update { $0.accepted += 1 }
            start("FaultRelay.connection") { $0.serve(client) }
        }
        condition.lock()
        acceptLoopDone = true
        condition.broadcast()
        condition.unlock()
    }

    private func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    // MARK: one connection

    /// The state two pumps of one connection share, under the relay's condition.
    private final class Link: @unchecked Sendable {
        // @unchecked: `client` and `upstream` are immutable; `mode` and `pumps` only under the relay's
        // condition.
        enum Mode { case forwarding, draining, silent, done }
        let client: Int32
        let upstream: Int32
        var mode = Mode.forwarding
        var pumps = 2
        init(client: Int32, upstream: Int32) {
            self.client = client
            self.upstream = upstream
        }
    }

    private func serve(_ client: Int32) {
        if fault == .acceptAndNeverAnswer {
            update { $0.faultsFired += 1 }
            holdUntilStopped()
            release(client)
            update { $0.finished += 1 }
            return
        }
        guard let upstream = try? RawSocket.connectTo(family: .v4, port: upstreamPort) else {
            sendReset(client)
            release(client)
            update { $0.finished += 1 }
            return
        }
        track(upstream)
        setNoDelay(upstream)
        let link = Link(client: client, upstream: upstream)
        start("FaultRelay.up") { $0.pump(link, .upstream) }
        start("FaultRelay.down") { $0.pump(link, .downstream) }
    }

    /// The link's mode, `.done` once the relay stops.
    private func mode(_ link: Link) -> Link.Mode {
        condition.lock()
        defer { condition.unlock() }
        return stopping ? .done : link.mode
    }

    /// Moves a forwarding link to `mode`; true for the caller that moved it.
    private func move(_ link: Link, to mode: Link.Mode) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard link.mode == .forwarding else { return false }
        link.mode = mode
        return true
    }

    private func pumpFinished(_ link: Link) {
        condition.lock()
        link.pumps -= 1
        let last = link.pumps == 0
        condition.unlock()
        guard last else { return }
        release(link.client)
        release(link.upstream)
        update { $0.finished += 1 }
    }

    private func pump(_ link: Link, _ direction: Direction) {
        defer { pumpFinished(link) }
        let source = direction == .upstream ? link.client : link.upstream
        let destination = direction == .upstream ? link.upstream : link.client
        if fault == .stopReading && direction == .upstream {
            update { $0.faultsFired += 1 }
            holdUntilStopped()
            return
        }
        var state = PumpState(fault: fault, direction: direction)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let current = mode(link)
            switch current {
            case .done: return
            case .silent:
                holdUntilStopped()
                return
            case .draining where direction == .downstream: return
            default: break
            }
            // Poll slices, so that a change of mode or stop() is seen promptly.
            var descriptor = pollfd(fd: source, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 50)
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            let count = recv(source, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count < 0 && (errno == EINTR || errno == EAGAIN) { continue }
            if current == .draining {
                // After a FIN to the client: its bytes are read and dropped until it closes.
                if count <= 0 { return }
                continue
            }
            if count < 0 {
                // The source reset: pass it on as a reset of the other side.
                if move(link, to: .done) { sendReset(destination) }
                return
            }
            if count == 0 {
                // A FIN from the source: pass it on; the other pump carries on.
                shutdown(destination, Int32(SHUT_WR))
                return
            }
            _ = forward(Array(buffer[0..<count]), link, direction, &state)
        }
    }

    /// Per-direction progress of the fault.
    private struct PumpState {
        let fault: Fault
        let direction: Direction
        var forwarded = 0
        var fired = false
        var generator: SplitMix64
        /// TLS records: bytes of a record held back until it is complete.
        var pendingRecord: [UInt8] = []
        /// Bandwidth: the bucket's tokens (bytes) and when it was last filled (monotonic seconds).
        var tokens: Double = 0
        var filled: Double = 0

        init(fault: Fault, direction: Direction) {
            self.fault = fault
            self.direction = direction
            generator = SplitMix64(seed: direction == .upstream ? 0x5eed_0001 : 0x5eed_0002)
            if case .bandwidth(_, let burst) = fault {
                tokens = Double(burst)
                filled = FaultRelay.now
            }
        }
    }

    /// Writes `bytes` onwards as the fault says; false when the connection is over for this pump.
    private func forward(_ bytes: [UInt8], _ link: Link, _ direction: Direction, _ state: inout PumpState) -> Bool {
        let destination = direction == .upstream ? link.upstream : link.client
        switch fault {
        case .segment(let maxSegment, let delay):
            var offset = 0
            while offset < bytes.count {
                let size = min(bytes.count - offset, 1 + Int(state.generator.next() % UInt64(max(1, maxSegment))))
                if delay > 0 { pause(delay) }
                guard write(Array(bytes[offset..<offset + size]), to: destination, direction) else { return false }
                offset += size
            }
            return true
        case .stall(let after, let faultDirection, let duration) where faultDirection == direction && !state.fired:
            let (head, tail) = split(bytes, at: after - state.forwarded)
            guard write(head, to: destination, direction) else { return false }
            state.forwarded += head.count
            guard state.forwarded >= after else { return true }
            state.fired = true
            update { $0.faultsFired += 1 }
            pause(duration)
            return write(tail, to: destination, direction)
        case .reset(let after, let faultDirection) where faultDirection == direction,
            .close(let after, let faultDirection) where faultDirection == direction:
            let (head, _) = split(bytes, at: after - state.forwarded)
            guard write(head, to: destination, direction) else { return false }
            state.forwarded += head.count
            guard state.forwarded >= after else { return true }
            if case .reset = fault { resetClient(link) } else { finClient(link) }
            return false
        case .deadPeer(let after):
            if direction == .upstream {
                guard write(bytes, to: destination, direction) else { return false }
                return true
            }
            let (head, _) = split(bytes, at: after - state.forwarded)
            guard write(head, to: destination, direction) else { return false }
            state.forwarded += head.count
            guard state.forwarded >= after else { return true }
            goSilent(link)
            return false
        case .truncateTLS(let afterRecordBytes, let prefix) where direction == .downstream:
            let (head, records) = split(bytes, at: prefix - state.forwarded)
            guard write(head, to: destination, direction) else { return false }
            state.forwarded += head.count
            state.pendingRecord += records
            while state.pendingRecord.count >= 5 {
                let length = Int(state.pendingRecord[3]) << 8 | Int(state.pendingRecord[4])
                guard state.pendingRecord.count >= 5 + length else { break }
                let record = Array(state.pendingRecord[0..<5 + length])
                state.pendingRecord.removeFirst(5 + length)
                guard write(record, to: destination, direction) else { return false }
                state.forwarded += record.count
                if state.forwarded - prefix >= afterRecordBytes {
                    finClient(link)
                    return false
                }
            }
            return true
        case .bandwidth(let rate, let burst):
            var offset = 0
            while offset < bytes.count {
                let now = FaultRelay.now
                state.tokens = min(Double(burst), state.tokens + Double(rate) * (now - state.filled))
                state.filled = now
                let wanted = min(bytes.count - offset, burst)
                if state.tokens < Double(wanted) {
                    // The link's pace, not synchronisation: the time until the bucket holds `wanted`.
                    pause((Double(wanted) - state.tokens) / Double(rate))
                    if isStopping { return false }
                    continue
                }
                guard write(Array(bytes[offset..<offset + wanted]), to: destination, direction) else { return false }
                state.tokens -= Double(wanted)
                offset += wanted
            }
            return true
        default:
            return write(bytes, to: destination, direction)
        }
    }

    private func split(_ bytes: [UInt8], at index: Int) -> ([UInt8], [UInt8]) {
        let cut = max(0, min(bytes.count, index))
        return (Array(bytes[0..<cut]), Array(bytes[cut...]))
    }

    private func write(_ bytes: [UInt8], to fd: Int32, _ direction: Direction) -> Bool {
        guard !bytes.isEmpty else { return true }
        do {
            try RawSocket.writeAll(fd, Data(bytes))
        } catch {
            return false
        }
        update {
            $0.forwarded[direction, default: 0] += bytes.count
            $0.writes[direction, default: 0] += 1
        }
        return true
    }

    /// Waits (briefly) until the client's send queue has gone out, so that a reset does not discard
    /// bytes the test expects the client to have.
    private func drainSendQueue(_ fd: Int32) {
        let deadline = Date(timeIntervalSinceNow: 2)
        var queued: Int32 = 0
        while ioctl(fd, UInt(TIOCOUTQ), &queued) == 0 && queued > 0 && Date() < deadline {
            sched_yield()
        }
    }

    private func resetClient(_ link: Link) {
        guard move(link, to: .done) else { return }
        drainSendQueue(link.client)
        update { $0.faultsFired += 1 }
        sendReset(link.client)
        shutdown(link.upstream, Int32(SHUT_RDWR))
    }

    /// FIN to the client and the peer's connection shut; the upstream pump then reads the client's
    /// bytes and drops them until it closes, so that nothing unread turns a close into a reset.
    private func finClient(_ link: Link) {
        guard move(link, to: .draining) else { return }
        shutdown(link.client, Int32(SHUT_WR))
        shutdown(link.upstream, Int32(SHUT_RDWR))
        update { $0.faultsFired += 1 }
    }

    /// Forwards nothing more either way, both connections left open until the relay stops (the
    /// client's bytes stay unread: a dead host acknowledges nothing either).
    private func goSilent(_ link: Link) {
        guard move(link, to: .silent) else { return }
        update { $0.faultsFired += 1 }
    }
}

extension SocketStreamsTestCase {
    /// A fault relay to 127.0.0.1:`upstreamPort`, stopped after the test.
    package func startRelay(to upstreamPort: Int, fault: FaultRelay.Fault) throws -> FaultRelay {
        let relay = try FaultRelay(upstreamPort: upstreamPort, fault: fault)
        addCleanup { relay.stop() }
        return relay
    }
}

extension FaultRelay {
    /// Seconds on the monotonic clock, for measuring how long a fault held things up.
    package static var now: Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
