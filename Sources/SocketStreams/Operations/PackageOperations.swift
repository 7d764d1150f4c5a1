import Foundation

// The operations engine for the package's other modules (CocoaAsyncSocket's GCDAsyncSocket), which
// cannot see its internals: an engine on one queue's reactor, held while the engine lives, whose
// events go to a handler (`PackageOperations`). The same engine as under `QueuedSocket` and
// `AsyncConnection`, with the same ownership: every pump runs on the queue.

/// The handler of a ``PackageOperations``: the engine's events on its queue, in order.
package protocol OperationsHandler: AnyObject, Sendable {
    /// One event (see `OperationEvent`), on the queue, outside the engine's lock.
    func operations(_ operations: PackageOperations, handle event: OperationEvent)
    /// A timeout passed; `answer` (called once, from any thread) takes the extension in seconds, or 0
    /// or less to fail the connection with the timeout.
    func operations(
        _ operations: PackageOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    )
}

/// One engine on a dispatch queue's reactor, for one connection.
package final class PackageOperations: StreamOperationsClient, Sendable {
    private let engine: StreamOperations
    /// The queue's reactor (one per queue, shared with every other user of the queue), held for as
    /// long as this lives; nil if none could be made (out of file descriptors). Held here rather than
    /// by a separate owner object per socket (issue 25: ~40 bytes per idle GCDAsyncSocket).
    private let reactor: Reactor?
    /// Set once, here, and only read after: a `weak let` needs no lock (issue 25: a `Guarded` box for
    /// it, with its own mutex, held ~70 bytes per idle GCDAsyncSocket).
    private weak let handler: (any OperationsHandler)?

    /// An engine on `queue`'s reactor, reporting to `handler` (held weakly). Without a reactor (out of
    /// file descriptors) the engine is closed at once with the `NSPOSIXErrorDomain` error.
    package init(queue: DispatchQueue, handler: any OperationsHandler) {
        var failure: NSError?
        do {
            reactor = try ReactorRegistry.shared.acquire(queue: queue)
        } catch {
            reactor = nil
            failure = NSError(domain: NSPOSIXErrorDomain, code: Int(error.code))
        }
        engine = StreamOperations(reactor: reactor)
        self.handler = handler
        engine.client = self
        if let failure { engine.close(error: failure) }
    }

    deinit {
        engine.close()
        if let reactor { ReactorRegistry.shared.release(reactor) }
    }

    /// Takes over an unopened pair, schedules it on `queue` (the one given to `init`) and opens it.
    package func attach(input: InputStream, output: OutputStream, queue: DispatchQueue) {
        engine.attach(input: input, output: output) { input, output in
            CFReadStreamSetDispatchQueue(input, queue)
            CFWriteStreamSetDispatchQueue(output, queue)
        }
    }

    /// Queues a read; returns the error that closed the connection if it is closed.
    @discardableResult
    package func enqueueRead(_ request: ReadRequest, timeout: Double, tag: Int) -> Error? {
        engine.enqueueRead(request, timeout: timeout, tag: tag)
    }

    /// Queues a write; returns the error that closed the connection if it is closed.
    @discardableResult
    package func enqueueWrite(_ bytes: [UInt8], timeout: Double, tag: Int) -> Error? {
        engine.enqueueWrite(bytes, timeout: timeout, tag: tag)
    }

    /// Queues a TLS handshake behind every read and write queued so far.
    @discardableResult
    package func enqueueTLS(_ settings: TLSSettings) -> Error? {
        engine.enqueueTLS(settings)
    }

    /// Closes at once (an orderly close first sends what the kernel accepts at once of the queued
    /// writes), or once the queued reads and/or writes have completed.
    package func close(afterReads: Bool = false, afterWrites: Bool = false, error: Error? = nil) {
        engine.close(afterReads: afterReads, afterWrites: afterWrites, error: error)
    }

    /// The pair's input stream once attached (kept while this lives, closed or not).
    package var input: InputStream? { engine.streams?.input }

    /// Takes the bytes read but not yet taken by a read.
    package func takeBuffered() -> [UInt8] { engine.takeBuffered() }

    /// Whether the calling thread is the queue's, inside its reactor's work.
    package var isOwnerHere: Bool { reactor?.isPerformingHere ?? false }

    // MARK: the engine's client

    func operations(_ operations: StreamOperations, handle event: OperationEvent) {
        handler?.operations(self, handle: event)
    }

    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double { 0 }

    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    ) {
        guard let handler else { return answer(0) }
        handler.operations(self, shouldTimeOut: direction, tag: tag, elapsed: elapsed, bytesDone: bytesDone, answer: answer)
    }
}
