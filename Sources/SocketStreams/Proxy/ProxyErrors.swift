// Proxy failures in CFNetwork's terms (moved out of ProxyHandshake.swift).

import Foundation
import Glibc

/// Proxy failures as CFNetwork reports them: `kCFErrorDomainCFNetwork` with the SOCKS codes 100…124 (the
/// `CFStreamError` in domain `kCFStreamErrorDomainSOCKS` packed as `subdomain << 16 | code`), the HTTP
/// proxy codes 303/307/311 (`CFStreamError` domain HTTP), and `ENOTCONN` when the proxy hangs up.
enum ProxyErrors {
    /// `kCFStreamErrorDomainSOCKS`.
    static let socksStreamDomain = 5
    /// `kCFStreamErrorDomainHTTP`.
    static let httpStreamDomain = 4

    static func failure(_ error: ProxyError, configuration: ProxyConfiguration, target: ProxyTarget) -> StreamFailure {
        let proxy = configuration.description
        var code: Int
        var streamDomain = socksStreamDomain
        var streamCode: Int
        var domain = StreamErrors.cfNetworkDomain
        var info: [String: any Sendable] = [
            ProxyConfiguration.errorProxyHostKey: configuration.host,
            ProxyConfiguration.errorProxyPortKey: configuration.port,
        ]
        let message: String
        switch error {
        case .noAcceptableMethod(let offeredCredentials):
            (code, streamCode) = (124, 4 << 16 | 0xFF)
            info[kCFSOCKSStatusCodeKey as String] = "255"
            message =
                offeredCredentials
                ? "\(proxy) accepted neither no authentication nor the username and password offered"
                : "\(proxy) requires authentication, and no username and password were given"
        case .unexpectedMethod(let method):
            (code, streamCode) = (123, 4 << 16 | Int(method))
            info[kCFSOCKSNegotiationMethodKey as String] = String(method)
            info[kCFSOCKSStatusCodeKey as String] = String(method)
            message = "\(proxy) chose authentication method \(method), which was not offered"
        case .badCredentials(let status):
            (code, streamCode) = (122, 3 << 16 | Int(status))
            info[kCFSOCKSStatusCodeKey as String] = String(status)
            message = "\(proxy) rejected the username and password (status \(status))"
        case .socks5Refused(let reply):
            (code, streamCode) = (120, 5 << 16 | Int(reply))
            info[kCFSOCKSStatusCodeKey as String] = String(reply)
            message = "\(proxy) refused the connection to \(target.label): \(socks5ReplyText(reply)) (reply \(reply))"
        case .badAddressType(let type):
            (code, streamCode) = (121, 5 << 16 | 1)
            info[kCFSOCKSStatusCodeKey as String] = String(type)
            message = "\(proxy) replied with an unknown address type (\(type))"
        case .wrongVersion(let got, let expected, let phase):
            (code, streamCode) = (101, 1 << 16 | Int(got))
            info[kCFSOCKSVersionKey as String] = String(got)
            info[kCFSOCKSStatusCodeKey as String] = String(got)
            let reply: String
            switch phase {
            case .methodSelection: reply = "its reply to the greeting"
            case .authentication: reply = "its reply to the username and password"
            case .connectReply: reply = "its reply to the connection request for \(target.label)"
            }
            message = "\(proxy) does not speak \(configuration.kindName): \(reply) has version \(got), not \(expected)"
        case .socks4Rejected(let cd):
            switch cd {
            case 91: code = 110
            case 92: code = 111
            case 93: code = 112
            default: code = 113
            }
            streamCode = 2 << 16 | Int(cd)
            info[kCFSOCKSStatusCodeKey as String] = String(cd)
            message = "\(proxy) rejected the connection to \(target.label): \(socks4ReplyText(cd)) (code \(cd))"
        case .httpRefused(let status, let reason, let head):
            streamDomain = httpStreamDomain
            streamCode = status
            info[ProxyConfiguration.errorHTTPStatusCodeKey] = status
            info[ProxyConfiguration.errorHTTPResponseHeadKey] = head
            let statusText = reason.isEmpty ? "\(status)" : "\(status) \(reason)"
            if status == 407 || status == 401 {  // some proxies (tinyproxy) answer wrong credentials with 401
                code = 307  // kCFErrorHTTPBadProxyCredentials
                message =
                    configuration.username?.isEmpty == false
                    ? "\(proxy) rejected the credentials (\(statusText))"
                    : "\(proxy) requires authentication (\(statusText))"
            } else {
                code = 311  // kCFStreamErrorHTTPSProxyFailureUnexpectedResponseToCONNECTMethod
                message = "\(proxy) refused the tunnel to \(target.label): \(statusText)"
            }
        case .httpMalformed(let description):
            streamDomain = httpStreamDomain
            (code, streamCode) = (303, -1)  // kCFErrorHTTPParseFailure, kCFStreamErrorHTTPParseFailure
            message = "\(proxy) sent a malformed reply to CONNECT \(target.authority): \(description)"
        case .closed:
            domain = NSPOSIXErrorDomain
            (code, streamDomain, streamCode) = (Int(ENOTCONN), StreamErrors.posixStreamDomain, Int(ENOTCONN))
            message = "\(proxy) closed the connection before it had connected \(target.label)"
        }
        return StreamFailure(
            .protocolError(
                ProtocolFailure(
                    domain: domain, code: code, streamDomain: streamDomain, streamCode: streamCode,
                    userInfo: info, message: message)), .proxyReply)
    }

    /// RFC 1928 §6's REP values.
    static func socks5ReplyText(_ reply: UInt8) -> String {
        switch reply {
        case 1: return "general SOCKS server failure"
        case 2: return "connection not allowed by ruleset"
        case 3: return "network unreachable"
        case 4: return "host unreachable"
        case 5: return "connection refused by destination host"
        case 6: return "TTL expired"
        case 7: return "command not supported"
        case 8: return "address type not supported"
        default: return "unassigned reply code"
        }
    }

    /// SOCKS4's CD values.
    static func socks4ReplyText(_ code: UInt8) -> String {
        switch code {
        case 91: return "request rejected or failed"
        case 92: return "the proxy could not reach identd on this host"
        case 93: return "identd reported a different user id"
        default: return "unknown reply code"
        }
    }
}
