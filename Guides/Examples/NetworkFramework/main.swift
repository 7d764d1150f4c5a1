// Guides/NetworkFramework.md's program: Network.framework code as it is written for Apple platforms,
// with the import switch and nothing else. An NWListener echoes in upper case on a port the system
// picks; an NWConnection sends two lines, ends its sending side with a final message, and reads the
// replies until the listener closes; a second connection to a port nothing listens on waits, as
// Network.framework's do, until it is cancelled.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation

let queue = DispatchQueue(label: "network-framework-example")
let finished = DispatchSemaphore(value: 0)

// The server: every connection echoes what it reads, upper-cased, until the client's end.
let listener = try NWListener(using: .tcp, on: .any)
listener.newConnectionHandler = { connection in
    connection.start(queue: queue)
    @Sendable func echo() {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, _, isComplete, error in
            if let data, !data.isEmpty {
                connection.send(content: Data(String(decoding: data, as: UTF8.self).uppercased().utf8), completion: .idempotent)
            }
            if isComplete || error != nil {
                connection.send(content: nil, contentContext: .finalMessage, completion: .contentProcessed { _ in connection.cancel() })
            } else {
                echo()
            }
        }
    }
    echo()
}

// The client: sends before it is ready (Network.framework holds the sends), then reads to the end.
func runClient(port: NWEndpoint.Port) {
    let connection = NWConnection(host: "127.0.0.1", port: port, using: .tcp)
    connection.stateUpdateHandler = { state in
        switch state {
        case .ready: print("client: ready")
        case .cancelled:
            print("client: cancelled")
            tryRefusedPort()
        default: break
        }
    }
    connection.start(queue: queue)
    connection.send(content: Data("hello\n".utf8), completion: .contentProcessed { _ in })
    connection.send(
        content: Data("network framework\n".utf8), contentContext: .finalMessage,
        completion: .contentProcessed { error in
            print("client: sent, sending side closed, error: \(String(describing: error))")
        })
    // Each receive carries what came before it: the handlers are `@Sendable`, so the reply is passed
    // along rather than kept in a captured variable.
    @Sendable func read(_ reply: Data) {
        connection.receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, _, isComplete, error in
            let reply = reply + (data ?? Data())
            if isComplete || error != nil {
                print("client: reply \(String(decoding: reply, as: UTF8.self).split(separator: "\n"))")
                connection.cancel()
            } else {
                read(reply)
            }
        }
    }
    read(Data())
}

// A refused connect is not a failure in Network.framework: the connection waits for a change, or a
// restart(), until it is cancelled.
func tryRefusedPort() {
    listener.cancel()
    let connection = NWConnection(host: "127.0.0.1", port: 1, using: .tcp)
    connection.stateUpdateHandler = { state in
        switch state {
        case .waiting(let error):
            print("refused: waiting, \(error)")
            connection.cancel()
        case .cancelled:
            print("refused: cancelled")
            finished.signal()
        default: break
        }
    }
    connection.start(queue: queue)
}

listener.stateUpdateHandler = { state in
    switch state {
    case .ready:
        print("listener: ready")
        runClient(port: listener.port!)
    case .failed(let error):
        print("listener: failed, \(error)")
        finished.signal()
    default: break
    }
}
listener.start(queue: queue)
finished.wait()
