// Security's trust evaluation (SecTrust.h) over the package's own verifier: a `SecTrust` (SocketStreams'
// `TLSPeerTrust`) holds the chain a peer sent and an evaluation state, the `SecTrustSet…` calls change
// that state, and `SecTrustEvaluateWithError` runs `TLSChainVerifier` (TLSPathBuilder and TLSVerification
// over OpenSSL, as in a handshake) on the chain, against the anchors set or the system store, for the
// policy's purpose and host name. A verdict is kept until the state changes.
//
// A trust a handshake made (the one a verify block gets through `sec_trust_copy_ref`, or GCDAsyncSocket's
// delegate) starts with Apple's default policy for it: SSL, server, the server name. Errors are
// `CFError`s (this package's `NSError`) in NSOSStatusErrorDomain with Apple's codes: errSecNotTrusted,
// errSecCertificateExpired, errSecCertificateNotValidYet, errSecHostNameMismatch.

import Dispatch
import Foundation

/// The result handler of ``SecTrustEvaluateAsyncWithError(_:_:_:)`` (`SecTrustWithErrorCallback`).
public typealias SecTrustWithErrorCallback = @Sendable (_ trustRef: SecTrust, _ result: Bool, _ error: CFError?) -> Void

/// A trust for `certificates` (a ``SecCertificate`` or an array of them, the leaf first) under `policies`
/// (a ``SecPolicy``, an array of them, or nil for the basic X.509 policy) (`SecTrustCreateWithCertificates`).
@discardableResult
public func SecTrustCreateWithCertificates(
    _ certificates: CFTypeRef, _ policies: CFTypeRef?, _ trust: UnsafeMutablePointer<SecTrust?>
) -> OSStatus {
    guard let chain = certificateList(certificates), !chain.isEmpty else { return errSecParam }
    var policy = TLSChainPolicy(purpose: .basic)
    if let policies {
        guard let chosen = policyList(policies) else { return errSecParam }
        if let last = chosen.last {
            policy.purpose = last.purpose
            policy.hostName = last.hostName
        }
    }
    trust.pointee = SecTrust(certificateChain: chain.map(\.der), policy: policy)
    return errSecSuccess
}

/// Evaluates the trust (`SecTrustEvaluateWithError`): true when the chain verifies; else false with, in
/// `error`, a `CFError` whose code says why (``errSecNotTrusted``, ``errSecCertificateExpired``,
/// ``errSecCertificateNotValidYet``, ``errSecHostNameMismatch``). Blocking; call it off the main thread
/// for a chain that may need the system store loaded (tens of milliseconds the first time).
public func SecTrustEvaluateWithError(_ trust: SecTrust, _ error: UnsafeMutablePointer<CFError?>?) -> Bool {
    let verdict = trust.evaluated()
    if !verdict.isTrusted { error?.pointee = trustError(verdict, trust) }
    return verdict.isTrusted
}

/// Evaluates the trust on a global queue and calls `result` on `queue` with it, the outcome and the
/// error (`SecTrustEvaluateAsyncWithError`); ``errSecSuccess``.
@discardableResult
public func SecTrustEvaluateAsyncWithError(_ trust: SecTrust, _ queue: DispatchQueue, _ result: @escaping SecTrustWithErrorCallback)
    -> OSStatus
{
    DispatchQueue.global().async {
        let verdict = trust.evaluated()
        let error = verdict.isTrusted ? nil : trustError(verdict, trust)
        queue.async { result(trust, verdict.isTrusted, error) }
    }
    return errSecSuccess
}

/// Evaluates the trust (`SecTrustEvaluate`, deprecated): `result` is ``SecTrustResultType/unspecified``
/// for a chain that verifies, ``SecTrustResultType/recoverableTrustFailure`` for one that does not.
@discardableResult
public func SecTrustEvaluate(_ trust: SecTrust, _ result: UnsafeMutablePointer<SecTrustResultType>) -> OSStatus {
    _ = SecTrustEvaluateWithError(trust, nil)
    return SecTrustGetTrustResult(trust, result)
}

/// The last evaluation's result (`SecTrustGetTrustResult`): ``SecTrustResultType/invalid`` before one.
@discardableResult
public func SecTrustGetTrustResult(_ trust: SecTrust, _ result: UnsafeMutablePointer<SecTrustResultType>) -> OSStatus {
    let verdict = trust.evaluation.withLock { $0.verdict }
    switch verdict {
    case nil: result.pointee = .invalid
    case let verdict? where verdict.isTrusted: result.pointee = .unspecified
    case let verdict? where verdict.code < 0: result.pointee = .fatalTrustFailure
    case _?: result.pointee = .recoverableTrustFailure
    }
    return errSecSuccess
}

/// Trusts only `anchorCertificates` (``SecCertificate``s) from now on (`SecTrustSetAnchorCertificates`), as
/// Apple's call does: the system store no longer counts until ``SecTrustSetAnchorCertificatesOnly(_:_:)``
/// says false. Nil or an empty array goes back to the system store. ``errSecParam`` if the array holds
/// something else.
@discardableResult
public func SecTrustSetAnchorCertificates(_ trust: SecTrust, _ anchorCertificates: CFArray?) -> OSStatus {
    let anchors: [SecCertificate]
    if let anchorCertificates {
        guard let list = anchorCertificates as? [SecCertificate] else { return errSecParam }
        anchors = list
    } else {
        anchors = []
    }
    change(trust) { policy in
        policy.anchors = anchors.map(\.der)
        policy.anchorsOnly = true
    }
    return errSecSuccess
}

/// Whether only the anchors set count (true, the default once some are set) or the system store too
/// (false) (`SecTrustSetAnchorCertificatesOnly`).
@discardableResult
public func SecTrustSetAnchorCertificatesOnly(_ trust: SecTrust, _ anchorCertificatesOnly: Bool) -> OSStatus {
    change(trust) { $0.anchorsOnly = anchorCertificatesOnly }
    return errSecSuccess
}

/// Sets what the evaluation checks (`SecTrustSetPolicies`): a ``SecPolicy`` or an array of them (the
/// last one decides here; Apple requires all). ``errSecParam`` for anything else.
@discardableResult
public func SecTrustSetPolicies(_ trust: SecTrust, _ policies: CFTypeRef) -> OSStatus {
    guard let chosen = policyList(policies), let last = chosen.last else { return errSecParam }
    change(trust) { policy in
        policy.purpose = last.purpose
        policy.hostName = last.hostName
    }
    return errSecSuccess
}

/// Sets the evaluation's options (`SecTrustSetOptions`): ``SecTrustOptionFlags/allowExpired``,
/// ``SecTrustOptionFlags/allowExpiredRoot``, ``SecTrustOptionFlags/leafIsCA``,
/// ``SecTrustOptionFlags/implicitAnchors``; the others are accepted with no effect. ``errSecSuccess``.
@discardableResult
public func SecTrustSetOptions(_ trustRef: SecTrust, _ options: SecTrustOptionFlags) -> OSStatus {
    change(trustRef) { policy in
        policy.allowsExpiredCertificates = options.contains(.allowExpired)
        policy.allowsExpiredRoots = options.contains(.allowExpiredRoot)
        policy.leafMayBeCA = options.contains(.leafIsCA)
        policy.implicitAnchors = options.contains(.implicitAnchors)
    }
    return errSecSuccess
}

/// The number of certificates in the chain (`SecTrustGetCertificateCount`): the evaluated chain (leaf to
/// anchor) once evaluated, else the chain the peer sent.
public func SecTrustGetCertificateCount(_ trust: SecTrust) -> CFIndex {
    chain(of: trust).count
}

/// The certificate at `ix` of the chain (`SecTrustGetCertificateAtIndex`, deprecated): 0 is the leaf.
public func SecTrustGetCertificateAtIndex(_ trust: SecTrust, _ ix: CFIndex) -> SecCertificate? {
    let certificates = chain(of: trust)
    return certificates.indices.contains(ix) ? SecCertificate(der: certificates[ix]) : nil
}

/// The chain, leaf first, as ``SecCertificate``s (`SecTrustCopyCertificateChain`): the evaluated chain
/// once evaluated, else the chain the peer sent; nil when there is none. Read it with `as? [SecCertificate]`.
public func SecTrustCopyCertificateChain(_ trust: SecTrust) -> CFArray? {
    let certificates = chain(of: trust)
    return certificates.isEmpty ? nil : certificates.map(SecCertificate.init(der:)) as CFArray
}

/// The leaf's public key (`SecTrustCopyKey`); nil when there is no leaf or its key cannot be read.
public func SecTrustCopyKey(_ trust: SecTrust) -> SecKey? {
    trust.certificateChain.first.flatMap { SecCertificateCopyKey(SecCertificate(der: $0)) }
}

// MARK: helpers

private func change(_ trust: SecTrust, _ body: (inout TLSChainPolicy) -> Void) {
    trust.evaluation.withLock { state in
        body(&state.policy)
        state.verdict = nil
    }
}

private func chain(of trust: SecTrust) -> [Data] {
    trust.evaluation.withLock { $0.verdict?.chain } ?? trust.certificateChain
}

private func certificateList(_ value: CFTypeRef) -> [SecCertificate]? {
    if let one = value as? SecCertificate { return [one] }
    return value as? [SecCertificate]
}

private func policyList(_ value: CFTypeRef) -> [SecPolicy]? {
    if let one = value as? SecPolicy { return [one] }
    return value as? [SecPolicy]
}

/// The `CFError` of a failed evaluation: NSOSStatusErrorDomain, Apple's code for the reason, a sentence
/// shaped like Apple's ("“localhost” certificate is not trusted") with OpenSSL's reason after it.
private func trustError(_ verdict: TLSChainVerdict, _ trust: SecTrust) -> CFError {
    let status: OSStatus
    if verdict.code < 0 {
        status = errSecDecode
    } else if verdict.isNameMismatch {
        status = errSecHostNameMismatch
    } else if verdict.isExpiry {
        let expired = verdict.description.contains("expired")
        status = expired ? errSecCertificateExpired : errSecCertificateNotValidYet
    } else {
        status = errSecNotTrusted
    }
    let name = trust.certificateChain.first.flatMap(TLSCertificateTools.subjectSummary) ?? "certificate"
    let sentence: String
    switch status {
    case errSecHostNameMismatch: sentence = "“\(name)” certificate name does not match input"
    case errSecCertificateExpired: sentence = "“\(name)” certificate is expired"
    case errSecCertificateNotValidYet: sentence = "“\(name)” certificate is not yet valid"
    case errSecDecode: sentence = "the certificate chain cannot be evaluated"
    default: sentence = "“\(name)” certificate is not trusted"
    }
    return NSError(
        domain: NSOSStatusErrorDomain, code: Int(status),
        userInfo: [NSLocalizedDescriptionKey: "\(sentence) (\(verdict.description))", "TLSVerifyResult": verdict.code])
}
