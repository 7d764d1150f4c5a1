#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

extension PathMonitorTests {
    /// A refused connection waits; when the host's network changes (an address added, in a namespace of
    /// the test's own), it tries again by itself, with no `restart()`, and finds the listener started
    /// meanwhile: as Network.framework retries a waiting connection on a path change.
    func testAWaitingConnectionRetriesWhenTheNetworkChanges() throws {
        try inNamespace {
            try ip("link", "set", "lo", "up")
            let queue = DispatchQueue(label: "retry")
            let listener = try NWListener(using: .tcp, on: .any)
            let listening = expectation(description: "listening")
            listener.stateUpdateHandler = { if $0 == .ready { listening.fulfill() } }
            listener.start(queue: queue)
            wait(for: [listening], timeout: 10)
            let port = try XCTUnwrap(listener.port)
            // Nothing accepts until the connection has waited once: the listener's handler is set later.
            listener.cancel()

            let connection = NWConnection(host: "127.0.0.1", port: port, using: .tcp)
            let waiting = expectation(description: "waiting")
            let states = Locked<[String]>([])
            connection.stateUpdateHandler = { state in
                states.mutate { $0.append("\(state)") }
                if state == .waiting(.posix(.ECONNREFUSED)) { waiting.fulfill() }
            }
            connection.start(queue: queue)
            wait(for: [waiting], timeout: 10)

            let again = try NWListener(using: .tcp, on: port)
            let readyAgain = expectation(description: "listening again")
            again.newConnectionHandler = { incoming in incoming.start(queue: queue) }
            again.stateUpdateHandler = { if $0 == .ready { readyAgain.fulfill() } }
            again.start(queue: queue)
            wait(for: [readyAgain], timeout: 10)

            // The routing socket the waiting connection listens on has read the kernel's tables once
            // it has told a monitor (sharing the socket) the first path: a change after that is news.
            let monitor = NWPathMonitor()
            let firstPath = expectation(description: "first path")
            let seenFirst = Locked(false)
            monitor.pathUpdateHandler = { _ in
                if seenFirst.mutate({ seen in
                    defer { seen = true }
                    return !seen
                }) {
                    firstPath.fulfill()
                }
            }
            monitor.start(queue: DispatchQueue(label: "monitor"))
            wait(for: [firstPath], timeout: 10)
            defer { monitor.cancel() }

            let ready = expectation(description: "ready")
            connection.stateUpdateHandler = { state in
                states.mutate { $0.append("\(state)") }
                if state == .ready { ready.fulfill() }
            }
            try ip("address", "add", "10.77.0.1/24", "dev", "lo")
            wait(for: [ready], timeout: 10)
            XCTAssertEqual(states.value.last, "ready", "\(states.value)")
            connection.cancel()
            again.cancel()
        }
    }
}
