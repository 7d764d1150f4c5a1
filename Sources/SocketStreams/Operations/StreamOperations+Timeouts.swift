// The operations' timeouts: a timer on the owner for the first read and the first write that have
// one; the client may extend a timeout that passes (GCDAsyncSocket's shouldTimeout…ByExtending).

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
        /// The operations whose timeouts to arm (0: none; ids start at 1), and after how long.
        var armRead: UInt64 = 0
        var armWrite: UInt64 = 0
        var readAfter: Double = 0
        var writeAfter: Double = 0

        var isEmpty: Bool { cancelRead == 0 && cancelWrite == 0 && armRead == 0 && armWrite == 0 }
    }

    /// Cancels the timer of an operation that is no longer first, and asks for one for the new first
    /// operation if it has a timeout. Under the lock; the changes are applied outside it. Nothing to do
    /// (and the queues' first operations not even looked at) while no operation has had a timeout.
    func updateTimers(_ state: inout State, _ changes: inout TimerChanges) {
        guard state.timeoutsUsed else { return }
        var firstRead: (UInt64, Double)?
        var firstWrite: (UInt64, Double)?
        if !state.closed {
            if case .read(let operation)? = state.reads.first {
                firstRead = (operation.id, operation.timeout)
            }
            if case .write(let operation)? = state.writes.first { firstWrite = (operation.id, operation.timeout) }
        }
        if let current = state.readTimeout, current.operation != firstRead?.0 {
            changes.cancelRead = current.timer
            state.readTimeout = nil
        }
        if let current = state.writeTimeout, current.operation != firstWrite?.0 {
            changes.cancelWrite = current.timer
            state.writeTimeout = nil
        }
        if state.readTimeout == nil, let (id, timeout) = firstRead, timeout > 0 {
            state.readTimeout = Timeout(operation: id, timer: 0, started: time.now())
            changes.armRead = id
            changes.readAfter = timeout
        }
        if state.writeTimeout == nil, let (id, timeout) = firstWrite, timeout > 0 {
            state.writeTimeout = Timeout(operation: id, timer: 0, started: time.now())
            changes.armWrite = id
            changes.writeAfter = timeout
        }
    }

    func apply(_ changes: TimerChanges) {
        if let reactor {
            if changes.cancelRead != 0 { time.cancel(changes.cancelRead, on: reactor) }
            if changes.cancelWrite != 0 { time.cancel(changes.cancelWrite, on: reactor) }
        }
        if changes.armRead != 0 { arm(.read, operation: changes.armRead, after: changes.readAfter) }
        if changes.armWrite != 0 { arm(.write, operation: changes.armWrite, after: changes.writeAfter) }
    }

    /// Schedules the timer of `operation`'s timeout (first, or extended) and records it.
    func arm(_ direction: OperationDirection, operation: UInt64, after seconds: Double) {
        guard let reactor else { return }
        // A target and a number instead of a closure: no allocation per operation's timeout.
        let context = operation << 1 | (direction == .write ? 1 : 0)
        let timer = time.schedule(after: seconds.saturatingNanoseconds, on: reactor, target: self, context: context)
        state.withLock { state in
            if state[timeout: direction]?.operation == operation { state[timeout: direction]?.timer = timer }
        }
    }

    /// On the reactor's thread: asks the client whether to extend, then extends or fails.
    /// A timeout's timer (see `arm`), on the reactor's thread.
    func timerFired(_ context: UInt64) {
        timerFired(context & 1 == 1 ? .write : .read, operation: context >> 1)
    }

    func timerFired(_ direction: OperationDirection, operation: UInt64) {
        let now = time.now()
        let question = state.withLock { state -> (tag: Int, elapsed: Double, done: Int)? in
            guard !state.closed, state.closing == nil, let timeout = state[timeout: direction], timeout.operation == operation
            else { return nil }
            let elapsed = Double(now - timeout.started) / 1e9
            switch (direction, state.reads.first, state.writes.first) {
            case (.read, .read(let first)?, _) where first.id == operation: return (first.tag, elapsed, state.bufferCount)
            case (.write, _, .write(let first)?) where first.id == operation: return (first.tag, elapsed, first.offset)
            default: return nil
            }
        }
        guard let question else { return }
        guard let client else { return timeoutAnswered(direction, operation: operation, tag: question.tag, extra: 0) }
        client.operations(self, shouldTimeOut: direction, tag: question.tag, elapsed: question.elapsed, bytesDone: question.done) {
            [weak self] extra in
            self?.timeoutAnswered(direction, operation: operation, tag: question.tag, extra: extra)
        }
    }

    /// The client's answer to a timeout (from any thread): re-arms for `extra` seconds, or fails the
    /// connection, unless the operation has completed or the connection closed meanwhile.
    func timeoutAnswered(_ direction: OperationDirection, operation: UInt64, tag: Int, extra: Double) {
        let current = state.withLock { state in
            !state.closed && state.closing == nil && state[timeout: direction]?.operation == operation
        }
        guard current else { return }
        if extra > 0, extra.isFinite {
            return arm(direction, operation: operation, after: extra)
        }
        state.withLock { state in
            if state.closing == nil, state[timeout: direction]?.operation == operation {
                state.closing = .some(
                    direction == .read
                        ? StreamOperationError.readTimedOut(tag: tag) : StreamOperationError.writeTimedOut(tag: tag))
            }
        }
        requestPump()
    }
}
