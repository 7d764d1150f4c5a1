import Foundation
import Glibc

/// Where a typed `StreamFailure` becomes a stream's `streamError`: the `NSError`s CFNetwork reports for
/// socket streams (the shapes of `_CFErrorCreateWithStreamError`), with descriptions that name the
/// endpoint. The names they use are declared below every layer (System/ErrorNames.swift).
extension StreamErrors {
    /// The `streamError` for `failure`; `target` is named when the failure names no endpoint.
    static func error(for failure: StreamFailure, target: Endpoint) -> NSError {
        let endpoint = failure.endpoint ?? target
        switch failure.reason {
        case .posix(let code):
            return posix(code, "\(describe(failure.operation, endpoint))")
        case .resolution(let resolution):
            var host = endpoint.label
            var port = 0
            if case .host(let name, let number) = endpoint { (host, port) = (name, number) }
            if Resolver.hasControlCharacter(host) { host = String(host.debugDescription.dropFirst().dropLast()) }
            if resolution.code == EAI_SYSTEM, resolution.systemErrno != 0 {
                return posix(resolution.systemErrno, "Could not resolve \(host) (port \(port))")
            }
            return NSError(
                domain: cfNetworkDomain, code: 2,
                userInfo: [
                    getAddrInfoFailureKey: Int(resolution.code),
                    streamErrorCodeKey: Int(resolution.code),
                    streamErrorDomainKey: netDBStreamDomain,
                    NSLocalizedDescriptionKey: "Could not resolve host \(host) (port \(port)): \(resolution.message)",
                ])
        case .protocolError(let detail):
            var userInfo: [String: Any] = detail.userInfo
            userInfo[streamErrorCodeKey] = detail.streamCode
            userInfo[streamErrorDomainKey] = detail.streamDomain
            userInfo[NSLocalizedDescriptionKey] =
                failure.operation == .proxyReply
                ? detail.message : "\(describe(failure.operation, endpoint)): \(detail.message)"
            return NSError(domain: detail.domain, code: detail.code, userInfo: userInfo)
        }
    }

    /// "Could not connect to example.com port 80", "Read from … failed", …
    private static func describe(_ operation: StreamFailure.Operation, _ endpoint: Endpoint) -> String {
        switch operation {
        case .resolve: return "Could not resolve \(endpoint.label)"
        case .connect: return "Could not connect to \(endpoint.label)"
        case .adopt: return "Could not use \(endpoint.label)"
        case .schedule: return "Could not watch \(endpoint.label) on a run loop"
        case .read: return "Read from \(endpoint.label) failed"
        case .write: return "Write to \(endpoint.label) failed"
        case .handshake(let name): return "\(name) with \(endpoint.label) failed"
        case .proxyReply: return "The proxy refused \(endpoint.label)"
        case .connectToProxy(let proxy): return "Could not connect to \(proxy)"
        }
    }
}
