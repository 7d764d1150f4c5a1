import Foundation

/// The error domain of GCDAsyncSocket's own failures: "GCDAsyncSocketErrorDomain" (`GCDAsyncSocketErrorDomain`).
public let GCDAsyncSocketErrorDomain = "GCDAsyncSocketErrorDomain"

/// "GCDAsyncSocket" (`GCDAsyncSocketQueueName`): the label of the private queue GCDAsyncSocket makes for
/// a socket given no socket queue; here such a socket works on the package's stream thread instead.
public let GCDAsyncSocketQueueName = "GCDAsyncSocket"

/// "GCDAsyncSocketException" (`GCDAsyncSocketException`): declared by GCDAsyncSocket and never raised, here too.
public let GCDAsyncSocketException = "GCDAsyncSocketException"

/// The domain of GCDAsyncSocket's TLS failures (its `sslError:`), "kCFStreamErrorDomainSSL": the code is
/// the SecureTransport status (−9807 an invalid chain, −9825 a trust the delegate refused, −9806 a
/// connection cut during the handshake). GCDAsyncSocket names the domain by this string, not by
/// CFNetwork's integer `kCFStreamErrorDomainSSL`; the stream pairs report `NSOSStatusErrorDomain`.
public let GCDAsyncSocketSSLErrorDomain = "kCFStreamErrorDomainSSL"
/// "GCDAsyncSocket-CFStream" (`GCDAsyncSocketThreadName`): the CFStream thread's name on iOS; no such thread here.
public let GCDAsyncSocketThreadName = "GCDAsyncSocket-CFStream"

/// GCDAsyncSocket's failures in ``GCDAsyncSocketErrorDomain``, as Swift sees the `NS_ERROR_ENUM`
/// `GCDAsyncSocketError` on Apple platforms: `catch let error as GCDAsyncSocketError`,
/// `catch GCDAsyncSocketError.readTimeoutError`, `error.code == .closedError`, or
/// `(error as NSError).code == GCDAsyncSocketError.Code.closedError.rawValue`.
public struct GCDAsyncSocketError: CustomNSError, LocalizedError, Hashable, Sendable {
    /// The codes of `GCDAsyncSocketError` (`GCDAsyncSocketNoError` … `GCDAsyncSocketOtherError`).
    public enum Code: Int, Sendable, Hashable {
        /// 0, never used (`GCDAsyncSocketNoError`).
        case noError = 0
        /// 1: a missing delegate or delegate queue, a socket not disconnected, both families disabled (`GCDAsyncSocketBadConfigError`).
        case badConfigError = 1
        /// 2: an invalid host, interface, address or URL (`GCDAsyncSocketBadParamError`).
        case badParamError = 2
        /// 3: the connect timeout passed (`GCDAsyncSocketConnectTimeoutError`).
        case connectTimeoutError = 3
        /// 4: a read's timeout passed and was not extended (`GCDAsyncSocketReadTimeoutError`).
        case readTimeoutError = 4
        /// 5: a write's timeout passed and was not extended (`GCDAsyncSocketWriteTimeoutError`).
        case writeTimeoutError = 5
        /// 6: a read to a terminator reached its maximum length (`GCDAsyncSocketReadMaxedOutError`).
        case readMaxedOutError = 6
        /// 7: the peer closed the connection (`GCDAsyncSocketClosedError`).
        case closedError = 7
        /// 8: anything else, with a message (`GCDAsyncSocketOtherError`).
        case otherError = 8
    }

    /// The code.
    public let code: Code
    /// The message (`NSLocalizedDescriptionKey`).
    public let message: String

    /// An error with `code` and `message` (by default GCDAsyncSocket's sentence for the code).
    public init(_ code: Code, message: String? = nil) {
        self.code = code
        self.message = message ?? Self.defaultMessage(code)
    }

    /// "GCDAsyncSocketErrorDomain".
    public static var errorDomain: String { GCDAsyncSocketErrorDomain }
    /// The code's raw value.
    public var errorCode: Int { code.rawValue }
    /// `NSLocalizedDescriptionKey`: the message.
    public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: message] }
    /// The message.
    public var errorDescription: String? { message }

    /// `GCDAsyncSocketError.noError`, and so on for every code: `catch GCDAsyncSocketError.closedError`.
    public static let noError = Code.noError
    /// `GCDAsyncSocketBadConfigError`.
    public static let badConfigError = Code.badConfigError
    /// `GCDAsyncSocketBadParamError`.
    public static let badParamError = Code.badParamError
    /// `GCDAsyncSocketConnectTimeoutError`.
    public static let connectTimeoutError = Code.connectTimeoutError
    /// `GCDAsyncSocketReadTimeoutError`.
    public static let readTimeoutError = Code.readTimeoutError
    /// `GCDAsyncSocketWriteTimeoutError`.
    public static let writeTimeoutError = Code.writeTimeoutError
    /// `GCDAsyncSocketReadMaxedOutError`.
    public static let readMaxedOutError = Code.readMaxedOutError
    /// `GCDAsyncSocketClosedError`.
    public static let closedError = Code.closedError
    /// `GCDAsyncSocketOtherError`.
    public static let otherError = Code.otherError

    private static func defaultMessage(_ code: Code) -> String {
        switch code {
        case .noError: return "No error"
        case .badConfigError: return "Bad configuration"
        case .badParamError: return "Bad parameter"
        case .connectTimeoutError: return "Attempt to connect to host timed out"
        case .readTimeoutError: return "Read operation timed out"
        case .writeTimeoutError: return "Write operation timed out"
        case .readMaxedOutError: return "Read operation reached set maximum length"
        case .closedError: return "Socket closed by remote peer"
        case .otherError: return "Other error"
        }
    }
}

/// Whether `error` is a ``GCDAsyncSocketError`` (or an `NSError` in its domain) with `code`: the
/// match behind `catch GCDAsyncSocketError.readTimeoutError`.
public func ~= (code: GCDAsyncSocketError.Code, error: any Error) -> Bool {
    if let error = error as? GCDAsyncSocketError { return error.code == code }
    let error = error as NSError
    return error.domain == GCDAsyncSocketErrorDomain && error.code == code.rawValue
}
