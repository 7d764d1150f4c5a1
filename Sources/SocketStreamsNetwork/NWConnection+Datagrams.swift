// `NWConnection` over UDP: one flow, "a series of datagrams that all share the same local IP / local port /
// remote IP / remote port" (Apple DTS). A connection made with `.udp` parameters resolves its endpoint
// (the engine's resolver, off the owner), connects one datagram socket of the engine on the reactor of
// the connection's queue (the owner, as for TCP) and is ready at once: UDP has no handshake. A connection
// an `NWListener(using: .udp)` made for a new remote has no socket of its own: its datagrams come from
// the listener's socket, demultiplexed by the remote's address, and its sends go out of that socket.
//
// The connection keeps what it keeps for TCP (`ConnectionLifecycle`, the handlers, the sends and
// receives held until ready in `Shared.pending`); the flow keeps what is UDP's: the attempt (a look-up,
// a socket, or the listener's link), the receives handed to it with the datagrams they wait for, and
// the sends in flight by tag. Lock order: the flow's lock and the connection's are never held together;
// completions are called outside both, on the owner.
//
// What a datagram is here: one `send` is one datagram (`isComplete` and the context change nothing);
// one receive completes with one datagram, `isComplete` true, in a context that is not final (it is not
// the end of a stream), a zero-length datagram included. A receive whose `maximumLength` is below the
// datagram's size gets its beginning with `isComplete` false, and the next receive the rest. A datagram
// the kernel refuses (EMSGSIZE, ECONNREFUSED after an ICMP port unreachable) fails that send's
// completion alone; the flow stays ready. A refusal the kernel reports on a read is dropped: receives
// wait for datagrams.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

/// An `NWConnection`'s UDP flow (see the file's header). Every method may be called from any thread but
/// those that say they run on the owner.
final class DatagramFlow: DatagramSocketDelegate {
    typealias ReceiveCompletion = NWConnection.ReceiveCompletion
    typealias SendDone = @Sendable (NWError?) -> Void

    /// Where the flow's datagrams come from.
    enum Origin: Sendable {
        /// A connection made by code: a socket of its own, connected to the endpoint.
        case client
        /// A connection a UDP listener made for `remote`: the listener's socket.
        case accepted(DatagramListener, remote: SocketAddress)
    }

    /// The flow's attempt.
    enum Attempt {
        /// None live.
        case idle
        /// Looking the endpoint up (its number: a stale look-up's end is ignored).
        case resolving(Int)
        /// A cancel came while looking up: the look-up's end reports the attempt closed.
        case closing
        /// Connected.
        case open(DatagramSocket)
        /// Over the listener's socket.
        case linked
    }

    struct Receive {
        let maximum: Int
        let completion: ReceiveCompletion
    }

    struct State {
        var attempt = Attempt.idle
        var attempts = 0
        /// Receives handed to the flow once ready, oldest first.
        var receives: [Receive] = []
        /// Datagrams that came before a receive asked for them, oldest first (the first may be the rest
        /// of one a short receive took the beginning of).
        var arrived: [Data] = []
        /// Sends in flight by tag (nil: `.idempotent`).
        var sends: [Int: SendDone?] = [:]
        /// The largest datagram a send can carry, once connected.
        var maximumDatagramSize = DatagramFlow.ipv4Limit
        /// Datagrams dropped because `arrived` was full (a listener's flow whose connection does not read).
        var dropped = 0
    }

    /// The largest UDP payload over IPv4 (65,535 less the IP and UDP headers) and over IPv6 (less UDP's).
    static let ipv4Limit = 65_507
    static let ipv6Limit = 65_527
    /// The most datagrams a listener keeps for one of its connections that has not asked for them yet
    /// (not started, or not receiving): later ones are dropped, as a full socket buffer drops them.
    static let heldLimit = 64

    /// The tags of sends, unique across flows (a listener's flows share its socket); never
    /// `untagged`.
    private static let tags = Guarded(0)
    /// The tag of a send whose outcome nobody waits for (see `send`).
    private static let untagged = 0

    let origin: Origin
    let state: Guarded<State>

    init(origin: Origin) {
        self.origin = origin
        state = Guarded(State())
    }

    /// Whether `parameters` make a UDP connection.
    static func isDatagram(_ parameters: NWParameters) -> Bool {
        parameters.defaultProtocolStack.transportProtocol is NWProtocolUDP.Options
    }

    /// The largest datagram one send can carry (`NWConnection.maximumDatagramSize`).
    var maximumDatagramSize: Int { state.withLock { $0.maximumDatagramSize } }

    /// The flow's own socket, once connected.
    private var openSocket: DatagramSocket? {
        state.withLock { state in
            guard case .open(let socket) = state.attempt else { return nil }
            return socket
        }
    }

    /// Runs `body` (on the owner) with the sends it makes out of the flow's own socket queued until it
    /// ends, then sent in batches (`DatagramSocket.queueingSends`): the sends held until the flow was
    /// ready would otherwise go out in a `sendmmsg` each.
    func queueingSends(_ body: () -> Void) {
        guard let socket = openSocket else { return body() }
        socket.queueingSends(body)
    }

    /// The connected socket's descriptor, for the connection's path.
    var socketDescriptor: Int32? {
        state.withLock { state in
            guard case .open(let socket) = state.attempt else { return nil }
            return socket.fd >= 0 ? socket.fd : nil
        }
    }

    // MARK: the attempt (on the owner)

    /// Begins an attempt (the lifecycle's `beginAttempt`).
    func begin(_ connection: NWConnection) {
        let number = state.withLock { state -> Int in
            state.attempts += 1
            state.attempt = .resolving(state.attempts)
            return state.attempts
        }
        // A cancel that found no attempt yet (see `close`): this attempt closes itself.
        if connection.shared.withLock({ $0.lifecycle.cancelRequested }) {
            state.withLock { $0.attempt = .idle }
            return connection.datagramAttemptClosed(nil)
        }
        if case .accepted(_, let remote) = origin {
            let linked = state.withLock { state -> Bool in
                guard case .resolving = state.attempt else {
                    state.attempt = .idle  // cancelled meanwhile
                    return false
                }
                state.attempt = .linked
                state.maximumDatagramSize = Self.limit(for: remote)
                return true
            }
            return linked ? connection.datagramsConnected(self) : connection.datagramAttemptClosed(nil)
        }
        let target: (host: String, port: Int)
        do throws(NWError) {
            target = try Self.target(of: connection.endpoint, parameters: connection.frozenParameters)
        } catch {
            state.withLock { $0.attempt = .idle }
            return connection.datagramAttemptClosed(error)
        }
        if let known = DatagramSocket.addressesWithoutLookup(host: target.host, port: target.port) {
            return open(.success(known), attempt: number, connection)
        }
        LookupQueue.run {
            let result = DatagramSocket.resolve(host: target.host, port: target.port)
            connection.onOwner { self.open(result, attempt: number, connection) }
        }
    }

    /// Where a client flow goes, or why it cannot: a host and port (a URL's too); Unix paths and Bonjour
    /// services have no UDP flow here, nor do protocols above UDP (DTLS).
    private static func target(of endpoint: NWEndpoint, parameters: NWParameters) throws(NWError) -> (host: String, port: Int) {
        guard parameters.defaultProtocolStack.applicationProtocols.isEmpty else { throw NWError.posix(.EPROTONOSUPPORT) }
        switch endpoint {
        case .hostPort(let host, let port): return (ConnectionConfiguration.text(of: host), Int(port.rawValue))
        case .url(let url):
            guard let host = url.host, !host.isEmpty, let port = url.port else { throw NWError.posix(.EINVAL) }
            return (host, port)
        case .unix: throw NWError.posix(.EAFNOSUPPORT)
        case .service: throw NWError.dns(-65544)  // kDNSServiceErr_Unsupported
        }
    }

    /// The look-up's end: connects a socket to the first address that takes one (of the IP version the
    /// parameters allow), and the flow is ready.
    private func open(_ result: Result<[SocketAddress], DatagramResolutionError>, attempt number: Int, _ connection: NWConnection) {
        let current = state.withLock { state -> Bool? in
            switch state.attempt {
            case .resolving(let live) where live == number: return true
            case .closing:
                state.attempt = .idle
                return false
            default: return nil  // stale
            }
        }
        guard let current else { return }
        guard current else { return connection.datagramAttemptClosed(nil) }
        var addresses: [SocketAddress]
        switch result {
        case .success(let found): addresses = found
        case .failure(let error):
            state.withLock { $0.attempt = .idle }
            return connection.datagramAttemptClosed(.dns(NWError.dnsCode(addrInfoFailure: error.code)))
        }
        let parameters = connection.frozenParameters
        let ip = parameters.defaultProtocolStack.values.withLock { $0.internetProtocol } as? NWProtocolIP.Options
        let ipValues = ip?.values.withLock { $0 }
        switch ipValues?.version {
        case .v4?: addresses = addresses.filter { $0.family == AF_INET }
        case .v6?: addresses = addresses.filter { $0.family == AF_INET6 }
        default: break
        }
        var failure = NWError.posix(.EADDRNOTAVAIL)
        for address in addresses {
            do throws(NWError) {
                let socket = try connect(to: address, parameters: parameters, ip: ipValues, queue: connection.queue)
                let kept = state.withLock { state -> Bool in
                    guard case .resolving(let live) = state.attempt, live == number else { return false }
                    state.attempt = .open(socket)
                    state.maximumDatagramSize = Self.limit(for: address)
                    return true
                }
                guard kept else {
                    // Cancelled meanwhile: the attempt ends here.
                    socket.close()
                    state.withLock { $0.attempt = .idle }
                    return connection.datagramAttemptClosed(nil)
                }
                return connection.datagramsConnected(self)
            } catch {
                failure = error
            }
        }
        let closing = state.withLock { state -> Bool in
            defer { state.attempt = .idle }
            if case .closing = state.attempt { return true }
            return false
        }
        connection.datagramAttemptClosed(closing ? nil : failure)
    }

    /// A socket on the connection's queue's reactor, with the parameters' options, connected to `address`.
    private func connect(to address: SocketAddress, parameters: NWParameters, ip: NWProtocolIP.Options.Values?, queue: DispatchQueue?)
        throws(NWError) -> DatagramSocket
    {
        guard let queue else { throw NWError.posix(.ECANCELED) }
        let socket: DatagramSocket
        do {
            socket = try DatagramSocket(family: address.family, owner: .delegateQueue(queue), delegate: self)
        } catch {
            throw NWError(datagramError: error)
        }
        do throws(DatagramSendError) {
            let (local, reuse) = parameters.values.withLock { ($0.requiredLocalEndpoint, $0.allowLocalEndpointReuse) }
            if reuse {
                try socket.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
                try socket.setOption(level: SOL_SOCKET, name: SO_REUSEPORT, value: 1)
            }
            let udp = parameters.defaultProtocolStack.transportProtocol as? NWProtocolUDP.Options
            if address.family == AF_INET, udp?.preferNoChecksum == true {
                try socket.setOption(level: SOL_SOCKET, name: 11, value: 1)  // SO_NO_CHECK
            }
            if let hops = ip?.hopLimit, hops > 0 {
                if address.family == AF_INET {
                    try socket.setOption(level: Int32(IPPROTO_IP), name: IP_TTL, value: Int32(hops))
                } else {
                    try socket.setOption(level: Int32(IPPROTO_IPV6), name: IPV6_UNICAST_HOPS, value: Int32(hops))
                }
            }
            if case .hostPort(let host, let port)? = local {
                let text = ConnectionConfiguration.text(of: host)
                let numeric = text == "0.0.0.0" || text == "::" ? (address.family == AF_INET ? "0.0.0.0" : "::") : text
                guard let binding = SocketAddress(numericHost: numeric, port: Int(port.rawValue)) else {
                    throw DatagramSendError.system(code: EADDRNOTAVAIL, function: "bind")
                }
                try socket.bind(to: binding)
            }
            try socket.connect(to: address)
        } catch {
            socket.close()
            throw NWError(datagramError: error)
        }
        return socket
    }

    /// The largest payload one datagram to `address` can carry.
    static func limit(for address: SocketAddress) -> Int {
        guard address.family == AF_INET6 else { return ipv4Limit }
        let bytes = address.addressBytes
        let mapped = bytes.count == 16 && bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        return mapped ? ipv4Limit : ipv6Limit
    }

    /// Ends the live attempt (the lifecycle's `closeAttempt`, or a cancel): its end is reported to the
    /// connection once, on the owner. Any thread.
    func close(_ connection: NWConnection) {
        let (socket, linked, report) = state.withLock { state -> (DatagramSocket?, Bool, Bool) in
            switch state.attempt {
            case .idle, .closing: return (nil, false, false)  // none yet (`begin` sees the cancel), or already asked
            case .resolving:
                state.attempt = .closing  // the look-up's end reports
                return (nil, false, false)
            case .open(let socket):
                state.attempt = .idle
                return (socket, false, true)
            case .linked:
                state.attempt = .idle
                return (nil, true, true)
            }
        }
        socket?.close()
        if linked { detach(connection) }
        if report { connection.onOwner { connection.datagramAttemptClosed(nil) } }
    }

    /// Takes an accepted flow out of its listener's demultiplexing: a later datagram from its remote
    /// makes a new connection.
    func detach(_ connection: NWConnection) {
        if case .accepted(let listener, let remote) = origin { listener.remove(connection, remote: remote) }
    }

    // MARK: receiving

    /// Asks for one datagram (at most `maximum` bytes of it), on a ready flow.
    func receive(maximum: Int, _ completion: @escaping ReceiveCompletion, _ connection: NWConnection) {
        let (deliver, socket) = state.withLock { state -> (Bool, DatagramSocket?) in
            state.receives.append(Receive(maximum: maximum, completion: completion))
            if !state.arrived.isEmpty { return (true, nil) }
            guard case .open(let socket) = state.attempt else { return (false, nil) }
            return (false, socket)
        }
        if deliver { connection.onOwner { self.drain() } }
        if let socket { updateReading(socket) }
    }

    /// Reads a client's socket while a receive is outstanding, and leaves the datagrams in the kernel
    /// otherwise. The socket is paused only when datagrams come with no receive left after their
    /// completions (`datagramSocket(_:received:)`), not each time the receives run out: a receive loop
    /// asks again from its completion, and pausing there and reading again at once would change the
    /// socket's epoll interest twice a datagram; what one batch brought beyond the receives is kept in
    /// `arrived`. The mode is set outside the flow's lock (on the owner the socket may report at once,
    /// and its reports take that lock), so each caller checks after setting it that it is still the one
    /// the receives call for: the last to set it sees the last change.
    private func updateReading(_ socket: DatagramSocket) {
        while true {
            let wanted = state.withLock { $0.receives.isEmpty ? DatagramReceiveMode.paused : .continuous }
            socket.setReceiveMode(wanted)
            if state.withLock({ $0.receives.isEmpty ? DatagramReceiveMode.paused : .continuous }) == wanted { return }
        }
    }

    /// Completes the receives the datagrams that arrived answer, in order; reads a client's socket
    /// again when receives are left (those kept did not answer them all). On the owner.
    func drain() {
        var answered: [(ReceiveCompletion, Data, Bool)] = []
        let client = state.withLock { state -> DatagramSocket? in
            while !state.receives.isEmpty, !state.arrived.isEmpty {
                let receive = state.receives.removeFirst()
                let datagram = state.arrived[0]
                if datagram.count > receive.maximum {
                    answered.append((receive.completion, datagram.prefix(receive.maximum), false))
                    state.arrived[0] = datagram.dropFirst(receive.maximum)
                } else {
                    answered.append((receive.completion, datagram, true))
                    state.arrived.removeFirst()
                }
            }
            guard !state.receives.isEmpty, case .open(let socket) = state.attempt else { return nil }
            return socket
        }
        if let client { updateReading(client) }
        // Only the rest of a datagram a short receive cut (its indices start past 0) is copied, so that
        // what the completion gets starts at index 0, as a datagram does.
        for (completion, data, complete) in answered {
            completion(data.startIndex == 0 ? data : Data(data), Self.receivedContext, complete, nil)
        }
    }

    /// Keeps `datagram` for the flow's receives: a client's from its socket (on the owner), an accepted
    /// flow's from the listener (`limit`: how many are kept at most). Whether a drain is needed.
    func arrive(_ datagrams: [Data], limit: Int = .max) -> Bool {
        state.withLock { state in
            for datagram in datagrams {
                if state.arrived.count >= limit {
                    state.dropped &+= 1
                } else {
                    state.arrived.append(datagram)
                }
            }
            return !state.receives.isEmpty && !state.arrived.isEmpty
        }
    }

    /// The context received datagrams come in: not final (a datagram is not the end of a stream), with
    /// UDP's metadata.
    static let receivedContext = NWConnection.ContentContext(
        identifier: "NWConnection.ContentContext.datagram", metadata: [NWProtocolUDP.Metadata()])

    // MARK: sending

    /// Sends `data` as one datagram, on a ready flow; nil content sends nothing and completes.
    func send(_ data: Data?, _ completion: NWConnection.SendCompletion, _ connection: NWConnection) {
        var done: SendDone?
        if case .contentProcessed(let body) = completion { done = body }
        guard let data else {
            if let done { connection.onOwnerUnlessCancelled { done(nil) } }
            return
        }
        // A send with nothing to call back (`.idempotent`) out of the flow's own socket takes no tag
        // and no entry in `sends`: its outcome changes nothing (tag 0, which `sent(tag:)` is never asked
        // about). A listener's flow still takes one, by which the listener finds the connection.
        if done == nil, let socket = openSocket {
            return socket.send(data, to: nil, timeout: nil, tag: Self.untagged)
        }
        let tag = Self.tags.withLock { counter in
            counter &+= 1
            if counter == Self.untagged { counter &+= 1 }
            return counter
        }
        let socket = state.withLock { state -> DatagramSocket? in
            state.sends[tag] = done
            guard case .open(let socket) = state.attempt else { return nil }
            return socket
        }
        if let socket {
            socket.send(data, to: nil, timeout: nil, tag: tag)
        } else if case .accepted(let listener, let remote) = origin {
            listener.send(data, to: remote, tag: tag, for: connection)
        }
        // Otherwise the flow is closing: the cancel completes the send.
    }

    /// A send's outcome. On the owner.
    func sent(tag: Int, error: DatagramSendError?) {
        guard let done = state.withLock({ $0.sends.removeValue(forKey: tag) }) else { return }
        done?(error.map { NWError(datagramError: $0) })
    }

    /// Every receive and send outstanding, taken out (oldest first), and the datagrams kept let go of:
    /// the connection completes them with its error.
    func takeOutstanding() -> (receives: [ReceiveCompletion], sends: [SendDone]) {
        state.withLock { state in
            defer {
                state.receives = []
                state.sends = [:]
                state.arrived = []
            }
            let sends = state.sends.sorted { $0.key < $1.key }.compactMap { $0.value }
            return (state.receives.map(\.completion), sends)
        }
    }

    // MARK: the socket's reports (a client flow's, on the owner)

    func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        if arrive(datagrams.map { Data($0.bytes) }) { drain() }
        // After the completions, which may have asked again: with no receive left the socket pauses.
        updateReading(socket)
    }

    func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        for outcome in outcomes where outcome.tag != Self.untagged { sent(tag: outcome.tag, error: outcome.error) }
    }

    func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {
        // An ICMP error the kernel reports on a read (see the file's header): dropped.
    }
}

extension NWError {
    /// A datagram socket's error as Network.framework reports it: the errno as `.posix`.
    init(datagramError error: DatagramSendError) {
        switch error {
        case .system(let code, _): self = .posix(POSIXErrorCode(rawValue: code) ?? .EIO)
        case .timedOut: self = .posix(.ETIMEDOUT)
        }
    }
}

extension NWProtocolUDP {
    /// UDP's per-datagram metadata: Network.framework's `NWProtocolUDP.Metadata`. It has no fields; a
    /// received datagram's context carries one (`context.protocolMetadata(definition: NWProtocolUDP.definition)`).
    // @unchecked Sendable: no stored state.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// UDP's metadata (`NWProtocolUDP.Metadata.init()`).
        override public init() {}
    }
}

// MARK: the connection's side of the flow

extension NWConnection {
    /// A send on a UDP connection: to the flow once ready, held before (as on TCP), failed after a cancel.
    func sendDatagram(_ data: Data?, _ completion: SendCompletion, over flow: DatagramFlow) {
        switch route(.send(data.map { WriteBytes($0) }, final: false, completion)) {
        case .direct: flow.send(data, completion, self)
        case .held: break
        case .failed(let failure):
            if case .contentProcessed(let done) = completion { onOwnerUnlessCancelled { done(failure) } }
        }
    }

    /// A receive on a UDP connection: one datagram (at most `maximum` bytes of it).
    func receiveDatagram(maximum: Int, _ completion: @escaping ReceiveCompletion, over flow: DatagramFlow) {
        switch route(.receive(.range(minimum: 0, maximum: maximum), completion)) {
        case .direct: flow.receive(maximum: maximum, completion, self)
        case .held: break
        case .failed(let failure): onOwnerUnlessCancelled { completion(nil, nil, false, failure) }
        }
    }

    /// Where a UDP send or receive goes, decided under the lock.
    private enum DatagramRoute {
        /// The flow is ready: straight to it.
        case direct
        /// Held (`pending`) until the flow is connected.
        case held
        /// Cancelled or failed: completes with this error.
        case failed(NWError)
    }

    /// Straight to a ready flow, else held in `pending` (as on TCP) until it is connected, else (after a
    /// cancel or failure) failed. `pending` is made only when it is held.
    private func route(_ pending: @autoclosure () -> Pending) -> DatagramRoute {
        shared.withLock { shared -> DatagramRoute in
            if shared.datagramsDirect { return .direct }
            if shared.lifecycle.phase == .cancelled || shared.lifecycle.cancelRequested { return .failed(.posix(.ECANCELED)) }
            if shared.lifecycle.phase == .failed { return .failed(shared.lifecycle.error) }
            shared.pending.append(pending())
            return .held
        }
    }

    /// The flow is connected (on the owner): `.ready`, then the sends and receives held for it, in order,
    /// then the datagrams kept for it.
    func datagramsConnected(_ flow: DatagramFlow) {
        let actions = shared.withLock { $0.lifecycle.handle(.connected) }
        if actions == [.report(.ready)], let fd = flow.socketDescriptor, let handler = shared.withLock({ $0.handlers.pathUpdate }) {
            handler(NWPath.connection(socket: fd))
        }
        perform(actions)
        while true {
            let held = shared.withLock { shared -> [Pending]? in
                guard shared.lifecycle.isReady else { return nil }
                guard !shared.pending.isEmpty else {
                    shared.datagramsDirect = true
                    return nil
                }
                defer { shared.pending = [] }
                return shared.pending
            }
            guard let held else { break }
            flow.queueingSends {
                for each in held {
                    switch each {
                    case .receive(let request, let completion):
                        guard case .range(_, let maximum) = request else { continue }
                        flow.receive(maximum: maximum, completion, self)
                    case .send(let bytes, _, let completion):
                        flow.send(bytes.map(Self.data), completion, self)
                    }
                }
            }
        }
        flow.drain()
    }

    private static func data(_ bytes: WriteBytes) -> Data {
        switch bytes {
        case .array(let array): Data(array)
        case .data(let box): box.data
        }
    }

    /// The flow's attempt ended (`nil`: for a cancel). On the owner.
    func datagramAttemptClosed(_ error: NWError?) {
        perform(shared.withLock { $0.lifecycle.handle(.attemptClosed(error)) })
    }
}
