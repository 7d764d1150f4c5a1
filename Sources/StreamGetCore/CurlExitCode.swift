import Foundation
import HTTPParsing
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// curl's exit codes (`CURLcode`, listed in curl's man page under EXIT CODES) that `stream-get` uses, and the
/// mapping from a stream error's domain and code onto them.
public enum CurlExitCode {
    /// 0: the transfer completed (whatever the HTTP status, unless `-f`).
    public static let ok: Int32 = 0
    /// 1 (`CURLE_UNSUPPORTED_PROTOCOL`): a URL or a redirect with a scheme other than http or https.
    public static let unsupportedProtocol: Int32 = 1
    /// 2 (`CURLE_FAILED_INIT`; curl's exit status for a bad command line): a usage error.
    public static let usage: Int32 = 2
    /// 3 (`CURLE_URL_MALFORMAT`): a URL that cannot be parsed (a port outside 0…65535, a bad host…).
    public static let urlMalformed: Int32 = 3
    /// 5 (`CURLE_COULDNT_RESOLVE_PROXY`): a proxy that cannot be used (bad syntax or port), or whose name
    /// does not resolve.
    public static let couldNotResolveProxy: Int32 = 5
    /// 6 (`CURLE_COULDNT_RESOLVE_HOST`): the host name did not resolve.
    public static let couldNotResolveHost: Int32 = 6
    /// 7 (`CURLE_COULDNT_CONNECT`): the connection (to the server or the proxy) was refused or unreachable.
    public static let couldNotConnect: Int32 = 7
    /// 8 (`CURLE_WEIRD_SERVER_REPLY`): the response could not be parsed.
    public static let weirdServerReply: Int32 = 8
    /// 18 (`CURLE_PARTIAL_FILE`): the connection closed before the body was complete.
    public static let partialFile: Int32 = 18
    /// 22 (`CURLE_HTTP_RETURNED_ERROR`): `-f` and a status of 400 or more.
    public static let httpReturnedError: Int32 = 22
    /// 23 (`CURLE_WRITE_ERROR`): the output file could not be created, written or renamed.
    public static let writeError: Int32 = 23
    /// 28 (`CURLE_OPERATION_TIMEDOUT`): `--timeout`/`-m`, or a connect that timed out.
    public static let timedOut: Int32 = 28
    /// 35 (`CURLE_SSL_CONNECT_ERROR`): the TLS handshake failed (no common version, a client certificate
    /// refused or missing…).
    public static let sslConnectError: Int32 = 35
    /// 47 (`CURLE_TOO_MANY_REDIRECTS`): `-L` went past `--max-redirs`.
    public static let tooManyRedirects: Int32 = 47
    /// 52 (`CURLE_GOT_NOTHING`): the server closed the connection without a byte of response.
    public static let gotNothing: Int32 = 52
    /// 55 (`CURLE_SEND_ERROR`): writing the request failed.
    public static let sendError: Int32 = 55
    /// 56 (`CURLE_RECV_ERROR`): reading the response failed (a reset), or an HTTP proxy refused CONNECT.
    public static let receiveError: Int32 = 56
    /// 58 (`CURLE_SSL_CERTPROBLEM`): the client certificate or key could not be used.
    public static let sslCertificateProblem: Int32 = 58
    /// 60 (`CURLE_PEER_FAILED_VERIFICATION`): the server certificate is not trusted or not for the host.
    public static let peerFailedVerification: Int32 = 60
    /// 90 (`CURLE_SSL_PINNEDPUBKEYNOTMATCH`): the server's key is not one of `--pinnedpubkey`'s.
    public static let pinnedPublicKeyMismatch: Int32 = 90
    /// 97 (`CURLE_PROXY`): a SOCKS proxy refused or answered something malformed.
    public static let proxyHandshake: Int32 = 97

    /// The exit code for a stream error (its domain and code, as Guides/HandlingErrors.md lists them).
    /// - Parameters:
    ///   - error: the stream's `streamError`.
    ///   - writing: whether the request was being written (a reset then is a send error, not a receive error).
    ///   - viaProxy: whether a proxy was in the way (a name that does not resolve is then the proxy's).
    public static func code(for error: Error?, writing: Bool, viaProxy: Bool) -> Int32 {
        guard let error else { return receiveError }
        let nsError = error as NSError
        switch nsError.domain {
        case NSPOSIXErrorDomain:
            switch Int32(nsError.code) {
            case ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, EADDRNOTAVAIL, ENETDOWN, EHOSTDOWN: return couldNotConnect
            case ETIMEDOUT: return timedOut
            default: return writing ? sendError : receiveError
            }
        case "kCFErrorDomainCFNetwork":
            switch nsError.code {
            case 2: return viaProxy ? couldNotResolveProxy : couldNotResolveHost
            case 307, 311: return receiveError  // curl: "Received HTTP code 407 from proxy after CONNECT" is 56
            default: return proxyHandshake
            }
        case NSOSStatusErrorDomain:
            switch nsError.code {
            case -9807 where nsError.localizedDescription.contains("pinned public key"): return pinnedPublicKeyMismatch
            case -9813, -9812, -9807, -9843, -9814, -9815, -9808: return peerFailedVerification
            case -9848 where nsError.localizedDescription.contains("certificate") || nsError.localizedDescription.contains("key"):
                return sslCertificateProblem
            case -9806, -9816: return receiveError
            default: return sslConnectError
            }
        default:
            return receiveError
        }
    }

    /// The exit code for a response the parser rejected: 52 for nothing at all, 18 for a response cut short,
    /// 8 for bytes that are not an HTTP/1.x response.
    public static func code(for error: HTTPResponseParserError) -> Int32 {
        switch error {
        case .emptyResponse: return gotNothing
        case .truncatedHead, .truncatedBody, .truncatedChunkedBody: return partialFile
        default: return weirdServerReply
        }
    }
}
