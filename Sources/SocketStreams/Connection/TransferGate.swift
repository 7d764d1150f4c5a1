// Transfers outside the connection's lock: a read, write or half-close passes its gate under the
// lock, then uses the transport and its fd without it, blocking in poll(2) until at least one byte
// moves (never surfacing EAGAIN). A blocked call polls in slices of `blockingSlice` and gives up once
// its stream has been closed (from another thread): closing does not wake a poll(2) on Linux. The
// socket is closed only after every such call has left: a teardown that finds one in flight defers
// the release to the last one out, so an fd number is never given back while a thread may still
// poll or read it.

import Glibc
import Synchronization

/// The transfers in flight on one pair, and how they wait for its socket. One atomic word, a `let`
/// of its connection read in place: raised with the connection's lock held (`enter`, at a gate),
/// lowered without it (`leave`).
struct TransferGate: ~Copyable {
    /// The number of transfers past their gate, and in its top bit whether a teardown left the
    /// release of the transport and socket to the last one out. One word, so that a teardown and
    /// the last transfer leaving agree on who releases without any ordering argument.
    private let word = Atomic<Int>(0)
    private static let releaseDeferred = Int.min

    /// How long one poll of a blocked transfer lasts before it checks whether its stream was closed
    /// meanwhile (milliseconds).
    static let blockingSlice: Int32 = 100

    /// A transfer passed its gate. Connection lock held.
    @inline(__always)
    func enter() {
        word.add(1, ordering: .sequentiallyConsistent)
    }

    /// A transfer leaves: true if it was the last one out and a teardown left the release to it
    /// (the caller then takes the lock and closes what was deferred).
    @inline(__always)
    func leave() -> Bool {
        word.subtract(1, ordering: .sequentiallyConsistent).newValue == Self.releaseDeferred
    }

    /// How many transfers are past their gate.
    @inline(__always)
    var count: Int { word.load(ordering: .sequentiallyConsistent) & ~Self.releaseDeferred }

    /// A teardown: true if no transfer is in flight, and the transport and socket may be closed now;
    /// false if the last one out will ask for that (`leave`). Connection lock held.
    func deferRelease() -> Bool {
        word.bitwiseOr(Self.releaseDeferred, ordering: .sequentiallyConsistent).oldValue & ~Self.releaseDeferred == 0
    }

    /// Blocks until `fd` is ready for `interest`: true, or false once `gone()` (asked between slices,
    /// with the connection's lock taken there) says the transfer's stream has been closed.
    static func block(for interest: Interest, on fd: Int32, unless gone: () -> Bool) -> Bool {
        while true {
            if interest.poll(fd, timeout: blockingSlice) { return true }
            if gone() { return false }
        }
    }
}
