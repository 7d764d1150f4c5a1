// A dispatch queue's reactor whose epoll set a thread of ours waits in, running each perform on the
// queue with `queue.sync`, which runs the block on this thread when the queue is idle and waits for it
// otherwise, as a dispatch source's block would. An event then costs what it costs on the stream
// thread (one `epoll_wait`, no thread woken), where a dispatch source costs libdispatch's cycle (see
// Benchmarks/results/syscalls.md).
//
// The queue's rules hold: every callout runs on the queue, one at a time (`QueuePerformer`), not while
// the queue runs other work. Posted work and timers still go through `queue.async` and
// `queue.asyncAfter`, so they keep their order with the user's own blocks. The perform runs one round,
// over what the wait fetched only if no socket was read or written since the wait looked
// (`Posix.ioCount`): by the time the queue runs the block, its other work (a user's read) may have
// taken the bytes that made a socket readable, and then the round polls afresh. One thread per queue (a
// shared one would deadlock where one queue's block waits for another queue's connection), for at most
// `maxThreads` queues at once; never the main queue.

import CSocketStreamsShims
import Dispatch
import Glibc
import Synchronization

/// Drives a queue's reactor from a thread of ours that waits in its epoll set.
final class QueueThreadDriver: QueueDriver {
    let queuePerformer: QueuePerformer
    /// The eventfd `detach` writes to end the thread (in the epoll set as `ReactorToken.stop`).
    private let stopFD: Int32
    /// Whether this driver holds one of the `maxThreads` slots (given back once, by `detach` or `close`).
    private let holdsSlot = Atomic<Bool>(true)
    /// Set by `detach` to end the thread.
    private let stopping = Atomic<Bool>(false)
    /// The thread's kernel id once it runs (0 before): tests watch it wait for its queue.
    let threadID = Atomic<Int32>(0)

    /// How many drivers hold a slot, process-wide, and how many may.
    static let threads = Atomic<Int>(0)
    /// Eight by default; tests change it to have a queue either way (0: every queue on a dispatch source).
    static let maxThreads = Atomic<Int>(8)

    /// A driver holding a slot, or nil when every slot is taken or the queue is the main queue (whose
    /// blocks run on the main thread whoever asks). Throws when its eventfd cannot be made.
    init?(performer: QueuePerformer, epollFD: Int32) throws(SystemError) {
        guard !Self.isMainQueue(performer.queue), Self.claimSlot() else { return nil }
        do {
            stopFD = try Posix.eventFD()
        } catch {
            Self.threads.subtract(1, ordering: .relaxed)
            throw error
        }
        do {
            try Posix.epollControl(epollFD, EPOLL_CTL_ADD, stopFD, events: cssh_epollin(), token: ReactorToken.stop)
        } catch {
            Posix.close(stopFD)
            Self.threads.subtract(1, ordering: .relaxed)
            throw error
        }
        self.queuePerformer = performer
    }

    /// Starts the thread. A thread of our own making, not Foundation's `Thread`, whose `start()` ignores
    /// a failed `pthread_create`: the reactor would never be driven, and the queue's streams would never
    /// hear of anything. Without a thread, the schedule fails with EAGAIN. The closure, which holds the
    /// reactor and the queue, is released on the thread as soon as `run` returns (`Posix.startThread`),
    /// not in the thread's TSD destructors, where Foundation's `Thread` releases its block: a dispatch
    /// queue released there double-frees libdispatch's per-thread cache.
    func attach(_ reactor: Reactor) throws(SystemError) {
        try Posix.startThread { self.run(reactor) }
    }

    /// Ends the thread (once it wakes from its wait) and gives back the slot.
    func detach() {
        stopping.store(true, ordering: .releasing)
        Posix.eventFDSignal(stopFD)
        giveBackSlot()
    }

    /// Closes the stop eventfd (the reactor's `deinit`, once the thread has let go of it).
    func close() {
        giveBackSlot()
        Posix.close(stopFD)
    }

    /// The thread: waits in the epoll set, then runs a perform on the queue.
    private func run(_ reactor: Reactor) {
        Posix.nameCurrentThread("SocketStreams q")
        threadID.store(cssh_gettid(), ordering: .releasing)
        let fetched = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(ReactorOwned.eventCapacity))
        defer { fetched.deallocate() }
        // One work item for every turn, made once: `queue.sync` with a closure makes a block of it each
        // time (a copy and its context allocated and freed a wake-up). What a turn and this loop share is
        // held by reference, not captured as `var`s: the item escapes, and Swift would check every
        // access to a captured `var` at run time.
        let shared = Turn()
        let performer = queuePerformer
        let turn = DispatchWorkItem {
            // A turn asked for by the last one (`Reactor.performNextTurn`) polls nothing: what is ready
            // is found by the next wait.
            let current = shared.count == 0 || Posix.ioCount.load(ordering: .relaxed) == shared.ioSeen
            shared.outcome = performer.perform(
                reactor, single: true, fetched: current ? fetched : nil, count: shared.count, rearm: .caller, ticket: shared.ticket)
            shared.ioSeen = Posix.ioCount.load(ordering: .relaxed)
        }
        while true {
            if shared.outcome == .again {
                shared.count = 0
            } else {
                let count = Posix.epollWait(reactor.epollFD, fetched, ReactorOwned.eventCapacity, timeout: -1)
                guard count > 0 || stopping.load(ordering: .acquiring) else { continue }
                shared.count = count
            }
            if stopping.load(ordering: .acquiring) { return }
            shared.outcome = .done
            shared.ticket = reactor.performsEnded.load(ordering: .relaxed)  // asked for now, after the last one ended
            performer.queue.sync(execute: turn)
            // A perform running elsewhere (a concurrent queue's) handles what is ready: wait for it to
            // end rather than find the same events again and again.
            if shared.outcome == .busy { performer.waitWhileRunning() }
        }
    }

    /// What the thread and the turns it runs on the queue (`queue.sync`, on the same thread) share:
    /// touched only by that thread, one turn at a time, so without Swift's dynamic exclusivity checks.
    private final class Turn: @unchecked Sendable {
        /// The socket I/O count (`Posix.ioCount`) when the thread last looked, on the queue: if it has
        /// not moved when the next turn runs, nothing has read or written a socket since the thread's
        /// wait looked at the epoll set, and what the wait fetched is current.
        @exclusivity(unchecked) var ioSeen = Posix.ioCount.load(ordering: .relaxed) &- 1
        /// How many events the wait fetched.
        @exclusivity(unchecked) var count = 0
        /// The turn's ticket (`QueuePerformer.perform`): the reactor's `performsEnded` as it was asked for.
        @exclusivity(unchecked) var ticket: UInt64 = 0
        /// What the last turn came to: `.busy` when a perform running elsewhere had the queue's work,
        /// `.again` when the next turn is due at once.
        @exclusivity(unchecked) var outcome = QueueTurn.done
    }

    /// Whether `queue` is the main queue: by its label, as each `DispatchQueue.main` is a new wrapper.
    private static func isMainQueue(_ queue: DispatchQueue) -> Bool {
        queue.label == DispatchQueue.main.label
    }

    private static func claimSlot() -> Bool {
        var current = threads.load(ordering: .relaxed)
        while current < maxThreads.load(ordering: .relaxed) {
            let (exchanged, found) = threads.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        return false
    }

    private func giveBackSlot() {
        if holdsSlot.exchange(false, ordering: .relaxed) { Self.threads.subtract(1, ordering: .relaxed) }
    }
}
