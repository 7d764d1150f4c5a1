import Foundation

// The operations engine for the package's other modules (CocoaAsyncSocket's GCDAsyncSocket), which
// cannot see its internals: an engine on one queue's reactor, holding that reactor while it lives,
// whose client (the socket itself) gets its events. The same engine as under `QueuedSocket` and
// `AsyncConnection`, with the same ownership: every pump runs on the queue. No object stands between
// the engine and the socket (issue 25: a separate `PackageOperations` object, and the weak reference's
// side table it needed, held ~110 bytes per idle GCDAsyncSocket).

extension StreamOperations {
    /// An engine on `queue`'s reactor, reporting to `client` (held weakly). It holds the reactor (one
    /// per queue, shared with every other user of the queue) until it is released. Without a reactor
    /// (out of file descriptors) the engine is closed at once with the `NSPOSIXErrorDomain` error.
    package convenience init(queue: DispatchQueue, client: any StreamOperationsClient) {
        var failure: NSError?
        var reactor: Reactor?
        do {
            reactor = try ReactorRegistry.shared.acquire(queue: queue)
        } catch {
            failure = NSError(domain: NSPOSIXErrorDomain, code: Int(error.code))
        }
        self.init(reactor: reactor)
        if reactor != nil { state.withLock { $0.holdsReactor = true } }
        self.client = client
        if let failure { close(error: failure) }
    }

    /// Takes over an unopened pair, schedules it on `queue` (the one given to `init`) and opens it.
    package func attach(input: InputStream, output: OutputStream, queue: DispatchQueue) {
        attach(input: input, output: output) { input, output in
            CFReadStreamSetDispatchQueue(input, queue)
            CFWriteStreamSetDispatchQueue(output, queue)
        }
    }
}
