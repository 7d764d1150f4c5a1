// `NWListener(using: .udp, on:)`: one datagram socket of the engine, bound to the listener's port and
// owned by the reactor of the listener's queue, reading continuously. Each datagram goes to the flow of
// its sender's address (IPv4 and IPv6, one socket: a dual-stack `::` unless the parameters name a local
// address); a sender with no flow yet gets a new `NWConnection`, handed unstarted to
// `newConnectionHandler`, with the datagram kept for it. Up to `DatagramFlow.heldLimit` datagrams wait
// for a connection that has not asked for them (not started, or with no receive outstanding); more are
// dropped, as a full socket buffer drops them. A connection's sends go out of the listener's socket to
// its remote, their outcomes back to the connection on its own queue.
//
// Cancelling a connection takes it out of the demultiplexing (a later datagram from that remote makes a
// new connection); cancelling the listener closes the socket and cancels every connection on it, which
// have nothing to send or receive through once the socket is gone.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

/// A UDP listener's socket and its flows, by remote address (see the file's header).
final class DatagramListener: DatagramSocketDelegate {
    struct State {
        weak var listener: NWListener?
        var socket: DatagramSocket?
        /// The connection of each remote address (address and port; IPv6: and scope).
        var flows: [SocketAddress: NWConnection] = [:]
        /// The connection each send in flight was made on, by tag.
        var sends: [Int: NWConnection] = [:]
        var closed = false
    }

    let parameters: NWParameters
    private let state = Guarded(State())

    init(parameters: NWParameters) {
        self.parameters = parameters
    }

    /// Binds the socket to `host` (a numeric address; nil: every address of both families) and `port`
    /// on `queue`'s reactor, and starts reading; returns the port bound.
    func listen(host: String?, port: NWEndpoint.Port, queue: DispatchQueue, for listener: NWListener) throws(NWError) -> NWEndpoint.Port {
        var candidates: [SocketAddress] = []
        if let host {
            guard let address = SocketAddress(numericHost: host, port: Int(port.rawValue)) else { throw NWError.posix(.EINVAL) }
            candidates = [address]
        } else {
            candidates = [.any(family: AF_INET6, port: Int(port.rawValue)), .any(family: AF_INET, port: Int(port.rawValue))]
        }
        var failure = NWError.posix(.EADDRNOTAVAIL)
        for address in candidates {
            let socket: DatagramSocket
            do {
                socket = try DatagramSocket(family: address.family, owner: .delegateQueue(queue), delegate: self)
            } catch {
                failure = NWError(datagramError: error)
                continue
            }
            do throws(DatagramSendError) {
                if host == nil, address.family == AF_INET6 { try socket.setOption(level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: 0) }
                if parameters.allowLocalEndpointReuse {
                    try socket.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
                    try socket.setOption(level: SOL_SOCKET, name: SO_REUSEPORT, value: 1)
                }
                try socket.bind(to: address)
            } catch {
                socket.close()
                failure = NWError(datagramError: error)
                // A port taken is taken for both families: no second try.
                if failure == .posix(.EADDRINUSE) { break }
                continue
            }
            let kept = state.withLock { state -> Bool in
                guard !state.closed else { return false }
                state.listener = listener
                state.socket = socket
                return true
            }
            guard kept else {
                socket.close()
                throw NWError.posix(.ECANCELED)
            }
            socket.setReceiveMode(.continuous)
            return NWEndpoint.Port(rawValue: UInt16(clamping: socket.localAddress?.port ?? 0)) ?? .any
        }
        throw failure
    }

    /// Closes the socket and cancels every connection on it. Any thread.
    func close() {
        let (socket, flows) = state.withLock { state -> (DatagramSocket?, [NWConnection]) in
            state.closed = true
            defer {
                state.socket = nil
                state.flows = [:]
                state.sends = [:]
            }
            return (state.socket, Array(state.flows.values))
        }
        socket?.close()
        for connection in flows { connection.cancel() }
    }

    /// Takes `connection` out of the demultiplexing (cancelled or refused).
    func remove(_ connection: NWConnection, remote: SocketAddress) {
        state.withLock { state in
            if state.flows[remote] === connection { state.flows[remote] = nil }
        }
    }

    /// Sends `data` to `remote` for `connection`; its outcome goes to the connection's flow.
    func send(_ data: Data, to remote: SocketAddress, tag: Int, for connection: NWConnection) {
        let socket = state.withLock { state -> DatagramSocket? in
            guard let socket = state.socket else { return nil }
            state.sends[tag] = connection
            return socket
        }
        // No socket: the listener is cancelled, and so is the connection, whose cancel completes the send.
        socket?.send(data, to: remote, timeout: nil, tag: tag)
    }

    // MARK: the socket's reports (on the listener's owner)

    func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        var made: [NWConnection] = []
        var arrivals: [(NWConnection, [Data])] = []
        let listener = state.withLock { state -> NWListener? in
            guard !state.closed else { return nil }
            for datagram in datagrams {
                let key = datagram.sender
                let connection: NWConnection
                if let known = state.flows[key] {
                    connection = known
                } else {
                    let flow = DatagramFlow(origin: .accepted(self, remote: datagram.sender))
                    connection = NWConnection(datagramsFrom: Self.endpoint(of: datagram.sender), over: flow, using: parameters.copy())
                    state.flows[key] = connection
                    made.append(connection)
                }
                if let last = arrivals.last, last.0 === connection {
                    arrivals[arrivals.count - 1].1.append(Data(datagram.bytes))
                } else {
                    arrivals.append((connection, [Data(datagram.bytes)]))
                }
            }
            return state.listener
        }
        for (connection, data) in arrivals {
            guard let flow = connection.datagrams else { continue }
            if flow.arrive(data, limit: DatagramFlow.heldLimit) { connection.onOwner { flow.drain() } }
        }
        for connection in made {
            if let listener { listener.accepted(connection) } else { connection.cancel() }
        }
    }

    func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        let owners = state.withLock { state in outcomes.map { state.sends.removeValue(forKey: $0.tag) } }
        for (outcome, connection) in zip(outcomes, owners) {
            guard let connection, let flow = connection.datagrams else { continue }
            let (tag, error) = (outcome.tag, outcome.error)
            connection.onOwnerUnlessCancelled { flow.sent(tag: tag, error: error) }
        }
    }

    func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {
        // An unconnected socket gets no ICMP errors on its reads; any other failure leaves it reading.
    }

    /// The endpoint a connection reports for `address`: an IPv4-mapped IPv6 address (a dual-stack
    /// socket's IPv4 sender) as the IPv4 address.
    static func endpoint(of address: SocketAddress) -> NWEndpoint {
        var host = address.host
        let bytes = address.addressBytes
        if address.family == AF_INET6, DatagramFlow.limit(for: address) == DatagramFlow.ipv4Limit {
            host = bytes[12...].map(String.init).joined(separator: ".")
        }
        return .hostPort(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: UInt16(clamping: address.port)) ?? .any)
    }
}
