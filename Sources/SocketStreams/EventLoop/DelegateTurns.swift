// A face's calls to its user's delegate when the face's work runs on the delegate's own queue: one call
// a turn of that queue's reactor. Each turn waits behind the blocks already on the queue
// (`Reactor.performNextTurn`), so a block the previous call posted runs before the next call, as it
// would if each call were a block of its own (GCDAsyncSocket's and GCDAsyncUdpSocket's promise: no
// delegate call overtakes a block posted to the queue before it), and no thread is woken to deliver
// it: the queue's thread runs the next turn itself.
//
// The calls wait in one FIFO under its lock, whichever thread made them, so they keep the order they
// were made in; one turn is asked for at a time. A call made off the reactor (another thread) first
// reaches a perform through `post` and then takes the next turn like the rest, so it too runs behind
// whatever that perform's callouts posted.

import Dispatch
import Synchronization

/// One delegate call a face makes (it holds what the call needs, and calls it in `run`).
package protocol TurnCall: AnyObject, Sendable {
    /// Calls the delegate, on its queue, in the call's turn.
    func run()
}

/// Delivers a face's delegate calls in turns of the reactor of the delegate's queue (see the file's
/// header). Holds a use of that reactor, so a face's datagram sockets on the same queue share it.
package final class DelegateTurns: Sendable {
    /// The delegate's queue.
    package let queue: DispatchQueue
    private let reactor: Reactor
    private let calls = Guarded(Calls())

    private struct Calls {
        var waiting: [any TurnCall] = []
        var next = 0
        /// A turn is asked for (and will run the call at `next`).
        var scheduled = false
    }

    /// Turns on `queue`'s reactor; nil when the reactor cannot be made (EMFILE, ENOMEM).
    package init?(queue: DispatchQueue) {
        guard let reactor = try? ReactorRegistry.shared.acquire(queue: queue) else { return nil }
        self.queue = queue
        self.reactor = reactor
    }

    deinit {
        ReactorRegistry.shared.release(reactor)
    }

    /// Whether calls for `other` may go through these turns: it is this queue (the same object; another
    /// wrapper of it, such as a second `DispatchQueue.main`, is not known to be).
    package func serves(_ other: DispatchQueue) -> Bool { other === queue }

    /// Whether the caller is inside a turn of this queue (a synchronous call to the queue from here
    /// would wait for itself).
    package var isInTurn: Bool { reactor.isPerformingHere }

    /// Delivers `call` in a turn of its own, after every call enqueued before it. Any thread.
    package func enqueue(_ call: any TurnCall) {
        let schedule = calls.withLock { calls -> Bool in
            calls.waiting.append(call)
            guard !calls.scheduled else { return false }
            calls.scheduled = true
            return true
        }
        guard schedule else { return }
        if reactor.isPerformingHere {
            reactor.performNextTurn { self.runOne() }
        } else {
            reactor.post { self.reactor.performNextTurn { self.runOne() } }
        }
    }

    /// The turn: the first waiting call, then another turn if more wait.
    private func runOne() {
        let call = calls.withLock { calls -> any TurnCall in
            let call = calls.waiting[calls.next]
            calls.next += 1
            if calls.next >= 1024, calls.next * 2 >= calls.waiting.count {  // a queue never empty keeps no read part
                calls.waiting.removeFirst(calls.next)
                calls.next = 0
            }
            return call
        }
        call.run()
        let more = calls.withLock { calls -> Bool in
            if calls.next < calls.waiting.count { return true }
            calls.waiting.removeAll(keepingCapacity: calls.waiting.count <= 16)
            calls.next = 0
            calls.scheduled = false
            return false
        }
        if more { reactor.performNextTurn { self.runOne() } }
    }
}
