import CSocketStreamsShims
import Glibc

/// A `pthread_mutex_t` in the object's own allocation, and a `pthread_cond_t` made on the first
/// `wait`: the connection's and the reactor's lock (and the condition blocking calls wait on, which
/// most pairs never need: 48 bytes a pair saved).
///
/// Replaces Foundation's `NSCondition`/`NSLock` on the paths every event takes: those wrap the same
/// pthread calls behind class dispatch and a second allocation (callgrind, delegate ping-pong:
/// ~36 instructions more per lock and unlock, with 15 of each per round trip). The mutex lives in
/// the object's tail storage, whose address never moves. Like `Guarded`, it is built on pthreads so
/// that Thread Sanitizer sees every acquisition.
///
/// `wait` and `broadcast` must be called with the lock held: that is what makes creating the
/// condition on first use safe (a broadcast before any wait has nobody to wake).
final class ConditionLock: ManagedBuffer<Void, UInt64> {
    /// 64-bit words for a `pthread_mutex_t`, then one for the condition's address (0: none yet).
    private static let mutexWords = (MemoryLayout<pthread_mutex_t>.size + 7) / 8
    private static let words = mutexWords + 1

    /// A new unlocked lock.
    static func make() -> ConditionLock {
        let buffer = create(minimumCapacity: words) { _ in }
        let lock = unsafeDowncast(buffer, to: ConditionLock.self)
        lock.withUnsafeMutablePointerToElements { words in
            words.initialize(repeating: 0, count: Self.words)
            pthread_mutex_init(UnsafeMutableRawPointer(words).assumingMemoryBound(to: pthread_mutex_t.self), nil)
        }
        return lock
    }

    deinit {
        if let condition = existingCondition {
            pthread_cond_destroy(condition)
            condition.deallocate()
        }
        pthread_mutex_destroy(mutex)
    }

    @inline(__always)
    private var mutex: UnsafeMutablePointer<pthread_mutex_t> {
        withUnsafeMutablePointerToElements { UnsafeMutableRawPointer($0).assumingMemoryBound(to: pthread_mutex_t.self) }
    }

    /// The condition, if a `wait` made one. Lock held (or in deinit).
    private var existingCondition: UnsafeMutablePointer<pthread_cond_t>? {
        withUnsafeMutablePointerToElements { UnsafeMutablePointer(bitPattern: UInt($0[Self.mutexWords])) }
    }

    /// The condition, made now if no `wait` has made it yet. Lock held.
    private var condition: UnsafeMutablePointer<pthread_cond_t> {
        if let existing = existingCondition { return existing }
        let made = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
        made.initialize(to: pthread_cond_t())
        pthread_cond_init(made, nil)
        withUnsafeMutablePointerToElements { $0[Self.mutexWords] = UInt64(UInt(bitPattern: made)) }
        return made
    }

    @inline(__always)
    func lock() { pthread_mutex_lock(mutex) }

    @inline(__always)
    func unlock() { pthread_mutex_unlock(mutex) }

    /// The "lock held" rule, checked in debug builds: the calling thread holds this lock (glibc
    /// records the holder's thread id in the mutex). Compiled out of release builds.
    @inline(__always)
    func assertHeld(file: StaticString = #file, line: UInt = #line) {
        assert(mutex.pointee.__data.__owner == cssh_gettid(), "SocketStreams: lock not held by this thread", file: file, line: line)
    }

    /// Runs `body` with the lock held.
    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Releases the lock, waits for `broadcast`, and takes the lock again (`pthread_cond_wait`; it may
    /// also return spuriously, so callers wait in a loop on their condition). Lock held.
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Wakes every thread in `wait` (`pthread_cond_broadcast`). Lock held.
    func broadcast() {
        if let condition = existingCondition { pthread_cond_broadcast(condition) }
    }
}
