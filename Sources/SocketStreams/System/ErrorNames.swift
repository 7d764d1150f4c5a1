// CoreFoundation's names for what errors carry, at the bottom so that every layer that reports an
// error can use them: `CFString` (an `NSString` here), CFNetwork's error domain and the userInfo keys
// of a `CFStreamError`, and POSIX errors in CFNetwork's shape. `StreamErrors.error(for:target:)`,
// which turns a `StreamFailure` into an error, is the Connection layer's (Connection/StreamErrors.swift).

import Foundation

/// `CFString`: `NSString` here, so a `String` or `NSString` converts with `as CFString`.
public typealias CFString = NSString

/// The names and shapes of the `NSError`s CFNetwork reports for socket streams.
enum StreamErrors {
    /// `kCFErrorDomainCFNetwork`.
    static let cfNetworkDomain = "kCFErrorDomainCFNetwork"
    /// The userInfo key holding the original `CFStreamError.error`.
    static let streamErrorCodeKey = "_kCFStreamErrorCodeKey"
    /// The userInfo key holding the original `CFStreamError.domain`.
    static let streamErrorDomainKey = "_kCFStreamErrorDomainKey"
    /// `kCFGetAddrInfoFailureKey`: the raw getaddrinfo() code.
    static let getAddrInfoFailureKey = "kCFGetAddrInfoFailureKey"

    /// `kCFStreamErrorDomainPOSIX`.
    static let posixStreamDomain = 1
    /// `kCFStreamErrorDomainNetDB`.
    static let netDBStreamDomain = 12

    /// A POSIX error (`NSPOSIXErrorDomain`, code = errno), e.g. ECONNREFUSED from connect.
    static func posix(_ code: Int32, _ what: String) -> NSError {
        NSError(
            domain: NSPOSIXErrorDomain, code: Int(code),
            userInfo: [
                streamErrorCodeKey: Int(code),
                streamErrorDomainKey: posixStreamDomain,
                NSLocalizedDescriptionKey: "\(what): \(Posix.errorString(code))",
            ])
    }
}
