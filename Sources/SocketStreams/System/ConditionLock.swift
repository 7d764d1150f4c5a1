import CSocketStreamsShims
import Glibc

/// A lock and the condition blocking calls wait on, in 24 bytes of the object's own allocation
/// (`cssh_lock_t`): the connection's and the reactor's lock.
///
/// Not Foundation's `NSCondition`/`NSLock`, and not `pthread_mutex_t`: those cost more instructions
/// per lock and unlock than this futex lock, which every round trip takes many times
/// (Benchmarks/results/syscalls.md), and a `pthread_mutex_t` plus a `pthread_cond_t` take 48 bytes a
/// connection and 48 more once a blocking call waits. The lock lives in the object's tail storage,
/// whose address never moves.
/// Like `Guarded`, it tells Thread Sanitizer about every acquisition (CSocketStreamsShims' `cssh_lock_*`).
///
/// `wait` and `broadcast` must be called with the lock held.
final class ConditionLock: ManagedBuffer<Void, cssh_lock_t> {
    /// A new unlocked lock.
    static func make() -> ConditionLock {
        let buffer = create(minimumCapacity: 1) { _ in }
        let lock = unsafeDowncast(buffer, to: ConditionLock.self)
        lock.withUnsafeMutablePointerToElements { cssh_lock_init($0) }
        return lock
    }

    deinit {
        withUnsafeMutablePointerToElements { cssh_lock_destroy($0) }
    }

    @inline(__always)
    private var raw: UnsafeMutablePointer<cssh_lock_t> {
        withUnsafeMutablePointerToElements { $0 }
    }

    @inline(__always)
    func lock() { cssh_lock_acquire(raw) }

    @inline(__always)
    func unlock() { cssh_lock_release(raw) }

    /// The "lock held" rule, checked in debug builds: the calling thread holds this lock. Compiled out
    /// of release builds.
    @inline(__always)
    func assertHeld(file: StaticString = #file, line: UInt = #line) {
        assert(cssh_lock_held(raw) != 0, "SocketStreams: lock not held by this thread", file: file, line: line)
    }

    /// Runs `body` with the lock held.
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        cssh_lock_acquire(raw)
        defer { cssh_lock_release(raw) }
        return try body()
    }

    /// Releases the lock, waits for `broadcast`, and takes the lock again (as `pthread_cond_wait`, it
    /// may also return spuriously, so callers wait in a loop on their condition). Lock held.
    func wait() { cssh_lock_wait(raw) }

    /// Wakes every thread in `wait` (`pthread_cond_broadcast`). Lock held.
    func broadcast() { cssh_lock_broadcast(raw) }
}
