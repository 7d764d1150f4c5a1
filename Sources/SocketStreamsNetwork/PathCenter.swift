// The process's one routing socket and what it has learnt, shared by every `NWPathMonitor` and every
// `NetworkChanges` observation.
//
// One socket for the process, not one per monitor: a monitor then costs no fd and no dump (a dump of a
// router's full routing table is large, and netlink serves one dump at a time per socket anyway), and
// the connection engine's observations ride on the same socket. What it costs: one fd, a 1 MiB receive
// buffer asked for, and a dispatch queue's reactor, from the first monitor started or observation made
// until the last is cancelled; the socket is closed then (before that `cancel` returns), and opened
// again, with fresh dumps, by the next one.
//
// Where things run: the socket is read on the center's own serial queue (its reactor's perform), where
// messages are parsed and applied to the `RoutingState`; once the socket is drained and no dump is under
// way, a flush a few milliseconds later (so that a burst of messages, a link going down with its
// addresses and routes, is one change) computes each monitor's path and hands those that changed to
// their monitors, which deliver them on their own queues, and calls the observations if the table
// changed. Monitors and observations are held weakly: one that is let go of stops as if cancelled.
// Lock order: the center's lock, then the socket's (a request is sent under the center's lock); the
// socket calls the center outside its own lock, and the center calls monitors and observations outside
// its lock.

import Dispatch
import Foundation

/// Something the center hands paths to: a monitor.
protocol PathSubscriber: AnyObject, Sendable {
    /// The path for the subscriber's constraints changed (or is the first one); called on the center's
    /// queue, outside its lock.
    func pathChanged(_ path: NWPath)
}

final class PathCenter: RoutingSocketDelegate {
    static let shared = PathCenter()

    /// How long a change may gather further messages before it is published.
    static let settleTime = DispatchTimeInterval.milliseconds(5)
    /// How long before a dump request that could not be sent is tried again.
    static let retryTime = DispatchTimeInterval.milliseconds(100)

    let queue = DispatchQueue(label: "SocketStreamsNetwork.paths")
    private let state = Guarded(State())

    private struct Monitor {
        weak var subscriber: (any PathSubscriber)?
        var constraints: PathConstraints
        /// The last path handed to it; nil until the first.
        var delivered: NWPath?
    }

    private struct Observer {
        weak var observation: NetworkChanges.Observation?
    }

    private struct State {
        var socket: RoutingSocket?
        var routing: RoutingState?
        /// The socket could not be opened: monitors get an unsatisfied path, and the next user tries again.
        var failed = false
        var monitors: [ObjectIdentifier: Monitor] = [:]
        var observers: [ObjectIdentifier: Observer] = [:]
        /// The table as last published; nil before the first publication of this socket.
        var published: RoutingTable?
        var flushScheduled = false
        var retryScheduled = false
        var users: Int { monitors.count + observers.count }
    }

    // MARK: users (any thread)

    func add(_ subscriber: any PathSubscriber, constraints: PathConstraints) {
        state.withLock { $0.monitors[ObjectIdentifier(subscriber)] = Monitor(subscriber: subscriber, constraints: constraints) }
        queue.async { self.refresh() }
    }

    func remove(subscriber id: ObjectIdentifier) {
        let closing = state.withLock { state -> RoutingSocket? in
            state.monitors[id] = nil
            return Self.takeSocketIfUnused(&state)
        }
        closing?.close()
    }

    func add(_ observation: NetworkChanges.Observation) {
        state.withLock { $0.observers[ObjectIdentifier(observation)] = Observer(observation: observation) }
        queue.async { self.refresh() }
    }

    func remove(observation id: ObjectIdentifier) {
        let closing = state.withLock { state -> RoutingSocket? in
            state.observers[id] = nil
            return Self.takeSocketIfUnused(&state)
        }
        closing?.close()
    }

    /// With no users left, the socket leaves the state, to be closed by the caller outside the lock.
    private static func takeSocketIfUnused(_ state: inout State) -> RoutingSocket? {
        guard state.users == 0 else { return nil }
        defer {
            state.socket = nil
            state.routing = nil
            state.published = nil
            state.failed = false
        }
        return state.socket
    }

    /// Whether the routing socket is open (tests).
    var isOpen: Bool { state.withLock { $0.socket != nil } }

    // MARK: on the queue

    /// Opens the socket for the first user, or gives a new user what is known.
    private func refresh() {
        let open = state.withLock { state -> Bool in
            guard state.users > 0 else { return false }
            if state.socket != nil || state.failed { return false }
            return true
        }
        if open { openSocket() }
        flush()
    }

    private func openSocket() {
        let socket: RoutingSocket
        do {
            socket = try RoutingSocket(protocol: Netlink.routeProtocol, groups: Netlink.pathGroups, queue: queue, delegate: self)
        } catch {
            state.withLock { $0.failed = true }
            return
        }
        let spare = state.withLock { state -> RoutingSocket? in
            guard state.users > 0, state.socket == nil else { return socket }
            state.socket = socket
            var routing = RoutingState(port: socket.port)
            if let request = routing.start(), !socket.send(request.bytes) { routing.requestFailed() }
            state.routing = routing
            return nil
        }
        spare?.close()
    }

    func routingSocket(_ socket: RoutingSocket, received datagram: UnsafeRawBufferPointer) {
        let parsed = RoutingMessageParser.parse(datagram)
        let retry = state.withLock { state -> Bool in
            guard state.socket === socket, var routing = state.routing else { return false }
            let request = routing.handle(parsed, classify: { NWInterface.InterfaceType.of($0) })
            let failed = request.map { !socket.send($0.bytes) } ?? false
            if failed { routing.requestFailed() }
            state.routing = routing
            return failed
        }
        if retry { scheduleRetry() }
    }

    func routingSocketLostMessages(_ socket: RoutingSocket) {
        let retry = state.withLock { state -> Bool in
            guard state.socket === socket, var routing = state.routing else { return false }
            let failed = routing.lostMessages().map { !socket.send($0.bytes) } ?? false
            if failed { routing.requestFailed() }
            state.routing = routing
            return failed
        }
        if retry { scheduleRetry() }
    }

    func routingSocketDrained(_ socket: RoutingSocket) {
        let schedule = state.withLock { state -> Bool in
            guard state.socket === socket, state.routing?.isSynchronized == true, !state.flushScheduled else { return false }
            state.flushScheduled = true
            return true
        }
        if schedule { queue.asyncAfter(deadline: .now() + Self.settleTime) { self.flush() } }
    }

    private func scheduleRetry() {
        let schedule = state.withLock { state -> Bool in
            guard !state.retryScheduled else { return false }
            state.retryScheduled = true
            return true
        }
        guard schedule else { return }
        queue.asyncAfter(deadline: .now() + Self.retryTime) {
            let retry = self.state.withLock { state -> Bool in
                state.retryScheduled = false
                guard let socket = state.socket, var routing = state.routing else { return false }
                let failed = routing.resume().map { !socket.send($0.bytes) } ?? false
                if failed { routing.requestFailed() }
                state.routing = routing
                return failed
            }
            if retry { self.scheduleRetry() }
        }
    }

    /// Publishes what changed: each monitor's path if it differs from the one it has, and a call to
    /// every observation if the table changed since the last publication.
    private func flush() {
        let resolver = NWPath.resolverConfigured()
        let (paths, observations) = state.withLock { state -> ([(any PathSubscriber, NWPath)], [NetworkChanges.Observation]) in
            state.flushScheduled = false
            let table: RoutingTable
            if state.failed {
                table = RoutingTable()
            } else {
                guard let routing = state.routing, routing.isSynchronized else { return ([], []) }
                table = routing.table
            }
            var observations: [NetworkChanges.Observation] = []
            if let published = state.published, published != table {
                observations = state.observers.values.compactMap(\.observation)
            }
            state.published = table
            var paths: [(any PathSubscriber, NWPath)] = []
            for (id, monitor) in state.monitors {
                guard let subscriber = monitor.subscriber else {
                    state.monitors[id] = nil
                    continue
                }
                let path = NWPath(table: table, constraints: monitor.constraints, resolverConfigured: resolver)
                guard path != monitor.delivered else { continue }
                state.monitors[id]?.delivered = path
                paths.append((subscriber, path))
            }
            return (paths, observations)
        }
        for (subscriber, path) in paths { subscriber.pathChanged(path) }
        for observation in observations { observation.fire() }
    }
}

/// Calls of a handler in flight, and the promise that none begins once `close` has returned. Threads
/// are told apart by `pthread_self`, so a handler that closes its own gate does not wait for itself.
final class HandlerGate: Sendable {
    private struct Calls {
        var closed = false
        var callers: [UInt] = []
    }

    private let calls = Guarded(Calls())

    /// Whether a call may begin; if true, `leave` must follow it.
    func enter() -> Bool {
        calls.withLock { calls in
            guard !calls.closed else { return false }
            calls.callers.append(UInt(pthread_self()))
            return true
        }
    }

    func leave() {
        let me = UInt(pthread_self())
        calls.withLockWakingWaiters { calls in
            if let index = calls.callers.firstIndex(of: me) { calls.callers.remove(at: index) }
        }
    }

    /// No call begins after this returns, and none is in flight except the caller's own.
    func close() {
        let me = UInt(pthread_self())
        calls.withLock { $0.closed = true }
        calls.wait { calls in calls.callers.allSatisfy { $0 == me } }
    }

    var isClosed: Bool { calls.withLock { $0.closed } }
}
