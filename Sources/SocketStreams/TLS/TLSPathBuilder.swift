// Path building: which chain of certificates a peer's are verified as. OpenSSL builds one chain from
// the served certificates and the trust store and, when that chain fails on a rule (an excluded name,
// an expired intermediate), does not try another; Chromium, Go, rustls and Apple's trust evaluation
// search the paths and accept the first that passes every rule. This does the same on OpenSSL's parsed
// certificates and signature checks, as the context's `SSL_CTX_set_cert_verify_callback`:
//
// - The search is depth first from the leaf. At each certificate, the issuers to try are the trusted
//   certificates of that name (`X509_STORE_CTX_get1_certs`, so a hashed directory is read as needed)
//   and then the served ones, those a trusted certificate issued first and otherwise in the order
//   served: the order is a hint, not a rule, so intermediates out of order, a root sent among them and
//   cross-signed alternatives are all found. An issuer is a
//   candidate when `X509_check_issued` matches names and key identifiers (a keyUsage without
//   keyCertSign still counts, so the path's verification names that rule) and, when there is more than
//   one to choose from, its key verifies the signature (a single candidate's signature is checked once,
//   by the path's verification). A trusted issuer ends the path.
// - Loops and repeats are cut: a certificate whose subject and key are already on the path is not
//   tried again (a cross-signed root, the same CA under two serials; CVE-2024-0567's shape).
// - Each complete path (leaf to a trusted certificate) is verified by OpenSSL on a fresh store context
//   holding only that path: the path's intermediates as the untrusted certificates, its anchor as the
//   only trusted one, the connection's parameters (name, purpose, time, depth, flags, CRLs from the
//   store) and the same per-certificate callback (TLSVerification), so every rule applies as before.
//   The first that passes is the verified chain. When all fail, the first one tried (the one nearest
//   the served order) is the one reported: its reason, its certificates and the number of paths tried.
// - `maximumChainDepth` counts a path's intermediates as RFC 5280's path length does, self-issued ones
//   left out; a path over the limit is not handed to OpenSSL.
// - The work is bounded: at most `signatureCheckBudget` signature checks in all, the search's and the
//   verifications' together (Go's limit is the same figure), so a chain of many cross-signed
//   intermediates fails in bounded time rather than in a number of paths exponential in its size.
// - When no path reaches a trusted certificate (an unknown root, a missing intermediate, or
//   `allowsAnyRoot`), OpenSSL's own verification of the served chain decides, with its own reasons.

import COpenSSL
import Foundation

enum TLSPathBuilder {
    /// The most signature checks one verification makes, the search's and the candidate paths' together.
    static let signatureCheckBudget = 100

    /// `SSL_CTX_set_cert_verify_callback`'s callback: 1 when a path verified (the store context then
    /// holds it as the verified chain), 0 with the error of the path that came closest.
    static let callback: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32 = { context, _ in
        guard let context else { return 0 }
        return verify(context)
    }

    nonisolated(unsafe) private static var last = Work()
    private static let lastLock = NSLock()
    /// What the most recent verification in the process did (for tests).
    static var lastWork: Work { lastLock.withLock { last } }

    /// What one verification did.
    struct Work: Sendable, Equatable {
        /// Signature checks made, the search's and the verifications' (each path's length less its anchor).
        var signatureChecks = 0
        /// Complete paths handed to OpenSSL's verification.
        var pathsVerified = 0
        /// Whether the budget ran out before a path passed.
        var exhausted = false
    }

    private static func verify(_ context: OpaquePointer) -> Int32 {
        guard let leaf = X509_STORE_CTX_get0_cert(context) else { return X509_verify_cert(context) }
        let ssl = X509_STORE_CTX_get_ex_data(context, SSL_get_ex_data_X509_STORE_CTX_idx()).map { OpaquePointer($0) }
        let transport = ssl.flatMap { TLSTransport.owner(of: $0) }
        var search = Search(context: context, ssl: ssl, transport: transport, leaf: leaf)
        search.run()
        lastLock.withLock { last = search.work }
        defer { search.release() }

        if let accepted = search.accepted {
            X509_STORE_CTX_set0_verified_chain(context, accepted.takeChain())
            X509_STORE_CTX_set_error(context, X509_V_OK)
            transport?.rejection = nil
            return 1
        }
        if let closest = search.closest {
            X509_STORE_CTX_set0_verified_chain(context, closest.takeChain())
            X509_STORE_CTX_set_error(context, closest.error)
            X509_STORE_CTX_set_error_depth(context, Int32(closest.depth))
            X509_STORE_CTX_set_current_cert(context, closest.current)
            var rejection = closest.rejection
            if search.work.pathsVerified > 1 {
                rejection?.pathsTried = search.work.pathsVerified
                rejection?.path = closest.path
            }
            transport?.rejection = rejection
            return 0
        }
        if search.work.exhausted {
            X509_STORE_CTX_set_error(context, X509_V_ERR_UNSPECIFIED)
            X509_STORE_CTX_set_error_depth(context, 0)
            X509_STORE_CTX_set_current_cert(context, leaf)
            transport?.rejection = VerifyRejection(
                code: X509_V_ERR_UNSPECIFIED,
                rule: "no path to a trusted certificate within \(signatureCheckBudget) signature checks (path building gave up)",
                subject: TLSVerification.subjectText(leaf), depth: 0)
            return 0
        }
        // No path reaches a trusted certificate: OpenSSL's verification of the served chain says why
        // (or, with allowsAnyRoot, overlooks it).
        return X509_verify_cert(context)
    }

    /// A complete path's verification.
    private final class Outcome {
        var chain: OpaquePointer?
        let error: Int32
        let depth: Int
        let current: OpaquePointer?
        let rejection: VerifyRejection?
        /// The path's certificates, leaf first (borrowed: valid while the search's references are held).
        private let certificates: [OpaquePointer]
        /// The path's subjects, leaf first: made only for a path that is reported, not for every one tried.
        var path: [String] { certificates.map { TLSVerification.subjectText($0) } }

        init(chain: OpaquePointer?, error: Int32, depth: Int, current: OpaquePointer?, rejection: VerifyRejection?, path: [OpaquePointer]) {
            certificates = path
            self.chain = chain
            self.error = error
            self.depth = depth
            self.current = current
            self.rejection = rejection
        }

        /// The chain, handed over to the caller (`X509_STORE_CTX_set0_verified_chain` takes it).
        func takeChain() -> OpaquePointer? {
            defer { chain = nil }
            return chain
        }

        deinit {
            if let chain { cssl_sk_X509_pop_free(chain) }
            if let current { X509_free(current) }
        }
    }

    private struct Search {
        let context: OpaquePointer
        let ssl: OpaquePointer?
        let transport: TLSTransport?
        let leaf: OpaquePointer
        /// The served certificates but the leaf, each once, in the order served.
        var served: [OpaquePointer] = []
        /// References this search took (trusted certificates looked up), released at the end.
        var owned: [OpaquePointer] = []
        var work = Work()
        var accepted: Outcome?
        var closest: Outcome?
        /// The most intermediates a path may hold that are not self-issued (`maximumChainDepth`), nil for none.
        let depthLimit: Int?
        /// Certificates a path may hold: OpenSSL's limit of 100 intermediates, the leaf and the anchor.
        let maximumLength = 102

        init(context: OpaquePointer, ssl: OpaquePointer?, transport: TLSTransport?, leaf: OpaquePointer) {
            self.context = context
            self.ssl = ssl
            self.transport = transport
            self.leaf = leaf
            let depth = Int(X509_VERIFY_PARAM_get_depth(X509_STORE_CTX_get0_param(context)))
            depthLimit = depth < 0 || depth >= 100 ? nil : depth
            if let untrusted = X509_STORE_CTX_get0_untrusted(context) {
                for index in 0..<cssl_sk_X509_num(untrusted) {
                    guard let certificate = cssl_sk_X509_value(untrusted, index) else { continue }
                    if X509_cmp(certificate, leaf) == 0 || served.contains(where: { X509_cmp($0, certificate) == 0 }) { continue }
                    served.append(certificate)
                }
            }
        }

        func release() {
            for certificate in owned { X509_free(certificate) }
        }

        var done: Bool { accepted != nil || work.exhausted }

        mutating func run() {
            // A leaf that is itself trusted is its own path.
            if trusted(named: X509_get_subject_name(leaf)).contains(where: { X509_cmp($0, leaf) == 0 }) {
                verifyPath([leaf])
                if done { return }
            }
            var path = [leaf]
            extend(&path)
        }

        /// Tries every issuer of the path's last certificate, trusted ones first.
        mutating func extend(_ path: inout [OpaquePointer]) {
            guard let certificate = path.last, path.count < maximumLength else { return }
            let anchors = trusted(named: X509_get_issuer_name(certificate)).filter { mayIssue($0, certificate, path: path) }
            // Served issuers that a trusted certificate issued come first (a name look-up, no signature);
            // a served copy of a trusted certificate is tried as an anchor only.
            let issuers = served.filter { issuer in
                mayIssue(issuer, certificate, path: path) && !anchors.contains { X509_cmp($0, issuer) == 0 }
            }
            let nearAnchor = issuers.map { issuer in
                trusted(named: X509_get_issuer_name(issuer)).contains { X509_check_issued($0, issuer) == X509_V_OK }
            }
            let ordered = zip(issuers, nearAnchor).filter(\.1).map(\.0) + zip(issuers, nearAnchor).filter { !$0.1 }.map(\.0)
            // With one candidate there is nothing to choose: the path's verification checks its signature.
            let chooses = anchors.count + ordered.count > 1
            for anchor in anchors where !done {
                if chooses { guard signatureVerifies(certificate, by: anchor) else { continue } }
                verifyPath(path + [anchor])
            }
            for issuer in ordered where !done {
                if chooses { guard signatureVerifies(certificate, by: issuer) else { continue } }
                path.append(issuer)
                extend(&path)
                path.removeLast()
            }
        }

        /// Names and key identifiers match, and the issuer is not on the path yet (by subject and key).
        func mayIssue(_ issuer: OpaquePointer, _ certificate: OpaquePointer, path: [OpaquePointer]) -> Bool {
            let match = X509_check_issued(issuer, certificate)
            guard match == X509_V_OK || match == X509_V_ERR_KEYUSAGE_NO_CERTSIGN else { return false }
            return !path.contains { onPath in
                X509_cmp(onPath, issuer) == 0
                    || (X509_NAME_cmp(X509_get_subject_name(onPath), X509_get_subject_name(issuer)) == 0
                        && EVP_PKEY_eq(X509_get0_pubkey(onPath), X509_get0_pubkey(issuer)) == 1)
            }
        }

        mutating func signatureVerifies(_ certificate: OpaquePointer, by issuer: OpaquePointer) -> Bool {
            guard work.signatureChecks < signatureCheckBudget else {
                work.exhausted = true
                return false
            }
            work.signatureChecks += 1
            guard let key = X509_get0_pubkey(issuer) else { return false }
            ERR_set_mark()
            defer { ERR_pop_to_mark() }
            return X509_verify(certificate, key) == 1
        }

        /// The trusted certificates with this subject, referenced until the search ends.
        mutating func trusted(named name: OpaquePointer?) -> [OpaquePointer] {
            guard let name else { return [] }
            ERR_set_mark()
            defer { ERR_pop_to_mark() }
            guard let stack = X509_STORE_CTX_get1_certs(context, name) else { return [] }
            var found: [OpaquePointer] = []
            for index in 0..<cssl_sk_X509_num(stack) {
                guard let certificate = cssl_sk_X509_value(stack, index), X509_up_ref(certificate) == 1 else { continue }
                owned.append(certificate)
                found.append(certificate)
            }
            cssl_sk_X509_pop_free(stack)
            return found
        }

        /// OpenSSL's verification of exactly this path (leaf first, anchor last).
        mutating func verifyPath(_ path: [OpaquePointer]) {
            // The depth limit counts intermediates as RFC 5280's path length does: a self-issued
            // certificate (a CA's new key or name rollover) is not one more (OpenSSL's depth counts it).
            let intermediates = path.dropFirst().dropLast()
            let counted = intermediates.filter { X509_NAME_cmp(X509_get_subject_name($0), X509_get_issuer_name($0)) != 0 }.count
            if let depthLimit, counted > depthLimit {
                if closest == nil {
                    let rule =
                        "certificate chain too long: \(counted) intermediate CA certificates, the limit (maximumChainDepth) is \(depthLimit)"
                    let rejection = VerifyRejection(
                        code: X509_V_ERR_CERT_CHAIN_TOO_LONG, rule: rule, subject: TLSVerification.subjectText(leaf), depth: 0)
                    closest = Outcome(
                        chain: nil, error: X509_V_ERR_CERT_CHAIN_TOO_LONG, depth: 0, current: nil, rejection: rejection, path: path)
                }
                return
            }
            let checks = path.count - 1
            guard work.signatureChecks + checks <= signatureCheckBudget else {
                work.exhausted = true
                return
            }
            work.signatureChecks += checks
            work.pathsVerified += 1
            guard let candidate = X509_STORE_CTX_new(), let untrusted = cssl_sk_X509_new_null(),
                let anchors = cssl_sk_X509_new_null()
            else { return }
            defer {
                X509_STORE_CTX_free(candidate)
                cssl_sk_X509_pop_free(untrusted)
                cssl_sk_X509_pop_free(anchors)
            }
            for intermediate in path.dropFirst().dropLast() { _ = cssl_sk_X509_push_up_ref(untrusted, intermediate) }
            _ = cssl_sk_X509_push_up_ref(anchors, path[path.count - 1])
            guard X509_STORE_CTX_init(candidate, X509_STORE_CTX_get0_store(context), leaf, untrusted) == 1 else { return }
            X509_STORE_CTX_set0_trusted_stack(candidate, anchors)
            X509_VERIFY_PARAM_set1(X509_STORE_CTX_get0_param(candidate), X509_STORE_CTX_get0_param(context))
            // Any trusted certificate is an anchor, a root or not (as Apple's, Chromium's, Go's and rustls's are).
            X509_VERIFY_PARAM_set_flags(X509_STORE_CTX_get0_param(candidate), UInt(X509_V_FLAG_PARTIAL_CHAIN))
            // The depth limit was held above, counted as RFC 5280 counts.
            if depthLimit != nil { X509_VERIFY_PARAM_set_depth(X509_STORE_CTX_get0_param(candidate), Int32(maximumLength - 2)) }
            if let ssl { X509_STORE_CTX_set_ex_data(candidate, SSL_get_ex_data_X509_STORE_CTX_idx(), UnsafeMutableRawPointer(ssl)) }
            X509_STORE_CTX_set_verify_cb(candidate, X509_STORE_CTX_get_verify_cb(context))
            transport?.rejection = nil
            let passed = X509_verify_cert(candidate) == 1
            let current = X509_STORE_CTX_get_current_cert(candidate)
            if let current { X509_up_ref(current) }
            let outcome = Outcome(
                chain: X509_STORE_CTX_get1_chain(candidate), error: X509_STORE_CTX_get_error(candidate),
                depth: Int(X509_STORE_CTX_get_error_depth(candidate)), current: current, rejection: transport?.rejection, path: path)
            if passed {
                X509_VERIFY_PARAM_move_peername(X509_STORE_CTX_get0_param(context), X509_STORE_CTX_get0_param(candidate))
                accepted = outcome
            } else if closest == nil {
                closest = outcome
            }
        }
    }
}
