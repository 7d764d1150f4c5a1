// IP's options as Network.framework declares them. Every parameters' stack has one (`internetProtocol`);
// as on Apple platforms, code does not make one itself.

import Foundation

/// The Internet Protocol: Network.framework's `NWProtocolIP`.
public class NWProtocolIP: NWProtocol, @unchecked Sendable {
    /// IP's definition, named "ip" (`NWProtocolIP.definition`).
    public static let definition = NWProtocolDefinition(name: "ip")

    /// How IP is used on a connection: Network.framework's `NWProtocolIP.Options`, reached through
    /// `parameters.defaultProtocolStack.internetProtocol as? NWProtocolIP.Options`.
    // @unchecked Sendable: the values are in a `Guarded` state.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        /// The IP version a connection must use: Network.framework's `NWProtocolIP.Options.Version`.
        public enum Version: Hashable, Sendable {
            /// Either version (`NWProtocolIP.Options.Version.any`).
            case any
            /// IPv4 only (`NWProtocolIP.Options.Version.v4`).
            case v4
            /// IPv6 only (`NWProtocolIP.Options.Version.v6`).
            case v6
        }

        /// Which kind of local IPv6 address a connection prefers: Network.framework's
        /// `NWProtocolIP.Options.AddressPreference`.
        public enum AddressPreference: Hashable, Sendable {
            /// The system's choice (`NWProtocolIP.Options.AddressPreference.default`).
            case `default`
            /// A temporary (privacy) address, `IPV6_PREFER_SRC_TMP` (`NWProtocolIP.Options.AddressPreference.temporary`).
            case temporary
            /// A stable address, `IPV6_PREFER_SRC_PUBLIC` (`NWProtocolIP.Options.AddressPreference.stable`).
            case stable
        }

        struct Values: Hashable {
            var version = Version.any
            var hopLimit: UInt8 = 0
            var useMinimumMTU = false
            var disableFragmentation = false
            var shouldCalculateReceiveTime = false
            var disableMulticastLoopback = false
            var localAddressPreference = AddressPreference.default
        }

        let values: Guarded<Values>

        override init() {
            values = Guarded(Values())
        }

        private init(values: Values) {
            self.values = Guarded(values)
        }

        override func copied() -> NWProtocolOptions { Options(values: values.withLock { $0 }) }
        override var sharingKey: OptionsSharingKey? { .ip(values.withLock { $0 }) }

        /// The only IP version the connection may use (`NWProtocolIP.Options.version`; default `.any`).
        public var version: Version {
            get { values[\.version] }
            set { values[\.version] = newValue }
        }
        /// The hop limit (TTL) of the packets sent, `IP_TTL` / `IPV6_UNICAST_HOPS`
        /// (`NWProtocolIP.Options.hopLimit`; 0: the system's).
        public var hopLimit: UInt8 {
            get { values[\.hopLimit] }
            set { values[\.hopLimit] = newValue }
        }
        /// Uses IPv6's minimum MTU, 1280 bytes, `IPV6_MTU` (`NWProtocolIP.Options.useMinimumMTU`; default false).
        public var useMinimumMTU: Bool {
            get { values[\.useMinimumMTU] }
            set { values[\.useMinimumMTU] = newValue }
        }
        /// Sets Don't Fragment on outgoing packets, `IP_MTU_DISCOVER` = `IP_PMTUDISC_DO`
        /// (`NWProtocolIP.Options.disableFragmentation`; default false).
        public var disableFragmentation: Bool {
            get { values[\.disableFragmentation] }
            set { values[\.disableFragmentation] = newValue }
        }
        /// Delivers each packet's receive time, `SO_TIMESTAMP` (`NWProtocolIP.Options.shouldCalculateReceiveTime`;
        /// default false).
        public var shouldCalculateReceiveTime: Bool {
            get { values[\.shouldCalculateReceiveTime] }
            set { values[\.shouldCalculateReceiveTime] = newValue }
        }
        /// Stops multicast sent from this socket coming back to it, `IP_MULTICAST_LOOP` = 0
        /// (`NWProtocolIP.Options.disableMulticastLoopback`; default false).
        public var disableMulticastLoopback: Bool {
            get { values[\.disableMulticastLoopback] }
            set { values[\.disableMulticastLoopback] = newValue }
        }
        /// The kind of local IPv6 address preferred (`NWProtocolIP.Options.localAddressPreference`;
        /// default `.default`).
        public var localAddressPreference: AddressPreference {
            get { values[\.localAddressPreference] }
            set { values[\.localAddressPreference] = newValue }
        }
    }
}
