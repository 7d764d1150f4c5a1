// An `NWConnection`'s life as one value: its state, whether an attempt (an engine with a stream pair) is
// live, whether cancel was asked for, and what each event makes the connection do. Network.framework's
// transitions, decided here and nowhere else, so that they are tested as plain values
// (`ConnectionLifecycleTests`) and the connection only carries the actions out:
//
//     setup ─start→ preparing ─connected→ ready ─closed(e)→ failed(e)
//                    │  ↑                                     │
//     attemptFailed(e)  restart / network changed             │
//     (waitable)  ↓  │                                        │
//                 waiting(e)            attemptFailed(e) (TLS…) → failed(e)
//
//     any state ─cancel→ (the live attempt closed first) → cancelled, last; nothing after it
//
// A failed connect that Network.framework retries (refused, unreachable, timed out, a failed lookup:
// `NWError.isWaitable`) waits; it never fails by itself. `restart()` is ignored unless waiting.

/// What the connection does for an event, in order.
enum ConnectionAction: Equatable {
    /// Calls `stateUpdateHandler` with the state.
    case report(NWConnection.State)
    /// Starts an attempt: a new stream pair and engine for the endpoint.
    case beginAttempt
    /// Closes the live attempt (cancel): its close comes back as `attemptClosed`.
    case closeAttempt
    /// Completes every outstanding send and receive with the error (pending ones too).
    case failOutstanding(NWError)
}

/// An `NWConnection`'s state machine (see the file's header).
struct ConnectionLifecycle: Equatable {
    enum Event: Equatable {
        /// `start(queue:)`.
        case start
        /// The attempt's connection is up (TCP, then TLS).
        case connected
        /// The attempt ended: before `connected` a failed connect, after it the connection's end (nil
        /// only when closed for a cancel).
        case attemptClosed(NWError?)
        /// `restart()`, or the host's network changed.
        case restart
        /// `cancel()` or `forceCancel()`.
        case cancel
    }

    /// `NWConnection.State` without its error: compared on every send and receive, where comparing the
    /// enum with its payload went through the runtime.
    enum Phase: UInt8 {
        case setup, preparing, waiting, ready, failed, cancelled
    }

    private(set) var phase = Phase.setup
    /// The error of `.waiting` and `.failed`.
    private(set) var error = NWError.posix(.ECANCELED)
    /// An attempt is live: begun and not yet closed.
    private(set) var attempting = false
    private(set) var cancelRequested = false
    /// Whether a failed connect may wait and be tried again: false for a connection a listener
    /// accepted, which has no connect to repeat.
    let retries: Bool

    init(retries: Bool = true) {
        self.retries = retries
    }

    /// The state as Network.framework reports it.
    var state: NWConnection.State {
        switch phase {
        case .setup: .setup
        case .preparing: .preparing
        case .waiting: .waiting(error)
        case .ready: .ready
        case .failed: .failed(error)
        case .cancelled: .cancelled
        }
    }

    /// Whether sends and receives go straight to the live attempt's engine.
    var isReady: Bool { phase == .ready && !cancelRequested }

    mutating func handle(_ event: Event) -> [ConnectionAction] {
        if phase == .cancelled { return [] }
        switch event {
        case .start:
            guard phase == .setup, !cancelRequested else { return [] }
            phase = .preparing
            attempting = true
            return [.report(.preparing), .beginAttempt]
        case .connected:
            guard attempting, phase == .preparing else { return [] }
            if cancelRequested { return [.closeAttempt] }  // again: the cancel may have come before the attempt was made
            phase = .ready
            return [.report(.ready)]
        case .attemptClosed(let error):
            guard attempting else { return [] }
            attempting = false
            if cancelRequested { return cancelled() }
            let error = error ?? .posix(.ECANCELED)
            self.error = error
            if phase == .preparing, retries, error.isWaitable {
                phase = .waiting
                return [.report(state)]
            }
            phase = .failed
            return [.failOutstanding(error), .report(state)]
        case .restart:
            guard phase == .waiting, !cancelRequested, !attempting else { return [] }
            phase = .preparing
            attempting = true
            return [.report(.preparing), .beginAttempt]
        case .cancel:
            guard !cancelRequested else { return [] }
            cancelRequested = true
            if phase == .setup {
                phase = .cancelled  // never started: no queue to report on, nothing to complete
                return []
            }
            return attempting ? [.closeAttempt] : cancelled()
        }
    }

    private mutating func cancelled() -> [ConnectionAction] {
        phase = .cancelled
        return [.failOutstanding(.posix(.ECANCELED)), .report(.cancelled)]
    }
}
