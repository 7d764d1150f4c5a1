import Foundation

/// Why a connection ended or a request failed.
public enum ChannelError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The peer closed the connection (`endEncountered`).
    case peerClosed
    /// The connection failed or could not be made (`errorOccurred`), with the stream's error.
    case streamError(String)
    /// No answer to this many heartbeats in a row.
    case heartbeatsMissed(Int)
    /// The peer sent something that is not a frame or not a message.
    case badFrame(String)
    /// The channel was closed by its owner.
    case closed

    /// The error in words, as the demo prints it.
    public var description: String {
        switch self {
        case .peerClosed: return "the peer closed the connection"
        case .streamError(let message): return message
        case .heartbeatsMissed(let count): return "no answer to \(count) heartbeats"
        case .badFrame(let what): return "bad frame: \(what)"
        case .closed: return "the channel was closed"
        }
    }
}

/// One stream pair carrying frames: writes queued payloads as space comes, reads and decodes frames
/// as bytes come. Used by both ends of the example (the client's `Channel` and the server).
///
/// It lives on the thread of the run loop it is opened on: call it there, and its callbacks come
/// there. Stream delegates are weak, so it keeps itself alive from `open(in:)` until it closes.
public final class FramedConnection: NSObject, StreamDelegate {
    /// The pair is connected and writable (the first `hasSpaceAvailable`; after TLS, if any).
    public var onReady: (() -> Void)?
    /// A frame's payload arrived.
    public var onFrame: (([UInt8]) -> Void)?
    /// The connection ended by itself (the peer closed it, it failed, or it sent a bad frame).
    /// Not called for `close()`.
    public var onClose: ((ChannelError) -> Void)?

    private let input: InputStream
    private let output: OutputStream
    private var decoder: FrameDecoder
    private var unsent: [UInt8] = []
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    private var ready = false
    private var keepAlive: FramedConnection?

    /// Whether the connection has closed (by `close()` or by itself).
    public private(set) var isClosed = false

    /// Wraps an unopened pair. `maxFrameLength` bounds the frames it accepts.
    public init(input: InputStream, output: OutputStream, maxFrameLength: Int = FrameDecoder.defaultMaxFrameLength) {
        self.input = input
        self.output = output
        decoder = FrameDecoder(maxFrameLength: maxFrameLength)
        super.init()
    }

    /// Schedules the pair on `runLoop` (the current thread's) and opens it.
    public func open(in runLoop: RunLoop, forMode mode: RunLoop.Mode = .default) {
        keepAlive = self
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: mode)
            stream.open()
        }
    }

    /// Queues one frame; it goes out as the socket takes it.
    public func send(_ payload: [UInt8]) {
        guard !isClosed else { return }
        unsent += encodeFrame(payload)
        flush()
    }

    /// Closes after reading and discarding what has already arrived: closing a socket with unread
    /// bytes makes the kernel send a reset, which the peer would see as a failure rather than an
    /// orderly close. The example's server drops connections this way.
    public func drop() {
        var scratch = [UInt8](repeating: 0, count: 4096)
        while !isClosed, input.hasBytesAvailable, input.read(&scratch, maxLength: scratch.count) > 0 {}
        close()
    }

    /// Closes both streams. No callback follows.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        input.close()
        output.close()
        keepAlive = nil
    }

    /// The streams' events: ready on the first space, frames from the bytes, the end on end or error.
    public func stream(_ stream: Stream, handle event: Stream.Event) {
        guard !isClosed else { return }
        switch event {
        case .hasSpaceAvailable:
            if !ready {
                ready = true
                onReady?()
            }
            flush()
        case .hasBytesAvailable:
            // One read per event: if bytes are left, the event comes again.
            let count = input.read(&readBuffer, maxLength: readBuffer.count)
            guard count > 0 else { return }
            decoder.append(readBuffer[..<count])
            do {
                while !isClosed, let frame = try decoder.nextFrame() { onFrame?(frame) }
            } catch {
                end(.badFrame(error.description))
            }
        case .endEncountered:
            end(.peerClosed)
        case .errorOccurred:
            end(.streamError(Self.describe(stream.streamError)))
        default:
            break
        }
    }

    /// One write of what is queued, if the socket has room; the rest waits for `hasSpaceAvailable`.
    private func flush() {
        guard ready, !unsent.isEmpty, output.hasSpaceAvailable else { return }
        let count = output.write(unsent, maxLength: unsent.count)
        if count > 0 { unsent.removeFirst(count) }
    }

    private func end(_ error: ChannelError) {
        close()
        onClose?(error)
    }

    /// A short, stable text for a stream error: the POSIX message for POSIX errors ("Connection refused").
    private static func describe(_ error: Error?) -> String {
        guard let error = error as NSError? else { return "unknown stream error" }
        if error.domain == NSPOSIXErrorDomain, let message = strerror(Int32(error.code)) { return String(cString: message) }
        return "\(error.domain) \(error.code)"
    }
}
