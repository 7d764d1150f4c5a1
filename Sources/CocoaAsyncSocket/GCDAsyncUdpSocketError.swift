import Foundation

/// The error domain of GCDAsyncUdpSocket's own failures: "GCDAsyncUdpSocketErrorDomain"
/// (`GCDAsyncUdpSocketErrorDomain`).
public let GCDAsyncUdpSocketErrorDomain = "GCDAsyncUdpSocketErrorDomain"

/// "GCDAsyncUdpSocket" (`GCDAsyncUdpSocketQueueName`): the label of the private queue GCDAsyncUdpSocket
/// makes for a socket given no socket queue; here such a socket works on the package's stream thread.
public let GCDAsyncUdpSocketQueueName = "GCDAsyncUdpSocket"

/// "GCDAsyncUdpSocketException" (`GCDAsyncUdpSocketException`): declared and never raised, here too.
public let GCDAsyncUdpSocketException = "GCDAsyncUdpSocketException"

/// "GCDAsyncUdpSocket-CFStream" (`GCDAsyncUdpSocketThreadName`): the CFStream thread's name on iOS; no
/// such thread here.
public let GCDAsyncUdpSocketThreadName = "GCDAsyncUdpSocket-CFStream"

/// The domain of resolver failures (`kCFStreamErrorDomainNetDB`, as GCDAsyncUdpSocket spells it): the
/// code is glibc's `EAI_*` value, the description `gai_strerror`'s.
let netDBErrorDomain = "kCFStreamErrorDomainNetDB"

/// GCDAsyncUdpSocket's failures in ``GCDAsyncUdpSocketErrorDomain``, as Swift sees the `NS_ERROR_ENUM`
/// `GCDAsyncUdpSocketError` on Apple platforms: `catch let error as GCDAsyncUdpSocketError`,
/// `error.code == .closedError`, `GCDAsyncUdpSocketError(.closedError, userInfo: [...])`. Numbered as
/// GCDAsyncUdpSocket numbers them, which differs from GCDAsyncSocket's numbering.
public struct GCDAsyncUdpSocketError: CustomNSError, LocalizedError, @unchecked Sendable {
    // @unchecked: `userInfo` holds what the caller put there, as NSError's does.

    /// The codes of `GCDAsyncUdpSocketError` (`GCDAsyncUdpSocketNoError` … `GCDAsyncUdpSocketOtherError`).
    public enum Code: Int, Sendable, Hashable {
        /// 0, never used (`GCDAsyncUdpSocketNoError`).
        case noError = 0
        /// 1: a missing delegate or queue, a second bind or connect, no destination, both families
        /// disabled (`GCDAsyncUdpSocketBadConfigError`).
        case badConfigError = 1
        /// 2: an unknown interface or group, an invalid address (`GCDAsyncUdpSocketBadParamError`).
        case badParamError = 2
        /// 3: a send waited for buffer space longer than its timeout (`GCDAsyncUdpSocketSendTimeoutError`).
        case sendTimeoutError = 3
        /// 4: the socket was closed (`GCDAsyncUdpSocketClosedError`).
        case closedError = 4
        /// 5: anything else, with a message (`GCDAsyncUdpSocketOtherError`).
        case otherError = 5
    }

    /// The code.
    public let code: Code
    /// `NSLocalizedDescriptionKey` and whatever else was given.
    public let userInfo: [String: Any]

    /// An error with `code` and `userInfo`, as the bridged `NS_ERROR_ENUM`'s initialiser makes one.
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        self.code = code
        self.userInfo = userInfo
    }

    /// An error with `code` and `message` as its description.
    init(_ code: Code, message: String) {
        self.init(code, userInfo: [NSLocalizedDescriptionKey: message])
    }

    /// "GCDAsyncUdpSocketErrorDomain".
    public static var errorDomain: String { GCDAsyncUdpSocketErrorDomain }
    /// The code's raw value.
    public var errorCode: Int { code.rawValue }
    /// The user info.
    public var errorUserInfo: [String: Any] { userInfo }
    /// The description given, else GCDAsyncUdpSocket's sentence for the code.
    public var errorDescription: String? { userInfo[NSLocalizedDescriptionKey] as? String ?? Self.defaultMessage(code) }

    /// `GCDAsyncUdpSocketNoError`, and so on for every code.
    public static let noError = Code.noError
    /// `GCDAsyncUdpSocketBadConfigError`.
    public static let badConfigError = Code.badConfigError
    /// `GCDAsyncUdpSocketBadParamError`.
    public static let badParamError = Code.badParamError
    /// `GCDAsyncUdpSocketSendTimeoutError`.
    public static let sendTimeoutError = Code.sendTimeoutError
    /// `GCDAsyncUdpSocketClosedError`.
    public static let closedError = Code.closedError
    /// `GCDAsyncUdpSocketOtherError`.
    public static let otherError = Code.otherError

    private static func defaultMessage(_ code: Code) -> String {
        switch code {
        case .noError: return "No error"
        case .badConfigError: return "Bad configuration"
        case .badParamError: return "Bad parameter"
        case .sendTimeoutError: return "Send operation timed out"
        case .closedError: return "Socket closed"
        case .otherError: return "Other error"
        }
    }
}

/// Whether `error` is a ``GCDAsyncUdpSocketError`` (or an `NSError` in its domain) with `code`: the
/// match behind `catch GCDAsyncUdpSocketError.sendTimeoutError`.
public func ~= (code: GCDAsyncUdpSocketError.Code, error: any Error) -> Bool {
    if let error = error as? GCDAsyncUdpSocketError { return error.code == code }
    let error = error as NSError
    return error.domain == GCDAsyncUdpSocketErrorDomain && error.code == code.rawValue
}

extension NSError {
    /// An `NSPOSIXErrorDomain` error as GCDAsyncUdpSocket makes one: errno as the code, `strerror` as
    /// the description, the failing call as the reason ("Error in bind() function").
    static func udpPOSIX(_ code: Int32, reason: String) -> NSError {
        NSError(
            domain: NSPOSIXErrorDomain, code: Int(code),
            userInfo: [NSLocalizedDescriptionKey: String(cString: strerror(code)), NSLocalizedFailureReasonErrorKey: reason])
    }

    /// A resolver failure in `kCFStreamErrorDomainNetDB`.
    static func udpNetDB(_ code: Int32, message: String) -> NSError {
        NSError(domain: netDBErrorDomain, code: Int(code), userInfo: [NSLocalizedDescriptionKey: message])
    }
}
