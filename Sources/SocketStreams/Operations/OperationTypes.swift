// What the operations engine takes and gives: read requests, its errors, the events it reports to
// its client (QueuedSocket, AsyncConnection) and that client's protocol.

import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What a queued read waits for.
package enum ReadRequest: Sendable, Equatable {
    /// Exactly this many bytes.
    case length(Int)
    /// Up to and including the first occurrence of the delimiter; fails once `maxLength` (0: no limit)
    /// bytes have arrived without it.
    case delimiter([UInt8], maxLength: Int)
    /// Whatever has arrived, at least one byte and at most `maxLength` (0: no limit).
    case available(maxLength: Int)
}

/// The failures the operations layer adds to the streams' own errors (which pass through unchanged).
///
/// Bridged to `NSError` in ``StreamOperationError/errorDomain`` with the codes below, as GCDAsyncSocket
/// reports its own in `GCDAsyncSocketErrorDomain`.
public enum StreamOperationError: Error, Sendable, Equatable, CustomNSError, LocalizedError {
    /// A read's timeout passed and the delegate gave no extension (GCDAsyncSocketReadTimeoutError).
    case readTimedOut(tag: Int)
    /// A write's timeout passed and the delegate gave no extension (GCDAsyncSocketWriteTimeoutError).
    case writeTimedOut(tag: Int)
    /// A delimiter read reached its `maxLength` without the delimiter (GCDAsyncSocketReadMaxedOutError).
    case readMaxedOut(maxLength: Int, tag: Int)
    /// The peer closed the connection before a read could complete. `unread` holds the bytes that had
    /// arrived for it, so nothing is lost (GCDAsyncSocketClosedError).
    case closedByPeer(unread: [UInt8])
    /// Bytes arrived before a queued TLS handshake began; they cannot be handed to TLS, so the connection
    /// is closed rather than guess. `unread` holds them.
    case bytesBeforeTLS(unread: [UInt8])
    /// The pair did not accept the TLS settings (`setProperty` returned false).
    case tlsSettingsRefused
    /// The connection was closed (by `disconnect()`, `close()` or an earlier failure) before the
    /// operation could run.
    case closed
    /// `connect` or `accept` on a socket that is already connected or listening
    /// (GCDAsyncSocketBadConfigError's "Attempting to connect while connected or accepting connections").
    case alreadyConnected

    /// "SocketStreams.StreamOperationError".
    public static var errorDomain: String { "SocketStreams.StreamOperationError" }

    /// 1 read timeout, 2 write timeout, 3 read maxed out, 4 closed by peer, 5 bytes before TLS,
    /// 6 TLS settings refused, 7 closed, 8 already connected.
    public var errorCode: Int {
        switch self {
        case .readTimedOut: return 1
        case .writeTimedOut: return 2
        case .readMaxedOut: return 3
        case .closedByPeer: return 4
        case .bytesBeforeTLS: return 5
        case .tlsSettingsRefused: return 6
        case .closed: return 7
        case .alreadyConnected: return 8
        }
    }

    /// A sentence saying what happened.
    public var errorDescription: String? {
        switch self {
        case .readTimedOut(let tag): return "the read with tag \(tag) timed out"
        case .writeTimedOut(let tag): return "the write with tag \(tag) timed out"
        case .readMaxedOut(let maxLength, let tag):
            return "the read with tag \(tag) reached its maximum length of \(maxLength) bytes without finding its delimiter"
        case .closedByPeer(let unread):
            return "the peer closed the connection" + (unread.isEmpty ? "" : " (\(unread.count) bytes arrived for an unfinished read)")
        case .bytesBeforeTLS(let unread): return "\(unread.count) bytes arrived before the TLS handshake could start"
        case .tlsSettingsRefused: return "the stream pair refused the TLS settings"
        case .closed: return "the connection is closed"
        case .alreadyConnected: return "Attempting to connect while connected or accepting connections. Disconnect first."
        }
    }

    /// The same sentence, for `NSError.localizedDescription`.
    public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: errorDescription ?? ""] }
}

/// Which queue a timeout belongs to.
package enum OperationDirection: Sendable {
    case read
    case write
}

/// What the engine tells its client, in order, outside its lock.
package enum OperationEvent {
    /// The pair is ready: open, and any proxy or TLS handshake set before `open()` done.
    case ready
    /// A read completed.
    case read([UInt8], tag: Int)
    /// A read got this many more bytes but is not complete.
    case readPartial(Int, tag: Int)
    /// A read cannot complete: the stream is at its end. `unread` holds the bytes that had arrived.
    case readEnded(unread: [UInt8], tag: Int)
    /// The input stream reached its end (once). `pendingReads` is how many reads were then queued.
    case ended(pendingReads: Int)
    /// A write completed: every byte was accepted by the kernel.
    case wrote(tag: Int)
    /// A write moved this many bytes but is not complete.
    case wrotePartial(Int, tag: Int)
    /// A queued TLS handshake finished.
    case secured
    /// The half-close queued with `tag` is done: TLS's close_notify (over TLS) and the FIN went to the
    /// kernel; the input stays open.
    case outputShutDown(tag: Int)
    /// The pair is closed (once): nil after `close(error: nil)`, else the reason. Queued operations
    /// that had not completed are dropped.
    case closed(Error?)
}

/// The engine's client: `QueuedSocket` or `AsyncConnection`.
protocol StreamOperationsClient: AnyObject, Sendable {
    /// Handles one event (see `OperationEvent`).
    func operations(_ operations: StreamOperations, handle event: OperationEvent)
    /// A timeout passed for the operation with `tag` after `elapsed` seconds with `bytesDone` moved.
    /// Returns the extension in seconds, or 0 or less to fail the operation.
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double
    /// The same question answered later, from any thread: `answer` (called once) takes the extension.
    /// GCDAsyncSocket asks its delegate on the delegate queue and comes back. The default answers at
    /// once with the synchronous method.
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    )
}

extension StreamOperationsClient {
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    ) {
        answer(self.operations(operations, shouldTimeOut: direction, tag: tag, elapsed: elapsed, bytesDone: bytesDone))
    }
}
