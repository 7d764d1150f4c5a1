import CSocketStreamsShims
import Glibc

/// State reachable only under its lock: a Mutex-style container.
///
/// Built on CSocketStreamsShims' `cssh_lock_t` (a futex lock that tells Thread Sanitizer what it does)
/// rather than the standard library's `Mutex`, whose lock Thread Sanitizer cannot see: with `Mutex`,
/// every access to the guarded state is reported as a race, which would hide the real ones; and rather
/// than a `pthread_mutex_t`, which costs more instructions a lock and unlock, and 16 bytes more
/// (Benchmarks/results/syscalls.md). The state and the lock share one allocation (the lock in the tail
/// of a `ManagedBuffer`, whose address never moves): a separate lock cost every `QueuedSocket`, idle
/// or not, two more allocations. Copies share the state.
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
        try storage.withUnsafeMutablePointers { state, lock in
            cssh_lock_acquire(lock)
            defer { cssh_lock_release(lock) }
            return try body(&state.pointee)
        }
    }

    #if DEBUG
        /// Debug builds only: whether the calling thread holds the lock (for the "with the lock held"
        /// rules of what the state's owner keeps beside it, such as `StreamOperations.clientReference`).
        package var isHeld: Bool {
            storage.withUnsafeMutablePointerToElements { cssh_lock_held($0) != 0 }
        }
    #endif

    /// Takes the lock and waits, letting it go meanwhile, until `condition` holds of the state (each
    /// look a fresh access, after the thread that changed it let go); returns with the lock released.
    /// Woken by `withLockWakingWaiters`.
    package func wait(until condition: (inout State) -> Bool) {
        storage.withUnsafeMutablePointers { state, lock in
            cssh_lock_acquire(lock)
            while !condition(&state.pointee) { cssh_lock_wait(lock) }
            cssh_lock_release(lock)
        }
    }

    /// `withLock`, then, still under the lock, wakes every thread in `wait(until:)` to look again (a
    /// load and nothing more when none waits).
    @inline(__always)
    package func withLockWakingWaiters<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try storage.withUnsafeMutablePointers { state, lock in
            cssh_lock_acquire(lock)
            defer {
                cssh_lock_broadcast(lock)
                cssh_lock_release(lock)
            }
            return try body(&state.pointee)
        }
    }
}

/// `Guarded`'s allocation: the state as the header, one `cssh_lock_t` as the element. Reached only
/// through pointers under the lock, so Swift's dynamic exclusivity checks do not apply.
package final class GuardedStorage<State>: ManagedBuffer<State, cssh_lock_t> {
    static func make(_ state: State) -> GuardedStorage<State> {
        let buffer = create(minimumCapacity: 1) { _ in state }
        let storage = unsafeDowncast(buffer, to: GuardedStorage<State>.self)
        storage.withUnsafeMutablePointerToElements { lock in
            lock.initialize(to: cssh_lock_t())
            cssh_lock_init(lock)
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { cssh_lock_destroy($0) }
    }
}
