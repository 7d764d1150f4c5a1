import Glibc

/// State reachable only under its lock: a Mutex-style container.
///
/// Built on a `pthread_mutex_t` rather than the standard library's `Mutex`, whose futex-based lock
/// Thread Sanitizer cannot see: with `Mutex`, every access to the guarded state is reported as a
/// race, which would hide the real ones.
package final class Guarded<State>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Reached only under `mutex`, so Swift's dynamic exclusivity check (two calls per access) is off.
    @exclusivity(unchecked) private var state: State

    package init(_ state: State) {
        self.state = state
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the state, under the lock. `body` must not call back into this container.
    @inline(__always)
    package func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
