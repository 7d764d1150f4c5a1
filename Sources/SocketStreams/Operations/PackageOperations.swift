import Foundation

// The operations engine for the package's other modules (CocoaAsyncSocket's GCDAsyncSocket), which
// cannot see its internals: an engine on one queue's reactor or the stream thread's, holding that
// reactor while it lives, whose client (the socket itself) gets its events. The same engine as under
// `QueuedSocket` and `AsyncConnection`, with the same ownership: every pump runs on the queue or the
// stream thread. No object stands between the engine and the socket: a separate `PackageOperations`
// object, and the weak reference's side table it needed, added to every idle GCDAsyncSocket
// (Benchmarks/results/scale-notes.md).

extension StreamOperations {
    /// An engine on `queue`'s reactor, or on the stream thread's when `queue` is nil (for a socket
    /// without a queue of its own, which would otherwise need a reactor, an epoll set and a thread of
    /// ours, per socket), reporting to `client` (held unretained: the client calls `dropClient` when it
    /// lets go of the engine, and first thing in its deinit). It holds the reactor (one per queue,
    /// shared with every other user of the queue or of the stream thread) until it is released.
    /// Without a reactor (out of file descriptors) the engine is closed at once with the
    /// `NSPOSIXErrorDomain` error.
    package convenience init(queue: DispatchQueue?, client: any StreamOperationsClient) {
        self.init(queue: queue) { _ in client }
    }

    /// The same, for a client made for the engine (one that holds it): `makeClient` is called once,
    /// before anything is reported.
    package convenience init(queue: DispatchQueue?, makeClient: (StreamOperations) -> any StreamOperationsClient) {
        var failure: NSError?
        var reactor: Reactor?
        do {
            if let queue {
                reactor = try ReactorRegistry.shared.acquire(queue: queue)
            } else {
                let shared = try StreamThread.reactor()
                ReactorRegistry.shared.retain(shared)
                reactor = shared
            }
        } catch {
            failure = NSError(domain: NSPOSIXErrorDomain, code: Int(error.code))
        }
        self.init(reactor: reactor)
        if reactor != nil { state.withLock { $0.holdsReactor = true } }
        setClient(makeClient(self))
        if let failure { close(error: failure) }
    }

    /// Takes over an unopened pair, schedules it on `queue` (the one given to `init`), or on the
    /// stream thread when nil, and opens it.
    package func attach(input: InputStream, output: OutputStream, queue: DispatchQueue?) {
        attach(input: input, output: output) { input, output in
            if let queue {
                CFReadStreamSetDispatchQueue(input, queue)
                CFWriteStreamSetDispatchQueue(output, queue)
            } else {
                input.schedule(in: .socketStreams, forMode: .default)
                output.schedule(in: .socketStreams, forMode: .default)
            }
        }
    }

    /// The dispatch queue the engine works on; nil for the stream thread's (or without a reactor).
    package var workQueue: DispatchQueue? { reactor?.queue }

    /// Whether the engine works on `queue` (its reactor is that queue's, the same object): its client's
    /// calls for that queue may then take turns of the engine's reactor (``enqueueTurn(_:)``).
    package func worksOn(_ queue: DispatchQueue) -> Bool { reactor?.queue === queue }

    /// Runs `call` in a turn of its own of the engine's reactor, after every call enqueued there before
    /// it and behind the blocks already on its queue (`DelegateTurns`' rule): for a client whose
    /// delegate's queue is the one the engine works on (``worksOn(_:)``). Any thread. Without a reactor
    /// (the engine could not get one, and is closed) the call is dropped, as the engine's events are.
    package func enqueueTurn(_ call: any TurnCall) { reactor?.enqueueTurn(call) }

    /// Runs `block` on the stream thread, where the engines of `init(queue: nil, client:)` own their
    /// state, and waits for it: inline when called there. Out of file descriptors (no stream thread,
    /// hence no engine there to race with) it runs on the caller.
    package static func performOnStreamThread(_ block: () -> Void) {
        guard let reactor = try? StreamThread.reactor(), !reactor.isPerformingHere, !StreamThread.isCurrent else {
            return block()
        }
        withoutActuallyEscaping(block) { block in
            let done = DispatchSemaphore(value: 0)
            let work = BorrowedBlock(block)
            reactor.post {
                work.run()
                done.signal()
            }
            done.wait()
        }
    }
}

/// A block run on another thread while its caller waits for it (`performOnStreamThread`), and let go
/// there before the caller is told, so that it does not outlive the call that lent it.
// @unchecked Sendable: `block` is reached by one thread at a time: the caller's before it posts this
// and after the signal, the stream thread's in between.
private final class BorrowedBlock: @unchecked Sendable {
    private var block: (() -> Void)?
    init(_ block: @escaping () -> Void) { self.block = block }

    func run() {
        block?()
        block = nil
    }
}
