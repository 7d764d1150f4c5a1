// An OpenSSL SSL_CTX built from TLSSettings, shared by every connection with the same settings.
//
// Building one is expensive (SSL_CTX_set_default_verify_paths parses the whole system bundle), where
// SSL_new on a shared context is cheap, so contexts are cached by the settings that shape them.
// The per-connection parts (the peer name, pins) are set on each SSL, not here.

import COpenSSL
import Foundation

final class TLSContext: @unchecked Sendable {
    /// The `SSL_CTX*`. Immutable once built, so any thread may create SSLs from it.
    let context: OpaquePointer
    /// The ALPN list in wire format (length-prefixed names), kept alive for the server's callback.
    private let alpnWire: UnsafeMutableBufferPointer<UInt8>?
    /// Client sessions for resumption, by peer (a context's sessions were all verified under its settings).
    let sessions = TLSSessionCache()

    private init(context: OpaquePointer, alpnWire: UnsafeMutableBufferPointer<UInt8>?) {
        self.context = context
        self.alpnWire = alpnWire
    }

    deinit {
        SSL_CTX_free(context)
        alpnWire?.deallocate()
    }

    // MARK: the cache

    /// The settings that shape a context (everything but what is set per connection).
    private struct Key: Hashable {
        let settings: TLSSettings
        init(_ settings: TLSSettings) {
            var shaping = settings
            shaping.peerName = .pairHost
            shaping.pinnedPublicKeySHA256 = []
            shaping.requiresCloseNotify = false
            shaping.refusedLevel = nil
            shaping.trustEvaluation = nil
            shaping.sessionPeerID = nil
            self.settings = shaping
        }
    }

    private static let cache = Guarded<[Key: TLSContext]>([:])
    /// Distinct settings kept at once; beyond that the cache starts again (contexts in use live on).
    private static let cacheCapacity = 32

    /// Empties the cache when the process exits (`atexit`), so that what it held is given back
    /// rather than left for the process's end: a leak checker run at exit then sees nothing of it
    /// (LeakSanitizer cannot follow the tagged pointers Swift keeps inside the keys' enum payloads, and
    /// reported a live key's PEM bytes as leaked). Contexts still in use live on with their connections.
    private static let emptiedAtExit: Void = {
        atexit { TLSContext.cache.withLock { $0.removeAll() } }
    }()

    /// The shared context for `settings`, built on first use.
    static func shared(for settings: TLSSettings) throws(TLSSetupError) -> TLSContext {
        let key = Key(settings)
        if let cached = cache.withLock({ $0[key] }) { return cached }
        let built = try build(settings)
        _ = emptiedAtExit
        return cache.withLock { cache in
            if let raced = cache[key] { return raced }
            if cache.count >= cacheCapacity { cache.removeAll() }
            cache[key] = built
            return built
        }
    }

    // MARK: building

    private static func build(_ settings: TLSSettings) throws(TLSSetupError) -> TLSContext {
        OpenSSLLibrary.prepare()
        ERR_clear_error()
        let method = settings.role == .client ? TLS_client_method() : TLS_server_method()
        guard let context = SSL_CTX_new(method) else { throw TLSSetupError("SSL_CTX_new failed") }
        var alpnWire: UnsafeMutableBufferPointer<UInt8>?
        do throws(TLSSetupError) {
            try configure(context, settings, alpnWire: &alpnWire)
        } catch {
            SSL_CTX_free(context)
            alpnWire?.deallocate()
            throw error
        }
        return TLSContext(context: context, alpnWire: alpnWire)
    }

    private static func configure(
        _ context: OpaquePointer, _ settings: TLSSettings,
        alpnWire: inout UnsafeMutableBufferPointer<UInt8>?
    ) throws(TLSSetupError) {
        guard cssl_ctx_set_min_proto_version(context, Int32(settings.minimumVersion.rawValue)) == 1,
            cssl_ctx_set_max_proto_version(context, Int32(settings.maximumVersion?.rawValue ?? 0)) == 1
        else {
            throw TLSSetupError(
                "cannot limit the TLS versions to \(settings.minimumVersion)…\(settings.maximumVersion.map(String.init(describing:)) ?? "newest")"
            )
        }
        if let maximum = settings.maximumVersion, maximum < settings.minimumVersion {
            throw TLSSetupError("the newest version allowed (\(maximum)) is older than the oldest (\(settings.minimumVersion))")
        }
        // Partial writes with a buffer that may move between retries: the stream's write semantics.
        _ = cssl_ctx_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        SSL_CTX_set_options(context, cssl_op_no_renegotiation())

        if !settings.cipherSuites.isEmpty { try useCipherSuites(settings.cipherSuites, in: context) }
        for root in settings.trustRoots { try addTrust(root, to: context) }
        try configureVerification(context, settings)
        SSL_CTX_set_cert_verify_callback(context, TLSPathBuilder.callback, nil)
        switch settings.role {
        case .client:
            SSL_CTX_set_verify(
                context, settings.validatesCertificateChain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, TLSVerification.callback)
            if settings.resumesSessions {
                _ = cssl_ctx_set_session_cache_mode(context, Int(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE))
                SSL_CTX_sess_set_new_cb(context, newSessionCallback)
            } else {
                _ = cssl_ctx_set_session_cache_mode(context, Int(SSL_SESS_CACHE_OFF))
            }
        case .server:
            guard settings.identity != nil else { throw TLSSetupError("a TLS server needs an identity (kCFStreamSSLCertificates)") }
            var mode: Int32 = SSL_VERIFY_NONE
            switch settings.clientCertificates {
            case .none: break
            case .request: mode = SSL_VERIFY_PEER
            case .require: mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
            }
            SSL_CTX_set_verify(context, mode, TLSVerification.callback)
            let sessionContext = Array("SocketStreams".utf8)
            _ = SSL_CTX_set_session_id_context(context, sessionContext, UInt32(sessionContext.count))
        }

        if let identity = settings.identity { try use(identity, in: context) }

        if !settings.alpnProtocols.isEmpty {
            var wire: [UInt8] = []
            for name in settings.alpnProtocols {
                let bytes = Array(name.utf8)
                guard !bytes.isEmpty, bytes.count <= 255 else {
                    throw TLSSetupError("ALPN protocol name \"\(name)\" must be 1 to 255 bytes")
                }
                wire.append(UInt8(bytes.count))
                wire += bytes
            }
            let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: wire.count)
            _ = buffer.initialize(from: wire)
            alpnWire = buffer
            switch settings.role {
            case .client:
                guard SSL_CTX_set_alpn_protos(context, buffer.baseAddress, UInt32(buffer.count)) == 0 else {
                    throw TLSSetupError("cannot set the ALPN protocols")
                }
            case .server:
                SSL_CTX_set_alpn_select_cb(context, alpnSelectCallback, UnsafeMutableRawPointer(buffer.baseAddress))
                SSL_CTX_set_ex_data(context, alpnLengthIndex, UnsafeMutableRawPointer(bitPattern: buffer.count))
            }
        }
    }

    /// The verify flags (the profile, CRL checks), the depth limit, the CRLs, and what the callback overlooks.
    private static func configureVerification(_ context: OpaquePointer, _ settings: TLSSettings) throws(TLSSetupError) {
        let flags = VerifyFlags(settings)
        SSL_CTX_set_ex_data(context, TLSVerification.flagsIndex, UnsafeMutableRawPointer(bitPattern: flags.rawValue))
        var verifyFlags: UInt = 0
        if settings.verificationProfile != .compatible { verifyFlags |= UInt(X509_V_FLAG_X509_STRICT) }
        if !settings.revocationLists.isEmpty {
            verifyFlags |= UInt(X509_V_FLAG_CRL_CHECK)
            if settings.revocationCheck == .wholeChain { verifyFlags |= UInt(X509_V_FLAG_CRL_CHECK_ALL) }
            let store = SSL_CTX_get_cert_store(context)
            for list in settings.revocationLists {
                for crl in try PEM.revocationLists(list) {
                    X509_STORE_add_crl(store, crl)
                    X509_CRL_free(crl)
                }
            }
        }
        if verifyFlags != 0 { X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(context), verifyFlags) }
        if let time = settings.verificationTime {
            X509_VERIFY_PARAM_set_time(SSL_CTX_get0_param(context), time_t(time.timeIntervalSince1970.rounded(.down)))
        }
        if let depth = settings.maximumChainDepth {
            guard depth >= 0, depth <= 100 else {
                throw TLSSetupError("the maximum chain depth must be 0 to 100 intermediate certificates, not \(depth)")
            }
            SSL_CTX_set_verify_depth(context, Int32(depth))
        }
    }

    /// ``TLSSettings/cipherSuites``: the TLS 1.3 suites by their own names, the others by OpenSSL's
    /// (`OPENSSL_cipher_name`). A version left with no suite keeps none (OpenSSL then offers only the other).
    private static func useCipherSuites(_ names: [String], in context: OpaquePointer) throws(TLSSetupError) {
        var tls13: [String] = []
        var older: [String] = []
        for name in names {
            if !name.contains("_WITH_") {
                tls13.append(name)
                continue
            }
            let openSSLName = String(cString: OPENSSL_cipher_name(name))
            guard openSSLName != "(NONE)" else { throw TLSSetupError("OpenSSL has no cipher suite \(name)") }
            older.append(openSSLName)
        }
        guard SSL_CTX_set_ciphersuites(context, tls13.joined(separator: ":")) == 1 else {
            throw TLSSetupError("OpenSSL cannot offer the TLS 1.3 cipher suites \(tls13.joined(separator: ", "))")
        }
        // An empty TLS 1.2 list is refused by OpenSSL; "-ALL" leaves none with the call succeeding.
        let list = older.isEmpty ? "-ALL" : older.joined(separator: ":")
        guard SSL_CTX_set_cipher_list(context, list) == 1 || older.isEmpty else {
            throw TLSSetupError("OpenSSL cannot offer the cipher suites \(older.joined(separator: ", "))")
        }
        ERR_clear_error()
    }

    private static func addTrust(_ root: TLSTrustRoot, to context: OpaquePointer) throws(TLSSetupError) {
        switch root {
        case .system:
            guard SSL_CTX_set_default_verify_paths(context) == 1 else { throw TLSSetupError("cannot load the system trust store") }
        case .pemFile(let path):
            guard SSL_CTX_load_verify_locations(context, path, nil) == 1 else {
                throw TLSSetupError("cannot load trusted certificates from \(path)")
            }
        case .directory(let path):
            guard SSL_CTX_load_verify_locations(context, nil, path) == 1 else {
                throw TLSSetupError("cannot use the certificate directory \(path)")
            }
        case .pem(let data):
            let certificates = try PEM.certificates(data, what: "trusted certificates")
            let store = SSL_CTX_get_cert_store(context)
            for certificate in certificates {
                X509_STORE_add_cert(store, certificate)
                X509_free(certificate)
            }
        }
    }

    private static func use(_ identity: TLSIdentity, in context: OpaquePointer) throws(TLSSetupError) {
        let chain: [OpaquePointer]
        let key: OpaquePointer
        switch identity.source {
        case .pem(let chainPEM, let keyPEM, let password):
            chain = try PEM.certificates(chainPEM, what: "the identity's certificate chain")
            key = try PEM.privateKey(keyPEM, password: password)
        case .pemFiles(let chainFile, let keyFile, let password):
            guard let chainPEM = FileManager.default.contents(atPath: chainFile) else {
                throw TLSSetupError("cannot read the certificate chain file \(chainFile)")
            }
            guard let keyPEM = FileManager.default.contents(atPath: keyFile) else {
                throw TLSSetupError("cannot read the private key file \(keyFile)")
            }
            chain = try PEM.certificates(chainPEM, what: "the certificate chain in \(chainFile)")
            key = try PEM.privateKey(keyPEM, password: password)
        case .pkcs12(let archive, let password):
            (chain, key) = try PEM.pkcs12(archive, password: password)
        }
        defer {
            for certificate in chain { X509_free(certificate) }
            EVP_PKEY_free(key)
        }
        guard SSL_CTX_use_certificate(context, chain[0]) == 1 else { throw TLSSetupError("the identity's certificate cannot be used") }
        for intermediate in chain.dropFirst() {
            guard cssl_ctx_add1_chain_cert(context, intermediate) == 1 else { throw TLSSetupError("the certificate chain cannot be used") }
        }
        guard SSL_CTX_use_PrivateKey(context, key) == 1, SSL_CTX_check_private_key(context) == 1 else {
            throw TLSSetupError("the private key does not match the identity's certificate")
        }
    }
}

private let alpnLengthIndex = cssl_ctx_get_ex_new_index()

/// The server's ALPN choice: its own first preference that the client offers.
private let alpnSelectCallback:
    @convention(c) (
        OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
        UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?
    ) -> Int32 = { ssl, out, outLength, offered, offeredLength, argument in
        guard let ssl, let out, let outLength, let offered, let argument,
            let raw = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), alpnLengthIndex)
        else { return SSL_TLSEXT_ERR_NOACK }
        let ours = UnsafeBufferPointer(start: argument.assumingMemoryBound(to: UInt8.self), count: Int(bitPattern: raw))
        let theirs = UnsafeBufferPointer(start: offered, count: Int(offeredLength))
        var index = 0
        while index < ours.count {
            let length = Int(ours[index])
            let name = ours[(index + 1)...].prefix(length)
            var cursor = 0
            while cursor < theirs.count {
                let theirLength = Int(theirs[cursor])
                if theirs[(cursor + 1)...].prefix(theirLength).elementsEqual(name) {
                    out.pointee = offered + cursor + 1
                    outLength.pointee = UInt8(theirLength)
                    return SSL_TLSEXT_ERR_OK
                }
                cursor += 1 + theirLength
            }
            index += 1 + length
        }
        return SSL_TLSEXT_ERR_ALERT_FATAL  // RFC 7301: no protocol in common
    }

/// Keeps each new client session (TLS 1.3 sends them after the handshake) for the next connection
/// to the same peer.
private let newSessionCallback: @convention(c) (OpaquePointer?, OpaquePointer?) -> Int32 = { ssl, session in
    guard let ssl, let session, let transport = TLSTransport.owner(of: ssl), let key = transport.sessionKey else { return 0 }
    transport.context.sessions.store(session, for: key)
    return 1  // we keep the reference
}

/// Whom a client session may be offered to, within one context (whose settings decided the trust):
/// the name verified and sent as SNI, the port, the pins checked on it, and a GCDAsyncSocket peer ID.
struct TLSSessionKey: Hashable, Sendable {
    let host: String
    let port: Int
    let pins: [Data]
    let peerID: Data?
}

/// Client sessions by peer, bounded: at most `capacity` peers (the least recently stored dropped
/// first) and `perPeer` sessions each (a TLS 1.3 server sends two tickets, each used once; a TLS 1.2
/// session ID is reused until replaced). Sessions OpenSSL no longer resumes are dropped when met.
final class TLSSessionCache: Sendable {
    static let capacity = 256
    static let perPeer = 2

    private struct Entry {
        /// Oldest first; each an `SSL_SESSION*` this cache holds a reference to.
        var sessions: [OpaquePointer]
        var stamp: UInt64
    }

    private struct State {
        var entries: [TLSSessionKey: Entry] = [:]
        var clock: UInt64 = 0
    }

    private let state = Guarded(State())

    func store(_ session: OpaquePointer, for key: TLSSessionKey) {
        var dropped: [OpaquePointer] = []
        state.withLock { state in
            state.clock += 1
            if state.entries[key] == nil, state.entries.count >= Self.capacity,
                let oldest = state.entries.min(by: { $0.value.stamp < $1.value.stamp })?.key
            {
                dropped += state.entries.removeValue(forKey: oldest)?.sessions ?? []
            }
            var entry = state.entries[key] ?? Entry(sessions: [], stamp: 0)
            entry.sessions.append(session)
            if entry.sessions.count > Self.perPeer { dropped.append(entry.sessions.removeFirst()) }
            entry.stamp = state.clock
            state.entries[key] = entry
        }
        for session in dropped { SSL_SESSION_free(session) }
    }

    /// Offers the newest resumable session for `key` on `ssl`, if any; a TLS 1.3 ticket is taken out
    /// (RFC 8446 C.4: a ticket is used once), a TLS 1.2 session stays for the next connection.
    func resume(_ ssl: OpaquePointer, key: TLSSessionKey) {
        var dropped: [OpaquePointer] = []
        state.withLock { state in
            guard var entry = state.entries[key] else { return }
            while let session = entry.sessions.last {
                guard SSL_SESSION_is_resumable(session) == 1 else {
                    dropped.append(entry.sessions.removeLast())
                    continue
                }
                SSL_set_session(ssl, session)  // takes a reference of its own
                if SSL_SESSION_get_protocol_version(session) >= TLS1_3_VERSION { dropped.append(entry.sessions.removeLast()) }
                break
            }
            state.entries[key] = entry.sessions.isEmpty ? nil : entry
        }
        for session in dropped { SSL_SESSION_free(session) }
    }

    /// Drops every session for `key` (after a failed handshake with that peer).
    func forget(_ key: TLSSessionKey) {
        let dropped = state.withLock { $0.entries.removeValue(forKey: key)?.sessions ?? [] }
        for session in dropped { SSL_SESSION_free(session) }
    }

    /// How many sessions are kept for `key` (for tests).
    func count(for key: TLSSessionKey) -> Int { state.withLock { $0.entries[key]?.sessions.count ?? 0 } }

    /// How many peers have sessions kept (for tests).
    var peerCount: Int { state.withLock { $0.entries.count } }

    deinit {
        state.withLock { state in
            for entry in state.entries.values { for session in entry.sessions { SSL_SESSION_free(session) } }
        }
    }
}

/// Settings OpenSSL cannot use: a bad PEM, a wrong password, a key that does not match.
struct TLSSetupError: Error {
    var message: String
    /// OpenSSL's error queue at the time, oldest first.
    var queue: [String]

    init(_ message: String) {
        self.message = message
        queue = TLSErrors.drainQueue()
    }
}

/// Reading PEM and PKCS#12 with OpenSSL's parsers.
enum PEM {
    /// Every certificate in PEM `data` (at least one), each to be `X509_free`d.
    static func certificates(_ data: Data, what: String) throws(TLSSetupError) -> [OpaquePointer] {
        OpenSSLLibrary.prepare()
        var certificates: [OpaquePointer] = []
        data.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return }
            defer { BIO_free(bio) }
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { certificates.append(certificate) }
        }
        ERR_clear_error()  // the loop ends on "no start line"
        guard !certificates.isEmpty else { throw TLSSetupError("no PEM certificate found in \(what)") }
        return certificates
    }

    /// Every CRL in a PEM file or text (at least one), each to be `X509_CRL_free`d.
    static func revocationLists(_ list: TLSRevocationList) throws(TLSSetupError) -> [OpaquePointer] {
        let data: Data
        let what: String
        switch list {
        case .pemFile(let path):
            guard let contents = FileManager.default.contents(atPath: path) else { throw TLSSetupError("cannot read the CRL file \(path)") }
            data = contents
            what = path
        case .pem(let text):
            data = text
            what = "the CRL data"
        }
        var lists: [OpaquePointer] = []
        data.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return }
            defer { BIO_free(bio) }
            while let crl = PEM_read_bio_X509_CRL(bio, nil, nil, nil) { lists.append(crl) }
        }
        ERR_clear_error()  // the loop ends on "no start line"
        guard !lists.isEmpty else { throw TLSSetupError("no PEM certificate revocation list (X509 CRL) found in \(what)") }
        // RFC 5280 §5.2.3: conforming CRL issuers must include the CRL number (rustls refuses a CRL
        // without one; Chromium, Go's crypto/x509 and Apple's trust evaluation take no CRLs to compare).
        if let unnumbered = lists.first(where: { X509_CRL_get_ext_by_NID($0, NID_crl_number, -1) < 0 }) {
            let issuer = TLSVerification.nameText(X509_CRL_get_issuer(unnumbered))
            for crl in lists { X509_CRL_free(crl) }
            throw TLSSetupError("the CRL of \"\(issuer)\" in \(what) has no CRL number (RFC 5280 §5.2.3 requires one)")
        }
        return lists
    }

    /// The private key in PEM `data`, decrypted with `password` if it is encrypted.
    static func privateKey(_ data: Data, password: String?) throws(TLSSetupError) -> OpaquePointer {
        let key = data.withUnsafeBytes { raw -> OpaquePointer? in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return (password ?? "").withCString { passphrase in
                PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: passphrase))
            }
        }
        guard let key else {
            throw TLSSetupError(
                password == nil
                    ? "cannot read the private key (encrypted keys need a password)" : "cannot read the private key (wrong password?)")
        }
        return key
    }

    /// The certificate chain (leaf first) and key in a PKCS#12 archive.
    static func pkcs12(_ data: Data, password: String) throws(TLSSetupError) -> ([OpaquePointer], OpaquePointer) {
        var key: OpaquePointer?
        var leaf: OpaquePointer?
        var others: OpaquePointer?
        let parsed = data.withUnsafeBytes { raw -> Bool in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return false }
            defer { BIO_free(bio) }
            guard let archive = d2i_PKCS12_bio(bio, nil) else { return false }
            defer { PKCS12_free(archive) }
            return PKCS12_parse(archive, password, &key, &leaf, &others) == 1
        }
        guard parsed, let key, let leaf else {
            if let key { EVP_PKEY_free(key) }
            if let leaf { X509_free(leaf) }
            if let others { cssl_sk_X509_pop_free(others) }
            throw TLSSetupError("cannot read the PKCS#12 identity (wrong password?)")
        }
        var chain = [leaf]
        if let others {
            for index in 0..<cssl_sk_X509_num(others) {
                if let certificate = cssl_sk_X509_value(others, index), X509_up_ref(certificate) == 1 { chain.append(certificate) }
            }
            cssl_sk_X509_pop_free(others)
        }
        return (chain, key)
    }
}
