// A face's calls to its user's delegate when the face's work runs on the delegate's own queue: one call
// a turn of that queue's reactor. Each turn waits behind the blocks already on the queue
// (`Reactor.performNextTurn`: only a perform asked for after the previous turn's ended runs it, never
// one already on the queue, such as a wake-up posted from another thread meanwhile), so a block the
// previous call posted runs before the next call, as it
// would if each call were a block of its own (GCDAsyncSocket's and GCDAsyncUdpSocket's promise: no
// delegate call overtakes a block posted to the queue before it), and no thread is woken to deliver
// it: the queue's thread runs the next turn itself.
//
// The calls wait in one FIFO in the queue's reactor (`Reactor.enqueueTurn`), for every face on that
// queue, whichever thread made them, so they keep the order they were made in; one turn is asked for
// at a time. A call made off the reactor (another thread) first reaches a perform through `post` and then
// takes the next turn like the rest, so it too runs behind whatever that perform's callouts posted. A
// face holds only this handle (a use of the reactor), so an idle socket holds no FIFO and no lock of its
// own for its calls.

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

    /// Delivers `call` in a turn of its own, after every call enqueued on this queue before it. Any
    /// thread.
    package func enqueue(_ call: any TurnCall) { reactor.enqueueTurn(call) }
}
