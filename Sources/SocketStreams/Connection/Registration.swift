import CSocketStreamsShims
import CoreFoundation
import Dispatch
import Foundation
import Glibc
import Synchronization

/// The connection's fd in one reactor's epoll set. Present only while it wants some event, so a
/// socket in error or hang-up state cannot make the run loop spin.
///
/// It holds its connection strongly (a weak reference would give every connection a side table, and
/// the slow path for every retain and release of it). The connection drops its registrations when
/// both halves are gone (`tearDown`), which ends the cycle; one the reactor is still firing in its
/// current round keeps the connection alive until then, and finds it torn down.
final class Registration: ReactorHandler, @unchecked Sendable {
    let connection: Connection
    let reactor: Reactor
    let fd: Int32
    private var token: UInt64 = 0
    private var events: UInt32 = 0

    init(connection: Connection, reactor: Reactor, fd: Int32) {
        self.connection = connection
        self.reactor = reactor
        self.fd = fd
    }

    /// Becomes the handler of an fd already in the reactor's epoll set (watched for `events`), so
    /// the next `update` modifies that registration instead of adding one.
    func takeOver(_ handover: EpollHandover) {
        token = handover.token
        events = handover.events
        reactor.replaceHandler(token: token, with: self)
    }

    /// Adds, modifies or removes the fd so epoll reports exactly `wanted`. Connection lock held.
    func update(_ wanted: UInt32) {
        connection.lock.assertHeld()
        guard wanted != events else { return }
        if wanted == 0 {
            reactor.remove(fd: fd, token: token)
        } else if events == 0 {
            guard let token = try? reactor.add(fd: fd, events: wanted, handler: self) else { return }
            self.token = token
        } else {
            try? reactor.modify(fd: fd, token: token, events: wanted)
        }
        events = wanted
    }

    /// Leaves the epoll set for good. Connection lock held.
    func leave() { update(0) }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        connection.handleReadiness(events, from: reactor)
    }
}
