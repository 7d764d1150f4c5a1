// The pair's lifecycle as a value with no I/O and no locks: one transition function from (state,
// event) to the next state and the action the connection carries out, so every legal move is in one
// switch and tested as a table (PairLifecycleTests). The connection holds one, under its lock.
//
//   idle ──open──▶ (start) ──dial──▶ connecting ──tcpUp──▶ negotiating ──stagesDone──▶ live
//     │                                   │   (no stages: straight to live)  ▲            │
//     │  (a native socket: tcpUp from idle)                                  └─stageAdded─┘ (STARTTLS)
//     └──── fail / scheduleFailed ───────┴───── fail / deadlinePassed ──────┴── fail ──▶ failed
//   every state but closed ──bothHalvesGone──▶ closed
//
// The connector (`Dial`) and the error (`Failure`) are type parameters so that the table tests run
// with plain values; the connection uses `PairLifecycle<Connector, NSError>`. An event a state cannot
// see (an illegal move) traps in debug builds and changes nothing in release builds.

struct PairLifecycle<Dial, Failure> {
    enum State {
        case idle
        /// The connector resolves and dials the first hop.
        case connecting(Dial)
        /// TCP is up and the handshake stages run.
        case negotiating
        case live
        case failed(Failure)
        /// Both halves are gone.
        case closed
    }

    enum Event {
        /// A half's first `open()`.
        case open
        /// The connector was made and starts (the open's home and deadline are set).
        case dial(Dial)
        /// The connector reports TCP up.
        case connected
        /// The socket is ready (connected, or a native socket adopted), with or without stages to run.
        case tcpUp(stages: Bool)
        /// A handshake stage was added (or TLS set on a live plain pair).
        case stageAdded
        /// The last stage finished.
        case stagesDone
        /// A connect, a stage, a read or a write failed.
        case fail(Failure)
        /// The connector gave up.
        case connectFailed
        /// The open's deadline (`connectTimeoutKey`) passed.
        case deadlinePassed
        /// A half could not be scheduled (no fd for its run loop source or queue).
        case scheduleFailed(Failure)
        /// Both halves were closed or released.
        case bothHalvesGone
    }

    /// What the connection does after a move.
    enum Action {
        case none
        /// Begin the open: adopt a native socket, or arm the deadline and make the connector.
        case start
        /// Signal `openCompleted` to the half being opened (handshakes still run).
        case completeOpen
        /// Signal `openCompleted` to the half being opened on a live pair, and watch its space.
        case completeOpenLive
        /// Signal the pair's failure to the half being opened.
        case reportFailure(Failure)
        /// Take the connector's socket.
        case adopt
        /// A connect that finished after the pair failed or closed: close its socket.
        case discard
        /// Run the stages (`beginNegotiation`).
        case negotiate
        /// Has-events flow (`goLive`).
        case goLive
        /// Keep the stage for when the stages run.
        case queueStage
        /// The pair failed or closed: no stage any more.
        case refuse
        /// Fail the pair (`fail`), which moves it on.
        case fail
        /// The deadline passed while dialling: cancel the connector and fail with ETIMEDOUT.
        case timeOutConnect(Dial)
        /// The deadline passed during a handshake: fail with ETIMEDOUT.
        case timeOutHandshake
        /// The pair is failed now: cancel the connector if there was one, and tell the halves;
        /// `wasLive`: the input may keep reading what arrived first.
        case failed(wasLive: Bool, cancel: Dial?)
        /// The pair is closed now: cancel the connector if there was one, and give everything back.
        case tearDown(cancel: Dial?)
    }

    private(set) var state: State = .idle

    /// Applies `event`: the next state, and what to do. An illegal move traps in debug builds; in
    /// release builds it changes nothing and asks for nothing.
    @inline(__always)
    mutating func handle(_ event: Event) -> Action {
        guard let (next, action) = Self.transition(state, event) else {
            assertionFailure("illegal lifecycle move: \(Self.name(of: state)) + \(event)")
            return .none
        }
        if let next { state = next }
        return action
    }

    /// The transition table: the next state (nil: unchanged) and the action, or nil for a move that
    /// cannot happen.
    static func transition(_ state: State, _ event: Event) -> (next: State?, action: Action)? {
        switch (state, event) {
        case (.idle, .open): return (nil, .start)
        case (.connecting, .open), (.closed, .open): return (nil, .none)
        case (.negotiating, .open): return (nil, .completeOpen)
        case (.live, .open): return (nil, .completeOpenLive)
        case (.failed(let error), .open): return (nil, .reportFailure(error))

        case (.idle, .dial(let dial)): return (.connecting(dial), .none)

        case (.connecting, .connected): return (nil, .adopt)
        case (.failed, .connected), (.closed, .connected): return (nil, .discard)

        case (.idle, .tcpUp(let stages)), (.connecting, .tcpUp(let stages)):
            return stages ? (.negotiating, .negotiate) : (.live, .goLive)

        case (.idle, .stageAdded), (.connecting, .stageAdded), (.negotiating, .stageAdded): return (nil, .queueStage)
        case (.live, .stageAdded): return (.negotiating, .negotiate)
        case (.failed, .stageAdded), (.closed, .stageAdded): return (nil, .refuse)

        case (.negotiating, .stagesDone): return (.live, .goLive)

        case (.connecting(let dial), .fail(let error)): return (.failed(error), .failed(wasLive: false, cancel: dial))
        case (.live, .fail(let error)): return (.failed(error), .failed(wasLive: true, cancel: nil))
        case (.idle, .fail(let error)), (.negotiating, .fail(let error)), (.failed, .fail(let error)):
            return (.failed(error), .failed(wasLive: false, cancel: nil))
        case (.closed, .fail): return (nil, .failed(wasLive: false, cancel: nil))

        case (.connecting, .connectFailed): return (nil, .fail)
        case (_, .connectFailed): return (nil, .none)

        case (.connecting(let dial), .deadlinePassed): return (nil, .timeOutConnect(dial))
        case (.negotiating, .deadlinePassed): return (nil, .timeOutHandshake)
        case (_, .deadlinePassed): return (nil, .none)

        case (.idle, .scheduleFailed(let error)): return (.failed(error), .none)
        case (.connecting, .scheduleFailed), (.negotiating, .scheduleFailed), (.live, .scheduleFailed): return (nil, .fail)
        case (.failed, .scheduleFailed), (.closed, .scheduleFailed): return (nil, .none)

        case (.connecting(let dial), .bothHalvesGone): return (.closed, .tearDown(cancel: dial))
        case (.idle, .bothHalvesGone), (.negotiating, .bothHalvesGone), (.live, .bothHalvesGone), (.failed, .bothHalvesGone):
            return (.closed, .tearDown(cancel: nil))

        default:
            return nil
        }
    }

    // MARK: questions the connection asks

    var isIdle: Bool {
        if case .idle = state { return true }
        return false
    }

    var isNegotiating: Bool {
        if case .negotiating = state { return true }
        return false
    }

    var isLive: Bool {
        if case .live = state { return true }
        return false
    }

    /// Connecting or negotiating: an open is in progress.
    var isOpening: Bool {
        switch state {
        case .connecting, .negotiating: return true
        default: return false
        }
    }

    /// The connector, while connecting.
    var dial: Dial? {
        if case .connecting(let dial) = state { return dial }
        return nil
    }

    /// The state's name, as the diagram in Guides/Architecture.md spells it.
    static func name(of state: State) -> String {
        switch state {
        case .idle: return "idle"
        case .connecting: return "connecting"
        case .negotiating: return "negotiating"
        case .live: return "live"
        case .failed: return "failed"
        case .closed: return "closed"
        }
    }
}

extension PairLifecycle: Sendable where Dial: Sendable, Failure: Sendable {}
extension PairLifecycle.State: Sendable where Dial: Sendable, Failure: Sendable {}
extension PairLifecycle.Event: Sendable where Dial: Sendable, Failure: Sendable {}
extension PairLifecycle.Action: Sendable where Dial: Sendable, Failure: Sendable {}
