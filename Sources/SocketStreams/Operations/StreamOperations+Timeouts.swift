// The operations' timeouts: a timer on the owner for the first read and the first write that have
// one; the client may extend a timeout that passes (GCDAsyncSocket's shouldTimeout…ByExtending).
//
// A timeout per operation costs no timer operation while it does not change: the timer armed for
// one operation is kept for the next (see `Timeout`), so a connection that reads and writes with the
// same timeout arms a timer about once per timeout period, not twice per round trip (each arm and
// cancel is a lock and a heap operation in the reactor). An operation that becomes first
// adopts the armed timer when that fires no later than the operation's deadline; the timer, firing
// before the deadline, re-arms for the rest. A shorter timeout cancels and re-arms at once; a timer no
// operation adopted is cancelled when the pump lets go; closing cancels both.
//
// What a direction keeps (`Timeout`, 24 bytes): the timer's id, when it fires, and when the operation
// it times became first. The rest is derived. Which operation it times: the first, while the
// direction's `timing` bit is set (every removal of the first operation clears it, under the lock,
// and `updateTimers` ends every round, in the same critical section). The operation's deadline:
// `started` plus its own timeout, or, once the client has extended it, when the timer fires (an
// extension arms the timer for the new deadline, which is later than the first), so the larger of
// the two. Which timer a firing is: its `fires` (in the timer's context), compared with the armed
// one's. Each timer armed fires at a time other than the one it replaces (a shorter timeout: earlier;
// a re-arm or an extension: after the firing), so a firing of a replaced timer is recognised and
// ignored. Two timers armed for the same nanosecond, one replacing the other, is the one case it
// cannot tell apart, and then it does no harm: either firing comes when the armed timer is due, and
// what the firing does is decided by the state (the operation's deadline), not by the timer.

import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension StreamOperations {

    /// A round's timer changes, applied outside the lock in this order: the read's cancel, the
    /// write's, then the read's arm, the write's. Fixed fields, not an array of changes: a round
    /// makes at most these four, and most none (no allocation, and nothing to release, per round).
    struct TimerChanges {
        /// The timers to cancel (0: none; ids start at 1).
        var cancelRead: UInt64 = 0
        var cancelWrite: UInt64 = 0
        /// When the timers to arm fire (0: none; see `Timeout.fires`), and after how long.
        var armRead: UInt64 = 0
        var armWrite: UInt64 = 0
        var readAfter: UInt64 = 0
        var writeAfter: UInt64 = 0

        var isEmpty: Bool { cancelRead == 0 && cancelWrite == 0 && armRead == 0 && armWrite == 0 }
    }

    /// The latest deadline: a timer's context is its `fires` shifted left by one (the direction in
    /// bit 0). Nanoseconds on a monotonic clock, 292 years.
    static let latestDeadline = UInt64.max >> 1

    /// `start` plus `nanoseconds`, at most `latestDeadline` and at least 1 (`fires` 0 is none armed).
    static func deadline(_ start: UInt64, plus nanoseconds: UInt64) -> UInt64 {
        let (sum, overflow) = start.addingReportingOverflow(nanoseconds)
        return overflow ? latestDeadline : min(max(sum, 1), latestDeadline)
    }

    /// Times the new first read and write that have a timeout (an operation that is no longer first
    /// left its timer for the next to adopt), and cancels everything once closed. Under the lock; the
    /// changes are applied outside it. Nothing to do (and the queues' first operations not even looked
    /// at) while no operation has had a timeout.
    func updateTimers(_ state: inout State, _ changes: inout TimerChanges) {
        guard state.timeoutsUsed else { return }
        if state.closed {
            if state.readTimeout.fires != 0 { changes.cancelRead = state.readTimeout.timer }
            if state.writeTimeout.fires != 0 { changes.cancelWrite = state.writeTimeout.timer }
            state.readTimeout = Timeout()
            state.writeTimeout = Timeout()
            state[timing: .read] = false
            state[timing: .write] = false
            return
        }
        if !state[timing: .read], case .read(let operation)? = state.reads.first, operation.timeout > 0 {
            state[timing: .read] = true
            startTiming(&state.readTimeout, seconds: operation.timeout, &changes.cancelRead, &changes.armRead, &changes.readAfter)
        }
        if !state[timing: .write], case .write(let operation)? = state.writes.first, operation.timeout > 0 {
            state[timing: .write] = true
            startTiming(&state.writeTimeout, seconds: operation.timeout, &changes.cancelWrite, &changes.armWrite, &changes.writeAfter)
        }
    }

    /// Times an operation that has just become first, with a timeout of `seconds`: it adopts the armed
    /// timer if that fires no later than its deadline, else (none armed, or one that would fire too
    /// late) has the armed one cancelled and one armed for its deadline.
    private func startTiming(
        _ timeout: inout Timeout, seconds: Double, _ cancel: inout UInt64, _ arm: inout UInt64, _ after: inout UInt64
    ) {
        let now = time.now()
        let deadline = Self.deadline(now, plus: seconds.saturatingNanoseconds)
        timeout.started = now
        if timeout.fires != 0, timeout.fires <= deadline { return }  // adopted: it fires first and re-arms
        if timeout.fires != 0 { cancel = timeout.timer }
        timeout.timer = 0
        timeout.fires = deadline
        arm = deadline
        after = deadline - min(now, deadline)
    }

    /// When the pump lets go: cancels the timers no operation adopted.
    func letGoOfTimers(_ state: inout State, _ changes: inout TimerChanges) {
        guard state.timeoutsUsed else { return }
        if !state[timing: .read], state.readTimeout.fires != 0 {
            changes.cancelRead = state.readTimeout.timer
            state.readTimeout = Timeout()
        }
        if !state[timing: .write], state.writeTimeout.fires != 0 {
            changes.cancelWrite = state.writeTimeout.timer
            state.writeTimeout = Timeout()
        }
    }

    func apply(_ changes: TimerChanges) {
        if let reactor {
            if changes.cancelRead != 0 { time.cancel(changes.cancelRead, on: reactor) }
            if changes.cancelWrite != 0 { time.cancel(changes.cancelWrite, on: reactor) }
        }
        if changes.armRead != 0 { arm(.read, fires: changes.armRead, after: changes.readAfter) }
        if changes.armWrite != 0 { arm(.write, fires: changes.armWrite, after: changes.writeAfter) }
    }

    /// Schedules the timer that fires at `fires` (recorded in the direction's `Timeout` under the
    /// lock) and records its id; or, if another has replaced it or it was let go meanwhile (an
    /// extension answered on another thread, racing a pump), cancels it: nothing else would.
    func arm(_ direction: OperationDirection, fires: UInt64, after nanoseconds: UInt64) {
        guard let reactor else { return }
        // A target and a number instead of a closure: no allocation per timer.
        let context = fires << 1 | (direction == .write ? 1 : 0)
        let timer = time.schedule(after: nanoseconds, on: reactor, target: self, context: context)
        let recorded = state.withLock { state -> Bool in
            guard state[timeout: direction].fires == fires else { return false }
            state[timeout: direction].timer = timer
            return true
        }
        if !recorded { time.cancel(timer, on: reactor) }
    }

    /// A timeout's timer (see `arm`), on the reactor's thread.
    func timerFired(_ context: UInt64) {
        timerFired(context & 1 == 1 ? .write : .read, fires: context >> 1)
    }

    /// What a timer's firing decided.
    private enum Firing {
        case none
        /// It fired before its operation's deadline (it was adopted): armed again for the rest.
        case rearm(fires: UInt64, after: UInt64)
        /// The operation's time is up: ask the client (taken under the lock; nil if it is gone).
        case ask(operation: UInt64, tag: Int, elapsed: Double, done: Int, client: (any StreamOperationsClient)?)
    }

    /// On the reactor's thread: re-arms a timer that fired early; else asks the client whether to
    /// extend, then extends or fails.
    func timerFired(_ direction: OperationDirection, fires: UInt64) {
        let now = time.now()
        let firing = state.withLock { state -> Firing in
            guard !state.closed, state.closing == nil, state[timeout: direction].fires == fires else { return .none }
            var timeout = state[timeout: direction]
            defer { state[timeout: direction] = timeout }
            timeout.fires = 0
            timeout.timer = 0
            guard state[timing: direction] else { return .none }
            let first: (id: UInt64, timeout: Double, tag: Int, done: Int)
            switch (direction, state.reads.first, state.writes.first) {
            case (.read, .read(let operation)?, _): first = (operation.id, operation.timeout, operation.tag, state.bufferCount)
            case (.write, _, .write(let operation)?): first = (operation.id, operation.timeout, operation.tag, operation.offset)
            default: return .none  // not reached: `timing` is set only for a read or a write
            }
            // Its own deadline, or, once extended, the extension's (see the top of this file).
            let deadline = max(fires, Self.deadline(timeout.started, plus: first.timeout.saturatingNanoseconds))
            if now < deadline {
                timeout.fires = deadline
                return .rearm(fires: deadline, after: deadline - now)
            }
            let elapsed = Double(now - min(timeout.started, now)) / 1e9
            return .ask(operation: first.id, tag: first.tag, elapsed: elapsed, done: first.done, client: takeClient())
        }
        switch firing {
        case .none: return
        case .rearm(let fires, let after): arm(direction, fires: fires, after: after)
        case .ask(let operation, let tag, let elapsed, let done, let client):
            guard let client else { return timeoutAnswered(direction, operation: operation, tag: tag, extra: 0) }
            client.operations(self, shouldTimeOut: direction, tag: tag, elapsed: elapsed, bytesDone: done) { [weak self] extra in
                self?.timeoutAnswered(direction, operation: operation, tag: tag, extra: extra)
            }
        }
    }

    /// The client's answer to a timeout (from any thread): re-arms for `extra` seconds, or fails the
    /// connection, unless the operation has completed or the connection closed meanwhile.
    func timeoutAnswered(_ direction: OperationDirection, operation: UInt64, tag: Int, extra: Double) {
        let extend = extra > 0 && extra.isFinite
        let now = extend ? time.now() : 0
        var cancel: UInt64 = 0
        let fires = state.withLock { state -> UInt64? in
            guard !state.closed, state.closing == nil, state[timing: direction] else { return nil }
            switch (direction, state.reads.first, state.writes.first) {
            case (.read, .read(let first)?, _) where first.id == operation: break
            case (.write, _, .write(let first)?) where first.id == operation: break
            default: return nil
            }
            guard extend else {
                state.closing = .some(
                    direction == .read ? StreamOperationError.readTimedOut(tag: tag) : StreamOperationError.writeTimedOut(tag: tag))
                return 0
            }
            // The new deadline is later than the operation's own (that has passed): `timerFired` takes
            // the larger of the two.
            var timeout = state[timeout: direction]
            if timeout.fires != 0 { cancel = timeout.timer }
            timeout.timer = 0
            timeout.fires = Self.deadline(now, plus: extra.saturatingNanoseconds)
            state[timeout: direction] = timeout
            return timeout.fires
        }
        guard let fires else { return }
        if fires == 0 { return requestPump() }
        if cancel != 0, let reactor { time.cancel(cancel, on: reactor) }
        arm(direction, fires: fires, after: fires - min(now, fires))
    }
}
