// TCP's options as Network.framework declares them, with its defaults (0 or false: "the system's
// default"). They are stored here; the connection slice maps each to its socket option (`TCP_NODELAY`,
// `TCP_KEEPIDLE`, `TCP_USER_TIMEOUT`, `TCP_FASTOPEN_CONNECT`, `TCP_MAXSEG`...) when it opens the socket.

import Foundation

/// The Transmission Control Protocol: Network.framework's `NWProtocolTCP`.
public class NWProtocolTCP: NWProtocol, @unchecked Sendable {
    /// TCP's definition, named "tcp" (`NWProtocolTCP.definition`).
    public static let definition = NWProtocolDefinition(name: "tcp")

    /// How TCP is used on a connection: Network.framework's `NWProtocolTCP.Options`. Every value
    /// starts at 0 or false, meaning the system's default, as on Apple platforms.
    // @unchecked Sendable: the values are in a `Guarded` state.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        struct Values: Hashable {
            var noDelay = false
            var noPush = false
            var noOptions = false
            var enableKeepalive = false
            var keepaliveCount = 0
            var keepaliveIdle = 0
            var keepaliveInterval = 0
            var maximumSegmentSize = 0
            var connectionTimeout = 0
            var persistTimeout = 0
            var connectionDropTime = 0
            var retransmitFinDrop = false
            var disableAckStretching = false
            var enableFastOpen = false
            var disableECN = false
        }

        let values: Guarded<Values>

        /// TCP with the system's defaults (`NWProtocolTCP.Options.init()`).
        override public init() {
            values = Guarded(Values())
        }

        private init(values: Values) {
            self.values = Guarded(values)
        }

        override func copied() -> NWProtocolOptions { Options(values: values.withLock { $0 }) }
        override var sharingKey: OptionsSharingKey? { .tcp(values.withLock { $0 }) }

        /// Disables Nagle's algorithm, `TCP_NODELAY` (`NWProtocolTCP.Options.noDelay`; default false).
        public var noDelay: Bool {
            get { values[\.noDelay] }
            set { values[\.noDelay] = newValue }
        }
        /// No-push mode, `TCP_CORK` on Linux (`NWProtocolTCP.Options.noPush`; default false).
        public var noPush: Bool {
            get { values[\.noPush] }
            set { values[\.noPush] = newValue }
        }
        /// No-options mode: no TCP options in the handshake (`NWProtocolTCP.Options.noOptions`;
        /// default false). Linux has no socket option for it: kept as a value only.
        public var noOptions: Bool {
            get { values[\.noOptions] }
            set { values[\.noOptions] = newValue }
        }
        /// Keepalive probes, `SO_KEEPALIVE` (`NWProtocolTCP.Options.enableKeepalive`; default false).
        public var enableKeepalive: Bool {
            get { values[\.enableKeepalive] }
            set { values[\.enableKeepalive] = newValue }
        }
        /// Probes sent before the connection is dropped, `TCP_KEEPCNT` (`NWProtocolTCP.Options.keepaliveCount`;
        /// 0: the system's).
        public var keepaliveCount: Int {
            get { values[\.keepaliveCount] }
            set { values[\.keepaliveCount] = newValue }
        }
        /// Seconds idle before the first probe, `TCP_KEEPIDLE` (`NWProtocolTCP.Options.keepaliveIdle`; 0: the system's).
        public var keepaliveIdle: Int {
            get { values[\.keepaliveIdle] }
            set { values[\.keepaliveIdle] = newValue }
        }
        /// Seconds between probes, `TCP_KEEPINTVL` (`NWProtocolTCP.Options.keepaliveInterval`; 0: the system's).
        public var keepaliveInterval: Int {
            get { values[\.keepaliveInterval] }
            set { values[\.keepaliveInterval] = newValue }
        }
        /// The maximum segment size in bytes, `TCP_MAXSEG` (`NWProtocolTCP.Options.maximumSegmentSize`; 0: the system's).
        public var maximumSegmentSize: Int {
            get { values[\.maximumSegmentSize] }
            set { values[\.maximumSegmentSize] = newValue }
        }
        /// Seconds the handshake may take, the connector's timeout (`NWProtocolTCP.Options.connectionTimeout`;
        /// 0: none of its own).
        public var connectionTimeout: Int {
            get { values[\.connectionTimeout] }
            set { values[\.connectionTimeout] = newValue }
        }
        /// The persist timeout in seconds (RFC 6429; `NWProtocolTCP.Options.persistTimeout`; 0: the system's).
        /// Linux has no socket option for it: kept as a value only.
        public var persistTimeout: Int {
            get { values[\.persistTimeout] }
            set { values[\.persistTimeout] = newValue }
        }
        /// Seconds unacknowledged data may wait before the connection is dropped, `TCP_USER_TIMEOUT`
        /// (`NWProtocolTCP.Options.connectionDropTime`; 0: the system's).
        public var connectionDropTime: Int {
            get { values[\.connectionDropTime] }
            set { values[\.connectionDropTime] = newValue }
        }
        /// Drops the connection when a FIN is not acknowledged (`NWProtocolTCP.Options.retransmitFinDrop`;
        /// default false). Linux has no socket option for it: kept as a value only.
        public var retransmitFinDrop: Bool {
            get { values[\.retransmitFinDrop] }
            set { values[\.retransmitFinDrop] = newValue }
        }
        /// Disables acknowledgement stretching, `TCP_QUICKACK` on Linux
        /// (`NWProtocolTCP.Options.disableAckStretching`; default false).
        public var disableAckStretching: Bool {
            get { values[\.disableAckStretching] }
            set { values[\.disableAckStretching] = newValue }
        }
        /// TCP Fast Open, `TCP_FASTOPEN_CONNECT` (`NWProtocolTCP.Options.enableFastOpen`; default false).
        public var enableFastOpen: Bool {
            get { values[\.enableFastOpen] }
            set { values[\.enableFastOpen] = newValue }
        }
        /// Disables ECN negotiation (`NWProtocolTCP.Options.disableECN`; default false). Linux sets ECN per
        /// host (`net.ipv4.tcp_ecn`), not per socket: kept as a value only.
        public var disableECN: Bool {
            get { values[\.disableECN] }
            set { values[\.disableECN] = newValue }
        }
    }
}
