import Foundation

/// How a stream pair secures itself with TLS: the typed form of `kCFStreamPropertySSLSettings`.
///
/// Set it with `stream.setProperty(settings, forKey: .tlsSettingsKey)` (either stream of the pair)
/// before `open()`, or on an open pair to upgrade it in place (STARTTLS). The CFNetwork dictionary
/// and `kCFStreamPropertySocketSecurityLevel` map onto it. The defaults are safe: the system trust
/// store, the pair's host name verified with the WebPKI rules (no partial wildcards, no subject CN,
/// name constraints held against the name asked for, no CA certificate as a server's leaf), the
/// RFC 5280 profile (``VerificationProfile/strict``), TLS 1.2 or newer.
public struct TLSSettings: Sendable, Hashable {
    /// Which end of the handshake this pair plays (`kCFStreamSSLIsServer`).
    public enum Role: Sendable, Hashable {
        /// Connects and verifies the server (the default; `kCFStreamSSLIsServer` false).
        case client
        /// Accepts the handshake with ``TLSSettings/identity`` (`kCFStreamSSLIsServer` true).
        case server
    }

    /// The name checked against the peer's certificate and sent as SNI (`kCFStreamSSLPeerName`).
    public enum PeerName: Sendable, Hashable {
        /// The host the pair was created with (an IP literal is checked as an IP address and sends
        /// no SNI). Pairs made from a native socket or a Unix path have none: a client that verifies the
        /// chain fails its handshake (errSSLBadConfiguration) until a name, or `.none`, is given.
        case pairHost
        /// This name.
        case name(String)
        /// No name check and no SNI; the chain is still verified (`kCFNull` as the peer name).
        case none
    }

    /// What a server asks of its clients.
    public enum ClientCertificates: Sendable, Hashable {
        /// Never asks (the default).
        case none
        /// Asks, and verifies a certificate if one is sent; a client without one is accepted.
        case request
        /// Asks and fails the handshake unless a trusted certificate is sent.
        case require
    }

    /// Which end of the handshake this pair plays: ``Role/client`` unless set.
    public var role: Role = .client
    /// The oldest version offered; TLS 1.2 unless set.
    public var minimumVersion: TLSVersion = .v1_2
    /// The newest version offered; nil is the newest OpenSSL knows.
    public var maximumVersion: TLSVersion?
    /// Where trusted certificates come from. `[.system]` by default; list `.system` with others to
    /// add to the system store, leave it out to replace it.
    public var trustRoots: [TLSTrustRoot] = [.system]
    /// Verify the peer's certificate chain (`kCFStreamSSLValidatesCertificateChain`). With false,
    /// any certificate is accepted (pins, if set, are still checked).
    public var validatesCertificateChain = true
    /// The name the server's certificate must match (`kCFStreamSSLPeerName`): the pair's host unless set.
    public var peerName: PeerName = .pairHost
    /// Accept expired (or not yet valid) certificates anywhere in the chain, the root and a
    /// self-signed leaf included, as Apple's platforms do (`kCFStreamSSLAllowsExpiredCertificates`).
    public var allowsExpiredCertificates = false
    /// Accept an expired root (`kCFStreamSSLAllowsExpiredRoots`).
    public var allowsExpiredRoots = false
    /// How strictly certificates are held to RFC 5280's profile: ``VerificationProfile/strict`` unless set
    /// (``VerificationProfile/baselineRequirements`` adds the CA/Browser Forum's). The WebPKI rules (no
    /// partial wildcards, no subject CN fallback, name constraints checked against the peer name, no name
    /// constraints on a server's leaf) apply in every profile, and so does path building: the first path
    /// from the leaf to a trusted certificate that passes them all is the verified chain.
    public var verificationProfile: VerificationProfile = .strict
    /// Certificate revocation lists the chain is checked against (`X509_STORE_add_crl`; curl's
    /// `--crlfile`). When not empty, a certificate ``revocationCheck`` covers must have a current CRL
    /// from its issuer here, or the handshake fails.
    public var revocationLists: [TLSRevocationList] = []
    /// Which certificates ``revocationLists`` are checked for: the leaf only (`X509_V_FLAG_CRL_CHECK`,
    /// the default) or every certificate below the root (`X509_V_FLAG_CRL_CHECK_ALL`). Ignored while
    /// ``revocationLists`` is empty.
    public var revocationCheck: RevocationCheck = .leaf
    /// The most intermediate CA certificates allowed between the leaf and the trust anchor
    /// (`SSL_CTX_set_verify_depth`): nil is OpenSSL's limit of 100. A longer chain fails with
    /// errSSLXCertChainInvalid ("certificate chain too long").
    public var maximumChainDepth: Int?
    /// Accept a chain that does not end in a trusted root (`kCFStreamSSLAllowsAnyRoot`).
    public var allowsAnyRoot = false
    /// ALPN protocols offered (client) or accepted (server), most preferred first, e.g. `["h2", "http/1.1"]`.
    public var alpnProtocols: [String] = []
    /// The local certificate and key (`kCFStreamSSLCertificates`): required for a server, optional
    /// for a client asked for one.
    public var identity: TLSIdentity?
    /// For servers: whether clients must present a certificate, verified against `trustRoots`.
    public var clientCertificates: ClientCertificates = .none
    /// SHA-256 digests of the peer's SubjectPublicKeyInfo (DER); when not empty, the leaf's key must
    /// match one of them, in addition to (or, with `validatesCertificateChain` false, instead of)
    /// chain verification.
    public var pinnedPublicKeySHA256: [Data] = []
    /// Clients: trust decided by the application after the handshake, from the peer's chain and
    /// OpenSSL's verdict (GCDAsyncSocket's `GCDAsyncSocketManuallyEvaluateTrust`); nil (the default)
    /// lets the settings above decide. See ``TLSTrustEvaluation``.
    public var trustEvaluation: TLSTrustEvaluation?
    /// The cipher suites offered (client) or accepted (server), by their IANA names
    /// ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"), most preferred first; empty
    /// is OpenSSL's defaults. TLS 1.3 suites go to `SSL_CTX_set_ciphersuites`, the others, under OpenSSL's
    /// names, to `SSL_CTX_set_cipher_list`; a name OpenSSL does not know fails the handshake with
    /// errSSLBadConfiguration. Network.framework's `sec_protocol_options_append_tls_ciphersuite` sets it.
    package var cipherSuites: [String] = []
    /// Clients: offer a session from an earlier connection to the same host and port, so repeated
    /// connections skip the full handshake. On by default, as Apple's TLS stack resumes sessions to a
    /// peer it has seen. A session is offered only under the settings that verified it (the same trust
    /// roots, verification profile, pins, client identity, versions and ALPN list, the same peer name and
    /// port); a ``trustEvaluation`` is still asked on every resumed connection, with the chain and
    /// verdict of the handshake that made the session. A TLS 1.3 ticket is used once. Servers ignore it.
    public var resumesSessions = true
    /// Clients: sessions are shared only between connections with the same peer ID (GCDAsyncSocket's
    /// `GCDAsyncSocketSSLPeerID`, SecureTransport's `SSLSetPeerID`); nil shares by host and port alone.
    package var sessionPeerID: Data?
    /// Treat the peer closing the TCP connection without a TLS `close_notify` as an error
    /// (errSSLClosedNoNotify, -9816) rather than as end of stream. Off by default: many servers
    /// close without one, and HTTP frames its bodies anyway; turn it on for protocols that rely on
    /// the connection end to mark the end of the data. Either way, a TCP end in the middle of a
    /// record is errSSLClosedNoNotify: part of the data was lost.
    public var requiresCloseNotify = false
    /// A legacy security level that cannot be honoured (SSLv2, SSLv3): the handshake then fails with
    /// errSSLPeerProtocolVersion instead of silently offering something else.
    var refusedLevel: String?
    /// The time certificates are verified at (`X509_VERIFY_PARAM_set_time`, as `SecTrustSetVerifyDate`
    /// sets it on Apple platforms); nil is the current time. For tests that replay a path-validation
    /// suite's fixed dates.
    var verificationTime: Date?

    /// Client settings with the safe defaults.
    public init() {}

    /// Server settings presenting `identity`.
    public static func server(identity: TLSIdentity) -> TLSSettings {
        var settings = TLSSettings()
        settings.role = .server
        settings.identity = identity
        return settings
    }
}

/// How strictly a certificate chain is held to RFC 5280's certificate profile (``TLSSettings/verificationProfile``).
public enum VerificationProfile: Sendable, Hashable {
    /// OpenSSL's `X509_V_FLAG_X509_STRICT`, which browsers, Go and rustls match in spirit: a CA
    /// certificate needs a critical basicConstraints, a keyUsage with keyCertSign and a
    /// subjectKeyIdentifier; a certificate below a root needs an authorityKeyIdentifier; a leaf may
    /// not carry keyCertSign; an empty subject needs a critical subjectAltName. The default.
    case strict
    /// OpenSSL's default checks only (no `X509_V_FLAG_X509_STRICT`): for private CAs made by old
    /// tools that leave out key identifiers or mark basicConstraints non-critical. It also lets a CA
    /// certificate (`cA=TRUE`) be a server's leaf, as RFC 5280 does, when its keyUsage lets its key sign
    /// the handshake (a CA's keyCertSign alone does not, in any profile); the other WebPKI rules still apply.
    case compatible
    /// ``strict`` plus the CA/Browser Forum Baseline Requirements' certificate profile, which some of
    /// the verifiers users meet skip (Guides/SecuringStreamsWithTLS.md has the table): a server
    /// certificate needs a non-critical extendedKeyUsage without anyExtendedKeyUsage, a serial of 1 to 20
    /// octets, DNS names in the preferred name syntax (no underscore, no empty label), no wildcard directly
    /// over a public suffix (the ICANN section of the system's Public Suffix List,
    /// /usr/share/publicsuffix/public_suffix_list.dat; without it, over a single label) and every subject
    /// CN among its subjectAltName entries; a
    /// root (the trust anchor too) has no extendedKeyUsage, a critical basicConstraints, a
    /// subjectKeyIdentifier and at most an authorityKeyIdentifier naming its own key; policyConstraints
    /// are critical; RSA moduli are whole bytes. Opt in for a client that must hold public CAs to it.
    case baselineRequirements
}

/// Which certificates a chain's CRLs are checked for (``TLSSettings/revocationCheck``).
public enum RevocationCheck: Sendable, Hashable {
    /// The leaf only (`X509_V_FLAG_CRL_CHECK`): its issuer's CRL must be among the lists.
    case leaf
    /// Every certificate but the trust anchor (`X509_V_FLAG_CRL_CHECK_ALL`, what curl's `--crlfile`
    /// sets): each issuer's CRL must be among the lists.
    case wholeChain
}

/// Certificate revocation lists in PEM (`PEM_read_bio_X509_CRL`), as curl's `--crlfile` takes them
/// (``TLSSettings/revocationLists``).
public enum TLSRevocationList: Sendable, Hashable {
    /// One or more CRLs in a PEM file, read when the settings are first used.
    case pemFile(String)
    /// PEM text holding one or more CRLs.
    case pem(Data)
}

/// A TLS protocol version.
public enum TLSVersion: Int, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// TLS 1.2 (`kTLSProtocol12`).
    case v1_2 = 0x0303
    /// TLS 1.3 (`kTLSProtocol13`).
    case v1_3 = 0x0304

    /// Older versions order first.
    public static func < (lhs: TLSVersion, rhs: TLSVersion) -> Bool { lhs.rawValue < rhs.rawValue }

    /// "TLSv1.2" or "TLSv1.3", as OpenSSL names them.
    public var description: String {
        switch self {
        case .v1_2: return "TLSv1.2"
        case .v1_3: return "TLSv1.3"
        }
    }
}

/// A source of trusted certificates.
public enum TLSTrustRoot: Sendable, Hashable {
    /// The system store (OpenSSL's default paths: `/etc/ssl/certs` on Debian).
    case system
    /// Certificates in a PEM file (`SSL_CTX_load_verify_locations`).
    case pemFile(String)
    /// A hashed certificate directory, as `c_rehash` makes.
    case directory(String)
    /// PEM text holding one or more certificates.
    case pem(Data)
}

/// The local certificate chain and private key a TLS server (or a client asked for a certificate)
/// presents: the Linux form of the `SecIdentity` CFNetwork takes in `kCFStreamSSLCertificates`.
public struct TLSIdentity: Sendable, Hashable {
    enum Source: Sendable, Hashable {
        case pem(chain: Data, key: Data, password: String?)
        case pemFiles(chain: String, key: String, password: String?)
        case pkcs12(Data, password: String)
    }

    let source: Source

    /// A PEM certificate chain (leaf first) and a PEM private key, encrypted if `password` is given.
    public init(certificateChainPEM: Data, privateKeyPEM: Data, password: String? = nil) {
        source = .pem(chain: certificateChainPEM, key: privateKeyPEM, password: password)
    }

    /// PEM files: the certificate chain (leaf first) and the private key.
    public init(certificateChainFile: String, privateKeyFile: String, password: String? = nil) {
        source = .pemFiles(chain: certificateChainFile, key: privateKeyFile, password: password)
    }

    /// A PKCS#12 archive (`.p12`/`.pfx`) holding the key, its certificate and any chain.
    public init(pkcs12: Data, password: String) {
        source = .pkcs12(pkcs12, password: password)
    }
}

/// What a completed handshake negotiated, readable from the first `hasSpaceAvailable` or
/// `hasBytesAvailable` after it (`stream.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo`).
public struct TLSConnectionInfo: Sendable, Hashable {
    /// "TLSv1.3", "TLSv1.2".
    public let protocolVersion: String
    /// The cipher suite's standard name, e.g. "TLS_AES_256_GCM_SHA384".
    public let cipherSuite: String
    /// The ALPN protocol agreed on, if any.
    public let alpnProtocol: String?
    /// The peer's certificates, DER, leaf first (what `kCFStreamPropertySSLPeerCertificates` returns).
    public let peerCertificates: [Data]
    /// Whether an earlier session was resumed.
    public let resumedSession: Bool
    /// The peer chain's verification result (`SSL_get_verify_result`): 0 (`X509_V_OK`) when it was
    /// verified or the peer sent no certificate; with `validatesCertificateChain` off, the result the
    /// check had although the handshake went on (e.g. 18, `X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT`).
    public let verifyResult: Int
    /// OpenSSL's text for ``verifyResult`` (`X509_verify_cert_error_string`), e.g. "ok".
    public let verifyResultDescription: String
    /// The server name (SNI) of the handshake: the one a client sent, or the one a server received
    /// (`SSL_get_servername`); nil when there was none (an IP address, or `.none`).
    public let serverName: String?

    package init(
        protocolVersion: String, cipherSuite: String, alpnProtocol: String?, peerCertificates: [Data], resumedSession: Bool,
        verifyResult: Int, verifyResultDescription: String, serverName: String? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.cipherSuite = cipherSuite
        self.alpnProtocol = alpnProtocol
        self.peerCertificates = peerCertificates
        self.resumedSession = resumedSession
        self.verifyResult = verifyResult
        self.verifyResultDescription = verifyResultDescription
        self.serverName = serverName
    }
}
