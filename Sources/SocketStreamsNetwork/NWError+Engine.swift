// What the engine's errors are as Network.framework reports them: a socket's errno as `.posix`, a failed
// name lookup as `.dns` with DNS-SD's code, a TLS failure as `.tls` with SecureTransport's status (the
// engine already speaks SecureTransport's codes in `NSOSStatusErrorDomain`), and whether a failed
// connect is one Network.framework waits on (`.waiting`) or gives up on (`.failed`).

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

extension NWError {
    /// `error` (an engine, stream or resolver error) as an `NWError`.
    init(engineError error: any Error) {
        if let error = error as? NWError {
            self = error
            return
        }
        if let failure = error as? StreamOperationError {
            switch failure.code {
            case .readTimedOut, .writeTimedOut: self = .posix(.ETIMEDOUT)
            case .closedByPeer: self = .posix(.ECONNRESET)
            case .alreadyConnected: self = .posix(.EISCONN)
            case .tlsSettingsRefused: self = .tls(-9830)  // errSSLIllegalParam
            default: self = .posix(.ENOTCONN)
            }
            return
        }
        let error = error as NSError
        let cfNetwork = String(describing: kCFErrorDomainCFNetwork)
        switch error.domain {
        case NSPOSIXErrorDomain:
            self = .posix(POSIXErrorCode(rawValue: Int32(truncatingIfNeeded: error.code)) ?? .EIO)
        case "NSOSStatusErrorDomain":
            self = .tls(Self.networkFrameworkStatus(OSStatus(truncatingIfNeeded: error.code)))
        case cfNetwork where error.code == 2:
            let code = (error.userInfo[String(describing: kCFGetAddrInfoFailureKey)] as? NSNumber)?.int32Value ?? 0
            self = .dns(Self.dnsCode(addrInfoFailure: code))
        case cfNetwork:
            // A proxy's refusal or a malformed proxy reply: the proxy's words are in the message; the
            // connection could not be made through it.
            self = .posix(.ECONNREFUSED)
        default:
            self = .posix(.EIO)
        }
    }

    /// The status Network.framework reports for the engine's SecureTransport `status`: a chain the default
    /// evaluation does not trust for want of a root (the engine's errSSLUnknownRootCert −9812 and
    /// errSSLNoRootCert −9813) is errSSLXCertChainInvalid (−9807), as Apple's "default TLS Trust
    /// evaluation failed(-9807)" reports it; every other status is the engine's.
    static func networkFrameworkStatus(_ status: OSStatus) -> OSStatus {
        status == errSSLUnknownRootCert || status == errSSLNoRootCert ? errSSLXCertChainInvalid : status
    }

    /// DNS-SD's code for a `getaddrinfo` failure: no such name (or no address of the family asked for)
    /// is `kDNSServiceErr_NoSuchRecord`, a temporary failure `kDNSServiceErr_Timeout` (what Apple's
    /// resolver reports when no server answers), out of memory `kDNSServiceErr_NoMemory`, the rest
    /// `kDNSServiceErr_Unknown`.
    static func dnsCode(addrInfoFailure code: Int32) -> DNSServiceErrorType {
        switch code {
        case EAI_NONAME, EAI_FAIL, -5, -9: -65554  // -5 EAI_NODATA, -9 EAI_ADDRFAMILY (glibc's, not imported)
        case EAI_AGAIN: -65568
        case EAI_MEMORY: -65539
        default: -65537
        }
    }

    /// Whether a connect that failed with this error leaves the connection `.waiting` (to be retried on
    /// `restart()` or a change in the host's network) rather than `.failed`, as on Apple platforms:
    /// refusals, unreachable hosts and networks, timeouts and failed lookups wait; TLS, what Linux cannot do
    /// (a Bonjour service) and the rest fail.
    var isWaitable: Bool {
        switch self {
        case .dns(let code): code != -65544 && code != -65540  // Unsupported (Bonjour) and BadParam cannot improve
        case .tls: false
        case .posix(let code):
            switch code {
            case .ECONNREFUSED, .ENETDOWN, .ENETUNREACH, .EHOSTUNREACH, .EHOSTDOWN, .ETIMEDOUT, .ENOENT, .EADDRNOTAVAIL,
                .ECONNRESET, .ECONNABORTED:
                true
            default: false
            }
        }
    }
}
