/// Monotonic time and one-shot timers that fire on a reactor's thread: the seam through which the
/// connector (Happy Eyeballs delays) and the connection (the open deadline) see time. Production
/// uses `SystemTime`, the kernel's monotonic clock and each reactor's timerfd; tests substitute a
/// clock they advance by hand, so delays and timeouts are tested without waiting.
protocol TimeSource: Sendable {
    /// Nanoseconds on a monotonic clock.
    func now() -> UInt64

    /// Runs `fire` on `reactor`'s thread once `nanoseconds` have passed on this clock. Returns an id
    /// for `cancel`.
    func schedule(after nanoseconds: UInt64, on reactor: Reactor, _ fire: @escaping @Sendable () -> Void) -> UInt64

    /// Calls `target.timerFired(context)` on `reactor`'s thread once `nanoseconds` have passed, unless
    /// the target is gone by then (it is held weakly). Returns an id for `cancel`.
    func schedule(after nanoseconds: UInt64, on reactor: Reactor, target: any TimerTarget, context: UInt64) -> UInt64

    /// Cancels a timer that has not fired yet (a no-op for one that has).
    func cancel(_ timer: UInt64, on reactor: Reactor)
}

extension TimeSource {
    /// A closure that calls the target, for clocks with no cheaper way.
    func schedule(after nanoseconds: UInt64, on reactor: Reactor, target: any TimerTarget, context: UInt64) -> UInt64 {
        schedule(after: nanoseconds, on: reactor) { [weak target] in target?.timerFired(context) }
    }
}

/// `CLOCK_MONOTONIC`, with timers on the reactor's timerfd.
struct SystemTime: TimeSource {
    func now() -> UInt64 { Posix.monotonicNanoseconds() }

    func schedule(after nanoseconds: UInt64, on reactor: Reactor, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        reactor.schedule(after: nanoseconds, fire)
    }

    func schedule(after nanoseconds: UInt64, on reactor: Reactor, target: any TimerTarget, context: UInt64) -> UInt64 {
        reactor.schedule(after: nanoseconds, target: target, context: context)
    }

    func cancel(_ timer: UInt64, on reactor: Reactor) {
        reactor.cancelTimer(timer)
    }
}

extension Double {
    /// Seconds as nanoseconds for a deadline, saturating instead of trapping on huge values, infinity
    /// and NaN (an absurd timeout means "no timeout" in practice, never a crash).
    var saturatingNanoseconds: UInt64 {
        guard self > 0 else { return 0 }
        let nanoseconds = self * 1e9
        return nanoseconds < 1.8e19 ? UInt64(nanoseconds) : UInt64.max / 2
    }
}
