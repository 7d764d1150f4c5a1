#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation

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
