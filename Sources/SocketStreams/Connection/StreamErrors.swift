import Foundation
import Glibc

/// Builds the `NSError`s that CFNetwork reports for socket streams (the shapes of
/// `_CFErrorCreateWithStreamError`), with descriptions that name the endpoint.
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
        NSError(domain: NSPOSIXErrorDomain, code: Int(code), userInfo: [
            streamErrorCodeKey: Int(code),
            streamErrorDomainKey: posixStreamDomain,
            NSLocalizedDescriptionKey: "\(what): \(Posix.errorString(code))",
        ])
    }

    /// A name-lookup failure: `kCFErrorDomainCFNetwork` code 2 (`kCFHostErrorUnknown`) with the getaddrinfo code.
    /// `EAI_SYSTEM` is reported as the POSIX errno, as CFNetwork does.
    static func resolution(_ error: ResolutionError, host: String, port: Int) -> NSError {
        if error.code == EAI_SYSTEM, error.systemErrno != 0 {
            return posix(error.systemErrno, "Could not resolve \(host) (port \(port))")
        }
        return NSError(domain: cfNetworkDomain, code: 2, userInfo: [
            getAddrInfoFailureKey: Int(error.code),
            streamErrorCodeKey: Int(error.code),
            streamErrorDomainKey: netDBStreamDomain,
            NSLocalizedDescriptionKey: "Could not resolve host \(host) (port \(port)): \(error.message)",
        ])
    }
}
