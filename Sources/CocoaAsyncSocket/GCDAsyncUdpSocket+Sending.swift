// GCDAsyncUdpSocket.h's "Sending" section, and the one queue of sends and connects behind it.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

extension GCDAsyncUdpSocket {
    // MARK: sending

    /// Sends `data` to the connected peer (`sendData:withTimeout:tag:`). `timeout` (seconds, negative
    /// for none) runs only while the datagram waits for room in the kernel's buffer. The outcome arrives
    /// as `udpSocket(_:didSendDataWithTag:)` or `udpSocket(_:didNotSendDataWithTag:dueToError:)`, in
    /// send order; an empty `data` is ignored, as GCDAsyncUdpSocket ignores it.
    public func send(_ data: Data, withTimeout timeout: TimeInterval, tag: Int) {
        guard !data.isEmpty else { return }
        let run = state.withLock { state -> Bool in
            _ = Self.enqueue(&state, kind: .send(data, timeout: timeout, tag: tag), target: .unspecified)
            return state.dispatcher.enter() == .run
        }
        if run { advanceEntered() }
    }

    /// Sends `data` to `host` and `port` (`sendData:toHost:port:withTimeout:tag:`): the host is looked
    /// up for this send (a numeric address, `localhost` and `loopback` without a look-up), and the
    /// datagram waits its turn behind earlier sends.
    public func send(_ data: Data, toHost host: String, port: UInt16, withTimeout timeout: TimeInterval, tag: Int) {
        guard !data.isEmpty else { return }
        let (pending, run) = state.withLock { state -> (UInt64?, Bool) in
            let known = state.numericHosts.addresses(host: host, port: port)
            let id = Self.enqueue(&state, kind: .send(data, timeout: timeout, tag: tag), target: .host(known.map { .success($0) }))
            guard known != nil else { return (id, false) }
            return (nil, state.dispatcher.enter() == .run)
        }
        if let pending { startLookup(id: pending, host: host, port: Int(port)) } else if run { advanceEntered() }
    }

    /// Sends `data` to one IPv4 or IPv6 `sockaddr` (`sendData:toAddress:withTimeout:tag:`). On a
    /// connected socket it goes to the connected peer, as GCDAsyncUdpSocket sends it.
    public func send(_ data: Data, toAddress remoteAddr: Data, withTimeout timeout: TimeInterval, tag: Int) {
        guard !data.isEmpty else { return }
        let target: UdpPacket.Target =
            Self.socketAddress(remoteAddr).map { .address($0) }
            ?? .host(.failure(GCDAsyncUdpSocketError(.badParamError, message: "A valid IPv4 or IPv6 address was not given") as NSError))
        let run = state.withLock { state -> Bool in
            _ = Self.enqueue(&state, kind: .send(data, timeout: timeout, tag: tag), target: target)
            return state.dispatcher.enter() == .run
        }
        if run { advanceEntered() }
    }

    /// Sets a filter every datagram passes before it is sent, called asynchronously on `filterQueue`
    /// (`setSendFilter:withQueue:`); nil removes it.
    public func setSendFilter(_ filterBlock: GCDAsyncUdpSocketSendFilterBlock?, with filterQueue: DispatchQueue?) {
        setSendFilter(filterBlock, with: filterQueue, isAsynchronous: true)
    }

    /// Sets a send filter, called on `filterQueue` asynchronously or, with `isAsynchronous` false,
    /// synchronously (`setSendFilter:withQueue:isAsynchronous:`). A datagram the filter refuses is not
    /// sent, and its tag is still reported sent, as GCDAsyncUdpSocket reports it.
    public func setSendFilter(_ filterBlock: GCDAsyncUdpSocketSendFilterBlock?, with filterQueue: DispatchQueue?, isAsynchronous: Bool) {
        if let filterQueue, !isAsynchronous { Self.markFilterQueue(filterQueue) }
        state.withLock { state in
            state.sendFilter = filterBlock.flatMap { block in
                filterQueue.map { UdpSendFilter(block: block, queue: $0, isAsynchronous: isAsynchronous) }
            }
        }
    }

    // MARK: the queue

    /// Adds a packet at the end of the queue; returns its id. Lock held.
    static func enqueue(_ state: inout UdpState, kind: UdpPacket.Kind, target: UdpPacket.Target) -> UInt64 {
        let id = state.nextPacketID
        state.nextPacketID &+= 1
        state.packets.append(UdpPacket(id: id, kind: kind, target: target))
        return id
    }

    /// Looks `host` up for packet `id` on a queue of its own (`getaddrinfo` blocks; see `LookupQueue`),
    /// then goes on.
    func startLookup(id: UInt64, host: String, port: Int) {
        let generation = state.withLock { $0.generation }
        LookupQueue.run {
            let answer: Result<[SocketAddress], NSError> =
                switch DatagramSocket.resolve(host: host, port: port) {
                case .success(let addresses): .success(addresses)
                case .failure(let error): .failure(.udpNetDB(error.code, message: error.message))
                }
            self.state.withLock { state in
                guard state.generation == generation else { return }
                state.keepLookup(answer, for: id)
            }
            self.advance()
        }
    }

    /// Hands what can go to the datagram sockets, reports what failed before it could, in queue order,
    /// and closes when `closeAfterSending` is done: one thread at a time (`SerialRunner`), from any.
    func advance() {
        guard state.withLock({ $0.dispatcher.enter() }) == .run else { return }
        advanceEntered()
    }

    /// `advance` for a caller that has entered the dispatcher (a send enters it in the lock section
    /// that queues its datagram: one section less a datagram). The lock section that finds nothing
    /// more to do also ends the round, or begins the next one if a request came meanwhile.
    func advanceEntered() {
        while let action = update({ state -> UdpAction? in
            while true {
                if let action = Self.nextAction(&state, self) { return action }
                if state.dispatcher.finishRound() == nil { return nil }
            }
        }) {
            switch action {
            case .send(let socket, let first, let rest):
                socket.send(first.data, to: first.destination, timeout: first.timeout, tag: first.tag)
                for datagram in rest {
                    socket.send(datagram.data, to: datagram.destination, timeout: datagram.timeout, tag: datagram.tag)
                }
            case .filter(let call):
                call.ask()
            case .close:
                closeNow(error: nil)
            }
        }
    }

    /// What `advance` does next, deciding under the lock; nil when the head must wait (a look-up, a
    /// filter, the outcomes of datagrams in flight on the other family's socket) or nothing is queued.
    static func nextAction(_ state: inout UdpState, _ socket: GCDAsyncUdpSocket) -> UdpAction? {
        // The batch's first datagram held apart: one at a time (a ping-pong's) allocates no array.
        var first: UdpOutgoing?
        var batch: [UdpOutgoing] = []
        var batchSocket: DatagramSocket?
        defer { if first != nil { state.inFlightSocket = batchSocket } }
        queue: while let head = state.packets.first {
            let target = resolvedTarget(&state, head)
            if case .waiting = target { break queue }
            let quiet = state.inFlight == 0 && first == nil  // nothing reported yet is ahead of the head
            guard case .send(let data, let timeout, let tag) = head.kind else {
                guard quiet else { break queue }
                state.packets.removeFirst()
                state.connecting = false
                connect(&state, socket, target)
                continue queue
            }
            let route = route(&state, socket, target)
            guard case .socket(let datagramSocket, let destination) = route else {
                guard quiet else { break queue }
                state.packets.removeFirst()
                if case .failed(let error) = route {
                    post(&state, socket) { $1.udpSocket($0, didNotSendDataWithTag: tag, dueToError: error) }
                }
                continue queue
            }
            if let filter = state.sendFilter, head.filtering != .passed {
                guard quiet, head.filtering != .asking else { break queue }
                if head.filtering == .dropped {
                    state.packets.removeFirst()
                    post(&state, socket, unlessDefault: .didSendDatagram) { $1.udpSocket($0, didSendDataWithTag: tag) }
                    continue queue
                }
                var asked = head
                asked.filtering = .asking
                state.packets.replaceFirst(asked)
                return .filter(
                    UdpSendFilterCall(socket, filter, id: head.id, data: data, destination: destination ?? state.connectedAddress, tag: tag)
                )
            }
            // Outcomes come back in order from one socket; a datagram for the other waits for them.
            guard state.inFlight == 0 || state.inFlightSocket === datagramSocket, batchSocket == nil || batchSocket === datagramSocket
            else {
                break queue
            }
            state.packets.removeFirst()
            state.inFlight += 1
            batchSocket = datagramSocket
            let outgoing = UdpOutgoing(data: data, destination: destination, timeout: nanoseconds(timeout), tag: tag)
            if first == nil { first = outgoing } else { batch.append(outgoing) }
            if batch.count == 63 { break queue }
        }
        if let batchSocket, let first { return .send(batchSocket, first, batch) }
        if state.packets.isEmpty, state.inFlight == 0, state.closeAfterSending { return .close }
        return nil
    }

    /// A timeout in seconds as the datagram socket's nanoseconds; nil for a negative one (none).
    static func nanoseconds(_ timeout: TimeInterval) -> UInt64? {
        guard timeout >= 0 else { return nil }
        return UInt64(min(timeout, 1e9) * 1e9)
    }

    /// The packet's destination as far as it is known.
    private static func resolvedTarget(_ state: inout UdpState, _ packet: UdpPacket) -> ResolvedTarget {
        switch packet.target {
        case .unspecified: return .unspecified
        case .address(let address): return .address(address)
        case .host(let answer?):
            switch answer {
            case .success(let addresses): return .addresses(addresses, named: true)
            case .failure(let error): return .failed(error)
            }
        case .host(nil):
            guard let answer = state.takeLookup(for: packet.id) else { return .waiting }
            var resolved = packet
            resolved.target = .host(answer)
            state.packets.replaceFirst(resolved)
            return resolvedTarget(&state, resolved)
        }
    }

    /// Which socket a datagram goes out of, and to where (nil: the connected peer); or why it cannot.
    private static func route(_ state: inout UdpState, _ socket: GCDAsyncUdpSocket, _ target: ResolvedTarget) -> Route {
        if state.connected {
            if case .addresses(_, named: true) = target {
                return .failed(
                    GCDAsyncUdpSocketError(.badConfigError, message: "Cannot specify destination of packet for connected socket") as NSError
                )
            }
            if case .failed(let error) = target { return .failed(error) }
            guard let connected = state.socket4 ?? state.socket6 else {
                return .failed(.udpPOSIX(EBADF, reason: "Error in send() function."))
            }
            return .socket(connected, nil)
        }
        switch target {
        case .waiting: return .failed(.udpPOSIX(EINVAL, reason: "Error in send() function."))
        case .unspecified:
            return .failed(
                GCDAsyncUdpSocketError(.badConfigError, message: "You must specify destination of packet for a non-connected socket")
                    as NSError)
        case .failed(let error): return .failed(error)
        case .address(let address): return route(&state, socket, picked: pick(state, CollectionOfOne(address)))
        case .addresses(let addresses, _): return route(&state, socket, picked: pick(state, addresses))
        }
    }

    /// The socket for the address `pick` chose, made if need be.
    private static func route(_ state: inout UdpState, _ socket: GCDAsyncUdpSocket, picked: Result<SocketAddress, NSError>) -> Route {
        let address: SocketAddress
        switch picked {
        case .failure(let error): return .failed(error)
        case .success(let chosen): address = chosen
        }
        if state.socket(address.family) == nil {
            do {
                try makeSockets(&state, socket, families: [address.family])
            } catch {
                return .failed(error as NSError)
            }
        }
        guard let datagramSocket = state.socket(address.family) else {
            // The family's socket was closed by a multicast join (GCDAsyncUdpSocket sends on fd -1 and fails with EBADF).
            return .failed(.udpPOSIX(EBADF, reason: "Error in send() function."))
        }
        return .socket(datagramSocket, address)
    }

    /// GCDAsyncUdpSocket's choice among a look-up's addresses: enabled and not deactivated families
    /// only; the preferred family if it is there, else (neutral) the first address's.
    static func pick(_ state: UdpState, _ addresses: some Collection<SocketAddress>) -> Result<SocketAddress, NSError> {
        let v4 = addresses.first { $0.family == AF_INET }
        let v6 = addresses.first { $0.family == AF_INET6 }
        let other = { (message: String) in GCDAsyncUdpSocketError(.otherError, message: message) as NSError }
        let use4 = state.ipv4Enabled && !state.deactivated4 ? v4 : nil
        let use6 = state.ipv6Enabled && !state.deactivated6 ? v6 : nil
        if !state.ipv4Enabled && v6 == nil { return .failure(other("IPv4 has been disabled and DNS lookup found no IPv6 address(es).")) }
        if !state.ipv6Enabled && v4 == nil { return .failure(other("IPv6 has been disabled and DNS lookup found no IPv4 address(es).")) }
        if state.deactivated4 && v6 == nil {
            return .failure(other("IPv4 has been deactivated due to bind/connect, and DNS lookup found no IPv6 address(es)."))
        }
        if state.deactivated6 && v4 == nil {
            return .failure(other("IPv6 has been deactivated due to bind/connect, and DNS lookup found no IPv4 address(es)."))
        }
        switch state.preference {
        case .ipv4: if let use4 { return .success(use4) }
        case .ipv6: if let use6 { return .success(use6) }
        case .neutral:
            if let first = addresses.first(where: { ($0.family == AF_INET && use4 != nil) || ($0.family == AF_INET6 && use6 != nil) }) {
                return .success(first)
            }
        }
        if let address = use4 ?? use6 { return .success(address) }
        return .failure(other("No usable address of an enabled family."))
    }

    /// Carries out a connect packet at the head of the queue (nothing in flight): reports the outcome.
    private static func connect(_ state: inout UdpState, _ socket: GCDAsyncUdpSocket, _ target: ResolvedTarget) {
        let address: SocketAddress
        switch target {
        case .failed(let error):
            return post(&state, socket) { $1.udpSocket($0, didNotConnect: error) }
        case .waiting, .unspecified:
            return
        case .address(let single):
            switch pick(state, CollectionOfOne(single)) {
            case .failure(let error): return post(&state, socket) { $1.udpSocket($0, didNotConnect: error) }
            case .success(let picked): address = picked
            }
        case .addresses(let addresses, _):
            switch pick(state, addresses) {
            case .failure(let error): return post(&state, socket) { $1.udpSocket($0, didNotConnect: error) }
            case .success(let picked): address = picked
            }
        }
        do {
            try makeSockets(&state, socket, families: [address.family])
            guard let datagramSocket = state.socket(address.family) else {
                throw NSError.udpPOSIX(EBADF, reason: "Error in connect() function")
            }
            try datagramSocket.connect(to: address)
        } catch {
            let failure = error is DatagramSendError ? posixError(error, reason: "Error in connect() function") : error as NSError
            return post(&state, socket) { $1.udpSocket($0, didNotConnect: failure) }
        }
        state.drop(address.family == AF_INET ? AF_INET6 : AF_INET)
        if address.family == AF_INET { state.deactivated6 = true } else { state.deactivated4 = true }
        state.didBind = true
        state.connected = true
        state.connectedAddress = address
        let bytes = Data(address.sockaddrBytes)
        post(&state, socket) { $1.udpSocket($0, didConnectToAddress: bytes) }
    }

    /// The send filter's answer for packet `id`.
    func sendFilterAnswered(id: UInt64, pass: Bool) {
        state.withLock { state in
            guard var head = state.packets.first, head.id == id else { return }
            head.filtering = pass ? .passed : .dropped
            state.packets.replaceFirst(head)
        }
        advance()
    }
}

extension GCDAsyncUdpSocket: DatagramSocketDelegate {
    /// Datagrams' outcomes, on the socket's owner: reported in order, a batch's in one block (each its
    /// own delegate call), and the queue goes on. A delegate that leaves `didSendDataWithTag` to its
    /// default is posted only the failures.
    package func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        // The queue goes on only if something waits in it (behind these outcomes, or for the close
        // after sending): with nothing queued `advance` has nothing to do, and a ping-pong's send, whose
        // outcome comes back inside its own `advance`, would otherwise make that one run a second round.
        let waiting = state.withLock { state -> Bool in
            guard state.owns(socket) else { return false }
            state.inFlight -= outcomes.count
            if state.inFlight == 0 { state.inFlightSocket = nil }
            if outcomes.contains(where: { $0.error == nil }) { state.didBind = true }
            let waiting = !state.packets.isEmpty || state.closeAfterSending
            guard let delegate = state.delegate else { return waiting }
            let reportsSent = !DelegateDefaults.leaves(.didSendDatagram, to: delegate, cache: &state.defaults)
            let calls = outcomes.compactMap { outcome -> (Int, NSError?)? in
                if let error = outcome.error { return (outcome.tag, Self.posixError(error, reason: "Error in send() function.")) }
                return reportsSent ? (outcome.tag, nil) : nil
            }
            guard !calls.isEmpty else { return waiting }
            Self.post(&state, self) { socket, delegate in
                for (tag, failure) in calls {
                    if let failure {
                        delegate.udpSocket(socket, didNotSendDataWithTag: tag, dueToError: failure)
                    } else {
                        delegate.udpSocket(socket, didSendDataWithTag: tag)
                    }
                }
            }
            return waiting
        }
        if waiting { advance() }
    }
}

/// What `advance` does outside the lock.
enum UdpAction {
    /// A batch: its first datagram and the rest.
    case send(DatagramSocket, UdpOutgoing, [UdpOutgoing])
    case filter(UdpSendFilterCall)
    case close
}

/// A datagram handed to a datagram socket.
struct UdpOutgoing {
    let data: Data
    let destination: SocketAddress?
    let timeout: UInt64?
    let tag: Int
}

/// A packet's destination as far as the queue knows it.
enum ResolvedTarget {
    case unspecified
    /// An address given as one.
    case address(SocketAddress)
    /// `named`: the addresses of a host name (which a connected socket refuses).
    case addresses([SocketAddress], named: Bool)
    case failed(NSError)
    case waiting
}

/// Where a datagram goes, or why it cannot.
enum Route {
    case socket(DatagramSocket, SocketAddress?)
    case failed(NSError)
}

/// One question to the send filter, carried to its queue.
final class UdpSendFilterCall: @unchecked Sendable {
    // @unchecked: made under the socket's lock, then used only by the block on the filter's queue.
    let socket: GCDAsyncUdpSocket
    let filter: UdpSendFilter
    let id: UInt64
    let data: Data
    let destination: Data
    let tag: Int

    init(_ socket: GCDAsyncUdpSocket, _ filter: UdpSendFilter, id: UInt64, data: Data, destination: SocketAddress?, tag: Int) {
        self.socket = socket
        self.filter = filter
        self.id = id
        self.data = data
        self.destination = destination.map { Data($0.sockaddrBytes) } ?? Data()
        self.tag = tag
    }

    func ask() {
        if filter.isAsynchronous {
            filter.queue.async {
                self.socket.sendFilterAnswered(id: self.id, pass: self.filter.block(self.data, self.destination, self.tag))
            }
        } else {
            let pass = GCDAsyncUdpSocket.runSynchronously(on: filter.queue) { filter.block(data, destination, tag) }
            socket.sendFilterAnswered(id: id, pass: pass)
        }
    }
}
