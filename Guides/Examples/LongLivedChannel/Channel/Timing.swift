import Foundation

/// Reconnect delays: exponential back-off, capped, with full jitter.
///
/// The ceiling before attempt n (from 1) is `min(cap, base × multiplier^(n−1))`; the delay is drawn
/// uniformly from 0...ceiling. Growing delays keep a client from hammering a server that is down;
/// the random draw keeps many clients that lost the same server at the same moment from all coming
/// back at the same moments too.
public struct Backoff: Equatable, Sendable {
    /// The ceiling before the first attempt, in seconds.
    public var base: TimeInterval
    /// The largest ceiling, in seconds.
    public var cap: TimeInterval
    /// How much the ceiling grows from one attempt to the next.
    public var multiplier: Double

    /// Back-off from `base` up to `cap` seconds, doubling by default.
    public init(base: TimeInterval, cap: TimeInterval, multiplier: Double = 2) {
        precondition(base >= 0 && cap >= base && multiplier >= 1, "Backoff needs 0 <= base <= cap and multiplier >= 1")
        self.base = base
        self.cap = cap
        self.multiplier = multiplier
    }

    /// The longest delay before attempt `attempt` (1 for the first).
    public func ceiling(beforeAttempt attempt: Int) -> TimeInterval {
        min(cap, base * pow(multiplier, Double(max(attempt, 1) - 1)))
    }

    /// A delay before attempt `attempt`, drawn uniformly from 0...`ceiling(beforeAttempt:)`.
    public func delay(beforeAttempt attempt: Int, using random: inout some RandomNumberGenerator) -> TimeInterval {
        TimeInterval.random(in: 0...ceiling(beforeAttempt: attempt), using: &random)
    }
}

/// A timer a `ChannelClock` started; `cancel()` stops it from firing.
public protocol ChannelTimer: AnyObject {
    /// Stops the timer; its action does not run. Harmless after it fired.
    func cancel()
}

/// Where a `Channel` gets its timers (heartbeats, reconnect delays). The default runs them on a
/// run loop; tests pass a clock they advance by hand, so nothing depends on how fast the machine is.
public protocol ChannelClock: AnyObject {
    /// Runs `action` once, `delay` seconds from now, on the channel's thread.
    func schedule(after delay: TimeInterval, _ action: @escaping () -> Void) -> any ChannelTimer
}

/// The default `ChannelClock`: one-shot `Timer`s on a run loop.
public final class RunLoopClock: ChannelClock {
    private let runLoop: RunLoop
    private let mode: RunLoop.Mode

    /// A clock whose timers fire on `runLoop`'s thread while it runs in `mode`.
    public init(runLoop: RunLoop, mode: RunLoop.Mode = .default) {
        self.runLoop = runLoop
        self.mode = mode
    }

    /// Adds a one-shot `Timer` to the run loop.
    public func schedule(after delay: TimeInterval, _ action: @escaping () -> Void) -> any ChannelTimer {
        // Timer's block is @Sendable, but it runs on `runLoop`'s thread: the thread the channel lives on.
        let confined = ThreadConfined(action)
        // An explicit fire date: swift-corelibs-foundation's Timer(timeInterval:repeats:block:) fires at
        // once, not after the interval as on Apple platforms.
        let timer = Timer(fire: Date(timeIntervalSinceNow: delay), interval: 0, repeats: false) { _ in confined.value() }
        runLoop.add(timer, forMode: mode)
        return RunLoopTimer(timer)
    }

    private final class RunLoopTimer: ChannelTimer {
        let timer: Timer
        init(_ timer: Timer) { self.timer = timer }
        func cancel() { timer.invalidate() }
    }
}

/// A value handed to code that runs on the thread that made it (a timer on that thread's run loop).
/// Swift cannot see that; the type says it, so that each such place is marked.
struct ThreadConfined<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Runs `block` once on `runLoop`'s thread, as soon as that run loop gets to it: the way to reach a
/// channel that lives on another thread (`RunLoop.socketStreams`, say).
///
/// A timer due now, not `RunLoop.perform(_:)`: `perform` queues the block without waking the run loop,
/// so on a run loop that sleeps until its next event the block can wait indefinitely.
public func onThread(of runLoop: RunLoop, mode: RunLoop.Mode = .default, _ block: @escaping @Sendable () -> Void) {
    runLoop.add(Timer(fire: Date(), interval: 0, repeats: false) { _ in block() }, forMode: mode)
}
