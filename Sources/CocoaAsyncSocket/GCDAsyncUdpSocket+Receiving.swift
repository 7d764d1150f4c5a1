// GCDAsyncUdpSocket.h's "Receiving" and "Closing" sections.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

extension GCDAsyncUdpSocket {
    // MARK: receiving

    /// Delivers the next datagram (that passes the receive filter), then stops reading (`receiveOnce:`).
    /// Throws `badConfigError` before any socket exists (bind, connect or send first).
    public func receiveOnce() throws { try setReceiving(.once) }

    /// Delivers every datagram as it comes until ``pauseReceiving()`` (`beginReceiving:`).
    public func beginReceiving() throws { try setReceiving(.continuous) }

    /// Stops reading (`pauseReceiving`): datagrams wait in the kernel's buffer until receiving begins
    /// again (beyond it the kernel drops them); calls already posted still arrive.
    public func pauseReceiving() {
        let sockets = state.withLock { state -> [DatagramSocket] in
            state.receiving = .paused
            return [state.socket4, state.socket6].compactMap { $0 }
        }
        for socket in sockets { socket.setReceiveMode(.paused) }
    }

    private func setReceiving(_ mode: DatagramReceiveMode) throws {
        let sockets = try state.withLock { state -> [DatagramSocket] in
            guard state.socket4 != nil || state.socket6 != nil else {
                throw GCDAsyncUdpSocketError(
                    .badConfigError,
                    message:
                        "Must bind socket before you can receive data. You can do this explicitly via bind, or implicitly via connect or by sending data."
                )
            }
            state.receiving = mode
            return [state.socket4, state.socket6].compactMap { $0 }
        }
        for socket in sockets { socket.setReceiveMode(mode) }
    }

    /// Sets a filter every received datagram passes before the delegate hears of it, called
    /// asynchronously on `filterQueue` (`setReceiveFilter:withQueue:`); nil removes it.
    public func setReceiveFilter(_ filterBlock: GCDAsyncUdpSocketReceiveFilterBlock?, with filterQueue: DispatchQueue?) {
        setReceiveFilter(filterBlock, with: filterQueue, isAsynchronous: true)
    }

    /// Sets a receive filter, called on `filterQueue` asynchronously or, with `isAsynchronous` false,
    /// synchronously from the socket's own work (`setReceiveFilter:withQueue:isAsynchronous:`); where
    /// that work already runs on `filterQueue` the filter is called inline, where GCDAsyncUdpSocket,
    /// given its socket queue as the filter's, deadlocks.
    public func setReceiveFilter(
        _ filterBlock: GCDAsyncUdpSocketReceiveFilterBlock?, with filterQueue: DispatchQueue?, isAsynchronous: Bool
    ) {
        if let filterQueue, !isAsynchronous { Self.markFilterQueue(filterQueue) }
        state.withLock { state in
            state.receiveFilter = filterBlock.flatMap { block in
                filterQueue.map { UdpReceiveFilter(block: block, queue: $0, isAsynchronous: isAsynchronous) }
            }
        }
    }

    // MARK: closing

    /// Closes at once (`close`): queued sends are dropped without a report, the sockets' descriptors are
    /// closed (before this returns when called on the socket queue), and `udpSocketDidClose(_:withError:)`
    /// follows with nil if any socket had been made. The object can be bound, connected and used again.
    public func close() { closeNow(error: nil) }

    /// Closes once every queued send's outcome has been reported (at once if none is queued)
    /// (`closeAfterSending`). Sends made meanwhile are sent first.
    public func closeAfterSending() {
        state.withLock { $0.closeAfterSending = true }
        advance()
    }

    func closeNow(error: Error?) {
        update { state in
            let hadSockets = state.socket4 != nil || state.socket6 != nil
            state.drop(AF_INET)
            state.drop(AF_INET6)
            state.packets.removeAll()
            state.dropLookups()
            state.inFlight = 0
            state.inFlightSocket = nil
            state.bound = false
            state.didBind = false
            state.connecting = false
            state.connected = false
            state.deactivated4 = false
            state.deactivated6 = false
            state.receiving = .paused
            state.closeAfterSending = false
            state.generation &+= 1
            if hadSockets { Self.post(&state, self) { $1.udpSocketDidClose($0, withError: error) } }
        }
    }
}

extension GCDAsyncUdpSocket {
    /// Datagrams from one of the sockets, on the socket's owner: handed to the delegate in one block
    /// (a call each), or each through the receive filter. Empty datagrams are dropped, as
    /// GCDAsyncUdpSocket drops them.
    package func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        let (calls, rearm) = update { state -> ([UdpReceiveFilterCall], [DatagramSocket]) in
            guard state.owns(socket) else { return ([], []) }
            let once = state.receiving == .once
            // The first datagram held apart: one at a time (a ping-pong's) allocates no array.
            var first: UdpDatagram?
            var rest: [UdpDatagram] = []
            for datagram in datagrams where !datagram.bytes.isEmpty {
                let received = UdpDatagram(data: Data(datagram.bytes), address: state.senders.data(for: datagram.sender))
                if first == nil { first = received } else { rest.append(received) }
            }
            guard let first else { return ([], once ? [socket] : []) }
            if let filter = state.receiveFilter {
                state.filtersPending += 1 + rest.count
                let calls = ([first] + rest).map {
                    UdpReceiveFilterCall(self, filter, data: $0.data, address: $0.address, generation: state.generation, once: once)
                }
                return (calls, [])
            }
            if once {
                state.receiving = .paused
            }
            if let delegate = state.delegate, let queue = state.delegateQueue {
                Self.deliver(&state, UdpReceiveCall(self, delegate, first, rest), on: queue)
            }
            return ([], once ? [state.socket4, state.socket6].compactMap { $0 }.filter { $0 !== socket } : [])
        }
        for other in rearm {
            other.setReceiveMode(other === socket ? .once : .paused)
        }
        for call in calls { call.ask() }
    }

    /// The receive filter's answer for one datagram.
    func receiveFilterAnswered(_ call: UdpReceiveFilterCall, pass: Bool, context: AnyObject?) {
        let rearm = state.withLock { state -> [DatagramSocket] in
            state.filtersPending -= 1
            guard state.generation == call.generation else { return [] }
            if pass {
                if call.once { state.receiving = .paused }
                let (data, address) = (call.data, call.address)
                let context = UdpContext(context)
                Self.post(&state, self) { Self.deliver(data, from: address, context: context.value, to: $1, on: $0) }
                return call.once ? [state.socket4, state.socket6].compactMap { $0 } : []
            }
            return call.once && state.receiving == .once ? [state.socket4, state.socket6].compactMap { $0 } : []
        }
        for socket in rearm { socket.setReceiveMode(pass ? .paused : .once) }
    }

    /// Reading failed: GCDAsyncUdpSocket closes with the error (an ICMP port unreachable on a connected
    /// socket: ECONNREFUSED).
    package func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {
        guard state.withLock({ $0.owns(socket) }) else { return }
        closeNow(error: Self.posixError(error, reason: "Error in recvfrom() function"))
    }
}

/// A datagram as the delegate is given it: its bytes and its sender's `sockaddr`.
struct UdpDatagram {
    let data: Data
    let address: Data
}

/// The senders' addresses as `Data`, the last one kept: a flow's datagrams come from one peer, whose
/// address is then made into a `Data` once, not once a datagram.
struct UdpSenderCache {
    private var last: SocketAddress?
    private var lastData = Data()

    mutating func data(for sender: SocketAddress) -> Data {
        if let last, last == sender { return lastData }
        lastData = sender.withSockAddr { Data(bytes: $0, count: Int($1)) }
        last = sender
        return lastData
    }
}

/// Datagrams that arrived together, carried to the delegate queue: a `didReceive` call each.
final class UdpReceiveCall: TurnCall, @unchecked Sendable {
    // @unchecked: built under the socket's lock and then read only by the block or turn that runs it.
    let socket: GCDAsyncUdpSocket
    let delegate: GCDAsyncUdpSocketDelegate
    let first: UdpDatagram
    let rest: [UdpDatagram]

    init(_ socket: GCDAsyncUdpSocket, _ delegate: GCDAsyncUdpSocketDelegate, _ first: UdpDatagram, _ rest: [UdpDatagram]) {
        self.socket = socket
        self.delegate = delegate
        self.first = first
        self.rest = rest
    }

    package func run() {
        var cache = DelegateDefaults.Cache()
        GCDAsyncUdpSocket.deliver(first.data, from: first.address, context: nil, to: delegate, on: socket, cache: &cache)
        for datagram in rest {
            GCDAsyncUdpSocket.deliver(datagram.data, from: datagram.address, context: nil, to: delegate, on: socket, cache: &cache)
        }
    }
}

/// A filter's context carried to the delegate queue.
struct UdpContext: @unchecked Sendable {
    // @unchecked: set by the filter, then read only by the delegate call that carries it.
    let value: AnyObject?
    init(_ value: AnyObject?) { self.value = value }
}

/// One question to the receive filter, carried to its queue.
final class UdpReceiveFilterCall: @unchecked Sendable {
    // @unchecked: made on the socket's owner, then used only by the block on the filter's queue.
    let socket: GCDAsyncUdpSocket
    let filter: UdpReceiveFilter
    let data: Data
    let address: Data
    let generation: UInt64
    let once: Bool

    init(_ socket: GCDAsyncUdpSocket, _ filter: UdpReceiveFilter, data: Data, address: Data, generation: UInt64, once: Bool) {
        self.socket = socket
        self.filter = filter
        self.data = data
        self.address = address
        self.generation = generation
        self.once = once
    }

    func ask() {
        if filter.isAsynchronous {
            filter.queue.async { self.run() }
        } else {
            GCDAsyncUdpSocket.runSynchronously(on: filter.queue) { run() }
        }
    }

    private func run() {
        var context: AnyObject?
        let pass = filter.block(data, address, &context)
        socket.receiveFilterAnswered(self, pass: pass, context: context)
    }
}
