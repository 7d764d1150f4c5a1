// WebSocket (RFC 6455) as Network.framework declares it: its options, message metadata, close codes and
// a server's handshake response. Inserted into a stack (`applicationProtocols.insert(options, at: 0)`),
// it runs as an implementation of the framer machinery (`WebSocketFramer`, driven by `FramerDriver`
// like any `NWProtocolFramer`): frames and handshake are plain values (WebSocketFrames.swift,
// WebSocketHandshake.swift); this file is the API.

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

    /// The kinds of WebSocket messages, by their RFC 6455 opcode (`NWProtocolWebSocket.Opcode`).
    public enum Opcode: Int, Hashable, Sendable {
        /// A continuation frame (`NWProtocolWebSocket.Opcode.cont`).
        case cont = 0x0
        /// A text message (`NWProtocolWebSocket.Opcode.text`).
        case text = 0x1
        /// A binary message (`NWProtocolWebSocket.Opcode.binary`).
        case binary = 0x2
        /// A close message (`NWProtocolWebSocket.Opcode.close`).
        case close = 0x8
        /// A Ping (`NWProtocolWebSocket.Opcode.ping`).
        case ping = 0x9
        /// A Pong (`NWProtocolWebSocket.Opcode.pong`).
        case pong = 0xA
    }

    /// The code a close message carries (`NWProtocolWebSocket.CloseCode`).
    public enum CloseCode: Hashable, Sendable {
        /// The codes RFC 6455 defines (`NWProtocolWebSocket.CloseCode.Defined`).
        public enum Defined: UInt16, Hashable, Sendable {
            /// 1000 (`.normalClosure`).
            case normalClosure = 1000
            /// 1001 (`.goingAway`).
            case goingAway = 1001
            /// 1002 (`.protocolError`).
            case protocolError = 1002
            /// 1003 (`.unsupportedData`).
            case unsupportedData = 1003
            /// 1005, never sent: a close message without a code (`.noStatusReceived`).
            case noStatusReceived = 1005
            /// 1006, never sent: the connection ended without a close message (`.abnormalClosure`).
            case abnormalClosure = 1006
            /// 1007 (`.invalidFramePayloadData`): a text message that is not UTF-8.
            case invalidFramePayloadData = 1007
            /// 1008 (`.policyViolation`).
            case policyViolation = 1008
            /// 1009 (`.messageTooBig`): a message over `maximumMessageSize`.
            case messageTooBig = 1009
            /// 1010 (`.mandatoryExtension`).
            case mandatoryExtension = 1010
            /// 1011 (`.internalServerError`).
            case internalServerError = 1011
            /// 1015, never sent (`.tlsHandshake`).
            case tlsHandshake = 1015
        }

        /// A code RFC 6455 defines, 1000-2999 (`NWProtocolWebSocket.CloseCode.protocolCode(_:)`).
        case protocolCode(Defined)
        /// A code for applications and frameworks, 3000-3999 (`NWProtocolWebSocket.CloseCode.applicationCode(_:)`).
        case applicationCode(UInt16)
        /// A private code, 4000-4999 (`NWProtocolWebSocket.CloseCode.privateCode(_:)`).
        case privateCode(UInt16)
    }

    /// What a server's request handler answers a client's opening handshake with
    /// (`NWProtocolWebSocket.Response`).
    public struct Response: Sendable {
        /// Whether the handshake is accepted (`NWProtocolWebSocket.Response.Status`).
        public enum Status: Hashable, Sendable {
            /// Accept: 101 Switching Protocols (`.accept`).
            case accept
            /// Reject: 400 Bad Request, then the connection fails (`.reject`).
            case reject
        }

        /// Accept or reject (`NWProtocolWebSocket.Response.status`).
        public let status: Status
        /// The subprotocol chosen among the client's, sent back in `Sec-WebSocket-Protocol`
        /// (`NWProtocolWebSocket.Response.subprotocol`); ignored when rejecting.
        public let subprotocol: String?
        /// Header fields added to the response (`NWProtocolWebSocket.Response.additionalHeaders`).
        public let additionalHeaders: [(name: String, value: String)]?

        /// A response (`NWProtocolWebSocket.Response.init(status:subprotocol:additionalHeaders:)`).
        public init(status: Status, subprotocol: String?, additionalHeaders: [(name: String, value: String)]? = nil) {
            self.status = status
            self.subprotocol = subprotocol
            self.additionalHeaders = additionalHeaders
        }
    }

    /// A server's handler of clients' opening handshakes: their subprotocols and additional headers in,
    /// the response out.
    typealias ClientRequestHandler = @Sendable ([String], [(name: String, value: String)]) -> Response

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
            var clientRequestHandler: (queue: DispatchQueue, handler: ClientRequestHandler)?
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

        /// The largest message received, in bytes; a larger one closes the connection with 1009
        /// (`NWProtocolWebSocket.Options.maximumMessageSize`; 0, the default, is no limit).
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

        /// On a server, calls `handler` on `queue` with each client's subprotocols and additional
        /// headers, and answers its handshake with the response it returns
        /// (`NWProtocolWebSocket.Options.setClientRequestHandler(_:handler:)`). Without one, a server
        /// accepts every valid handshake and chooses no subprotocol.
        public func setClientRequestHandler(
            _ queue: DispatchQueue, handler: @escaping @Sendable ([String], [(name: String, value: String)]) -> Response
        ) {
            values[\.clientRequestHandler] = (queue, handler)
        }
    }

    /// A WebSocket message's kind and close code, for a send's context or from a receive's
    /// (`NWProtocolWebSocket.Metadata`).
    // @unchecked Sendable: a `let` and values in a `Guarded` state.
    public class Metadata: NWProtocolMetadata, @unchecked Sendable {
        struct Values {
            var closeCode = CloseCode.protocolCode(.normalClosure)
            var pongHandler: (queue: DispatchQueue, handler: @Sendable (NWError?) -> Void)?
            var additionalServerHeaders: [(String, String)]?
        }

        /// The message's kind (`NWProtocolWebSocket.Metadata.opcode`).
        public final let opcode: Opcode
        let values = Guarded(Values())

        /// Metadata for a message of this kind (`NWProtocolWebSocket.Metadata.init(opcode:)`).
        public init(opcode: Opcode) {
            self.opcode = opcode
        }

        /// A close message's code: the one to send, or the one received
        /// (`NWProtocolWebSocket.Metadata.closeCode`; default `.protocolCode(.normalClosure)`).
        public var closeCode: CloseCode {
            get { values[\.closeCode] }
            set { values[\.closeCode] = newValue }
        }

        /// On a Ping sent with this metadata: calls `handler` on `queue` when its Pong arrives (nil), or
        /// with the error that ended the connection first
        /// (`NWProtocolWebSocket.Metadata.setPongHandler(_:handler:)`).
        public func setPongHandler(_ queue: DispatchQueue, handler: @escaping @Sendable (NWError?) -> Void) {
            values[\.pongHandler] = (queue, handler)
        }

        /// On a client, the header fields the server's handshake response added
        /// (`NWProtocolWebSocket.Metadata.additionalServerHeaders`): in the metadata of received messages
        /// and in `connection.metadata(definition: NWProtocolWebSocket.definition)`; nil on a server.
        public var additionalServerHeaders: [(String, String)]? { values[\.additionalServerHeaders] }
    }
}

extension NWProtocolWebSocket.CloseCode: RawRepresentable {
    /// The code of a value on the wire: 1000-2999 a defined code (nil if RFC 6455 defines none),
    /// 3000-3999 an application's, 4000-4999 a private one (`NWProtocolWebSocket.CloseCode.init(rawValue:)`).
    public init?(rawValue: UInt16) {
        switch rawValue {
        case 1000...2999:
            guard let defined = Defined(rawValue: rawValue) else { return nil }
            self = .protocolCode(defined)
        case 3000...3999: self = .applicationCode(rawValue)
        case 4000...4999: self = .privateCode(rawValue)
        default: return nil
        }
    }

    /// The code's value (`NWProtocolWebSocket.CloseCode.rawValue`).
    public var rawValue: UInt16 {
        switch self {
        case .protocolCode(let defined): defined.rawValue
        case .applicationCode(let code), .privateCode(let code): code
        }
    }
}
