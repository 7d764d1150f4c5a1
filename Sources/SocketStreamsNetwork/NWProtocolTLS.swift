// TLS's options as Network.framework declares them: a class holding Security's `sec_protocol_options_t`
// (SecProtocolOptions.swift), which the `sec_protocol_options_*` functions configure;
// NWProtocolTLS+Settings.swift maps what they set onto SocketStreams' `TLSSettings` (OpenSSL).

import Foundation

/// Transport Layer Security: Network.framework's `NWProtocolTLS`.
public class NWProtocolTLS: NWProtocol, @unchecked Sendable {
    /// TLS's definition, named "tls" (`NWProtocolTLS.definition`).
    public static let definition = NWProtocolDefinition(name: "tls")

    /// How TLS is used on a connection: Network.framework's `NWProtocolTLS.Options`, a holder of a
    /// ``sec_protocol_options_t`` that the `sec_protocol_options_*` functions configure.
    // @unchecked Sendable: only a `let` of a Sendable class, whose values are in a `Guarded` state.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        /// The Security options the `sec_protocol_options_*` functions configure
        /// (`NWProtocolTLS.Options.securityProtocolOptions`).
        public let securityProtocolOptions: sec_protocol_options_t

        /// TLS with the system's defaults (`NWProtocolTLS.Options.init()`): the peer verified against the
        /// system store, the server name from the endpoint, TLS 1.2 or 1.3.
        override public init() {
            securityProtocolOptions = sec_protocol_options_t()
        }

        private init(securityProtocolOptions: sec_protocol_options_t) {
            self.securityProtocolOptions = securityProtocolOptions
        }

        override func copied() -> NWProtocolOptions { Options(securityProtocolOptions: securityProtocolOptions.copied()) }
    }
}
