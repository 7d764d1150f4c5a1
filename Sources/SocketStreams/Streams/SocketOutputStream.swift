import Foundation

/// Storage the `OutputStream` base class is initialised with and never writes to.
nonisolated(unsafe) private let unusedBaseBuffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 1)

/// The write half of a socket stream pair (CFNetwork's socket `CFWriteStream`).
///
/// Writes never raise SIGPIPE: a closed peer shows as `errorOccurred` with EPIPE or ECONNRESET.
/// Closing it does not shut the socket down; the socket closes once both streams are closed or released.
public final class SocketOutputStream: OutputStream {
    let connection: Connection

    /// The delegate, held weakly and nil until set (swift-corelibs-foundation's default; Apple's
    /// streams answer themselves). Kept here rather than in Foundation's `Stream` so that reading it
    /// for each event costs a weak load and no exclusivity check (Foundation's getter cost more, most of
    /// it a dynamic exclusivity check: Benchmarks/results/syscalls.md). Like every `Stream` property,
    /// touched on the stream's owner only.
    @exclusivity(unchecked) private weak var storedDelegate: StreamDelegate?

    /// The object that receives this stream's events (`CFWriteStreamSetClient`'s callback, as `NSStream`'s
    /// `delegate`), held weakly.
    public override var delegate: StreamDelegate? {
        get { storedDelegate }
        set { storedDelegate = newValue }
    }

    init(connection: Connection) {
        self.connection = connection
        // The base class needs some sink; every method that would use it is overridden. A fixed
        // buffer costs every stream far less memory than `init(toMemory:)` does.
        super.init(toBuffer: unusedBaseBuffer, capacity: 0)
    }

    /// Required by `OutputStream`; a socket stream cannot be made this way.
    public required init(toMemory: ()) {
        fatalError("SocketOutputStream is created with createStreamPair(host:port:)")
    }

    deinit {
        connection.close(.output, deinitialised: true)
        #if DEBUG
            UnretainedChecks.check(connection.unretainedProblem(afterDeinitOf: self, .output))
        #endif
    }

    /// Starts connecting (`CFWriteStreamOpen`); see `SocketInputStream.open()`.
    public override func open() { connection.open(.output) }

    /// `CFWriteStreamClose`. No FIN is sent: the socket closes once both streams are closed or released.
    public override func close() { connection.close(.output) }

    /// `CFWriteStreamGetStatus`.
    public override var streamStatus: Stream.Status { connection.status(.output) }

    /// `CFWriteStreamCopyError`.
    public override var streamError: Error? { connection.error(.output) }

    /// `CFWriteStreamWrite`: blocks until at least one byte can be written (waiting for the open
    /// first). Returns the count written, which may be less than `len`, or -1 on error.
    public override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        connection.write(buffer, maxLength: len)
    }

    /// `CFWriteStreamCanAcceptBytes`: true if `write` would not block. Never blocks.
    public override var hasSpaceAvailable: Bool { connection.isReady(.output) }

    /// `CFWriteStreamScheduleWithRunLoop`.
    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        connection.schedule(.output, in: aRunLoop, forMode: mode)
    }

    /// `CFWriteStreamUnscheduleFromRunLoop`.
    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        connection.unschedule(.output, from: aRunLoop, forMode: mode)
    }

    /// `CFWriteStreamCopyProperty`. Properties are shared by both streams of the pair.
    public override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        connection.property(forKey: key.rawValue)
    }

    /// `CFWriteStreamSetProperty`. Returns false for keys socket streams do not support.
    public override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        connection.setProperty(property, forKey: key.rawValue)
    }
}
