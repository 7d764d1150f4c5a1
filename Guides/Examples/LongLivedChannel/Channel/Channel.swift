// A long-lived client connection: requests matched to replies by sequence number, heartbeats, and
// reconnecting with back-off. One `FramedConnection` at a time; when it ends, requests written to it
// fail (the server may or may not have acted on them: only the caller knows whether resending is
// safe), requests made while disconnected wait for the next connection, and a timer starts the next
// attempt.
//
//     idle ──start()──▶ connecting(attempt n) ──ready──▶ connected
//                           ▲          │                      │
//                     timer │          │ failed               │ lost
//                           │          ▼                      │
//                        waiting(attempt n + 1) ◀─────────────┘ (attempt 1 after a loss)
//
//     close(), from any state ──▶ closed
import Foundation
import SocketStreams

/// What happened to a `Channel`'s connection, for logging.
public enum ChannelEvent: Equatable, Sendable {
    /// Connected, on attempt `attempt` since the channel started or last lost its connection.
    case connected(attempt: Int)
    /// Attempt `attempt` failed.
    case connectFailed(attempt: Int, ChannelError)
    /// The connection was lost; requests in flight fail with the same error.
    case disconnected(ChannelError)
    /// Attempt `attempt` starts in `delay` seconds.
    case willReconnect(attempt: Int, delay: TimeInterval)
}

/// A client connection that stays up: it reconnects when the connection is lost, sends heartbeats to
/// notice a peer that stopped answering, and matches replies to requests by sequence number.
///
/// Confined to one thread: create it, call it, close it and release it on the thread of the run loop
/// given to `init`, which must be running; every callback comes on that thread.
public final class Channel {
    /// Timing settings.
    public struct Configuration: Sendable {
        /// Seconds between heartbeats while connected.
        public var heartbeatInterval: TimeInterval = 1
        /// Heartbeats in a row that go unanswered before the connection is declared dead. Any frame
        /// from the peer counts as an answer.
        public var missedHeartbeatLimit = 3
        /// Delays between connection attempts.
        public var backoff = Backoff(base: 0.1, cap: 30)
        /// The longest frame accepted from the peer.
        public var maxFrameLength = FrameDecoder.defaultMaxFrameLength

        /// The defaults: a heartbeat a second, 3 missed allowed, back-off from 0.1 s up to 30 s.
        public init() {}
    }

    /// What a request gets: the reply's body, or why there is none.
    public typealias Completion = (Result<[UInt8], ChannelError>) -> Void

    private enum State {
        case idle
        case connecting(FramedConnection, attempt: Int)
        case connected(FramedConnection)
        case waiting(any ChannelTimer)
        case closed
    }

    /// Called for each connection event, on the channel's thread.
    public var onEvent: ((ChannelEvent) -> Void)?
    /// Heartbeats in a row the peer has not answered so far.
    public private(set) var missedHeartbeats = 0
    /// Pongs received since the channel started (for logging and tests).
    public private(set) var answeredHeartbeats = 0

    private let host: String
    private let port: Int
    private let configuration: Configuration
    private let runLoop: RunLoop
    private let clock: any ChannelClock
    private var random: AnyRandom
    private var state = State.idle
    private var nextSequence: UInt32 = 1
    private var waitingForReply: [UInt32: Completion] = [:]
    private var unsent: [Message] = []  // requests made while not connected
    private var written: [UInt32] = []  // requests handed to the current connection
    private var heartbeat: (any ChannelTimer)?
    private var heartbeatUnanswered = false

    /// A channel to `host`:`port` whose streams and timers run on `runLoop`. Call `start()` to connect.
    /// `clock` and `random` are for tests: by default timers run on `runLoop` and jitter is random.
    public init(
        host: String, port: Int, runLoop: RunLoop = .current, configuration: Configuration = Configuration(),
        clock: (any ChannelClock)? = nil, random: any RandomNumberGenerator = SystemRandomNumberGenerator()
    ) {
        self.host = host
        self.port = port
        self.runLoop = runLoop
        self.configuration = configuration
        self.clock = clock ?? RunLoopClock(runLoop: runLoop)
        self.random = AnyRandom(base: random)
    }

    /// Releasing the channel closes it (its connection would otherwise keep itself open).
    deinit {
        close()
    }

    /// Makes the first connection attempt.
    public func start() {
        guard case .idle = state else { return }
        connect(attempt: 1)
    }

    /// Sends a request; `completion` gets the reply with the same sequence number, or the error that
    /// ended the connection it was written to. Made while disconnected, it waits for the next connection.
    /// - Returns: The request's sequence number.
    @discardableResult
    public func request(_ body: [UInt8], completion: @escaping Completion) -> UInt32 {
        let sequence = nextSequence
        nextSequence &+= 1
        let message = Message(.request, sequence: sequence, body: body)
        switch state {
        case .closed:
            completion(.failure(.closed))
            return sequence
        case .connected(let connection):
            waitingForReply[sequence] = completion
            write(message, to: connection)
        default:
            waitingForReply[sequence] = completion
            unsent.append(message)
        }
        return sequence
    }

    /// Closes the connection and stops reconnecting; every request still waiting fails with `.closed`.
    public func close() {
        switch state {
        case .connecting(let connection, _), .connected(let connection): connection.close()
        case .waiting(let timer): timer.cancel()
        case .idle, .closed: break
        }
        state = .closed
        stopHeartbeats()
        unsent = []
        written = []
        let failed = waitingForReply
        waitingForReply = [:]
        for (_, completion) in failed.sorted(by: { $0.key < $1.key }) { completion(.failure(.closed)) }
    }

    // MARK: connecting

    private func connect(attempt: Int) {
        let pair = createStreamPair(host: host, port: port)
        let connection = FramedConnection(input: pair.input, output: pair.output, maxFrameLength: configuration.maxFrameLength)
        connection.onReady = { [weak self, unowned connection] in self?.ready(connection) }
        connection.onFrame = { [weak self] payload in self?.received(payload) }
        connection.onClose = { [weak self, unowned connection] error in self?.ended(connection, error) }
        state = .connecting(connection, attempt: attempt)
        connection.open(in: runLoop)
    }

    private func ready(_ connection: FramedConnection) {
        guard case .connecting(let current, let attempt) = state, current === connection else { return }
        state = .connected(connection)
        let queued = unsent
        unsent = []
        for message in queued { write(message, to: connection) }
        startHeartbeats()
        onEvent?(.connected(attempt: attempt))
    }

    private func write(_ message: Message, to connection: FramedConnection) {
        written.append(message.sequence)
        connection.send(message.payload)
    }

    /// The connection or the attempt ended: schedule the next attempt (first, so that callbacks see
    /// the channel disconnected), report it, and fail the requests that were written to it.
    private func ended(_ connection: FramedConnection, _ error: ChannelError) {
        switch state {
        case .connecting(let current, let attempt) where current === connection:
            let delay = scheduleAttempt(attempt + 1)
            onEvent?(.connectFailed(attempt: attempt, error))
            if case .waiting = state { onEvent?(.willReconnect(attempt: attempt + 1, delay: delay)) }
        case .connected(let current) where current === connection:
            stopHeartbeats()
            let delay = scheduleAttempt(1)
            let lost = written
            written = []
            onEvent?(.disconnected(error))
            for sequence in lost { waitingForReply.removeValue(forKey: sequence)?(.failure(error)) }
            if case .waiting = state { onEvent?(.willReconnect(attempt: 1, delay: delay)) }  // unless a callback closed it
        default:
            break
        }
    }

    /// Starts the timer for attempt `attempt`; returns its delay.
    private func scheduleAttempt(_ attempt: Int) -> TimeInterval {
        let delay = configuration.backoff.delay(beforeAttempt: attempt, using: &random)
        state = .waiting(clock.schedule(after: delay) { [weak self] in self?.connect(attempt: attempt) })
        return delay
    }

    // MARK: receiving

    private func received(_ payload: [UInt8]) {
        guard case .connected(let connection) = state else { return }
        guard let message = Message(payload: payload) else {
            connection.close()
            return ended(connection, .badFrame("not a message"))
        }
        // Anything from the peer shows it is alive.
        heartbeatUnanswered = false
        missedHeartbeats = 0
        switch message.kind {
        case .reply:
            written.removeAll { $0 == message.sequence }
            waitingForReply.removeValue(forKey: message.sequence)?(.success(message.body))
        case .ping:
            connection.send(Message(.pong, sequence: message.sequence).payload)
        case .pong:
            answeredHeartbeats += 1
        case .request:
            break  // this end serves no requests
        }
    }

    // MARK: heartbeats

    private func startHeartbeats() {
        heartbeatUnanswered = false
        missedHeartbeats = 0
        scheduleHeartbeat()
    }

    private func stopHeartbeats() {
        heartbeat?.cancel()
        heartbeat = nil
    }

    private func scheduleHeartbeat() {
        heartbeat = clock.schedule(after: configuration.heartbeatInterval) { [weak self] in self?.beat() }
    }

    /// Every interval: count the last ping as missed if nothing came since, give up at the limit,
    /// otherwise send the next ping.
    private func beat() {
        guard case .connected(let connection) = state else { return }
        if heartbeatUnanswered {
            missedHeartbeats += 1
            if missedHeartbeats >= configuration.missedHeartbeatLimit {
                connection.close()
                return ended(connection, .heartbeatsMissed(missedHeartbeats))
            }
        }
        heartbeatUnanswered = true
        connection.send(Message(.ping, sequence: 0).payload)
        scheduleHeartbeat()
    }
}

/// Lets a stored `any RandomNumberGenerator` be passed where a concrete generator is expected.
private struct AnyRandom: RandomNumberGenerator {
    var base: any RandomNumberGenerator
    mutating func next() -> UInt64 { base.next() }
}
