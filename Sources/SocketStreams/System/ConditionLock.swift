import Glibc

/// A `pthread_mutex_t` and a `pthread_cond_t` in one allocation: the connection's and the reactor's
/// lock (and the condition blocking calls wait on).
///
/// Replaces Foundation's `NSCondition`/`NSLock` on the paths every event takes: those wrap the same
/// pthread calls behind class dispatch and a second allocation (callgrind, delegate ping-pong:
/// ~36 instructions more per lock and unlock, with 15 of each per round trip). The mutex and the
/// condition live in the object's tail storage, whose address never moves. Like `Guarded`, it is
/// built on pthreads so that Thread Sanitizer sees every acquisition.
final class ConditionLock: ManagedBuffer<Void, UInt64> {
    /// 64-bit words for a `pthread_mutex_t` followed by a `pthread_cond_t`.
    private static let mutexWords = (MemoryLayout<pthread_mutex_t>.size + 7) / 8
    private static let words = mutexWords + (MemoryLayout<pthread_cond_t>.size + 7) / 8

    /// A new unlocked lock.
    static func make() -> ConditionLock {
        let buffer = create(minimumCapacity: words) { _ in }
        let lock = unsafeDowncast(buffer, to: ConditionLock.self)
        lock.withUnsafeMutablePointerToElements { words in
            words.initialize(repeating: 0, count: Self.words)
            pthread_mutex_init(UnsafeMutableRawPointer(words).assumingMemoryBound(to: pthread_mutex_t.self), nil)
            pthread_cond_init(UnsafeMutableRawPointer(words + mutexWords).assumingMemoryBound(to: pthread_cond_t.self), nil)
        }
        return lock
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
    }

    @inline(__always)
    private var mutex: UnsafeMutablePointer<pthread_mutex_t> {
        withUnsafeMutablePointerToElements { UnsafeMutableRawPointer($0).assumingMemoryBound(to: pthread_mutex_t.self) }
    }

    @inline(__always)
    private var condition: UnsafeMutablePointer<pthread_cond_t> {
        withUnsafeMutablePointerToElements {
            UnsafeMutableRawPointer($0 + Self.mutexWords).assumingMemoryBound(to: pthread_cond_t.self)
        }
    }

    @inline(__always)
    func lock() { pthread_mutex_lock(mutex) }

    @inline(__always)
    func unlock() { pthread_mutex_unlock(mutex) }

    /// Runs `body` with the lock held.
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Releases the lock, waits for `broadcast`, and takes the lock again (`pthread_cond_wait`; it may
    /// also return spuriously, so callers wait in a loop on their condition).
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Wakes every thread in `wait` (`pthread_cond_broadcast`).
    func broadcast() { pthread_cond_broadcast(condition) }
}
