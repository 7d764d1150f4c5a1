import CSocketStreamsShims

/// A reference that does not keep its object alive, for a back reference on a hot path where `weak`
/// costs too much: a weak reference gives its object a side table, after which every retain and
/// release of the object, anywhere in the process, takes the runtime's slow path (a connection's
/// streams: ~190 instructions a ping-pong round trip, ~1,900 a connection, issue 25).
///
/// Safe under one rule, which the holder keeps: a lock guards the reference, every `retained()` is
/// made with it held, and the object's deinit, before anything else, clears the reference with it
/// held. Then under the lock the object is alive, or its deinit is waiting for the lock (its memory
/// is still there), and `retained()` returns a reference only to one whose deinit has not begun:
/// the check a weak reference's load makes (`swift_tryRetain`).
struct UnretainedReference<Object: AnyObject>: @unchecked Sendable {
    // `@unchecked Sendable`: a pointer; the holder's lock (above) orders every use of it.
    private let object: Unmanaged<Object>

    init(_ object: Object) {
        self.object = Unmanaged.passUnretained(object)
    }

    /// Whether this refers to `candidate` (an identity comparison; nothing is retained).
    @inline(__always) func refers(to candidate: Object) -> Bool {
        object.toOpaque() == Unmanaged.passUnretained(candidate).toOpaque()
    }

    /// The object with a reference taken (+1, to be released by the caller), unless its deinit has
    /// begun. With the holder's lock held. For a call made after the lock is let go:
    /// `_withUnsafeGuaranteedRef` then `release()` cost no retain and release of their own.
    @inline(__always) func taken() -> Unmanaged<Object>? {
        cssh_try_retain(object.toOpaque()) ? object : nil
    }

    /// The object, retained, unless its deinit has begun. With the holder's lock held.
    @inline(__always) func retained() -> Object? {
        guard cssh_try_retain(object.toOpaque()) else { return nil }
        return object.takeRetainedValue()
    }
}
