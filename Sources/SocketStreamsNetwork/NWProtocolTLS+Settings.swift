// What a connection or listener asks of its TLS options: the SocketStreams `TLSSettings` they come to
// (OpenSSL's configuration), and the metadata a ready connection reports. The `sec_protocol_options_*`
// functions fill the options; this file turns them into settings.

import Foundation

extension NWProtocolTLS.Options {
    /// The settings a connection (`role` `.client`) or an accepted connection (`.server`) uses, for an
    /// endpoint whose host is `endpointHost` (the name or numeric address; nil for a Unix socket):
    /// the server name defaults to it. Throws what cannot be honoured.
    func settings(role: TLSSettings.Role, endpointHost: String?) throws(NWError) -> TLSSettings {
        var settings = TLSSettings()
        settings.role = role
        if let endpointHost { settings.peerName = .name(endpointHost) }
        if role == .server { throw NWError.tls(-9829) }  // errSSLNoRootCert-shaped: no identity to serve
        return settings
    }
}

extension NWProtocolTLS {
    /// TLS's metadata on a ready connection (`NWProtocolTLS.Metadata`): what was negotiated.
    // @unchecked Sendable: only `let`s of Sendable values.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// What the handshake negotiated, nil before it.
        let info: TLSConnectionInfo?

        init(info: TLSConnectionInfo?) {
            self.info = info
        }
    }
}
