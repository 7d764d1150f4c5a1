// The values around `NWConnection`, as Network.framework declares them: its states, how a send is
// acknowledged, and the context a message is sent and received in.

import Foundation

extension NWConnection {
    /// Where a connection is in its life: Network.framework's `NWConnection.State` (`Equatable`,
    /// `Sendable`, and no other conformance: clients add their own `CustomStringConvertible`).
    ///
    /// States move forward, except that `.preparing` and `.waiting` may alternate before `.ready` or
    /// `.failed`; `.cancelled` comes last, only after `cancel()`, and no handler is called after it.
    public enum State: Equatable, Sendable {
        /// Made and not started (`NWConnection.State.setup`): the value of `state` before `start(queue:)`.
        case setup
        /// Waiting for a usable network before trying again (`NWConnection.State.waiting(_:)`): the last
        /// attempt failed with this error (refused, unreachable, timed out, a failed lookup). Not
        /// fatal: `restart()` or a change in the host's network tries again; `cancel()` ends it.
        case waiting(NWError)
        /// Establishing: resolving, connecting, handshaking (`NWConnection.State.preparing`).
        case preparing
        /// Established: sends and receives go through (`NWConnection.State.ready`).
        case ready
        /// Failed for good (`NWConnection.State.failed(_:)`): a TLS failure, a reset or a timeout while
        /// ready. Call `cancel()` to let go of the handlers, and make a new connection.
        case failed(NWError)
        /// Cancelled (`NWConnection.State.cancelled`): the last state, after `cancel()` or `forceCancel()`.
        case cancelled
    }

    /// How a send's completion is reported: Network.framework's `NWConnection.SendCompletion`.
    public enum SendCompletion: Sendable {
        /// Called once, on the connection's queue, when the content has been handed to the kernel (not
        /// when the peer has it), or with the error that stopped it (`.contentProcessed(_:)`).
        case contentProcessed(@Sendable (NWError?) -> Void)
        /// No completion: the content may be sent before the connection is ready, and sent again by
        /// another attempt (`.idempotent`). Here it is held until ready and sent once.
        case idempotent
    }

    /// The context a message is sent or received in: Network.framework's `NWConnection.ContentContext`.
    /// On a byte stream (TCP, TLS) every context is part of the one stream; a final context ends the
    /// connection's sending side (`.finalMessage`), and received content comes in a final context, so
    /// `context.isFinal && isComplete` means the peer closed its side.
    // @unchecked Sendable: only `let`s of Sendable values and metadata objects, which are Sendable.
    public final class ContentContext: @unchecked Sendable {
        /// The context's name, for debugging (`NWConnection.ContentContext.identifier`).
        public let identifier: String
        /// Milliseconds after which unsent content may be dropped; 0 for never
        /// (`NWConnection.ContentContext.expirationMilliseconds`). Kept; TCP here sends everything.
        public let expirationMilliseconds: UInt64
        /// The priority relative to other contexts, 0 to 1 (`NWConnection.ContentContext.relativePriority`).
        /// Kept; a byte stream sends in the order given.
        public let relativePriority: Double
        /// Whether this is the last context of the connection: completing it closes the sending side
        /// (`NWConnection.ContentContext.isFinal`).
        public let isFinal: Bool
        /// A context that must be sent before this one (`NWConnection.ContentContext.antecedent`).
        public let antecedent: ContentContext?
        /// Per-protocol metadata (`NWConnection.ContentContext.protocolMetadata`).
        public let protocolMetadata: [NWProtocolMetadata]

        /// A context with these attributes (`NWConnection.ContentContext.init(identifier:expiration:priority:isFinal:antecedent:metadata:)`).
        public init(
            identifier: String, expiration: UInt64 = 0, priority: Double = 0.5, isFinal: Bool = false, antecedent: ContentContext? = nil,
            metadata: [NWProtocolMetadata]? = []
        ) {
            self.identifier = identifier
            expirationMilliseconds = expiration
            relativePriority = priority
            self.isFinal = isFinal
            self.antecedent = antecedent
            protocolMetadata = metadata ?? []
        }

        /// The metadata of the protocol `definition` names, if the context has some
        /// (`NWConnection.ContentContext.protocolMetadata(definition:)`).
        public func protocolMetadata(definition: NWProtocolDefinition) -> NWProtocolMetadata? {
            protocolMetadata.first { Self.definition(of: $0) == definition }
        }

        /// The definition a metadata object belongs to.
        static func definition(of metadata: NWProtocolMetadata) -> NWProtocolDefinition? {
            switch metadata {
            case is NWProtocolTLS.Metadata: NWProtocolTLS.definition
            case is NWProtocolTCP.Metadata: NWProtocolTCP.definition
            case let message as NWProtocolFramer.Message: message.definition
            case is NWProtocolWebSocket.Metadata: NWProtocolWebSocket.definition
            case is NWProtocolUDP.Metadata: NWProtocolUDP.definition
            default: nil
            }
        }

        /// A message that does not end the connection: the default for `send`
        /// (`NWConnection.ContentContext.defaultMessage`).
        public static let defaultMessage = ContentContext(identifier: "NWConnection.ContentContext.defaultMessage")
        /// The last message: sending it complete closes the sending side, with TLS's close_notify and
        /// TCP's FIN, while receives go on (`NWConnection.ContentContext.finalMessage`).
        public static let finalMessage = ContentContext(identifier: "NWConnection.ContentContext.finalMessage", isFinal: true)
        /// The whole stream as one context: complete, it closes the sending side as `.finalMessage` does
        /// (`NWConnection.ContentContext.defaultStream`). Received stream content comes in it.
        public static let defaultStream = ContentContext(identifier: "NWConnection.ContentContext.defaultStream", isFinal: true)
    }
}
