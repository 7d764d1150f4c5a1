// QUIC's options as Network.framework declares them (macOS 12, iOS 15), so that code with a QUIC
// endpoint among others builds. Linux has no QUIC in this package: a connection over
// `NWParameters(quic:)` fails with `.posix(.EPROTONOSUPPORT)` (ConnectionConfiguration) instead of
// falling back to anything, and a listener refuses it at init.

import Foundation

/// The QUIC protocol: Network.framework's `NWProtocolQUIC`.
// @unchecked Sendable: no stored state (as `NWProtocol`).
public class NWProtocolQUIC: NWProtocol, @unchecked Sendable {
    /// QUIC's definition, named "quic" (`NWProtocolQUIC.definition`).
    public static let definition = NWProtocolDefinition(name: "quic")

    /// How QUIC is used on a connection: Network.framework's `NWProtocolQUIC.Options`.
    // @unchecked Sendable: the values are in a `Guarded` state, the Security options are a `let` of a
    // Sendable class.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        struct Values {
            var alpn: [String]
            var idleTimeout = 0
        }

        let values: Guarded<Values>

        /// The handshake's TLS options, which the `sec_protocol_options_*` functions configure
        /// (`NWProtocolQUIC.Options.securityProtocolOptions`).
        public let securityProtocolOptions: sec_protocol_options_t

        /// QUIC with the system's defaults and no ALPN value (`NWProtocolQUIC.Options.init()`).
        override public init() {
            values = Guarded(Values(alpn: []))
            securityProtocolOptions = sec_protocol_options_t()
        }

        /// QUIC offering these ALPN values (`NWProtocolQUIC.Options.init(alpn:)`).
        public convenience init(alpn: [String]) {
            self.init()
            values[\.alpn] = alpn
        }

        private init(values: Values, securityProtocolOptions: sec_protocol_options_t) {
            self.values = Guarded(values)
            self.securityProtocolOptions = securityProtocolOptions
        }

        override func copied() -> NWProtocolOptions {
            Options(values: values.withLock { $0 }, securityProtocolOptions: securityProtocolOptions.copied())
        }

        /// The ALPN values offered (`NWProtocolQUIC.Options.alpn`).
        public var alpn: [String] {
            get { values[\.alpn] }
            set { values[\.alpn] = newValue }
        }

        /// The idle timeout, in milliseconds (`NWProtocolQUIC.Options.idleTimeout`; 0 until set here).
        public var idleTimeout: Int {
            get { values[\.idleTimeout] }
            set { values[\.idleTimeout] = newValue }
        }
    }
}

extension NWParameters {
    /// Parameters for QUIC with these options (`NWParameters.init(quic:)`): QUIC is the stack's transport.
    public convenience init(quic: NWProtocolQUIC.Options) {
        self.init()
        defaultProtocolStack.transportProtocol = quic
    }

    /// Parameters for QUIC offering these ALPN values (`NWParameters.quic(alpn:)`).
    public class func quic(alpn: [String]) -> NWParameters {
        NWParameters(quic: NWProtocolQUIC.Options(alpn: alpn))
    }
}
