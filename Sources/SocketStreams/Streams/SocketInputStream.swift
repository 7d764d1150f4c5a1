import Foundation

/// The read half of a socket stream pair (CFNetwork's socket `CFReadStream`).
///
/// Create pairs with `createStreamPair(host:port:)`, `createStreamPair(nativeSocket:)`,
/// `createStreamPair(unixSocketPath:)` or `Stream.getStreamsToHost(withName:port:inputStream:outputStream:)`.
/// Its events, statuses and errors follow CFNetwork's socket streams; see `Guides/Architecture.md`.
/// Like every Foundation stream it is not thread-safe: use it from one thread at a time.
public final class SocketInputStream: InputStream {
    let connection: Connection

    /// The delegate, held weakly and nil until set (swift-corelibs-foundation's default; Apple's
    /// streams answer themselves). Kept here rather than in Foundation's `Stream` so that reading it
    /// for each event costs a weak load and no exclusivity check (Foundation's getter cost more, most of
    /// it a dynamic exclusivity check: Benchmarks/results/syscalls.md). Like every `Stream` property,
    /// touched on the stream's owner only.
    @exclusivity(unchecked) private weak var storedDelegate: StreamDelegate?

    /// The object that receives this stream's events (`CFReadStreamSetClient`'s callback, as `NSStream`'s
    /// `delegate`), held weakly.
    public override var delegate: StreamDelegate? {
        get { storedDelegate }
        set { storedDelegate = newValue }
    }

    init(connection: Connection) {
        self.connection = connection
        super.init(data: Data())
    }

    deinit {
        connection.close(.input, deinitialised: true)
        #if DEBUG
            UnretainedChecks.check(connection.unretainedProblem(afterDeinitOf: self, .input))
        #endif
    }

    /// Starts connecting (`CFReadStreamOpen`). The first `open()` of either stream of the pair
    /// resolves the host and connects; `openCompleted` arrives when TCP is up.
    public override func open() { connection.open(.input) }

    /// `CFReadStreamClose`. The socket closes once both streams of the pair are closed or released.
    public override func close() { connection.close(.input) }

    /// `CFReadStreamGetStatus`.
    public override var streamStatus: Stream.Status { connection.status(.input) }

    /// `CFReadStreamCopyError`: `NSPOSIXErrorDomain` for socket errors, `kCFErrorDomainCFNetwork`
    /// code 2 for name-lookup failures.
    public override var streamError: Error? { connection.error(.input) }

    /// `CFReadStreamRead`: blocks until at least one byte is available (waiting for the open first).
    /// Returns the byte count, 0 at end of stream, or -1 on error.
    public override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        connection.read(buffer, maxLength: len)
    }

    /// `CFReadStreamGetBuffer`: socket streams have no internal buffer to lend, so always false.
    public override func getBuffer(
        _ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>
    ) -> Bool { false }

    /// `CFReadStreamHasBytesAvailable`: true if `read` would not block. Never blocks.
    public override var hasBytesAvailable: Bool { connection.isReady(.input) }

    /// `CFReadStreamScheduleWithRunLoop`: deliver delegate events on `aRunLoop` while it runs in `mode`.
    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        connection.schedule(.input, in: aRunLoop, forMode: mode)
    }

    /// `CFReadStreamUnscheduleFromRunLoop`. A no-op for a pair that was never scheduled there, or is closed.
    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        connection.unschedule(.input, from: aRunLoop, forMode: mode)
    }

    /// `CFReadStreamCopyProperty`. Properties are shared by both streams of the pair.
    public override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        connection.property(forKey: key.rawValue)
    }

    /// `CFReadStreamSetProperty`. Returns false for keys socket streams do not support.
    public override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        connection.setProperty(property, forKey: key.rawValue)
    }
}

extension Stream {
    /// The socket under a stream of this package: the descriptor `kCFStreamPropertySocketNativeHandle`
    /// holds, read without making the property's `NSData` (for the package's other faces, such as
    /// GCDAsyncSocket's `socketFD`, which ask for it on every connection). Nil for a stream of another
    /// kind and for a pair without a socket yet.
    package var socketDescriptor: Int32? {
        if let input = self as? SocketInputStream { return input.connection.nativeDescriptor }
        if let output = self as? SocketOutputStream { return output.connection.nativeDescriptor }
        return nil
    }
}
