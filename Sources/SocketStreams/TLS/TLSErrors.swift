// OpenSSL's failures in CFNetwork's terms: NSOSStatusErrorDomain with the SecureTransport status a
// Darwin client would see (`_kCFStreamErrorDomainKey` 3, kCFStreamErrorDomainSSL), OpenSSL's error
// queue and the verify result in userInfo, and a message a person can act on.
//
// SecureTransport statuses (Security/SecBase.h; values checked against the SDK enum as reproduced
// in public bindings):

import COpenSSL
import Foundation

enum TLSStatus {
    static let protocolError = -9800  // errSSLProtocol
    static let negotiation = -9801  // errSSLNegotiation
    static let fatalAlert = -9802  // errSSLFatalAlert
    static let closedGraceful = -9805  // errSSLClosedGraceful
    static let closedAbort = -9806  // errSSLClosedAbort
    static let certChainInvalid = -9807  // errSSLXCertChainInvalid
    static let badCert = -9808  // errSSLBadCert
    static let unknownRootCert = -9812  // errSSLUnknownRootCert
    static let noRootCert = -9813  // errSSLNoRootCert
    static let certExpired = -9814  // errSSLCertExpired
    static let certNotYetValid = -9815  // errSSLCertNotYetValid
    static let closedNoNotify = -9816  // errSSLClosedNoNotify
    static let peerBadCert = -9825  // errSSLPeerBadCert
    static let peerProtocolVersion = -9836  // errSSLPeerProtocolVersion
    static let hostNameMismatch = -9843  // errSSLHostNameMismatch
    static let badConfiguration = -9848  // errSSLBadConfiguration
    static let certificateRequired = -9863  // errSSLCertificateRequired

    /// A TLS alert (RFC 8446 §6) received from the peer, as SecureTransport's errSSLPeer… status.
    static func peerAlert(_ alert: Int) -> Int {
        switch alert {
        case 10: return -9819  // unexpected_message: errSSLPeerUnexpectedMsg
        case 20: return -9820  // bad_record_mac
        case 21: return -9821  // decryption_failed
        case 22: return -9822  // record_overflow
        case 30: return -9823  // decompression_failure
        case 40: return -9824  // handshake_failure
        case 42: return -9825  // bad_certificate
        case 43: return -9826  // unsupported_certificate
        case 44: return -9827  // certificate_revoked
        case 45: return -9828  // certificate_expired
        case 46: return -9829  // certificate_unknown
        case 47: return -9830  // illegal_parameter
        case 48: return -9831  // unknown_ca
        case 49: return -9832  // access_denied
        case 50: return -9833  // decode_error
        case 51: return -9834  // decrypt_error
        case 60: return -9835  // export_restriction
        case 70: return peerProtocolVersion
        case 71: return -9837  // insufficient_security
        case 80: return -9838  // internal_error
        case 90: return -9839  // user_canceled
        case 100: return -9840  // no_renegotiation
        case 116: return certificateRequired
        default: return fatalAlert
        }
    }
}

enum TLSErrors {
    static let domain = "NSOSStatusErrorDomain"
    /// `kCFStreamErrorDomainSSL`.
    static let streamDomain = 3
    /// userInfo keys.
    static let queueKey = "OpenSSLErrors"
    static let verifyResultKey = "OpenSSLVerifyResult"
    static let verifyResultDescriptionKey = "OpenSSLVerifyResultDescription"
    static let verifyDepthKey = "OpenSSLVerifyDepth"
    static let verifySubjectKey = "OpenSSLVerifySubject"

    /// OpenSSL's thread-local error queue as text, oldest first, emptied.
    static func drainQueue() -> [String] {
        var entries: [String] = []
        var buffer = [CChar](repeating: 0, count: 256)
        while true {
            let code = ERR_get_error()
            if code == 0 { return entries }
            ERR_error_string_n(code, &buffer, buffer.count)
            entries.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }

    static func failure(
        _ status: Int, _ message: String, _ operation: StreamFailure.Operation,
        queue: [String] = [], extra: [String: any Sendable] = [:]
    ) -> StreamFailure {
        var userInfo = extra
        if !queue.isEmpty { userInfo[queueKey] = queue }
        let detail = ProtocolFailure(
            domain: domain, code: status, streamDomain: streamDomain, streamCode: status,
            userInfo: userInfo, message: message)
        return StreamFailure(.protocolError(detail), operation)
    }

    /// Settings OpenSSL could not use.
    static func configuration(_ error: TLSSetupError) -> StreamFailure {
        failure(
            TLSStatus.badConfiguration, "the TLS settings cannot be used: \(error.message)", .handshake(TLSHandshake.stageName),
            queue: error.queue)
    }

    /// What a failed `SSL_do_handshake`, `SSL_read` or `SSL_write` means. `code` is `SSL_get_error`'s
    /// answer; the error queue is read (and emptied) here. `peer` names the peer in messages.
    static func sslFailure(
        _ ssl: OpaquePointer, code: Int32, operation: StreamFailure.Operation, peer: String,
        duringHandshake: Bool, rejection: VerifyRejection? = nil
    ) -> StreamFailure {
        // The queue's first entry is the root cause.
        let first = ERR_peek_error()
        let reason = first == 0 ? 0 : cssl_err_reason(first)
        let library = first == 0 ? 0 : cssl_err_lib(first)
        // A refused certificate ends the queue with "certificate verify failed", after whatever
        // decoding errors the chain's checks left before it.
        let last = ERR_peek_last_error()
        let verifyFailed =
            (library == ERR_LIB_SSL && reason == SSL_R_CERTIFICATE_VERIFY_FAILED)
            || (last != 0 && cssl_err_lib(last) == ERR_LIB_SSL && cssl_err_reason(last) == SSL_R_CERTIFICATE_VERIFY_FAILED)
        let queue = drainQueue()
        // The peer's connection ended without a TLS close: in the handshake, or outside it.
        func closedEarly() -> StreamFailure {
            failure(
                duringHandshake ? TLSStatus.closedAbort : TLSStatus.closedNoNotify,
                duringHandshake
                    ? "\(peer) closed the connection during the TLS handshake"
                    : "\(peer) closed the connection without a TLS close_notify",
                operation, queue: queue)
        }

        if verifyFailed {
            let result = Int(SSL_get_verify_result(ssl))
            let description = String(cString: X509_verify_cert_error_string(result))
            // The callback's record says which rule, which certificate; OpenSSL's result alone only the first.
            let rejection = rejection.flatMap { $0.code == Int32(result) ? $0 : nil }
            let status: Int
            switch Int32(result) {
            case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH, X509_V_ERR_EMAIL_MISMATCH:
                status = TLSStatus.hostNameMismatch
            case X509_V_ERR_CERT_HAS_EXPIRED: status = TLSStatus.certExpired
            case X509_V_ERR_CERT_NOT_YET_VALID: status = TLSStatus.certNotYetValid
            case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
                status = TLSStatus.unknownRootCert
            case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
                X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
                status = TLSStatus.noRootCert
            default: status = TLSStatus.certChainInvalid
            }
            var extra: [String: any Sendable] = [verifyResultKey: result, verifyResultDescriptionKey: description]
            if let rejection {
                extra[verifyDepthKey] = rejection.depth
                extra[verifySubjectKey] = rejection.subject
            }
            return failure(
                status, "the certificate for \(peer) is not trusted: \(rejection?.description ?? description)", operation,
                queue: queue, extra: extra)
        }
        if library == ERR_LIB_SSL && reason > SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256 {
            let alert = Int(reason - SSL_AD_REASON_OFFSET)
            let name = String(cString: SSL_alert_desc_string_long(Int32(alert)))
            let status = TLSStatus.peerAlert(alert)
            let what =
                status == TLSStatus.certificateRequired
                ? "\(peer) requires a client certificate (alert \(alert): \(name))"
                : "\(peer) sent a fatal alert: \(name) (alert \(alert))"
            return failure(status, what, operation, queue: queue)
        }
        if library == ERR_LIB_SSL {
            switch reason {
            case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_NO_PROTOCOLS_AVAILABLE, SSL_R_VERSION_TOO_LOW, SSL_R_VERSION_TOO_HIGH,
                SSL_R_WRONG_SSL_VERSION, SSL_R_UNSUPPORTED_SSL_VERSION:
                return failure(TLSStatus.peerProtocolVersion, "no TLS version in common with \(peer)", operation, queue: queue)
            case SSL_R_WRONG_VERSION_NUMBER, SSL_R_PACKET_LENGTH_TOO_LONG, SSL_R_HTTP_REQUEST,
                SSL_R_HTTPS_PROXY_REQUEST, SSL_R_UNEXPECTED_RECORD, SSL_R_RECORD_LENGTH_MISMATCH:
                return failure(
                    TLSStatus.protocolError, "\(peer) does not speak TLS (\(queue.first.map(shortReason) ?? "bad record"))",
                    operation, queue: queue)
            case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
                return failure(
                    TLSStatus.certificateRequired, "\(peer) sent no client certificate, which this server requires",
                    operation, queue: queue)
            case SSL_R_UNEXPECTED_EOF_WHILE_READING:
                return closedEarly()
            case SSL_R_NO_SHARED_CIPHER:
                return failure(TLSStatus.negotiation, "no cipher suite in common with \(peer)", operation, queue: queue)
            default:
                break
            }
        }
        if code == SSL_ERROR_ZERO_RETURN {
            return failure(TLSStatus.closedGraceful, "\(peer) closed the TLS session", operation, queue: queue)
        }
        if code == SSL_ERROR_SYSCALL { return closedEarly() }
        return failure(
            TLSStatus.protocolError, "TLS failed with \(peer): \(queue.first.map(shortReason) ?? "SSL error \(code)")",
            operation, queue: queue)
    }

    /// "error:0A00010B:SSL routines::wrong version number" → "wrong version number".
    private static func shortReason(_ entry: String) -> String {
        entry.split(separator: ":", omittingEmptySubsequences: false).last.map(String.init) ?? entry
    }
}
