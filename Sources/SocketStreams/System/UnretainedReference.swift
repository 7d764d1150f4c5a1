import CSocketStreamsShims

/// A reference that does not keep its object alive, for a back reference on a hot path where `weak`
/// costs too much: a weak reference gives its object a side table, after which every retain and
/// release of the object, anywhere in the process, takes the runtime's slow path (for a connection's
/// streams, on every round trip and more on every connection: Benchmarks/results/syscalls.md).
///
/// Safe under one rule, which the holder keeps: a lock guards the reference, every `retained()` is
/// made with it held, and the object's deinit, before anything else, clears the reference with it
/// held. Then under the lock the object is alive, or its deinit is waiting for the lock (its memory
/// is still there), and `retained()` returns a reference only to one whose deinit has not begun:
/// the check a weak reference's load makes (`swift_tryRetain`).
///
/// Checked in debug builds (UnretainedChecks.swift): each load against a weak shadow of the object
/// (`checkLoad`), the holder's lock where the holder loads, and, at the end of the object's deinit,
/// that its holder no longer refers to it (`deinitProblem`). Release builds hold the pointer alone.
struct UnretainedReference<Object: AnyObject>: @unchecked Sendable {
    // `@unchecked Sendable`: a pointer; the holder's lock (above) orders every use of it.
    private let object: Unmanaged<Object>
    #if DEBUG
        /// Debug builds only: the object, weakly (nil once its deinit has begun), to check each load by.
        private weak var shadow: Object?
    #endif

    init(_ object: Object) {
        self.object = Unmanaged.passUnretained(object)
        #if DEBUG
            shadow = object
        #endif
    }

    /// Whether this refers to `candidate` (an identity comparison; nothing is retained).
    @inline(__always) func refers(to candidate: Object) -> Bool {
        object.toOpaque() == Unmanaged.passUnretained(candidate).toOpaque()
    }

    /// The object with a reference taken (+1, to be released by the caller), unless its deinit has
    /// begun. With the holder's lock held. For a call made after the lock is let go:
    /// `_withUnsafeGuaranteedRef` then `release()` cost no retain and release of their own.
    @inline(__always) func taken() -> Unmanaged<Object>? {
        let alive = cssh_try_retain(object.toOpaque())
        #if DEBUG
            checkLoad(retained: alive)
        #endif
        return alive ? object : nil
    }

    /// The object, retained, unless its deinit has begun. With the holder's lock held.
    @inline(__always) func retained() -> Object? {
        let alive = cssh_try_retain(object.toOpaque())
        #if DEBUG
            checkLoad(retained: alive)
        #endif
        guard alive else { return nil }
        return object.takeRetainedValue()
    }

    #if DEBUG
        /// Debug builds: a load's try-retain (`retained`: what it answered) agrees with the shadow, loaded
        /// after it (see `UnretainedChecks.loadProblem`).
        private func checkLoad(retained: Bool, file: StaticString = #file, line: UInt = #line) {
            UnretainedChecks.check(loadProblem(retained: retained), file: file, line: line)
        }

        /// What `checkLoad` checks: nil, or the rule broken.
        func loadProblem(retained: Bool) -> String? {
            UnretainedChecks.loadProblem(of: "\(Object.self)", at: object.toOpaque(), retained: retained, shadow: shadow)
        }

        /// Debug builds, at the end of `object`'s deinit: nil, or the rule broken if `reference` (what its
        /// holder holds now) still refers to it.
        static func deinitProblem(_ reference: UnretainedReference?, after object: Object) -> String? {
            UnretainedChecks.deinitProblem(of: "\(Object.self)", stillReferred: reference?.refers(to: object) == true)
        }
    #endif
}
