import Foundation
import SocketStreamsTestSupport
import LongLivedChannel
import SocketStreams
import XCTest

/// The long-lived-channel example's `Channel` (Guides/LongLivedChannel.md) against real peers on
/// loopback: replies matched by sequence number, a server that drops and restarts on the same port,
/// missed heartbeats, and back-off. The channel, its peers and the test share this thread's run loop;
/// time moves only when the test advances a `ManualClock`, and every wait has a deadline.
final class LongLivedChannelTests: SocketStreamsTestCase {
    /// What a channel reported, in order, and each request's outcome, by the request's text.
    final class Log {
        var events: [ChannelEvent] = []
        var outcomes: [String: Result<[UInt8], ChannelError>] = [:]
        /// The requests in the order their outcomes came.
        var order: [String] = []

        func text(_ request: String) -> String? {
            switch outcomes[request] {
            case .success(let body): return String(decoding: body, as: UTF8.self)
            case .failure(let error): return "error: \(error)"
            case nil: return nil
            }
        }

        var connections: Int { events.filter { if case .connected = $0 { return true } else { return false } }.count }
        var failedAttempts: Int { events.filter { if case .connectFailed = $0 { return true } else { return false } }.count }
        var losses: Int { events.filter { if case .disconnected = $0 { return true } else { return false } }.count }
    }

    /// Heartbeats every 10 s (of the manual clock), 3 may be missed, back-off from 1 s up to 8 s.
    func configuration() -> Channel.Configuration {
        var configuration = Channel.Configuration()
        configuration.heartbeatInterval = 10
        configuration.missedHeartbeatLimit = 3
        configuration.backoff = Backoff(base: 1, cap: 8)
        return configuration
    }

    /// A started channel to `port` on a manual clock, logging into `log`; closed after the test.
    func makeChannel(
        port: Int, clock: ManualClock, log: Log, random: any RandomNumberGenerator = SplitMix64(seed: 1)
    ) -> Channel {
        let channel = Channel(host: "127.0.0.1", port: port, configuration: configuration(), clock: clock, random: random)
        channel.onEvent = { log.events.append($0) }
        addCleanup { channel.close() }
        channel.start()
        return channel
    }

    /// Sends `text` (unique in the test); its outcome goes to `log.outcomes[text]`. Returns the sequence number.
    @discardableResult
    func ask(_ channel: Channel, _ text: String, _ log: Log) -> UInt32 {
        channel.request(Array(text.utf8)) { [weak log] result in
            log?.outcomes[text] = result
            log?.order.append(text)
        }
    }

    func testRepliesFindTheirRequestsWhateverOrderTheyComeIn() throws {
        // A peer that holds three requests, then answers them last first.
        let listener = try StreamListener(host: "127.0.0.1")
        addCleanup { listener.close() }
        listener.start(in: .current) { input, output in
            let connection = FramedConnection(input: input, output: output)
            var held: [Message] = []
            connection.onFrame = { [unowned connection] payload in
                guard let message = Message(payload: payload), message.kind == .request else { return }
                held.append(message)
                guard held.count == 3 else { return }
                for request in held.reversed() {
                    let body = Array("answer to ".utf8) + request.body
                    connection.send(Message(.reply, sequence: request.sequence, body: body).payload)
                }
            }
            connection.open(in: .current)
        }
        let log = Log()
        let channel = makeChannel(port: listener.port, clock: ManualClock(), log: log)
        let sequences = ["a", "b", "c"].map { ask(channel, $0, log) }
        XCTAssertEqual(sequences, [1, 2, 3])
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.outcomes.count == 3 }, "\(log.events)")
        XCTAssertEqual(log.order, ["c", "b", "a"])
        XCTAssertEqual(["a", "b", "c"].map(log.text), ["answer to a", "answer to b", "answer to c"])
        XCTAssertEqual(log.events, [.connected(attempt: 1)])
    }

    func testADroppedConnectionFailsRequestsInFlightAndTheChannelComesBackWhenTheServerDoes() throws {
        let clock = ManualClock()
        let log = Log()
        var server = try UppercaseServer(behaviour: .init(requestsBeforeFault: 1, fault: .drop))
        addCleanup { server.stop() }
        let port = server.port
        let channel = makeChannel(port: port, clock: clock, log: log)
        let one = ask(channel, "one", log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.outcomes["one"] != nil })
        XCTAssertEqual(log.text("one"), "ONE")
        // The server closes the connection when the second request arrives: that request fails.
        let two = ask(channel, "two", log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.outcomes["two"] != nil }, "\(log.events)")
        XCTAssertEqual(log.text("two"), "error: the peer closed the connection")
        guard case .willReconnect(attempt: 1, let firstDelay) = log.events.last else { return XCTFail("\(log.events)") }
        XCTAssertEqual(Array(log.events.prefix(2)), [.connected(attempt: 1), .disconnected(.peerClosed)])
        XCTAssertEqual(clock.pendingDelays.count, 1)
        XCTAssertEqual(clock.requestedDelays.last, firstDelay)

        // The server goes away. A request made now waits for the next connection.
        server.stop()
        let three = ask(channel, "three", log)
        clock.advance(by: firstDelay)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.failedAttempts == 1 }, "\(log.events)")
        XCTAssertEqual(log.events.suffix(2).first, .connectFailed(attempt: 1, .streamError("Connection refused")))
        XCTAssertNil(log.outcomes["three"])

        // It comes back on the same port; the next attempt connects and the waiting request goes out.
        server = try UppercaseServer(port: port)
        guard case .willReconnect(attempt: 2, let secondDelay) = log.events.last else { return XCTFail("\(log.events)") }
        clock.advance(by: secondDelay)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.outcomes["three"] != nil }, "\(log.events)")
        XCTAssertEqual(log.text("three"), "THREE")
        XCTAssertEqual(log.events.last, .connected(attempt: 2))
        let four = ask(channel, "four", log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.outcomes["four"] != nil })
        XCTAssertEqual(log.text("four"), "FOUR")
        XCTAssertEqual([one, two, three, four], [1, 2, 3, 4])
        XCTAssertEqual(log.losses, 1)
    }

    func testHeartbeatsAnsweredKeepTheConnection() throws {
        let clock = ManualClock()
        let log = Log()
        let server = try UppercaseServer()
        addCleanup { server.stop() }
        let channel = makeChannel(port: server.port, clock: clock, log: log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.connections == 1 })
        for beat in 1...10 {
            clock.advance(by: 10)  // a ping goes out
            XCTAssertTrue(runUntil(timeout: shortTimeout) { channel.answeredHeartbeats == beat }, "beat \(beat)")
            XCTAssertEqual(channel.missedHeartbeats, 0)
        }
        XCTAssertEqual(log.events, [.connected(attempt: 1)])
    }

    func testMissedHeartbeatsDeclareTheConnectionDeadAndFailRequestsInFlight() throws {
        let clock = ManualClock()
        let log = Log()
        // Answers nothing from the first request on, and keeps the connection open.
        let server = try UppercaseServer(behaviour: .init(requestsBeforeFault: 0, fault: .silence))
        addCleanup { server.stop() }
        let channel = makeChannel(port: server.port, clock: clock, log: log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.connections == 1 })
        ask(channel, "anyone there?", log)
        clock.advance(by: 10)  // the first ping
        XCTAssertEqual(channel.missedHeartbeats, 0)
        for missed in 1...2 {
            clock.advance(by: 10)
            XCTAssertEqual(channel.missedHeartbeats, missed)
            XCTAssertEqual(log.losses, 0)
        }
        clock.advance(by: 10)  // the third missed: dead
        XCTAssertEqual(Array(log.events.dropLast()), [.connected(attempt: 1), .disconnected(.heartbeatsMissed(3))])
        XCTAssertEqual(log.text("anyone there?"), "error: no answer to 3 heartbeats")
        // And it reconnects (the server still accepts).
        guard case .willReconnect(attempt: 1, let delay) = log.events.last else { return XCTFail("\(log.events)") }
        clock.advance(by: delay)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.connections == 2 }, "\(log.events)")
        XCTAssertEqual(channel.missedHeartbeats, 0)
    }

    func testReconnectDelaysComeFromTheBackoffAndTheRandomSource() throws {
        let clock = ManualClock()
        let log = Log()
        let port = try RawSocket.unusedPort()
        _ = makeChannel(port: port, clock: clock, log: log, random: SplitMix64(seed: 42))
        var delays: [TimeInterval] = []
        for attempt in 1...8 {
            XCTAssertTrue(runUntil(timeout: shortTimeout) { log.failedAttempts == attempt }, "\(log.events)")
            guard case .willReconnect(attempt + 1, let delay) = log.events.last else { return XCTFail("\(log.events)") }
            XCTAssertEqual(clock.pendingDelays.count, 1)
            XCTAssertEqual(clock.requestedDelays.last, delay)  // the reported delay is the one scheduled
            delays.append(delay)
            clock.advance(by: delay)
        }
        // The same draws from the same seed, attempts 2 to 9.
        var random = SplitMix64(seed: 42)
        let backoff = configuration().backoff
        XCTAssertEqual(delays, (2...9).map { backoff.delay(beforeAttempt: $0, using: &random) })
        for (index, delay) in delays.enumerated() {
            XCTAssertLessThanOrEqual(delay, backoff.ceiling(beforeAttempt: index + 2))
        }
    }

    func testAPeerSendingAnOversizedFrameIsDropped() throws {
        let server = try startRawServer { connection in
            try? connection.write(Data([0xFF, 0xFF, 0xFF, 0xFF]))
            _ = try? connection.readToEOF()
        }
        let log = Log()
        _ = makeChannel(port: server.port, clock: ManualClock(), log: log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.losses == 1 }, "\(log.events)")
        let limit = FrameDecoder.defaultMaxFrameLength
        XCTAssertEqual(log.events[1], .disconnected(.badFrame("a frame of 4294967295 bytes (the limit is \(limit))")))
    }

    /// The guide's way to put a channel on the stream thread: make it, use it and release it in
    /// blocks run there with `onThread(of:_:)`. The server runs there too; real timers (a `RunLoopClock`) this time.
    func testAChannelLivesOnTheStreamThread() throws {
        let server = try UppercaseServer(runLoop: .socketStreams)
        addCleanup { server.stop() }
        let port = server.port
        let holder = UncheckedBox<Channel?>(nil)  // touched only on the stream thread
        let reply = Locked<String?>(nil)
        let answered = Signal()
        onThread(of: .socketStreams) {
            let channel = Channel(host: "127.0.0.1", port: port, runLoop: .socketStreams)
            holder.value = channel
            channel.start()
            channel.request(Array("from the stream thread".utf8)) { result in
                reply.value = (try? result.get()).map { String(decoding: $0, as: UTF8.self) } ?? "\(result)"
                answered.raise()
            }
        }
        XCTAssertTrue(answered.wait(timeout: shortTimeout), "no reply")
        XCTAssertEqual(reply.value, "FROM THE STREAM THREAD")
        let released = Signal()
        onThread(of: .socketStreams) {
            holder.value = nil  // closes it, on its own thread
            released.raise()
        }
        XCTAssertTrue(released.wait(timeout: shortTimeout))
    }

    func testClosingFailsWhatIsWaitingAndStopsReconnecting() throws {
        let clock = ManualClock()
        let log = Log()
        let channel = makeChannel(port: try RawSocket.unusedPort(), clock: clock, log: log)
        ask(channel, "queued", log)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { log.failedAttempts == 1 })
        channel.close()
        XCTAssertEqual(log.text("queued"), "error: the channel was closed")
        XCTAssertEqual(clock.pendingDelays, [])
        ask(channel, "late", log)
        XCTAssertEqual(log.text("late"), "error: the channel was closed")
    }
}

/// A `ChannelClock` that moves only when told.
final class ManualClock: ChannelClock {
    final class Entry: ChannelTimer {
        let deadline: TimeInterval
        let action: () -> Void
        var cancelled = false
        init(deadline: TimeInterval, action: @escaping () -> Void) {
            self.deadline = deadline
            self.action = action
        }
        func cancel() { cancelled = true }
    }

    private(set) var now: TimeInterval = 0
    /// Every delay asked for, in order.
    private(set) var requestedDelays: [TimeInterval] = []
    private var entries: [Entry] = []

    func schedule(after delay: TimeInterval, _ action: @escaping () -> Void) -> any ChannelTimer {
        requestedDelays.append(delay)
        let entry = Entry(deadline: now + delay, action: action)
        entries.append(entry)
        return entry
    }

    /// How far ahead each live timer is, soonest first.
    var pendingDelays: [TimeInterval] {
        entries.filter { !$0.cancelled }.map { $0.deadline - now }.sorted()
    }

    /// Moves time on by `interval`, running the timers that come due in deadline order (those they
    /// start included).
    func advance(by interval: TimeInterval) {
        let end = now + interval
        while let next = entries.filter({ !$0.cancelled && $0.deadline <= end }).min(by: { $0.deadline < $1.deadline }) {
            entries.removeAll { $0 === next }
            now = next.deadline
            next.action()
        }
        entries.removeAll { $0.cancelled }
        now = end
    }
}
