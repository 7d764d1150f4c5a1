#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

extension NWConnection {
    /// Starts this (accepted) connection on `queue` and echoes what it receives until the peer's end or
    /// an error, then cancels it: the test listeners' server side.
    func startEchoing(on queue: DispatchQueue) {
        start(queue: queue)
        echoNext()
    }

    private func echoNext() {
        receive(minimumIncompleteLength: 1, maximumLength: 65_536) { data, _, isComplete, error in
            if let data { self.send(content: data, completion: .idempotent) }
            if isComplete || error != nil { return self.cancel() }
            self.echoNext()
        }
    }
}

extension SocketStreamsTestCase {
    /// Starts `connection` on `queue`, waits up to `timeout` for `.ready` or `.failed`, and returns the
    /// states it went through; the test's cleanup cancels it.
    func startAndSettle(_ connection: NWConnection, on queue: DispatchQueue, timeout: TimeInterval) -> [NWConnection.State] {
        let states = Locked<[NWConnection.State]>([])
        let settled = expectation(description: "settled")
        connection.stateUpdateHandler = { state in
            states.mutate { $0.append(state) }
            switch state {
            case .ready, .failed: settled.fulfill()
            default: break
            }
        }
        connection.start(queue: queue)
        addCleanup { connection.cancel() }
        wait(for: [settled], timeout: timeout)
        return states.value
    }

    /// Starts `listener` on `queue`, waits until it is `.ready`, and cancels it at the test's cleanup.
    func startAndAwaitReady(_ listener: NWListener, on queue: DispatchQueue) {
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)
    }
}
