// The operations layer's own failures, as a struct with a code (the shape of swift-certificates'
// CertificateError) rather than an enum: a new failure is a new static member, which breaks no
// user's exhaustive switch, while the spellings an enum allowed keep compiling.

import Foundation

/// The failures the operations layer adds to the streams' own errors (which pass through unchanged),
/// GCDAsyncSocket's `GCDAsyncSocketError` for ``QueuedSocket`` and ``AsyncConnection``.
///
/// A struct with a ``code`` and the values the failure carries (``tag``, ``maxLength``, ``unread``),
/// so that a failure can be added without breaking code that matches them. Match the whole error,
/// values included, or only its code:
///
/// ```
/// catch StreamOperationError.closed { … }                       // the whole error
/// catch let error as StreamOperationError where error.code == .closedByPeer {
///     … error.unread …                                          // any error with that code
/// }
/// if error as? StreamOperationError == .readTimedOut(tag: 3) { … }
/// switch failure.code {
/// case .readTimedOut, .writeTimedOut: … failure.tag …
/// default: …                                                    // codes may be added
/// }
/// ```
///
/// Bridged to `NSError` in ``errorDomain`` with the code's ``Code/rawValue`` (1 to 9), as GCDAsyncSocket
/// reports its own in `GCDAsyncSocketErrorDomain`.
public struct StreamOperationError: Error, Hashable, Sendable, CustomNSError, LocalizedError, CustomStringConvertible {
    /// What failed, without the values: GCDAsyncSocket's `GCDAsyncSocketError` codes for the failures
    /// it shares. Compare with `==`, or `switch` with a `default:` (codes may be added).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        // Private to this file: the error switches over it exhaustively, so a new code cannot be
        // added without its sentence.
        fileprivate enum Kind: Int, Sendable {
            case readTimedOut = 1
            case writeTimedOut, readMaxedOut, closedByPeer, bytesBeforeTLS, tlsSettingsRefused, closed, alreadyConnected, notOpen
        }

        fileprivate let kind: Kind

        private init(_ kind: Kind) { self.kind = kind }

        /// A read's timeout passed and the delegate gave no extension (`GCDAsyncSocketReadTimeoutError`).
        public static let readTimedOut = Code(.readTimedOut)
        /// A write's timeout passed and the delegate gave no extension (`GCDAsyncSocketWriteTimeoutError`).
        public static let writeTimedOut = Code(.writeTimedOut)
        /// A delimiter read reached its `maxLength` without the delimiter (`GCDAsyncSocketReadMaxedOutError`).
        public static let readMaxedOut = Code(.readMaxedOut)
        /// The peer closed the connection before a read could complete (`GCDAsyncSocketClosedError`).
        public static let closedByPeer = Code(.closedByPeer)
        /// Bytes arrived before a queued TLS handshake began (`GCDAsyncSocketOtherError` in GCDAsyncSocket,
        /// which has no code of its own for it).
        public static let bytesBeforeTLS = Code(.bytesBeforeTLS)
        /// The pair did not accept the TLS settings (`GCDAsyncSocketOtherError`).
        public static let tlsSettingsRefused = Code(.tlsSettingsRefused)
        /// The connection was closed before the operation could run (`GCDAsyncSocketClosedError`).
        public static let closed = Code(.closed)
        /// `connect` or `accept` on a socket already connected or listening (`GCDAsyncSocketBadConfigError`).
        public static let alreadyConnected = Code(.alreadyConnected)
        /// A read, write or TLS upgrade on an ``AsyncConnection`` whose `open()` was never called (as
        /// `read` of an unopened `InputStream` fails; GCDAsyncSocket drops operations on a socket not started).
        public static let notOpen = Code(.notOpen)

        /// The `NSError` code (`CustomNSError.errorCode`): 1 read timed out, 2 write timed out, 3 read
        /// maxed out, 4 closed by peer, 5 bytes before TLS, 6 TLS settings refused, 7 closed, 8 already
        /// connected, 9 not open.
        public var rawValue: Int { kind.rawValue }

        /// The code's name, as the enum case it replaces was spelled: "readTimedOut", "closed"….
        public var description: String { "\(kind)" }

        // No `~=(Code, any Error)` for `catch StreamOperationError.Code.x`: it would make `case .closed:`
        // in a `switch` over the error ambiguous (the error's `closed` or the code's). Match a code with
        // `catch let error as StreamOperationError where error.code == .x`.
    }

    /// What failed.
    public let code: Code
    /// The tag of the read or write that failed: set for ``Code/readTimedOut``, ``Code/writeTimedOut``
    /// and ``Code/readMaxedOut``, nil otherwise.
    public let tag: Int?
    /// The limit a delimiter read reached: set for ``Code/readMaxedOut``, nil otherwise.
    public let maxLength: Int?
    /// The bytes that had arrived and were not handed out: for ``Code/closedByPeer``, those of the read
    /// that could not complete (so nothing is lost); for ``Code/bytesBeforeTLS``, those that came
    /// before the handshake. Empty for the other codes.
    public let unread: [UInt8]

    private init(_ code: Code, tag: Int? = nil, maxLength: Int? = nil, unread: [UInt8] = []) {
        self.code = code
        self.tag = tag
        self.maxLength = maxLength
        self.unread = unread
    }

    /// A read's timeout passed and the delegate gave no extension (`GCDAsyncSocketReadTimeoutError`).
    public static func readTimedOut(tag: Int) -> StreamOperationError { StreamOperationError(.readTimedOut, tag: tag) }

    /// A write's timeout passed and the delegate gave no extension (`GCDAsyncSocketWriteTimeoutError`).
    public static func writeTimedOut(tag: Int) -> StreamOperationError { StreamOperationError(.writeTimedOut, tag: tag) }

    /// A delimiter read reached its `maxLength` without the delimiter (`GCDAsyncSocketReadMaxedOutError`).
    public static func readMaxedOut(maxLength: Int, tag: Int) -> StreamOperationError {
        StreamOperationError(.readMaxedOut, tag: tag, maxLength: maxLength)
    }

    /// The peer closed the connection before a read could complete. `unread` holds the bytes that had
    /// arrived for it, so nothing is lost (`GCDAsyncSocketClosedError`).
    public static func closedByPeer(unread: [UInt8]) -> StreamOperationError { StreamOperationError(.closedByPeer, unread: unread) }

    /// Bytes arrived before a queued TLS handshake began; they cannot be handed to TLS, so the connection
    /// is closed rather than guess. `unread` holds them (`GCDAsyncSocketOtherError` in GCDAsyncSocket).
    public static func bytesBeforeTLS(unread: [UInt8]) -> StreamOperationError { StreamOperationError(.bytesBeforeTLS, unread: unread) }

    /// The pair did not accept the TLS settings: `setProperty` returned false (`GCDAsyncSocketOtherError`).
    public static let tlsSettingsRefused = StreamOperationError(.tlsSettingsRefused)

    /// The connection was closed (by `disconnect()`, `close()` or an earlier failure) before the
    /// operation could run (`GCDAsyncSocketClosedError`).
    public static let closed = StreamOperationError(.closed)

    /// `connect` or `accept` on a socket that is already connected or listening
    /// (`GCDAsyncSocketBadConfigError`'s "Attempting to connect while connected or accepting connections").
    public static let alreadyConnected = StreamOperationError(.alreadyConnected)

    /// A read, write or TLS upgrade on an ``AsyncConnection`` whose `open()` was never called: it
    /// would wait for ever, so it throws at once and nothing is queued (a read of an unopened
    /// `InputStream` fails the same way).
    public static let notOpen = StreamOperationError(.notOpen)

    /// Whether `error` is this error, values included: the match behind `catch StreamOperationError.closed`.
    public static func ~= (pattern: StreamOperationError, error: any Error) -> Bool {
        (error as? StreamOperationError) == pattern
    }

    /// "SocketStreams.StreamOperationError".
    public static var errorDomain: String { "SocketStreams.StreamOperationError" }

    /// The code's ``Code/rawValue``: 1 read timed out, 2 write timed out, 3 read maxed out, 4 closed by
    /// peer, 5 bytes before TLS, 6 TLS settings refused, 7 closed, 8 already connected, 9 not open.
    public var errorCode: Int { code.rawValue }

    /// A sentence saying what happened.
    public var errorDescription: String? {
        switch code.kind {
        case .readTimedOut: return "the read with tag \(tag ?? 0) timed out"
        case .writeTimedOut: return "the write with tag \(tag ?? 0) timed out"
        case .readMaxedOut:
            return "the read with tag \(tag ?? 0) reached its maximum length of \(maxLength ?? 0) bytes without finding its delimiter"
        case .closedByPeer:
            return "the peer closed the connection" + (unread.isEmpty ? "" : " (\(unread.count) bytes arrived for an unfinished read)")
        case .bytesBeforeTLS: return "\(unread.count) bytes arrived before the TLS handshake could start"
        case .tlsSettingsRefused: return "the stream pair refused the TLS settings"
        case .closed: return "the connection is closed"
        case .alreadyConnected: return "Attempting to connect while connected or accepting connections. Disconnect first."
        case .notOpen: return "the connection is not open: call open() first"
        }
    }

    /// The same sentence, for `NSError.localizedDescription`.
    public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: errorDescription ?? ""] }

    /// The code and its values as the enum this type replaces printed them: "closed",
    /// "readTimedOut(tag: 2)", "closedByPeer(unread: [104, 105])".
    public var description: String {
        var values: [String] = []
        if let maxLength { values.append("maxLength: \(maxLength)") }
        if let tag { values.append("tag: \(tag)") }
        if code == .closedByPeer || code == .bytesBeforeTLS { values.append("unread: \(unread)") }
        return values.isEmpty ? code.description : "\(code)(\(values.joined(separator: ", ")))"
    }
}
