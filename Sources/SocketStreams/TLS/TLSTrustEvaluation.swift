import Dispatch
import Foundation

/// The peer's certificate chain and OpenSSL's verdict on it, handed to a ``TLSTrustEvaluation``
/// after the handshake: the Linux form of the `SecTrust` Darwin code evaluates itself (GCDAsyncSocket
/// hands it over as `GCDAsyncSocketTrust`, the same type).
public final class TLSPeerTrust: Sendable {
    /// The peer's certificates, DER, leaf first (`SecTrustCopyCertificateChain`).
    public let certificateChain: [Data]
    /// OpenSSL's verification result (`SSL_get_verify_result`): `X509_V_OK`, 0, when the chain verified
    /// against ``TLSSettings/trustRoots`` and, with a peer name, the name matched; else an `X509_V_ERR_*`
    /// value (18 for a self-signed certificate).
    public let verifyResult: Int
    /// OpenSSL's text for ``verifyResult`` (`X509_verify_cert_error_string`).
    public let verifyResultDescription: String

    /// A trust object holding `certificateChain` and the verification result.
    public init(certificateChain: [Data], verifyResult: Int, verifyResultDescription: String) {
        self.certificateChain = certificateChain
        self.verifyResult = verifyResult
        self.verifyResultDescription = verifyResultDescription
    }

    /// Whether OpenSSL's verification passed (`SecTrustEvaluateWithError` returning true).
    public var isVerified: Bool { verifyResult == 0 }
}

/// Trust decided by the application (``TLSSettings/trustEvaluation``), as GCDAsyncSocket's
/// `GCDAsyncSocketManuallyEvaluateTrust` and Darwin's evaluate-it-yourself `SecTrust` do it: the
/// handshake completes whatever the chain (pins in ``TLSSettings/pinnedPublicKeySHA256`` are still
/// checked), then the evaluation gets the peer's chain and OpenSSL's verdict and answers `true` to
/// accept or `false` to reject. Until it answers, the connection stays in its handshake: no application
/// data is read or written, `hasBytesAvailable`/`hasSpaceAvailable` wait, a `QueuedSocket` or
/// `AsyncConnection` does not go on, and the open deadline (`.connectTimeoutKey`) runs. A rejection
/// fails the pair with errSSLPeerBadCert (−9825) in `NSOSStatusErrorDomain`, as GCDAsyncSocket reports
/// it. Only the first answer counts. Clients only: a server's settings with one fail their handshake
/// with errSSLBadConfiguration.
///
/// Two evaluations are equal only when they are the same object.
public final class TLSTrustEvaluation: Sendable, Hashable {
    let queue: DispatchQueue
    let evaluate: @Sendable (TLSPeerTrust, @escaping @Sendable (Bool) -> Void) -> Void

    /// Calls `evaluate` on `queue` with the peer's trust and a completion to call once, from any
    /// thread, with the decision (GCDAsyncSocket's `socket:didReceiveTrust:completionHandler:`).
    public init(
        queue: DispatchQueue = .global(),
        _ evaluate: @escaping @Sendable (_ trust: TLSPeerTrust, _ completion: @escaping @Sendable (Bool) -> Void) -> Void
    ) {
        self.queue = queue
        self.evaluate = evaluate
    }

    /// Decides with an async function (for `AsyncConnection` code): its result is the answer.
    public convenience init(_ decide: @escaping @Sendable (_ trust: TLSPeerTrust) async -> Bool) {
        self.init { trust, completion in
            Task { completion(await decide(trust)) }
        }
    }

    /// Posts the question to the queue.
    func ask(_ trust: TLSPeerTrust, _ completion: @escaping @Sendable (Bool) -> Void) {
        queue.async { [evaluate] in evaluate(trust, completion) }
    }

    /// Identity.
    public static func == (lhs: TLSTrustEvaluation, rhs: TLSTrustEvaluation) -> Bool { lhs === rhs }

    /// Identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
