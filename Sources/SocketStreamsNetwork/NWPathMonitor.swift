// `NWPathMonitor`: Network.framework's observer of the network, over the process's routing socket
// (`PathCenter`). The monitor itself holds what its user set (handler, queue) and the path it last
// delivered; the center decides when a path changed and calls `pathChanged` on its own queue, and the
// monitor delivers it on the user's queue, where `currentPath` changes just before the handler runs.
//
// After `cancel()` returns no handler call begins, and none is in flight except one that made the
// `cancel` call itself (`HandlerGate`); a `cancel` from another thread while the handler runs waits for
// it to return, so a handler must not wait for the thread that cancels it.

import Dispatch
import Foundation

/// An observer that watches for changes in the network's paths: Network.framework's `NWPathMonitor`
/// (a final class, `Sendable`).
///
/// ```swift
/// let monitor = NWPathMonitor()
/// monitor.pathUpdateHandler = { path in
///     if path.status == .satisfied { reconnect() }
/// }
/// monitor.start(queue: queue)
/// ```
///
/// The first update arrives on the queue shortly after `start(queue:)`, then one for each change of the
/// monitor's path (a burst of kernel messages is one change). On Linux the path comes from the kernel's
/// routing socket (rtnetlink) and is `.satisfied` when a non-loopback interface that the monitor allows
/// is up, has an address and carries a default route; a monitor that requires `.loopback` is satisfied
/// by `lo` alone (Guides/NetworkFramework.md, "Paths: NWPathMonitor").
public final class NWPathMonitor: Sendable {
    private let constraints: PathConstraints
    private let state = Guarded(State())
    private let gate = HandlerGate()

    private struct State {
        var handler: (@Sendable (NWPath) -> Void)?
        var queue: DispatchQueue?
        var cancelled = false
        var currentPath = NWPath.unknown
    }

    /// A monitor of every interface but loopback (`NWPathMonitor.init()`).
    public init() {
        constraints = PathConstraints()
    }

    /// A monitor of the interfaces of one kind only (`NWPathMonitor.init(requiredInterfaceType:)`);
    /// `.loopback` watches `lo`.
    public init(requiredInterfaceType: NWInterface.InterfaceType) {
        constraints = PathConstraints(required: requiredInterfaceType)
    }

    /// A monitor of every interface but loopback and those of the kinds given
    /// (`NWPathMonitor.init(prohibitedInterfaceTypes:)`, macOS 11).
    public init(prohibitedInterfaceTypes: [NWInterface.InterfaceType]) {
        constraints = PathConstraints(prohibited: prohibitedInterfaceTypes)
    }

    deinit {
        PathCenter.shared.remove(subscriber: ObjectIdentifier(self))
    }

    /// Called on the monitor's queue with each new path (`NWPathMonitor.pathUpdateHandler`). Released
    /// by `cancel()`.
    public var pathUpdateHandler: (@Sendable (_ newPath: NWPath) -> Void)? {
        get { state.withLock { $0.handler } }
        set {
            let old = state.withLock { state -> (@Sendable (NWPath) -> Void)? in
                defer { state.handler = state.cancelled ? nil : newValue }
                return state.handler
            }
            // Let go of outside the lock: its captures' deinits may call back into the monitor.
            withExtendedLifetime(old) {}
        }
    }

    /// The path last delivered; before the first update, an unsatisfied path with no interface
    /// (`NWPathMonitor.currentPath`).
    public var currentPath: NWPath { state.withLock { $0.currentPath } }

    /// The queue given to `start(queue:)`; nil until then (`NWPathMonitor.queue`).
    public var queue: DispatchQueue? { state.withLock { $0.queue } }

    /// Starts watching, delivering updates on `queue` (`NWPathMonitor.start(queue:)`). A second call, or
    /// one after `cancel()`, does nothing.
    public func start(queue: DispatchQueue) {
        let start = state.withLock { state -> Bool in
            guard state.queue == nil, !state.cancelled else { return false }
            state.queue = queue
            return true
        }
        if start { PathCenter.shared.add(self, constraints: constraints) }
    }

    /// Stops watching (`NWPathMonitor.cancel()`): once it returns no update is delivered, and the handler
    /// is released. A cancelled monitor cannot be started again.
    public func cancel() {
        let handler = state.withLock { state -> (@Sendable (NWPath) -> Void)? in
            state.cancelled = true
            defer { state.handler = nil }
            return state.handler
        }
        PathCenter.shared.remove(subscriber: ObjectIdentifier(self))
        gate.close()
        withExtendedLifetime(handler) {}
    }
}

extension NWPathMonitor: PathSubscriber {
    func pathChanged(_ path: NWPath) {
        guard let queue = state.withLock({ $0.cancelled ? nil : $0.queue }) else { return }
        queue.async { self.deliver(path) }
    }

    private func deliver(_ path: NWPath) {
        guard gate.enter() else { return }
        defer { gate.leave() }
        let handler = state.withLock { state -> (@Sendable (NWPath) -> Void)? in
            guard !state.cancelled else { return nil }
            state.currentPath = path
            return state.handler
        }
        handler?(path)
    }
}
