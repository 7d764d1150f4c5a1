// What a connection or listener asks of its TLS options: the SocketStreams `TLSSettings` they come to
// (OpenSSL's configuration), and the metadata a ready connection reports. The `sec_protocol_options_*`
// functions fill the options (SecProtocolOptions.swift); this file turns them into settings:
//
// | option                              | TLSSettings                                                      |
// |-------------------------------------|------------------------------------------------------------------|
// | server name, else the endpoint host | `peerName` (SNI and the name verified); neither: `.none`          |
// | ALPN protocols                      | `alpnProtocols`                                                  |
// | min / max version                   | `minimumVersion` (below 1.2 → 1.2) / `maximumVersion` (below 1.2: |
// |                                     | throws errSSLPeerProtocolVersion)                                |
// | peer authentication                 | client (default true): verify, false `validatesCertificateChain` |
// |                                     | off; server (default false): true `clientCertificates .require`  |
// | local identity                      | `identity` (a server without one throws errSSLBadConfiguration)  |
// | challenge block                     | `identity`, asked before the handshake (the engine picks the     |
// |                                     | client certificate up front)                                     |
// | cipher suites                       | `cipherSuites` (IANA names; unknown: errSSLBadCipherSuite)       |
// | resumption and tickets              | `resumesSessions` (clients; unless resumption or tickets off)    |
// | verify block                        | `trustEvaluation` on its queue; OpenSSL's verdict then no longer |
// |                                     | refuses the handshake (TLSHandshake turns the chain check off and|
// |                                     | hands the verdict over); false fails with errSSLBadCert          |
// | false start, renegotiation, OCSP    | nothing (see their functions)                                    |

import Dispatch
import Foundation

extension NWProtocolTLS.Options {
    /// The settings a connection (`role` `.client`) or an accepted connection (`.server`) uses, for an
    /// endpoint whose host is `endpointHost` (the name or numeric address; nil for a Unix socket):
    /// the server name defaults to it. Throws what cannot be honoured, as `NWError.tls`.
    func settings(role: TLSSettings.Role, endpointHost: String?) throws(NWError) -> TLSSettings {
        let values = securityProtocolOptions.values.withLock { $0 }
        var settings = TLSSettings()
        settings.role = role
        let serverName = values.serverName ?? endpointHost
        settings.peerName = serverName.map { .name($0) } ?? .none

        if let maximum = values.maximumVersion {
            guard let version = maximum.tlsVersion else { throw NWError.tls(errSSLPeerProtocolVersion) }
            settings.maximumVersion = version
        }
        if let minimum = values.minimumVersion { settings.minimumVersion = minimum.tlsVersion ?? .v1_2 }
        if let maximum = settings.maximumVersion, maximum < settings.minimumVersion { throw NWError.tls(errSSLBadConfiguration) }

        settings.alpnProtocols = values.applicationProtocols
        settings.cipherSuites = try values.cipherSuites.map { suite throws(NWError) in
            guard let name = suite.ianaName else { throw NWError.tls(errSSLBadCipherSuite) }
            return name
        }

        switch role {
        case .client:
            if let block = values.verifyBlock, let queue = values.verifyQueue {
                settings.trustEvaluation = Self.evaluation(block, on: queue, serverName: serverName)
            } else if values.peerAuthenticationRequired == false {
                settings.validatesCertificateChain = false
            }
            if let identity = values.localIdentity {
                settings.identity = identity.tlsIdentity
            } else if let block = values.challengeBlock, let queue = values.challengeQueue {
                settings.identity = Self.challenge(block, on: queue, serverName: serverName)?.tlsIdentity
            }
            settings.resumesSessions = values.resumptionEnabled != false && values.ticketsEnabled != false
        case .server:
            guard let identity = values.localIdentity else { throw NWError.tls(errSSLBadConfiguration) }
            settings.identity = identity.tlsIdentity
            if values.peerAuthenticationRequired == true {
                // A server's verify block would judge client certificates, which the engine cannot hand over.
                if values.verifyBlock != nil { throw NWError.tls(errSSLBadConfiguration) }
                settings.clientCertificates = .require
            }
        }
        return settings
    }

    /// The verify block as a trust evaluation: asked on `queue` with the handshake's metadata and a
    /// trust over the peer's chain; a rejection fails with errSSLBadCert.
    private static func evaluation(_ block: @escaping sec_protocol_verify_t, on queue: DispatchQueue, serverName: String?)
        -> TLSTrustEvaluation
    {
        TLSTrustEvaluation(queue: queue, rejectionStatus: Int(errSSLBadCert)) { trust, completion in
            block(sec_protocol_metadata_t(info: trust.connectionInfo, serverName: serverName), sec_trust_t(trust: trust), completion)
        }
    }

    /// The challenge block's identity, asked now: directly when this is its queue (an answer it gives
    /// later is not waited for), else on its queue, waited for up to 30 seconds.
    private static func challenge(_ block: @escaping sec_protocol_challenge_t, on queue: DispatchQueue, serverName: String?)
        -> sec_identity_t?
    {
        let metadata = sec_protocol_metadata_t(info: nil, serverName: serverName)
        let answer = Guarded<(given: Bool, identity: sec_identity_t?)>((false, nil))
        let answered = DispatchSemaphore(value: 0)
        let complete: sec_protocol_challenge_complete_t = { identity in
            let first = answer.withLock { answer -> Bool in
                guard !answer.given else { return false }
                answer = (true, identity)
                return true
            }
            if first { answered.signal() }
        }
        if DispatchQueue.getSpecific(key: challengeQueueKey) == ObjectIdentifier(queue) {
            block(metadata, complete)
        } else {
            queue.async { block(metadata, complete) }
            _ = answered.wait(timeout: .now() + 30)
        }
        return answer.withLock { $0.identity }
    }
}

extension NWProtocolTLS {
    /// TLS's metadata on a ready connection (`NWProtocolTLS.Metadata`): what was negotiated.
    // @unchecked Sendable: only `let`s of Sendable values.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// What the handshake negotiated, nil before it.
        let info: TLSConnectionInfo?

        /// The handshake's Security metadata (`NWProtocolTLS.Metadata.securityProtocolMetadata`): read it
        /// with the `sec_protocol_metadata_*` functions.
        public let securityProtocolMetadata: sec_protocol_metadata_t

        init(info: TLSConnectionInfo?) {
            self.info = info
            securityProtocolMetadata = sec_protocol_metadata_t(info: info)
        }
    }
}
