// The open of a pair, from its first `open()` (or a stage added to a live pair, STARTTLS) until it is
// live, failed or closed: where its waits run (its home reactor), its deadline, and the handshake
// stages with the runner that drives them over the transport.
//
// The open's waits (the connector's, a stage's readiness, the deadline) run on a *home* reactor: the
// run loop and mode the pair's streams are scheduled on when that is one place, so it completes
// there with no thread hop, as CFNetwork schedules its connect on the stream's run loops; otherwise
// the stream thread. A blocking `read`/`write`, a status poll, or a schedule change that would leave
// the open waiting on a run loop nobody may run moves it to the stream thread first, and later opens
// (a STARTTLS) start there too. `connectTimeoutKey` bounds the whole open, stages included, on the
// same home.
//
// A value its connection owns and calls only with the connection's lock held (as `PairRegistrations`).
// It never calls back into the connection: it says what happened (a stage's outcome, the reactor the
// open left, whether the deadline really passed), and the connection carries that out through its
// lifecycle (`PairLifecycle`), which alone decides the pair's state.

import Foundation

/// A pair's open: its home, deadline and stages. Guarded by the owning connection's lock.
struct PairOpen {
    /// Where the open's waits run, and where the next open will: one word (the reference's spare bits
    /// hold the case), as the connection's reference to its home was.
    private enum Place {
        /// No open runs; the next picks its home from where the halves are scheduled.
        case unset
        /// No open runs; the next runs on the stream thread (a blocking call or a poll moved one there).
        case streamThread
        /// An open runs here, with a registry use held.
        case home(Reactor)
        /// An open runs here, with a registry use held; the next one runs on the stream thread.
        case homeThenStreamThread(Reactor)
    }

    private var place = Place.unset
    /// The deadline and stages, when the open has any: neither an idle pair nor a plain connect
    /// carries them.
    private var state: OpenState?

    /// What a run of the stages came to.
    enum StageOutcome {
        /// The running stage (or a flush before it) waits for `interest`.
        case wait
        case failed(StreamFailure)
        /// No stage is left: the pair may go live.
        case done
    }

    /// Where the open's waits run; nil when no open is in progress.
    var home: Reactor? {
        switch place {
        case .home(let reactor), .homeThenStreamThread(let reactor): return reactor
        case .unset, .streamThread: return nil
        }
    }

    /// What the running stage (or a flush before it) waits for.
    var interest: Interest { state?.interest ?? [] }

    /// Stages still to run, in order; the first one runs while the pair is negotiating.
    var stages: [any HandshakeStage] { state?.stages ?? [] }

    /// How a failure or timeout of the running stage names it.
    var stageName: String { state?.stages.first?.name ?? "handshake" }

    private var someState: OpenState {
        mutating get {
            if let state { return state }
            let created = OpenState()
            state = created
            return created
        }
    }

    /// Adds a stage to run after those already queued.
    mutating func queue(_ stage: any HandshakeStage) { someState.stages.append(stage) }

    /// Adds the stages the settings ask for at TCP up, before any queued meanwhile.
    mutating func queueFirst(_ configured: [any HandshakeStage]) {
        if !configured.isEmpty { someState.stages.insert(contentsOf: configured, at: 0) }
    }

    /// A stage starts: it has asked for nothing yet.
    mutating func clearInterest() { state?.interest = [] }

    /// Starts an open: picks its home from where the pair's halves are scheduled (`halves`, read in
    /// place). Inlined into its one caller, which would otherwise pass what it reads.
    @inline(__always)
    mutating func begin(scheduledOn halves: borrowing FixedPair<HalfState>) throws(SystemError) {
        // The open's waits run where the pair's events will be delivered, when that is one place.
        // Unscheduled, or scheduled in several places (any of which may be the one that runs), they
        // run on the stream thread, which always runs.
        var single: Reactor?
        var places = 0
        for half in [Half.input, .output] where !halves[half].gone {
            for reactor in halves[half].reactors where reactor !== single {
                single = reactor
                places += 1
            }
        }
        let home: Reactor
        if places == 1, case .unset = place, let single {
            home = single
            place = .home(home)
        } else {
            home = try StreamThread.reactor()
            place = .homeThenStreamThread(home)
        }
        ReactorRegistry.shared.retain(home)
    }

    /// Arms the open's deadline (`connectTimeoutKey`), `seconds` from now on `time`'s clock, on its
    /// home. `alarm` makes what the deadline runs: made only for an open that has one (it holds the
    /// connection weakly, and a weak reference costs the connection a side table).
    mutating func armDeadline(after seconds: Double, time: any TimeSource, alarm: () -> @Sendable () -> Void) {
        guard let home else { return }
        let nanoseconds = seconds.saturatingNanoseconds
        let state = someState
        state.time = time
        state.deadline = time.now() &+ nanoseconds
        state.deadlineTimer = time.schedule(after: nanoseconds, on: home, alarm())
    }

    /// The deadline's timer fired: true if it is still armed and its time has come (it is disarmed
    /// then), false for one cancelled or moved meanwhile.
    mutating func deadlinePassed() -> Bool {
        guard let state, state.deadlineTimer != nil, let time = state.time, time.now() >= state.deadline else { return false }
        state.deadlineTimer = nil
        return true
    }

    /// The open is over (live, failed or closed): its deadline and home go, with its stages when
    /// `dropStages` (a failure or a close), and with no stage left, the whole open state.
    mutating func end(dropStages: Bool = false) {
        if let state {
            if dropStages { state.stages.removeAll() }
            if let home, let timer = state.deadlineTimer, let time = state.time { time.cancel(timer, on: home) }
            state.deadlineTimer = nil
            if state.stages.isEmpty { self.state = nil }
        }
        switch place {
        case .home(let home):
            place = .unset
            ReactorRegistry.shared.release(home)
        case .homeThenStreamThread(let home):
            place = .streamThread
            ReactorRegistry.shared.release(home)
        case .unset, .streamThread:
            break
        }
    }

    /// Moves the open in progress to the stream thread, its deadline with it, so that it does not
    /// depend on some client run loop being run; later opens start there too. Returns the new home
    /// and the old one when it moved: the connection moves the connector and its registrations,
    /// then releases the old home's registry use.
    mutating func moveToStreamThread(alarm: () -> @Sendable () -> Void) -> (to: Reactor, from: Reactor)? {
        guard let old = home else { return nil }
        guard let target = try? StreamThread.reactor(), target !== old else {
            place = .homeThenStreamThread(old)
            return nil
        }
        ReactorRegistry.shared.retain(target)
        place = .homeThenStreamThread(target)
        if let state, let timer = state.deadlineTimer, let time = state.time {
            time.cancel(timer, on: old)
            let now = time.now()
            state.deadlineTimer = time.schedule(after: state.deadline > now ? state.deadline - now : 1, on: target, alarm())
        }
        return (target, old)
    }

    /// Runs the stages as far as they go over `transport`: first a flush of output the transport
    /// still holds, then the current stage; a finished stage hands its transport to the next.
    mutating func runStages(over transport: inout HeldTransport?) -> StageOutcome {
        while let held = transport, let stage = state?.stages.first {
            let current = held.active
            if current.hasPendingOutput {
                switch current.flush() {
                case .wouldBlock:
                    state?.interest = current.writeInterest
                    return .wait
                case .failed(let failure):
                    return .failed(failure)
                case .processed, .end:
                    continue
                }
            }
            switch stage.advance(over: held.base) {
            case .wait(let interest):
                state?.interest = interest
                return .wait
            case .failed(let failure):
                return .failed(failure)
            case .done(let next):
                transport = HeldTransport(next)
                state?.stages.removeFirst()
            }
        }
        return .done
    }
}

/// What only an open with a deadline or stages needs: allocated when a stage is added or a
/// deadline armed, dropped once the pair is live, failed or closed. Guarded by the connection's
/// lock, through its `PairOpen`.
final class OpenState {
    /// Stages still to run, in order.
    var stages: [any HandshakeStage] = []
    /// When the open deadline expires, on the clock it was armed with, and its timer on the open's home.
    var time: (any TimeSource)?
    var deadline: UInt64 = 0
    var deadlineTimer: UInt64?
    /// What the running stage (or a flush before it) waits for.
    var interest: Interest = []
}
