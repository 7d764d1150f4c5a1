import Foundation

/// The TLS handshake as a connection stage: builds (or reuses) the context, creates the SSL over
/// the transport below, drives `SSL_do_handshake`, checks pins, and hands over the TLS transport.
final class TLSHandshake: HandshakeStage, @unchecked Sendable {
    static let stageName = "TLS handshake"
    let name = TLSHandshake.stageName

    let settings: TLSSettings
    /// What OpenSSL is set up with: `settings` without the trust evaluation, which turns the chain
    /// check off (its verdict still goes to the evaluation).
    private let contextSettings: TLSSettings
    /// Runs the stage again once the trust evaluation answered (the connection's `resumeNegotiation`).
    private let resume: @Sendable () -> Void
    /// The trust evaluation's answer, once it gave one.
    private let decision = Guarded<Bool?>(nil)
    /// Whether the evaluation has been asked.
    private var asked = false
    /// The name SNI and verification use, nil for none.
    private let hostName: String?
    /// "host:port" for session resumption.
    private let sessionKey: TLSSessionKey?
    private let peerLabel: String
    /// A client that would verify a chain with no name to check it against (a pair from a native
    /// socket or a Unix path, `.pairHost`): refused rather than accept a valid certificate for any name.
    private let lacksPeerName: Bool
    private var transport: TLSTransport?

    /// A handshake for a pair created for `target` (whose host is the default peer name).
    init(settings: TLSSettings, target: Endpoint, resume: @escaping @Sendable () -> Void = {}) {
        self.settings = settings
        var contextSettings = settings
        contextSettings.trustEvaluation = nil
        if settings.trustEvaluation != nil { contextSettings.validatesCertificateChain = false }
        self.contextSettings = contextSettings
        self.resume = resume
        var pairHost: String?
        var port = 0
        if case .host(let name, let number) = target {
            pairHost = name
            port = number
        }
        switch settings.peerName {
        case .pairHost: hostName = settings.role == .client ? pairHost : nil
        case .name(let name): hostName = IDNA.asciiOrSame(name)  // a U-label name is checked and sent as its A-labels
        case .none: hostName = nil
        }
        lacksPeerName =
            settings.role == .client && contextSettings.validatesCertificateChain && hostName == nil
            && settings.peerName == .pairHost
        // A trust evaluation is asked on resumed connections too, with the chain the session was made with.
        sessionKey =
            settings.resumesSessions && settings.role == .client
            ? hostName.map { TLSSessionKey(host: $0, port: port, pins: settings.pinnedPublicKeySHA256, peerID: settings.sessionPeerID) }
            : nil
        peerLabel = hostName.map { port > 0 ? "\($0) port \(port)" : $0 } ?? target.label
    }

    func advance(over inner: any Transport) -> HandshakeStep {
        if transport == nil {
            if lacksPeerName {
                return .failed(
                    TLSErrors.failure(
                        TLSStatus.badConfiguration,
                        "the pair has no host name to verify the certificate against: set "
                            + "kCFStreamSSLPeerName (or TLSSettings.peerName), or NSNull / .none to check the chain only",
                        .handshake(name)))
            }
            if let level = settings.refusedLevel {
                return .failed(
                    TLSErrors.failure(
                        TLSStatus.peerProtocolVersion,
                        "\(level) is not offered: SSLv2 and SSLv3 are broken, TLS 1.2 is the oldest version supported",
                        .handshake(name)))
            }
            if settings.trustEvaluation != nil, settings.role == .server {
                return .failed(
                    TLSErrors.failure(
                        TLSStatus.badConfiguration, "a trust evaluation is for clients: a server's settings cannot have one",
                        .handshake(name)))
            }
            do {
                transport = try TLSTransport(
                    context: TLSContext.shared(for: contextSettings), over: inner, settings: contextSettings,
                    hostName: hostName, sessionKey: sessionKey, peerLabel: peerLabel)
            } catch {
                return .failed(TLSErrors.configuration(error))
            }
        }
        guard let transport else { return .failed(.posix(EINVAL, .handshake(name))) }
        switch transport.handshake() {
        case .wait(let interest):
            return .wait(interest)
        case .failed(let failure):
            return .failed(failure)
        case .done:
            if !settings.pinnedPublicKeySHA256.isEmpty {
                guard let key = transport.peerPublicKeyDER(), settings.pinnedPublicKeySHA256.contains(SHA256.digest(key)) else {
                    return .failed(
                        TLSErrors.failure(
                            TLSStatus.certChainInvalid,
                            "the certificate for \(peerLabel) does not carry a pinned public key",
                            .handshake(name)))
                }
            }
            if let evaluation = settings.trustEvaluation {
                return evaluate(with: evaluation, transport)
            }
            return .done(transport)
        }
    }

    /// The handshake is done and the application decides: asks once, waits (for nothing on the
    /// socket) until it answers, then goes on or fails with errSSLPeerBadCert.
    private func evaluate(with evaluation: TLSTrustEvaluation, _ transport: TLSTransport) -> HandshakeStep {
        let info = transport.info
        switch decision.withLock({ $0 }) {
        case true?:
            return .done(transport)
        case false?:
            return .failed(
                TLSErrors.failure(
                    evaluation.rejectionStatus,
                    "the trust evaluation rejected the certificate of \(peerLabel) (OpenSSL: \(info?.verifyResultDescription ?? "no certificate"))",
                    .handshake(name), extra: [TLSErrors.verifyResultKey: info?.verifyResult ?? -1]))
        case nil:
            if !asked {
                asked = true
                let chain = info?.peerCertificates ?? []
                let trust = TLSPeerTrust(
                    certificateChain: chain, policy: TLSChainPolicy(purpose: .server, hostName: hostName),
                    connectionInfo: info, parsed: transport.parsedPeerCertificates(matching: chain))
                evaluation.ask(trust) { [decision, resume] accepted in
                    let first = decision.withLock { decision -> Bool in
                        guard decision == nil else { return false }
                        decision = accepted
                        return true
                    }
                    if first { resume() }
                }
            }
            return .wait([])
        }
    }
}
