// The operations' timeouts: a timer on the owner for the first read and the first write that have
// one; the client may extend a timeout that passes (GCDAsyncSocket's shouldTimeout…ByExtending).
//
// A timeout per operation costs no timer operation while it does not change: the timer armed for
// one operation is kept for the next (see `Timeout`), so a connection that reads and writes with the
// same timeout arms a timer about once per timeout period, not twice per round trip (each arm and
// cancel is a lock and a heap operation in the reactor; issue 25).

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
        /// The serials of the timers to arm (0: none), and after how long.
        var armRead: UInt64 = 0
        var armWrite: UInt64 = 0
        var readAfter: UInt64 = 0
        var writeAfter: UInt64 = 0

        var isEmpty: Bool { cancelRead == 0 && cancelWrite == 0 && armRead == 0 && armWrite == 0 }
    }

    /// Gives the new first read and write their timeouts (an operation that is no longer first leaves
    /// its timer for the next to adopt), and cancels everything once closed. Under the lock; the
    /// changes are applied outside it. Nothing to do (and the queues' first operations not even looked
    /// at) while no operation has had a timeout.
    func updateTimers(_ state: inout State, _ changes: inout TimerChanges) {
        guard state.timeoutsUsed else { return }
        var firstRead: (id: UInt64, seconds: Double)?
        var firstWrite: (id: UInt64, seconds: Double)?
        if !state.closed {
            if case .read(let operation)? = state.reads.first { firstRead = (operation.id, operation.timeout) }
            if case .write(let operation)? = state.writes.first { firstWrite = (operation.id, operation.timeout) }
        }
        update(
            &state.readTimeout, first: firstRead, closed: state.closed, &state.nextID, &changes.cancelRead, &changes.armRead,
            &changes.readAfter)
        update(
            &state.writeTimeout, first: firstWrite, closed: state.closed, &state.nextID, &changes.cancelWrite, &changes.armWrite,
            &changes.writeAfter)
    }

    /// One direction of `updateTimers`.
    private func update(
        _ timeout: inout Timeout, first: (id: UInt64, seconds: Double)?, closed: Bool, _ nextID: inout UInt64,
        _ cancel: inout UInt64, _ arm: inout UInt64, _ after: inout UInt64
    ) {
        if closed {
            if timeout.serial != 0 { cancel = timeout.timer }
            timeout = Timeout()
            return
        }
        if timeout.operation != 0, timeout.operation != first?.id { timeout.operation = 0 }  // its timer stays, for now
        guard timeout.operation == 0, let first, first.seconds > 0 else { return }
        let now = time.now()
        let nanoseconds = first.seconds.saturatingNanoseconds
        let (deadline, overflow) = now.addingReportingOverflow(nanoseconds)
        timeout.operation = first.id
        timeout.started = now
        timeout.deadline = overflow ? .max : deadline
        if timeout.serial != 0, timeout.fires <= timeout.deadline { return }  // adopted: it fires first and re-arms
        if timeout.serial != 0 { cancel = timeout.timer }
        timeout.serial = nextID
        nextID += 1
        timeout.timer = 0
        timeout.fires = timeout.deadline
        arm = timeout.serial
        after = nanoseconds
    }

    /// When the pump lets go: cancels the timers no operation adopted.
    func letGoOfTimers(_ state: inout State, _ changes: inout TimerChanges) {
        guard state.timeoutsUsed else { return }
        if state.readTimeout.operation == 0, state.readTimeout.serial != 0 {
            changes.cancelRead = state.readTimeout.timer
            state.readTimeout = Timeout()
        }
        if state.writeTimeout.operation == 0, state.writeTimeout.serial != 0 {
            changes.cancelWrite = state.writeTimeout.timer
            state.writeTimeout = Timeout()
        }
    }

    func apply(_ changes: TimerChanges) {
        if let reactor {
            if changes.cancelRead != 0 { time.cancel(changes.cancelRead, on: reactor) }
            if changes.cancelWrite != 0 { time.cancel(changes.cancelWrite, on: reactor) }
        }
        if changes.armRead != 0 { arm(.read, serial: changes.armRead, after: changes.readAfter) }
        if changes.armWrite != 0 { arm(.write, serial: changes.armWrite, after: changes.writeAfter) }
    }

    /// Schedules the timer with `serial` (recorded in the direction's `Timeout` under the lock) and
    /// records its id.
    func arm(_ direction: OperationDirection, serial: UInt64, after nanoseconds: UInt64) {
        guard let reactor else { return }
        // A target and a number instead of a closure: no allocation per timer.
        let context = serial << 1 | (direction == .write ? 1 : 0)
        let timer = time.schedule(after: nanoseconds, on: reactor, target: self, context: context)
        state.withLock { state in
            if state[timeout: direction].serial == serial { state[timeout: direction].timer = timer }
        }
    }

    /// A timeout's timer (see `arm`), on the reactor's thread.
    func timerFired(_ context: UInt64) {
        timerFired(context & 1 == 1 ? .write : .read, serial: context >> 1)
    }

    /// What a timer's firing decided.
    private enum Firing {
        case none
        /// It fired before its operation's deadline (it was adopted): armed again for the rest.
        case rearm(serial: UInt64, after: UInt64)
        /// The operation's time is up: ask the client.
        case ask(operation: UInt64, tag: Int, elapsed: Double, done: Int)
    }

    /// On the reactor's thread: re-arms a timer that fired early; else asks the client whether to
    /// extend, then extends or fails.
    func timerFired(_ direction: OperationDirection, serial: UInt64) {
        let now = time.now()
        let firing = state.withLock { state -> Firing in
            guard !state.closed, state.closing == nil, state[timeout: direction].serial == serial else { return .none }
            var timeout = state[timeout: direction]
            defer { state[timeout: direction] = timeout }
            timeout.serial = 0
            timeout.timer = 0
            guard timeout.operation != 0 else { return .none }
            if now < timeout.deadline {
                timeout.serial = state.nextID
                state.nextID += 1
                timeout.fires = timeout.deadline
                return .rearm(serial: timeout.serial, after: timeout.deadline - now)
            }
            let elapsed = Double(now - timeout.started) / 1e9
            switch (direction, state.reads.first, state.writes.first) {
            case (.read, .read(let first)?, _) where first.id == timeout.operation:
                return .ask(operation: first.id, tag: first.tag, elapsed: elapsed, done: state.bufferCount)
            case (.write, _, .write(let first)?) where first.id == timeout.operation:
                return .ask(operation: first.id, tag: first.tag, elapsed: elapsed, done: first.offset)
            default: return .none
            }
        }
        switch firing {
        case .none: return
        case .rearm(let serial, let after): arm(direction, serial: serial, after: after)
        case .ask(let operation, let tag, let elapsed, let done):
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
        let nanoseconds = extend ? extra.saturatingNanoseconds : 0
        var cancel: UInt64 = 0
        let serial = state.withLock { state -> UInt64? in
            guard !state.closed, state.closing == nil, state[timeout: direction].operation == operation else { return nil }
            guard extend else {
                state.closing = .some(
                    direction == .read ? StreamOperationError.readTimedOut(tag: tag) : StreamOperationError.writeTimedOut(tag: tag))
                return 0
            }
            var timeout = state[timeout: direction]
            if timeout.serial != 0 { cancel = timeout.timer }
            let (deadline, overflow) = now.addingReportingOverflow(nanoseconds)
            timeout.deadline = overflow ? .max : deadline
            timeout.serial = state.nextID
            state.nextID += 1
            timeout.timer = 0
            timeout.fires = timeout.deadline
            state[timeout: direction] = timeout
            return timeout.serial
        }
        guard let serial else { return }
        if serial == 0 { return requestPump() }
        if cancel != 0, let reactor { time.cancel(cancel, on: reactor) }
        arm(direction, serial: serial, after: nanoseconds)
    }
}
