import Glibc

/// State reachable only under its lock: a Mutex-style container.
///
/// Built on a `pthread_mutex_t` rather than the standard library's `Mutex`, whose futex-based lock
/// Thread Sanitizer cannot see: with `Mutex`, every access to the guarded state is reported as a
/// race, which would hide the real ones. The state and the mutex share one allocation (the mutex in
/// the tail of a `ManagedBuffer`, whose address never moves): a separate `pthread_mutex_t` cost every
/// `QueuedSocket`, idle or not, two more allocations of 40 bytes (issue 25). Copies share the state.
///
/// `@unchecked Sendable`: the mutex owns the state, and `withLock` is the only way to it, so any thread
/// may hold a copy. `State` need not be `Sendable`; `body` must not let references to it escape the
/// lock. `package` only: users never see it.
package struct Guarded<State>: @unchecked Sendable {
    private let storage: GuardedStorage<State>

    package init(_ state: State) {
        storage = GuardedStorage.make(state)
    }

    /// Runs `body` with the state, under the lock. `body` must not call back into this container.
    @inline(__always)
    package func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try storage.withUnsafeMutablePointers { state, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&state.pointee)
        }
    }
}

/// `Guarded`'s allocation: the state as the header, one `pthread_mutex_t` as the element. Reached only
/// through pointers under the mutex, so Swift's dynamic exclusivity checks do not apply.
package final class GuardedStorage<State>: ManagedBuffer<State, pthread_mutex_t> {
    static func make(_ state: State) -> GuardedStorage<State> {
        let buffer = create(minimumCapacity: 1) { _ in state }
        let storage = unsafeDowncast(buffer, to: GuardedStorage<State>.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            pthread_mutex_init(mutex, nil)
        }
        return storage
    }

    deinit {
        _ = withUnsafeMutablePointerToElements { pthread_mutex_destroy($0) }
    }
}
