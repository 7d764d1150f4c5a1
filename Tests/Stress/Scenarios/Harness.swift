#if canImport(Glibc)
    import Glibc
#endif
import Dispatch
import Foundation
import SocketStreams

/// A reproducible random source (SplitMix64): each iteration's choices follow from the run's seed and
/// the iteration's number, so a failing iteration's random points can be replayed (`--seed`).
public struct StressRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64, iteration: Int) {
        state = seed &+ UInt64(truncatingIfNeeded: iteration) &* 0x9E37_79B9_7F4A_7C15
        _ = next()
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A flag tasks and threads can raise once and wait for, with a deadline.
public final class StressFlag: Sendable {
    private struct State {
        var raised = false
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        var next = 0
    }

    private let state = Guarded(State())

    public init() {}

    public var isRaised: Bool { state.withLock { $0.raised } }

    /// Raises the flag: every waiter returns true.
    public func raise() {
        let waiters = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.raised = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: true) }
    }

    /// True once the flag is raised; false if it is not within `timeout` seconds.
    public func wait(timeout: Double) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let id = state.withLock { state -> Int? in
                if state.raised { return nil }
                state.next += 1
                state.waiters[state.next] = continuation
                return state.next
            }
            guard let id else { return continuation.resume(returning: true) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: false)
            }
        }
    }
}

/// A counter shared between tasks and threads, which a task can wait on.
public final class StressCounter: Sendable {
    private struct State {
        var value = 0
        var finished = false
        var waiters: [(target: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Guarded(State())

    public init() {}

    public var current: Int { state.withLock { $0.value } }

    public func add(_ amount: Int = 1) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.value += amount
            let value = state.value
            let ready = state.waiters.filter { $0.target <= value }.map(\.continuation)
            state.waiters.removeAll { $0.target <= value }
            return ready
        }
        for waiter in ready { waiter.resume() }
    }

    /// No more counting (the counting task has ended): every waiter returns, now and later.
    public func finish() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.finished = true
            defer { state.waiters.removeAll() }
            return state.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the counter reaches `target`, or once ``finish()`` is called: lets a scenario act
    /// once another task has made some progress, without sleeping or spinning.
    public func wait(until target: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.finished || state.value >= target { return true }
                state.waiters.append((target, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// The failures of one iteration, as messages.
public final class StressFailures: Sendable {
    private let messages = Guarded<[String]>([])
    public init() {}
    public func add(_ message: String) { messages.withLock { $0.append(message) } }
    public var all: [String] { messages.withLock { $0 } }
}

/// What one iteration came to within its deadline.
enum IterationOutcome: Sendable {
    case finished([String])
    case threw(String)
    case hung
}

/// Runs `body` in a task of its own and returns its outcome, or `.hung` if it has not finished
/// within `seconds` (the task is then abandoned: a hang is reported, not waited for).
func runWithDeadline(_ seconds: Double, _ body: @escaping @Sendable () async throws -> [String]) async -> IterationOutcome {
    let once = Guarded<CheckedContinuation<IterationOutcome, Never>?>(nil)
    return await withCheckedContinuation { (continuation: CheckedContinuation<IterationOutcome, Never>) in
        once.withLock { $0 = continuation }
        let finish: @Sendable (IterationOutcome) -> Void = { outcome in
            once.withLock { pending -> CheckedContinuation<IterationOutcome, Never>? in
                defer { pending = nil }
                return pending
            }?.resume(returning: outcome)
        }
        Task {
            do {
                finish(.finished(try await body()))
            } catch {
                finish(.threw("\(type(of: error)): \(error)"))
            }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { finish(.hung) }
    }
}
