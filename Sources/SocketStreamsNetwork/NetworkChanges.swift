// The connection engine's signal that the network changed: `NWConnection` retries its `.waiting`
// connections on it, as Network.framework retries on a path change. It rides on the same routing socket
// as the path monitors (`PathCenter`), which stays open while any observation lives.

import Foundation

/// Changes of the host's links, addresses and default routes, for the package's own use (the
/// `.waiting` connections' retries).
package final class NetworkChanges: Sendable {
    /// The process's one source of changes.
    package static let shared = NetworkChanges()

    private init() {}

    /// Calls `handler` after each change of the links, addresses or default routes the kernel reports
    /// (a burst of messages is one change; the state found when the routing socket opens is not one), on
    /// a thread of the package's, never under its locks, until the observation is cancelled or let go of.
    package func observe(_ handler: @escaping @Sendable () -> Void) -> NetworkChanges.Observation {
        let observation = Observation(handler)
        PathCenter.shared.add(observation)
        return observation
    }

    /// One `observe` call's registration: its `deinit` or `cancel()` stops the calls.
    package final class Observation: Sendable {
        private let handler: @Sendable () -> Void
        private let gate = HandlerGate()

        init(_ handler: @escaping @Sendable () -> Void) {
            self.handler = handler
        }

        deinit {
            PathCenter.shared.remove(observation: ObjectIdentifier(self))
        }

        /// Stops the calls: none begins once this returns, and none is in flight except one that made
        /// this call.
        package func cancel() {
            PathCenter.shared.remove(observation: ObjectIdentifier(self))
            gate.close()
        }

        func fire() {
            guard gate.enter() else { return }
            defer { gate.leave() }
            handler()
        }
    }
}
