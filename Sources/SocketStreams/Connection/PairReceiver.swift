import Foundation

/// An owner of a pair that takes the pair's events itself instead of as its streams' delegate: the
/// operations engine under `QueuedSocket`, `AsyncConnection` and GCDAsyncSocket. A stream's
/// `delegate` is a weak reference, and a weak reference gives its object a side table, after which
/// every retain and release of the object takes the runtime's slow path: the engine, retained and
/// released many times an event, paid for it on every round trip (Benchmarks/results/syscalls.md).
/// The connection holds its receiver unretained instead (`UnretainedReference`), under the rule its
/// streams are held by: set and cleared under the connection's lock, and cleared by the receiver's
/// deinit first thing (`Connection.setReceiver(_:)`, `Connection.dropReceiver(_:)`).
///
/// While a pair has a receiver, its events go to it and to nothing else (not the streams' delegate,
/// nor a `CFReadStreamSetClient` client): the receiver owns the pair.
package class PairReceiver: NSObject {
    /// One event of `stream`, on the thread or queue the pair delivers on, as
    /// `StreamDelegate.stream(_:handle:)` would be called.
    package func pair(_ stream: Stream, handle event: Stream.Event) {}
}

extension Connection {
    /// Makes `receiver` take the pair's events from now on (nil: the delegate or client again).
    func setReceiver(_ receiver: PairReceiver?) {
        lock.withLock { self.receiver = receiver.map { UnretainedReference($0) } }
    }

    /// Clears the receiver if it is `receiver`: from its deinit (before anything else there) or when
    /// it lets go of the pair. Holds the lock while it compares, as a delivery does while it loads.
    func dropReceiver(_ receiver: PairReceiver) {
        lock.withLock {
            if self.receiver?.refers(to: receiver) == true { self.receiver = nil }
        }
    }

    #if DEBUG
        /// Debug builds, at the end of a receiver's deinit: nil, or the rule broken if the connection still
        /// refers to it (UnretainedChecks.swift).
        func unretainedProblem(afterDeinitOf receiver: PairReceiver) -> String? {
            lock.withLock { UnretainedReference.deinitProblem(self.receiver, after: receiver) }
        }
    #endif
}
