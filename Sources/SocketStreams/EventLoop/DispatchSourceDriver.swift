// A dispatch queue's reactor watched by a `DispatchSource` on the epoll fd, with the queue as its
// target: every queue beyond the first few (which get a thread of ours, QueueThreadDriver.swift), and
// the main queue, whose blocks run on the main thread whoever asks. Each event costs libdispatch's
// cycle (its epoll thread woken, a worker woken, the source re-armed), which the queue's thread saves.

import Dispatch

/// Drives a queue's reactor with a dispatch read source on its epoll fd.
final class DispatchSourceDriver: QueueDriver {
    let queuePerformer: QueuePerformer
    /// The source while attached; `detach` takes it.
    private let source = Guarded<(any DispatchSourceRead)?>(nil)

    init(performer: QueuePerformer) {
        self.queuePerformer = performer
    }

    /// Makes and resumes the source, whose handlers hold `reactor` until it is cancelled.
    func attach(_ reactor: Reactor) {
        let watcher = DispatchSource.makeReadSource(fileDescriptor: reactor.epollFD, queue: queuePerformer.queue)
        let performer = queuePerformer
        // When the source's block was queued is not known: it runs no turn (ticket 0), which a wake-up
        // perform then runs (`Reactor.performNextTurn`).
        watcher.setEventHandler { performer.perform(reactor, ticket: 0) }
        // ... and until libdispatch has let go of the epoll fd, which the reactor's `deinit` closes:
        // libdispatch unregisters a cancelled source's fd on its manager thread later, and says it is
        // safe to close only once the cancel handler runs. Closed before, the fd number can be reused
        // (by the next reactor or socket) while the manager still holds the old registration.
        watcher.setCancelHandler { withExtendedLifetime(reactor) {} }
        source.withLock { $0 = watcher }
        watcher.resume()
    }

    /// Cancels the source; its cancel handler, the last holder of the reactor, runs once libdispatch no
    /// longer watches the epoll fd.
    func detach() {
        let watcher = source.withLock { source -> (any DispatchSourceRead)? in
            defer { source = nil }
            return source
        }
        guard let watcher else { return }
        watcher.setEventHandler(handler: nil)
        watcher.cancel()
    }

    /// A dispatch source has no fd of its own.
    func close() {}
}
