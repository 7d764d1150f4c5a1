// The engine's routing socket: one netlink socket (`AF_NETLINK`, a protocol such as `NETLINK_ROUTE`)
// owned by a dispatch queue's reactor, as `DatagramSocket` is owned by its owner's. It knows nothing of
// what the kernel says: each datagram it reads goes to its delegate as bytes, the parsing and the
// state built from them are the face's (SocketStreamsNetwork's path monitor).
//
// Who owns what: reading runs only inside the reactor's perform, on the queue; `send` and `close` may be
// called from any thread. Every system call on the fd (a read, a request, the close) is made under the
// socket's lock, so a close from another thread never meets a read in progress, and no read or request
// ever meets a closed or reused fd; the delegate is called outside that lock. The fd is level-triggered:
// a readiness reads at most `readBudget` datagrams, and what is left is reported again next round, so
// the kernel flooding this socket cannot keep the reactor from its timers and other fds.
//
// The kernel drops notifications when the receive buffer is full and says so once, with ENOBUFS on the
// next read: the delegate is told (`routingSocketLostMessages`) and is expected to ask for the state
// again (a dump), since it can no longer know what it missed.

import CSocketStreamsShims
import Dispatch
import Glibc

/// What a routing socket tells its face, on its queue, inside the reactor's perform, never under its lock.
package protocol RoutingSocketDelegate: AnyObject, Sendable {
    /// One datagram from the kernel (one or more netlink messages), valid only during the call.
    func routingSocket(_ socket: RoutingSocket, received datagram: UnsafeRawBufferPointer)
    /// The kernel dropped messages for want of buffer space (ENOBUFS): what the face knows may be stale.
    func routingSocketLostMessages(_ socket: RoutingSocket)
    /// Everything the kernel had queued has been read (the read that followed would have blocked): the
    /// moment to act on a burst of messages as one change.
    func routingSocketDrained(_ socket: RoutingSocket)
}

/// Why a routing socket could not be made.
package struct RoutingSocketError: Error, Sendable, Equatable {
    /// `errno`.
    package let code: Int32
    /// The C function that failed.
    package let function: String
}

/// One netlink socket on a dispatch queue's reactor (see the file's header).
package final class RoutingSocket: ReactorHandler {
    /// Datagrams one readiness may read.
    static let readBudget = 32
    /// The largest datagram read whole; the kernel's dump chunks are at most 32 KiB.
    static let bufferSize = 65_536
    /// The receive buffer asked for: room for the notifications of a burst (a link going down takes its
    /// addresses and routes with it) while the queue is busy elsewhere.
    static let receiveBuffer: Int32 = 1 << 20

    /// The port id the kernel gave the socket: the answers to its own requests carry it.
    package let port: UInt32
    private let reactor: Reactor
    private let handle: SocketHandle
    private let token: UInt64
    private let state: Guarded<State>

    private struct State {
        var fdOpen = true
        var delegate: (any RoutingSocketDelegate)?
        /// Where reads land: filled under the lock, read by the delegate inside the reactor's perform
        /// (one at a time, and nothing else writes it); freed in `deinit`.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: RoutingSocket.bufferSize, alignment: 8)
    }

    /// A netlink socket of `protocol` joined to the multicast `groups`, read on `queue`'s reactor. Fails
    /// as `socket(2)` or `bind(2)` fail (EMFILE, EPROTONOSUPPORT) or when the queue's reactor cannot be had.
    package init(protocol: Int32, groups: UInt32, queue: DispatchQueue, delegate: any RoutingSocketDelegate) throws(RoutingSocketError) {
        let reactor: Reactor
        do {
            reactor = try ReactorRegistry.shared.acquire(queue: queue)
        } catch {
            throw RoutingSocketError(code: error.code, function: error.function)
        }
        let opened: (fd: Int32, port: UInt32)
        do {
            opened = try Posix.netlinkSocket(protocol: `protocol`, groups: groups, receiveBuffer: Self.receiveBuffer)
        } catch {
            ReactorRegistry.shared.release(reactor)
            throw RoutingSocketError(code: error.code, function: error.function)
        }
        self.reactor = reactor
        port = opened.port
        handle = SocketHandle(fd: opened.fd, closesOnRelease: true)
        state = Guarded(State(delegate: delegate))
        do {
            token = try reactor.add(fd: opened.fd, events: cssh_epollin(), handler: Unregistered.shared)
        } catch {
            handle.release()
            state.withLock { $0.buffer.deallocate() }
            ReactorRegistry.shared.release(reactor)
            throw RoutingSocketError(code: error.code, function: error.function)
        }
        reactor.replaceHandler(token: token, with: self)
    }

    deinit {
        close()
        state.withLock { $0.buffer.deallocate() }
        ReactorRegistry.shared.release(reactor)
    }

    /// Sends one request to the kernel (a dump request: the answers come as datagrams like any other).
    /// False when the socket is closed or the kernel refused it (ENOBUFS, ENOMEM).
    @discardableResult
    package func send(_ request: [UInt8]) -> Bool {
        state.withLock { state in
            guard state.fdOpen else { return false }
            return request.withUnsafeBytes { bytes in
                guard case .processed(let sent)? = try? Posix.send(handle.fd, bytes.baseAddress!, bytes.count) else { return false }
                return sent == bytes.count
            }
        }
    }

    /// Whether the socket is still open.
    package var isOpen: Bool { state.withLock { $0.fdOpen } }

    /// Leaves the epoll set and closes the fd, at once, from any thread; no delegate call begins after
    /// this returns unless one had already begun on the queue.
    package func close() {
        let delegate = state.withLock { state -> (any RoutingSocketDelegate)? in
            guard state.fdOpen else { return nil }
            state.fdOpen = false
            reactor.remove(fd: handle.fd, token: token)
            handle.release()
            defer { state.delegate = nil }
            return state.delegate
        }
        // Let go of outside the lock: it may be the face's last reference.
        withExtendedLifetime(delegate) {}
    }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        for _ in 0..<Self.readBudget {
            let (outcome, delegate, buffer) = state.withLock {
                state -> (Read, (any RoutingSocketDelegate)?, UnsafeMutableRawBufferPointer) in
                let buffer = state.buffer
                guard state.fdOpen, let delegate = state.delegate else { return (.closed, nil, buffer) }
                do throws(SystemError) {
                    guard case .processed(let count) = try Posix.recv(handle.fd, buffer.baseAddress!, buffer.count) else {
                        return (.drained, delegate, buffer)
                    }
                    return (.datagram(count), delegate, buffer)
                } catch {
                    return (error.code == ENOBUFS ? .lost : .drained, delegate, buffer)
                }
            }
            guard let delegate else { return }
            switch outcome {
            case .closed: return
            case .datagram(let count): delegate.routingSocket(self, received: UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            case .lost: delegate.routingSocketLostMessages(self)
            case .drained:
                delegate.routingSocketDrained(self)
                return
            }
        }
    }

    private enum Read {
        case datagram(Int)
        case lost, drained, closed
    }

    /// Holds a token's place in the epoll set until `init` can hand it to the socket itself.
    private final class Unregistered: ReactorHandler {
        static let shared = Unregistered()
        func reactor(_ reactor: Reactor, fired events: UInt32) {}
    }
}
