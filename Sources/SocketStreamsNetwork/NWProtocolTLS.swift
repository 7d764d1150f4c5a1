// TLS's options as Network.framework declares them: a class holding Security's `sec_protocol_options_t`,
// which the `sec_protocol_options_*` functions configure. This slice declares the storage only; the TLS
// slice adds those functions and maps what they set onto SocketStreams' `TLSSettings` (OpenSSL).

import Foundation

/// Security's handle on one TLS configuration, `sec_protocol_options_t`: what the
/// `sec_protocol_options_*` functions take. On Apple platforms an opaque object; here a class.
///
/// Storage only for now: the `sec_protocol_options_*` functions (verify block, versions, server name,
/// ALPN, identities) come with the TLS slice, and until then a connection uses the system's defaults
/// (the peer verified against the system store, server name from the endpoint).
// swift-format-ignore: TypeNamesShouldBeCapitalized
public final class sec_protocol_options_t: Sendable {
    init() {}
}

/// Transport Layer Security: Network.framework's `NWProtocolTLS`.
public class NWProtocolTLS: NWProtocol, @unchecked Sendable {
    /// TLS's definition, named "tls" (`NWProtocolTLS.definition`).
    public static let definition = NWProtocolDefinition(name: "tls")

    /// How TLS is used on a connection: Network.framework's `NWProtocolTLS.Options`, a holder of a
    /// ``sec_protocol_options_t`` (storage only in this release: the `sec_protocol_options_*` functions
    /// that configure it come with TLS itself).
    // @unchecked Sendable: only a `let` of a Sendable class.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        /// The Security options the `sec_protocol_options_*` functions configure
        /// (`NWProtocolTLS.Options.securityProtocolOptions`).
        public let securityProtocolOptions: sec_protocol_options_t

        /// TLS with the system's defaults (`NWProtocolTLS.Options.init()`).
        override public init() {
            securityProtocolOptions = sec_protocol_options_t()
        }

        override func copied() -> NWProtocolOptions { Options() }
    }
}
