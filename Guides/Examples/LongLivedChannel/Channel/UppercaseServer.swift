import Foundation
import SocketStreams

/// The example's server: answers each request with its body in capitals and the same sequence
/// number, and each heartbeat with a pong. It can be told to misbehave, to show what the client does.
public final class UppercaseServer: Sendable {
    /// How each connection behaves.
    public struct Behaviour: Sendable {
        /// What a connection does once it has answered `requestsBeforeFault` requests.
        public enum Fault: Sendable {
            /// Closes the connection when the next request arrives, without answering it.
            case drop
            /// Stops answering anything (requests and heartbeats) but keeps the connection open,
            /// like a server that hangs or a network path that dies without a word.
            case silence
        }

        /// Whether heartbeats get a pong.
        public var answersHeartbeats: Bool
        /// Requests each connection answers before `fault`; nil for never.
        public var requestsBeforeFault: Int?
        /// What happens then.
        public var fault: Fault

        /// A behaviour; the default answers everything.
        public init(answersHeartbeats: Bool = true, requestsBeforeFault: Int? = nil, fault: Fault = .drop) {
            self.answersHeartbeats = answersHeartbeats
            self.requestsBeforeFault = requestsBeforeFault
            self.fault = fault
        }
    }

    /// The port it listens on, on 127.0.0.1.
    public let port: Int
    private let listener: StreamListener

    /// Listens on 127.0.0.1:`port` (0 for a free port) and serves connections on `runLoop`'s thread.
    public init(port: Int = 0, behaviour: Behaviour = Behaviour(), runLoop: RunLoop = .current) throws {
        listener = try StreamListener(host: "127.0.0.1", port: port)
        self.port = listener.port
        // The accept closure is @Sendable: each connection's objects and state are made inside it.
        listener.start(in: runLoop) { input, output in
            let connection = FramedConnection(input: input, output: output)
            var answered = 0
            var silent = false
            connection.onFrame = { [unowned connection] payload in
                guard !silent, let message = Message(payload: payload) else { return }
                switch message.kind {
                case .ping where behaviour.answersHeartbeats:
                    connection.send(Message(.pong, sequence: message.sequence).payload)
                case .request:
                    if let limit = behaviour.requestsBeforeFault, answered == limit {
                        switch behaviour.fault {
                        case .drop: connection.drop()
                        case .silence: silent = true
                        }
                        return
                    }
                    answered += 1
                    let reply = Array(String(decoding: message.body, as: UTF8.self).uppercased().utf8)
                    connection.send(Message(.reply, sequence: message.sequence, body: reply).payload)
                default:
                    break
                }
            }
            connection.open(in: .current)  // this closure runs on the listener's run loop thread
        }
    }

    /// Stops accepting connections; those already accepted carry on.
    public func stop() {
        listener.close()
    }
}
