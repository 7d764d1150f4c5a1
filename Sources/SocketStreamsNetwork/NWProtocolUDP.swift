// UDP's options as Network.framework declares them.

import Foundation

/// The User Datagram Protocol: Network.framework's `NWProtocolUDP`.
public class NWProtocolUDP: NWProtocol, @unchecked Sendable {
    /// UDP's definition, named "udp" (`NWProtocolUDP.definition`).
    public static let definition = NWProtocolDefinition(name: "udp")

    /// How UDP is used on a connection: Network.framework's `NWProtocolUDP.Options`.
    // @unchecked Sendable: the values are in a `Guarded` state.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        struct Values: Hashable {
            var preferNoChecksum = false
        }

        let values: Guarded<Values>

        /// UDP with the system's defaults (`NWProtocolUDP.Options.init()`).
        override public init() {
            values = Guarded(Values())
        }

        private init(values: Values) {
            self.values = Guarded(values)
        }

        override func copied() -> NWProtocolOptions { Options(values: values.withLock { $0 }) }
        override var sharingKey: OptionsSharingKey? { .udp(values.withLock { $0 }) }

        /// Sends IPv4 datagrams without a checksum, `SO_NO_CHECK` on Linux
        /// (`NWProtocolUDP.Options.preferNoChecksum`; default false; IPv6 always has one).
        public var preferNoChecksum: Bool {
            get { values[\.preferNoChecksum] }
            set { values[\.preferNoChecksum] = newValue }
        }
    }
}
