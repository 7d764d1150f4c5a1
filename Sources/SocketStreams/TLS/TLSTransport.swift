// TLS over any transport: an OpenSSL `SSL` whose BIO reads and writes the transport below directly
// (no memory-BIO copies), so it layers over a plain socket as over bytes a proxy left behind.
//
// - One SSL is never used by two threads at once: every call on it happens under `lock`, whatever
//   the client does with its two streams.
// - Readiness: OpenSSL may need to write to make progress on a read (and the reverse), so each
//   direction remembers what it last waited for, and `ready(_:)` maps what epoll reported back.
//   A readable socket may carry only a TLS 1.3 session ticket, which yields no plaintext; `ready`
//   therefore peeks, so hasBytesAvailable is signalled only when a read will return something
//   (or an end or error), never leaving a delegate's read blocked.
// - Read-ahead: OpenSSL reads as much as the socket holds (up to a record's buffer) in one recv, so
//   a record costs one recv, not two (header, then body).
// - Bytes OpenSSL has decrypted but not handed out, and records it read ahead, are invisible to
//   epoll: `hasBufferedInput` reports them (a record read ahead only once a peek says it yields
//   something: a partial record or a session ticket alone would leave a read waiting), and the
//   connection re-signals hasBytesAvailable while they last.
// - Writes: OpenSSL commits a record once it has encrypted it, so a record the socket takes only in
//   part must not be left to OpenSSL (it would have to be retried with the same bytes, which a
//   stream's caller need not do). The BIO keeps the unsent tail of that one record (at most ~16 KiB,
//   CFNetwork's SecureTransport buffered likewise), `write` reports the record's plaintext as written,
//   stops there, and sends the tail before anything else: on the next write or read, when the socket
//   becomes writable (`ready`), and on close. So one `write` moves as many whole records as the
//   socket takes, not one record per call.
// - Send space: over the socket's own fd (bare, or behind bytes a proxy left), every send to it is
//   counted (`takeSendCharge`), so the connection keeps its send-space bound (SendSpace.swift) over
//   TLS as over a plain socket and re-signals hasSpaceAvailable after a write without a poll.
// - Reads stop after a record shorter than the most a record holds (16 KiB) with nothing read
//   ahead behind it: that is the end of what the peer wrote, and asking for the next record would
//   cost a recv that finds nothing (epoll is level-triggered: bytes that did come meanwhile are
//   reported again).
// - End: a peer's close_notify is end of stream. A TCP end without it, between records, is end of
//   stream too unless the settings say `requiresCloseNotify` (see TLSSettings); inside a record it is
//   always errSSLClosedNoNotify (the wire follows the record framing to tell). Closing sends close_notify (best
//   effort, without waiting) before freeing the SSL.

import COpenSSL
import Foundation

final class TLSTransport: Transport, @unchecked Sendable {
    let inner: any Transport
    let context: TLSContext
    /// Whom this connection's sessions may be offered to next, when the settings resume sessions.
    let sessionKey: TLSSessionKey?
    private let ssl: OpaquePointer
    private let wire: TLSWire
    private let requiresCloseNotify: Bool
    /// How messages name the peer, e.g. "localhost port 4433".
    let peerLabel: String
    /// A futex lock in its own allocation (`ConditionLock`), not `NSLock`: taken several times every TLS
    /// round trip, where `NSLock`'s class dispatch and pthread mutex cost more each time.
    private let lock = ConditionLock.make()
    // Guarded by `lock`; `@exclusivity(unchecked)` on what every read, write and readiness check touches,
    // as in `Connection`: the lock serialises them, and Swift's dynamic checks, with `TLSWire`'s fields,
    // were a measurable share of a TLS round trip (Benchmarks/results/syscalls.md).
    @exclusivity(unchecked) private var readWants: Interest = .readable
    @exclusivity(unchecked) private var writeWants: Interest = .writable
    private var closed = false
    /// `shutdownOutput` has sent close_notify (or queued it as the tail): writes fail with EPIPE.
    @exclusivity(unchecked) private var outputShut = false
    /// An end or error found by a peek in `ready` or after a read that returned data, for the next read
    /// to report: OpenSSL reports a fatal alert only once.
    @exclusivity(unchecked) private var deferredReadOutcome: TransportIO?
    /// What the handshake negotiated (nil until it is done), made on first use and kept: most connections
    /// never ask, and making it encodes each peer certificate to DER and builds several strings.
    var info: TLSConnectionInfo? {
        lock.withLock {
            if madeInfo == nil, handshakeDone { madeInfo = makeInfo() }
            return madeInfo
        }
    }
    private var madeInfo: TLSConnectionInfo?
    private var handshakeDone = false
    /// The DNS name the peer's certificate is verified for (nil for an IP address or none), for the
    /// verify callback's name-constraint check.
    let verifiedDNSName: String?
    /// Why the verify callback refused the chain. Written by the callback, which runs inside
    /// `SSL_do_handshake` with `lock` held, and read under `lock`.
    var rejection: VerifyRejection?

    /// The most plaintext one record carries (`SSL3_RT_MAX_PLAIN_LENGTH`).
    private static let fullRecord = 16384

    private static let ownerIndex = cssl_get_ex_new_index()
    /// Live SSL objects, for leak checks in tests.
    nonisolated(unsafe) private static var liveCount = 0
    private static let countLock = NSLock()
    static var openCount: Int { countLock.withLock { liveCount } }

    /// Creates the SSL for one connection. The peer name (SNI and the name verified) is set here.
    init(
        context: TLSContext, over inner: any Transport, settings: TLSSettings, hostName: String?, sessionKey: TLSSessionKey?,
        peerLabel: String
    ) throws(TLSSetupError) {
        clearErrors()
        guard let ssl = SSL_new(context.context), let bio = BIO_new(TLSWire.method) else { throw TLSSetupError("SSL_new failed") }
        self.ssl = ssl
        self.inner = inner
        self.context = context
        self.sessionKey = sessionKey
        self.peerLabel = peerLabel
        requiresCloseNotify = settings.requiresCloseNotify
        verifiedDNSName =
            settings.role == .client && hostName.map({ SocketAddress(numericHost: $0, port: 0) == nil }) == true ? hostName : nil
        wire = TLSWire(inner, countsSends: Self.writesStraight(inner))
        BIO_set_data(bio, Unmanaged.passUnretained(wire).toOpaque())
        BIO_set_init(bio, 1)
        SSL_set_bio(ssl, bio, bio)
        SSL_set_read_ahead(ssl, 1)  // a record's header and body in one recv, not two
        SSL_set_ex_data(ssl, Self.ownerIndex, Unmanaged.passUnretained(self).toOpaque())
        Self.countLock.withLock { Self.liveCount += 1 }

        switch settings.role {
        case .client:
            SSL_set_connect_state(ssl)
            if let hostName {
                let param = SSL_get0_param(ssl)
                if SocketAddress(numericHost: hostName, port: 0) != nil {
                    // An IP literal: checked against the certificate's IP addresses; no SNI (RFC 6066 §3).
                    let bare = hostName.hasPrefix("[") ? String(hostName.dropFirst().dropLast()) : hostName
                    guard X509_VERIFY_PARAM_set1_ip_asc(param, bare) == 1 else {
                        throw TLSSetupError("cannot verify the address \(hostName)")
                    }
                } else {
                    SSL_set_hostflags(ssl, TLSVerification.hostFlags)
                    guard SSL_set1_host(ssl, hostName) == 1, cssl_set_tlsext_host_name(ssl, hostName) == 1 else {
                        throw TLSSetupError("cannot use \(hostName) as the TLS server name")
                    }
                }
            }
            if let sessionKey { context.sessions.resume(ssl, key: sessionKey) }
        case .server:
            SSL_set_accept_state(ssl)
        }
    }

    deinit {
        SSL_free(ssl)
        Self.countLock.withLock { Self.liveCount -= 1 }
    }

    /// The transport that owns `ssl` (for OpenSSL callbacks).
    static func owner(of ssl: OpaquePointer) -> TLSTransport? {
        SSL_get_ex_data(ssl, ownerIndex).map { Unmanaged<TLSTransport>.fromOpaque($0).takeUnretainedValue() }
    }

    var fd: Int32 { inner.fd }

    /// Whether `transport`'s writes go straight to its fd: the bare socket, or bytes a proxy left
    /// in front of it. (Not another TLS layer, whose sends are not the bytes handed to it.)
    static func writesStraight(_ transport: any Transport) -> Bool {
        if transport is SocketTransport { return true }
        if let prefixed = transport as? PrefixedTransport { return writesStraight(prefixed.inner) }
        return false
    }

    // MARK: handshake

    enum HandshakeProgress {
        case done
        case wait(Interest)
        case failed(StreamFailure)
    }

    /// Drives `SSL_do_handshake` as far as it goes.
    func handshake() -> HandshakeProgress {
        lock.withLock {
            if let blocked = flushTail() { return handshakeBlocked(blocked) }
            clearErrors()
            wire.failure = nil
            let result = SSL_do_handshake(ssl)
            if result == 1 {
                // The last flight must be out before the stage is done: nothing else would send it.
                if let blocked = flushTail() { return handshakeBlocked(blocked) }
                handshakeDone = true
                return .done
            }
            let code = SSL_get_error(ssl, result)
            switch code {
            case SSL_ERROR_WANT_READ: return .wait(inner.readInterest)
            case SSL_ERROR_WANT_WRITE: return .wait(inner.writeInterest)
            default:
                if let sessionKey { context.sessions.forget(sessionKey) }  // the peer changed, or refused what it was offered
                if let failure = wire.failure { return .failed(failure) }
                return .failed(
                    TLSErrors.sslFailure(
                        ssl, code: code, operation: .handshake(TLSHandshake.stageName),
                        peer: peerLabel, duringHandshake: true, rejection: rejection))
            }
        }
    }

    /// A handshake waiting for a record's tail to go out (or failed sending it). Lock held.
    private func handshakeBlocked(_ blocked: Interest) -> HandshakeProgress {
        blocked.isEmpty ? .failed(wire.failure ?? .posix(EPIPE, .write)) : .wait(blocked)
    }

    /// The peer's leaf certificate's SubjectPublicKeyInfo, DER (for pinning).
    func peerPublicKeyDER() -> Data? {
        lock.withLock {
            guard let leaf = SSL_get0_peer_certificate(ssl), let key = X509_get_X509_PUBKEY(leaf) else { return nil }
            var buffer: UnsafeMutablePointer<UInt8>?
            let length = i2d_X509_PUBKEY(key, &buffer)
            guard length > 0, let buffer else { return nil }
            defer { cssl_free(buffer) }
            return Data(bytes: buffer, count: Int(length))
        }
    }

    /// The peer's certificates as the handshake parsed them, in the order of `ders` (the connection
    /// info's `peerCertificates`); nil unless every one is found.
    func parsedPeerCertificates(matching ders: [Data]) -> TLSParsedChain? {
        lock.withLock {
            let candidates = peerCertificateObjects()
            let encoded = candidates.map { TLSChainVerifier.der($0) }
            var found: [OpaquePointer] = []
            for der in ders {
                guard let index = encoded.firstIndex(of: der) else { return nil }
                found.append(candidates[index])
            }
            for certificate in found { X509_up_ref(certificate) }
            return TLSParsedChain(taking: found)
        }
    }

    /// The peer's leaf, then the chain it sent (which, on a client, begins with the leaf again), as
    /// OpenSSL holds them (borrowed: valid while the SSL lives). Lock held.
    private func peerCertificateObjects() -> [OpaquePointer] {
        var objects: [OpaquePointer] = []
        if let leaf = SSL_get0_peer_certificate(ssl) { objects.append(leaf) }
        if let chain = SSL_get_peer_cert_chain(ssl) {
            for index in 0..<cssl_sk_X509_num(chain) {
                if let certificate = cssl_sk_X509_value(chain, index) { objects.append(certificate) }
            }
        }
        return objects
    }

    /// Lock held.
    private func makeInfo() -> TLSConnectionInfo {
        var alpn: UnsafePointer<UInt8>?
        var alpnLength: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &alpn, &alpnLength)
        var certificates: [Data] = []
        for certificate in peerCertificateObjects() {
            if let der = TLSChainVerifier.der(certificate), !certificates.contains(der) { certificates.append(der) }
        }
        let verifyResult = SSL_get_verify_result(ssl)
        return TLSConnectionInfo(
            protocolVersion: String(cString: SSL_get_version(ssl)),
            cipherSuite: SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_standard_name($0) }.map { String(cString: $0) } ?? "",
            alpnProtocol: alpn.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(alpnLength)), as: UTF8.self) },
            peerCertificates: certificates,
            resumedSession: SSL_session_reused(ssl) == 1,
            verifyResult: Int(verifyResult),
            verifyResultDescription: String(cString: X509_verify_cert_error_string(verifyResult)),
            serverName: SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) })
    }

    // MARK: Transport

    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO {
        lock.withLock {
            if let peeked = deferredReadOutcome { return peeked }
            _ = flushTail()  // a request's tail must go out before waiting for the reply
            // Records while they come without waiting (one SSL_read_ex returns at most one), so a
            // 64 KiB read is one call, not four. What stops the loop after some data (an end, an
            // error) is kept for the next read.
            var total = 0
            while total < count {
                // Plaintext already decrypted (what a peek in `ready` left) is handed out without a failure,
                // so SSL_get_error, which needs an empty error queue, is never asked after it: the queue is
                // checked only before a read that may reach the socket.
                if total > 0 || SSL_pending(ssl) == 0 { clearErrors() }
                wire.failure = nil
                var done = 0
                let result = SSL_read_ex(ssl, buffer + total, count - total, &done)
                if result == 1 {
                    total += done
                    // A record shorter than a full one, all handed out, nothing read ahead behind it:
                    // the peer's write ended there.
                    if done < Self.fullRecord, SSL_has_pending(ssl) == 0 { break }
                    continue
                }
                let code = SSL_get_error(ssl, result)
                if total == 0 { return outcome(code, reading: true) }
                if code != SSL_ERROR_WANT_READ && code != SSL_ERROR_WANT_WRITE {
                    deferredReadOutcome = outcome(code, reading: true)
                }
                clearErrors()
                break
            }
            readWants = .readable
            return .processed(total)
        }
    }

    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO {
        lock.withLock {
            if outputShut { return .failed(.posix(EPIPE, .write)) }
            if let blocked = flushTail() {
                if blocked.isEmpty, let failure = wire.failure { return .failed(failure) }
                writeWants = blocked
                return .wouldBlock
            }
            var total = 0
            while total < count {
                clearErrors()
                wire.failure = nil
                var done = 0
                let result = SSL_write_ex(ssl, buffer + total, count - total, &done)  // one record (partial-write mode)
                if result != 1 {
                    if total > 0 { break }
                    return outcome(SSL_get_error(ssl, result), reading: false)
                }
                total += done
                if !wire.tail.isEmpty { break }  // the socket is full: this record's tail waits
            }
            writeWants = .writable
            return .processed(total)
        }
    }

    /// Sends the unsent tail of the last record. Lock held. Nil when none is left; otherwise what
    /// to wait for (empty after a failure, which `wire.failure` holds).
    private func flushTail() -> Interest? {
        guard !wire.tail.isEmpty else { return nil }
        while !wire.tail.isEmpty {
            let result = wire.tail.withUnsafeBytes { wire.send($0.baseAddress!, $0.count) }
            switch result {
            case .processed(let count): wire.tail.removeFirst(count)
            case .wouldBlock: return inner.writeInterest
            case .failed(let failure):
                wire.failure = failure
                wire.tail.removeAll()
                return []
            case .end:
                wire.tail.removeAll()
                return []
            }
        }
        return nil
    }

    /// A failed `SSL_read_ex`/`SSL_write_ex`. Lock held.
    private func outcome(_ code: Int32, reading: Bool) -> TransportIO {
        switch code {
        case SSL_ERROR_WANT_READ:
            if reading { readWants = inner.readInterest } else { writeWants = inner.readInterest }
            return .wouldBlock
        case SSL_ERROR_WANT_WRITE:
            if reading { readWants = inner.writeInterest } else { writeWants = inner.writeInterest }
            return .wouldBlock
        case SSL_ERROR_ZERO_RETURN where reading:
            return .end  // close_notify
        default:
            if let failure = wire.failure {
                var failure = failure
                failure.operation = reading ? .read : .write
                return .failed(failure)
            }
            let failure = TLSErrors.sslFailure(
                ssl, code: code, operation: reading ? .read : .write, peer: peerLabel,
                duringHandshake: false)
            // A TCP end without close_notify between records is accepted as the end
            // (TLSSettings.requiresCloseNotify); inside a record it is a truncation, always an error.
            if reading, !requiresCloseNotify, case .protocolError(let detail) = failure.reason,
                detail.code == TLSStatus.closedNoNotify, wire.atRecordBoundary
            {
                return .end
            }
            return .failed(failure)
        }
    }

    /// What the next read waits for; also writability while a record's tail waits to go out.
    var readInterest: Interest { lock.withLock { wire.tail.isEmpty ? readWants : readWants.union(inner.writeInterest) } }
    var writeInterest: Interest { lock.withLock { writeWants } }
    var hasPendingOutput: Bool { lock.withLock { !wire.tail.isEmpty } }

    func takeSendCharge() -> Int? {
        takeSendState().charge
    }

    /// `hasPendingOutput` and `takeSendCharge()` under one acquisition of the lock (after each write).
    func takeSendState() -> (pending: Bool, charge: Int?) {
        lock.withLock {
            guard wire.countsSends else { return (!wire.tail.isEmpty, nil) }
            defer { wire.sendCharge = 0 }
            return (!wire.tail.isEmpty, wire.sendCharge)
        }
    }

    func flush() -> TransportIO {
        lock.withLock {
            guard let blocked = flushTail() else { return .processed(0) }
            if blocked.isEmpty, let failure = wire.failure { return .failed(failure) }
            return .wouldBlock
        }
    }

    /// Plaintext OpenSSL holds (or an end or error a peek found), readable though the socket may not
    /// be; or records it has read ahead, when one of them yields plaintext, an end or an error (a
    /// partial record, or a session ticket alone, is not readable: a read would wait for the socket).
    var hasBufferedInput: Bool {
        lock.withLock {
            if SSL_pending(ssl) > 0 || deferredReadOutcome != nil { return true }
            return SSL_has_pending(ssl) == 1 && peek()
        }
    }

    /// Readiness arrived: a read can make progress only if a record yields plaintext (or an end or
    /// an error). Peeking processes what arrived, so a session ticket alone signals nothing.
    func ready(_ events: Interest) -> Interest {
        lock.withLock {
            var result: Interest = []
            if events.contains(.writable), !wire.tail.isEmpty, flushTail() != nil {
                // Still sending the last record's tail: nothing new may be written yet.
            } else if !events.isDisjoint(with: writeWants) {
                result.insert(.writable)
            }
            guard !events.isDisjoint(with: readWants) else { return result }
            if peek() { result.insert(.readable) }
            return result
        }
    }

    /// Whether a read returns something now (plaintext, an end or an error, which it then reports):
    /// `SSL_peek_ex` processes what has arrived, reading the socket without waiting. Lock held.
    private func peek() -> Bool {
        clearErrors()
        wire.failure = nil
        var byte: UInt8 = 0
        var peeked = 0
        let status = SSL_peek_ex(ssl, &byte, 1, &peeked)
        if status == 1 {
            readWants = .readable
            return true
        }
        let code = SSL_get_error(ssl, status)
        defer { clearErrors() }
        switch code {
        case SSL_ERROR_WANT_READ:
            readWants = inner.readInterest
            return false
        case SSL_ERROR_WANT_WRITE:
            readWants = inner.writeInterest
            return false
        default:
            // An end or an error: the next read reports it.
            deferredReadOutcome = outcome(code, reading: true)
            return true
        }
    }

    /// The write-side half-close: the last record's tail, then close_notify (`SSL_shutdown` once: it
    /// does not wait for the peer's, and `SSL_read` goes on until that arrives), then FIN below. Reading
    /// stays possible; writes fail with EPIPE from here on.
    func shutdownOutput() -> TransportIO {
        lock.withLock {
            if !outputShut {
                if let blocked = flushTail() {
                    if blocked.isEmpty, let failure = wire.failure { return .failed(failure) }
                    writeWants = blocked
                    return .wouldBlock
                }
                clearErrors()
                wire.failure = nil
                let result = SSL_shutdown(ssl)  // 0: ours sent, the peer's not yet (our BIO keeps any unsent part as the tail)
                if result < 0 {
                    let code = SSL_get_error(ssl, result)
                    clearErrors()
                    if code == SSL_ERROR_WANT_WRITE || code == SSL_ERROR_WANT_READ {
                        writeWants = code == SSL_ERROR_WANT_WRITE ? inner.writeInterest : inner.readInterest
                        return .wouldBlock
                    }
                    return .failed(wire.failure ?? .posix(EPIPE, .write))
                }
                outputShut = true
            }
            if let blocked = flushTail() {  // the close_notify itself, if the socket took only part
                if blocked.isEmpty, let failure = wire.failure { return .failed(failure) }
                writeWants = blocked
                return .wouldBlock
            }
            return inner.shutdownOutput()
        }
    }

    /// Sends close_notify if the session is up and `shutdownOutput` has not (without waiting for the
    /// peer's), then closes the transport below. The SSL itself is freed with this object.
    func close() {
        lock.withLock {
            guard !closed else { return }
            closed = true
            _ = flushTail()
            if SSL_is_init_finished(ssl) == 1, !outputShut {
                clearErrors()
                _ = SSL_shutdown(ssl)
                clearErrors()
            }
        }
        inner.close()
    }
}

/// Empties this thread's OpenSSL error queue (before an I/O call, as `SSL_get_error` requires, and
/// after a failed one), and only if it holds something: `ERR_clear_error` resets all its 16 slots
/// whether or not, where a peek costs a fraction of that (Benchmarks/results/syscalls.md).
@inline(__always)
private func clearErrors() {
    if ERR_peek_error() != 0 { ERR_clear_error() }
}
