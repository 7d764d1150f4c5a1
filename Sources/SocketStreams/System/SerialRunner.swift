import Glibc

/// "One runner at a time; whoever comes while it runs leaves a request, and the runner answers the
/// requests before it lets go": the one mechanism behind three places that must never run twice at
/// once for the same state.
///
/// - A dispatch queue's reactor (`QueuePerformer.perform`): its thread's `queue.sync` (or its dispatch
///   source), its posted wake-ups and its timers are separate work items, which a concurrent queue
///   runs side by side. A request goes round again.
/// - A pair's event delivery (`Connection.deliverEvents`): a pair scheduled on several run loops or
///   queues never has two callouts at once. A request (a bit per half) is handed back to that half's
///   reactors when the runner lets go, since the runner's thread may not be one the half is scheduled
///   on. The runner's own thread may enter again (a delegate that runs a run loop in its callout).
/// - The operations engine's pump (`StreamOperations`): a request made from a completion the pump is
///   delivering (a read queued in `didRead`) goes round again instead of pumping inside the pump.
///
/// A plain value: it is kept under its owner's lock, which every call must hold.
package struct SerialRunner {
    /// What `enter` found.
    package enum Entry {
        /// Nobody was running: the caller is the runner now, and must call `finishRound` until it
        /// returns nil.
        case run
        /// The caller's own thread is the runner (it re-entered from inside a round): allowed only
        /// where `reentrant` was passed; the caller runs without becoming the runner.
        case nested
        /// Another round is running: the request is recorded for the runner.
        case busy
    }

    package init() {}

    /// The runner's thread (`pthread_self()`), or 0.
    private var runner: UInt = 0
    /// Requests made while the runner ran, as bits the owner chooses.
    private var requests: UInt8 = 0

    /// Whether a round is running (on any thread).
    package var isRunning: Bool { runner != 0 }

    /// Whether the calling thread is the runner.
    package var isRunningHere: Bool { runner != 0 && runner == UInt(pthread_self()) }

    /// Becomes the runner, or leaves `request` for the one running. With `reentrant`, the runner's own
    /// thread gets `.nested` (and leaves no request); without, it is `.busy` like any other.
    package mutating func enter(request: UInt8 = 1, reentrant: Bool = false) -> Entry {
        let me = UInt(pthread_self())
        if runner == 0 {
            runner = me
            requests = 0
            return .run
        }
        if reentrant, runner == me { return .nested }
        requests |= request
        return .busy
    }

    /// The runner, after a round: the requests made meanwhile (cleared), or nil when there were none,
    /// in which case the runner has let go.
    package mutating func finishRound() -> UInt8? {
        assert(isRunningHere, "SerialRunner: a round finished on a thread that is not its runner")
        guard requests != 0 else {
            runner = 0
            return nil
        }
        defer { requests = 0 }
        return requests
    }

    /// The runner lets go whatever was requested, and returns the requests (cleared) for it to hand
    /// on.
    mutating func leave() -> UInt8 {
        assert(isRunningHere, "SerialRunner: left by a thread that is not its runner")
        runner = 0
        defer { requests = 0 }
        return requests
    }
}
