import Dispatch
import Foundation

/// Security's trust object (`SecTrust`): on Linux the library's ``TLSPeerTrust``, declared once here so
/// that CocoaAsyncSocket (`GCDAsyncSocketTrust`) and SocketStreamsNetwork (`sec_trust_copy_ref`,
/// `SecTrustEvaluateWithError`...), which both re-export this module, name the same type.
public typealias SecTrust = TLSPeerTrust

/// The peer's certificate chain and OpenSSL's verdict on it, handed to a ``TLSTrustEvaluation``
/// after the handshake: the Linux form of the `SecTrust` Darwin code evaluates itself (GCDAsyncSocket
/// hands it over as `GCDAsyncSocketTrust`, the same type; SocketStreamsNetwork's Security calls
/// evaluate it again with the policy, anchors and options they set).
public final class TLSPeerTrust: Sendable {
    /// The peer's certificates, DER, leaf first (`SecTrustCopyCertificateChain`).
    public let certificateChain: [Data]
    /// OpenSSL's verification result (`SSL_get_verify_result`): `X509_V_OK`, 0, when the chain verified
    /// against ``TLSSettings/trustRoots`` and, with a peer name, the name matched; else an `X509_V_ERR_*`
    /// value (18 for a self-signed certificate).
    public let verifyResult: Int
    /// OpenSSL's text for ``verifyResult`` (`X509_verify_cert_error_string`).
    public let verifyResultDescription: String

    /// What the handshake negotiated, for a trust a handshake made (nil otherwise).
    package let connectionInfo: TLSConnectionInfo?
    /// How the Security calls verify the chain again (`SecTrustEvaluateWithError`): the policy, anchors and
    /// options set on it, and the last verdict, which a change of those forgets.
    package let evaluation: Guarded<TLSTrustState>
    /// For a trust a handshake made: the chain as OpenSSL parsed it then, so that evaluating it again does
    /// not parse it a second time (OpenSSL 3 spends most of a verification's instructions in `d2i_X509`).
    let parsed: TLSParsedChain?

    /// A trust object holding `certificateChain` and the verification result.
    public init(certificateChain: [Data], verifyResult: Int, verifyResultDescription: String) {
        self.certificateChain = certificateChain
        self.verifyResult = verifyResult
        self.verifyResultDescription = verifyResultDescription
        connectionInfo = nil
        evaluation = Guarded(TLSTrustState(policy: TLSChainPolicy()))
        parsed = nil
    }

    /// A trust for `certificateChain` whose evaluation starts with `policy`, made by a handshake that
    /// negotiated `connectionInfo` (whose verify result it reports).
    /// `parsed`, if given, holds the same certificates as OpenSSL objects, in the same order.
    init(certificateChain: [Data], policy: TLSChainPolicy, connectionInfo: TLSConnectionInfo? = nil, parsed: TLSParsedChain?) {
        self.certificateChain = certificateChain
        self.verifyResult = connectionInfo?.verifyResult ?? -1
        self.verifyResultDescription = connectionInfo?.verifyResultDescription ?? "no peer certificate"
        self.connectionInfo = connectionInfo
        evaluation = Guarded(TLSTrustState(policy: policy))
        self.parsed = parsed
    }

    /// A trust for `certificateChain` whose evaluation starts with `policy`, made by a handshake that
    /// negotiated `connectionInfo` (whose verify result it reports).
    package convenience init(certificateChain: [Data], policy: TLSChainPolicy, connectionInfo: TLSConnectionInfo? = nil) {
        self.init(certificateChain: certificateChain, policy: policy, connectionInfo: connectionInfo, parsed: nil)
    }

    /// The verdict for the chain under the evaluation's policy, evaluated now unless the last one still
    /// holds (`SecTrustEvaluateWithError`).
    package func evaluated() -> TLSChainVerdict {
        evaluation.withLock { $0.evaluate(certificateChain, parsed: parsed) }
    }

    /// Whether OpenSSL's verification passed (`SecTrustEvaluateWithError` returning true).
    public var isVerified: Bool { verifyResult == 0 }
}

/// A trust object's evaluation state: what `SecTrustSet…` set, and the verdict of the last evaluation.
package struct TLSTrustState: Sendable {
    package var policy: TLSChainPolicy
    /// The last evaluation's verdict, nil until one ran or since the policy changed.
    package var verdict: TLSChainVerdict?

    package init(policy: TLSChainPolicy) {
        self.policy = policy
    }

    /// The verdict for `chain` (with `parsed`, its certificates as OpenSSL objects), evaluated now unless
    /// the last one still holds.
    mutating func evaluate(_ chain: [Data], parsed: TLSParsedChain?) -> TLSChainVerdict {
        if let verdict { return verdict }
        let fresh = TLSChainVerifier.verify(chain, policy: policy, parsed: parsed)
        verdict = fresh
        return fresh
    }
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
    /// The status a rejection fails the handshake with: errSSLPeerBadCert (−9825, GCDAsyncSocket's)
    /// unless an API that reports another (Network.framework's verify block: errSSLBadCert) says so.
    package let rejectionStatus: Int

    /// Calls `evaluate` on `queue` with the peer's trust and a completion to call once, from any
    /// thread, with the decision (GCDAsyncSocket's `socket:didReceiveTrust:completionHandler:`).
    public init(
        queue: DispatchQueue = .global(),
        _ evaluate: @escaping @Sendable (_ trust: TLSPeerTrust, _ completion: @escaping @Sendable (Bool) -> Void) -> Void
    ) {
        self.queue = queue
        self.evaluate = evaluate
        rejectionStatus = TLSStatus.peerBadCert
    }

    /// An evaluation whose rejection fails the handshake with `rejectionStatus`.
    package init(
        queue: DispatchQueue, rejectionStatus: Int,
        _ evaluate: @escaping @Sendable (_ trust: TLSPeerTrust, _ completion: @escaping @Sendable (Bool) -> Void) -> Void
    ) {
        self.queue = queue
        self.evaluate = evaluate
        self.rejectionStatus = rejectionStatus
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
