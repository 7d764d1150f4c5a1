// WebSocket's options and message metadata as Network.framework declares them, so that code which
// inserts `NWProtocolWebSocket.Options` into a stack for some of its endpoints builds. The protocol
// itself comes with the protocol-stack slice: until then a connection whose stack holds these options
// fails with `.posix(.EPROTONOSUPPORT)` (ConnectionConfiguration), and a listener refuses them at init.

import Foundation

/// The WebSocket protocol: Network.framework's `NWProtocolWebSocket`.
// @unchecked Sendable: no stored state (as `NWProtocol`).
public class NWProtocolWebSocket: NWProtocol, @unchecked Sendable {
    /// WebSocket's definition, named "websocket" (`NWProtocolWebSocket.definition`).
    public static let definition = NWProtocolDefinition(name: "websocket")

    /// The WebSocket protocol versions (`NWProtocolWebSocket.Version`).
    public enum Version: Hashable, Sendable {
        /// RFC 6455's version 13 (`NWProtocolWebSocket.Version.version13`).
        case version13
    }

    /// The kinds of WebSocket messages (`NWProtocolWebSocket.Opcode`).
    public enum Opcode: Hashable, Sendable {
        /// A continuation frame (`NWProtocolWebSocket.Opcode.cont`).
        case cont
        /// A text message (`NWProtocolWebSocket.Opcode.text`).
        case text
        /// A binary message (`NWProtocolWebSocket.Opcode.binary`).
        case binary
        /// A close message (`NWProtocolWebSocket.Opcode.close`).
        case close
        /// A Ping (`NWProtocolWebSocket.Opcode.ping`).
        case ping
        /// A Pong (`NWProtocolWebSocket.Opcode.pong`).
        case pong
    }

    /// How WebSocket is used on a connection: Network.framework's `NWProtocolWebSocket.Options`.
    // @unchecked Sendable: the values are in a `Guarded` state.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        struct Values {
            var version: Version
            var autoReplyPing = false
            var maximumMessageSize = 0
            var skipHandshake = false
            var subprotocols: [String] = []
            var additionalHeaders: [(name: String, value: String)] = []
        }

        let values: Guarded<Values>

        /// WebSocket with the system's defaults (`NWProtocolWebSocket.Options.init(_:)`).
        public init(_ version: Version = .version13) {
            values = Guarded(Values(version: version))
        }

        private init(values: Values) {
            self.values = Guarded(values)
        }

        override func copied() -> NWProtocolOptions { Options(values: values.withLock { $0 }) }

        /// Answers Pings itself instead of delivering them (`NWProtocolWebSocket.Options.autoReplyPing`;
        /// default false).
        public var autoReplyPing: Bool {
            get { values[\.autoReplyPing] }
            set { values[\.autoReplyPing] = newValue }
        }

        /// The largest message received, in bytes (`NWProtocolWebSocket.Options.maximumMessageSize`;
        /// 0 until set here, Apple documents no default).
        public var maximumMessageSize: Int {
            get { values[\.maximumMessageSize] }
            set { values[\.maximumMessageSize] = newValue }
        }

        /// Frames from the start, without the HTTP upgrade (`NWProtocolWebSocket.Options.skipHandshake`;
        /// default false).
        public var skipHandshake: Bool {
            get { values[\.skipHandshake] }
            set { values[\.skipHandshake] = newValue }
        }

        /// The subprotocols a client offers in its handshake (`NWProtocolWebSocket.Options.setSubprotocols(_:)`).
        public func setSubprotocols(_ subprotocols: [String]) {
            values[\.subprotocols] = subprotocols
        }

        /// Header fields a client adds to its handshake
        /// (`NWProtocolWebSocket.Options.setAdditionalHeaders(_:)`).
        public func setAdditionalHeaders(_ additionalHeaders: [(name: String, value: String)]) {
            values[\.additionalHeaders] = additionalHeaders
        }
    }

    /// A WebSocket message's kind, for a send's context or from a receive's
    /// (`NWProtocolWebSocket.Metadata`).
    // @unchecked Sendable: only a `let`.
    public class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// The message's kind (`NWProtocolWebSocket.Metadata.opcode`).
        public final let opcode: Opcode

        /// Metadata for a message of this kind (`NWProtocolWebSocket.Metadata.init(opcode:)`).
        public init(opcode: Opcode) {
            self.opcode = opcode
        }
    }
}
