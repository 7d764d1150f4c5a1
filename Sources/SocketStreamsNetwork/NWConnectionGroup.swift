// `NWConnectionGroup` with an `NWMulticastGroup`: one datagram socket of the engine, on the reactor of the
// group's queue, bound to the members' port and joined to each member group on every interface the
// parameters allow (`requiredInterface`, `requiredInterfaceType`, the prohibited ones), as
// Network.framework joins "all available interfaces"; multicast it sends leaves by the first interface
// joined. What arrives goes to the receive handler as a message that knows its sender (`reply`); a send
// to no endpoint goes to every member group. States move forward: setup → ready | failed → cancelled.
//
// Linux's particulars: a source filter (`from:`) is applied to each datagram's sender here rather than
// as a source-specific membership; `disableUnicast` binds the socket to the group's address (one member
// group), which is how Linux keeps unicast to the port out; `extractConnection()` is not offered (nil).
// Port 0 in the members (not a multicast port any peer could know) binds a port the system picks, and a
// send to the group then goes to that port: a loopback test's ephemeral port.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

/// A group of endpoints to communicate with: Network.framework's `NWGroupDescriptor`.
public protocol NWGroupDescriptor: Sendable {}

/// An IP multicast group to join: Network.framework's `NWMulticastGroup` (`Equatable`,
/// `CustomDebugStringConvertible`).
public struct NWMulticastGroup: NWGroupDescriptor, Equatable, CustomDebugStringConvertible {
    /// The multicast addresses and port joined (`NWMulticastGroup.members`).
    public private(set) var members: [NWEndpoint]
    /// The only sender whose datagrams are received, nil for any (the `from:` of the initialiser).
    let source: NWEndpoint?
    /// Receives only what is sent to the group, not to the port's unicast addresses
    /// (`NWMulticastGroup.disableUnicast`; default false).
    public var disableUnicast: Bool

    /// A group of the multicast `groups` (numeric IPv4 224.0.0.0/4 or IPv6 ff00::/8 addresses, one port,
    /// one family), from `source` only if given (`NWMulticastGroup.init(for:from:disableUnicast:)`).
    ///
    /// - Throws: `NWError.posix(.EINVAL)` for no group, an endpoint that is not a multicast address and
    ///   port, or groups of two families or ports.
    public init(for groups: [NWEndpoint], from source: NWEndpoint? = nil, disableUnicast: Bool = false) throws {
        guard let first = groups.first.flatMap(Self.address) else { throw NWError.posix(.EINVAL) }
        for group in groups {
            guard let address = Self.address(of: group), address.family == first.family, address.port == first.port,
                Self.isMulticast(address)
            else { throw NWError.posix(.EINVAL) }
        }
        members = groups
        self.source = source
        self.disableUnicast = disableUnicast
    }

    /// "multicast group: 239.1.2.3:5353" (`NWMulticastGroup.debugDescription`).
    public var debugDescription: String {
        "multicast group: " + members.map(\.debugDescription).joined(separator: ", ")
    }

    /// A numeric host and port's socket address.
    static func address(of endpoint: NWEndpoint) -> SocketAddress? {
        guard case .hostPort(let host, let port) = endpoint else { return nil }
        return SocketAddress(numericHost: ConnectionConfiguration.text(of: host), port: Int(port.rawValue))
    }

    static func isMulticast(_ address: SocketAddress) -> Bool {
        guard let first = address.addressBytes.first else { return false }
        return address.family == AF_INET ? first & 0xF0 == 0xE0 : first == 0xFF
    }
}

/// Messages sent to and received from a group of endpoints, such as an IP multicast group:
/// Network.framework's `NWConnectionGroup`.
///
/// ```swift
/// let group = try NWMulticastGroup(for: [.hostPort(host: "239.1.2.3", port: 5000)])
/// let connections = NWConnectionGroup(with: group, using: .udp)
/// connections.setReceiveHandler { message, content, isComplete in message.reply(content: content) }
/// connections.start(queue: .main)
/// connections.send(content: Data("hello".utf8)) { error in … }
/// ```
///
/// Every handler and completion runs on the queue given to `start(queue:)`. A started group keeps itself
/// alive until it is cancelled.
public final class NWConnectionGroup: CustomDebugStringConvertible, Sendable {
    /// Where a group is in its life: Network.framework's `NWConnectionGroup.State`. States move forward;
    /// `.cancelled` is last.
    public enum State: Equatable, Sendable {
        /// Made and not started (`NWConnectionGroup.State.setup`).
        case setup
        /// Waiting for a usable network (`NWConnectionGroup.State.waiting(_:)`): not reported on Linux, a
        /// group joins at once or fails.
        case waiting(NWError)
        /// Joined: messages are sent and received (`NWConnectionGroup.State.ready`).
        case ready
        /// Could not join, e.g. `.posix(.EADDRINUSE)` or no interface to join on (`.failed(_:)`).
        case failed(NWError)
        /// Cancelled, last (`NWConnectionGroup.State.cancelled`).
        case cancelled
    }

    /// A message sent to or received from the group: Network.framework's `NWConnectionGroup.Message`.
    public final class Message: Sendable {
        /// The message's name, for debugging.
        public let identifier: String
        /// Whether it is the last message (kept; a datagram ends nothing).
        public let isFinal: Bool
        /// Per-protocol metadata (UDP's, on a received message).
        public let protocolMetadata: [NWProtocolMetadata]
        /// The sender of a received message; nil for one to send (`NWConnectionGroup.Message.remoteEndpoint`).
        public let remoteEndpoint: NWEndpoint?
        /// The local address and port a received message came in on; nil for one to send
        /// (`NWConnectionGroup.Message.localEndpoint`).
        public let localEndpoint: NWEndpoint?
        private let group: NWConnectionGroup?
        private let sender: SocketAddress?

        /// A message to send (`NWConnectionGroup.Message`'s context initialiser).
        public init(identifier: String, isFinal: Bool = false, metadata: [NWProtocolMetadata]? = []) {
            self.identifier = identifier
            self.isFinal = isFinal
            protocolMetadata = metadata ?? []
            remoteEndpoint = nil
            localEndpoint = nil
            group = nil
            sender = nil
        }

        init(received sender: SocketAddress, local: NWEndpoint?, group: NWConnectionGroup) {
            identifier = "NWConnectionGroup.Message.received"
            isFinal = false
            protocolMetadata = [NWProtocolUDP.Metadata()]
            remoteEndpoint = DatagramListener.endpoint(of: sender)
            localEndpoint = local
            self.group = group
            self.sender = sender
        }

        /// The default message to send (`NWConnectionGroup.Message.default`).
        public static let `default` = Message(identifier: "NWConnectionGroup.Message.default")

        /// The path the message came over (`NWConnectionGroup.Message.path`): not tracked per message, nil.
        public var path: NWPath? { nil }

        /// Sends `content` to the sender of this received message (`NWConnectionGroup.Message.reply(content:message:)`);
        /// a message to send has no sender, and the reply is dropped.
        public func reply(content: Data?, message: Message = .default) {
            guard let group, let sender else { return }
            group.send(content, to: [sender], completion: nil)
        }

        /// A connection of its own to this message's sender (`NWConnectionGroup.Message.extractConnection()`):
        /// not offered on Linux, nil (make an `NWConnection` to `remoteEndpoint` instead).
        public func extractConnection() -> NWConnection? { nil }
    }

    typealias ReceiveHandler = @Sendable (Message, Data?, Bool) -> Void

    struct Receiving {
        var maximumMessageSize: Int
        var rejectOversized: Bool
        var handler: ReceiveHandler
    }

    struct Shared {
        var state = State.setup
        var stateUpdate: (@Sendable (State) -> Void)?
        var receiving: Receiving?
        var queue: DispatchQueue?
        var turns: DelegateTurns?
        var socket: DatagramSocket?
        /// Where a send to the group goes.
        var targets: [SocketAddress] = []
        var local: NWEndpoint?
        /// Sends made before ready.
        var held: [(Data?, [SocketAddress]?, (@Sendable (NWError?) -> Void)?)] = []
        /// Sends in flight by tag.
        var sends: [Int: @Sendable (NWError?) -> Void] = [:]
        var nextTag = 0
        var keptAlive: NWConnectionGroup?
    }

    /// The group joined (`NWConnectionGroup.descriptor`).
    public let descriptor: any NWGroupDescriptor
    /// The parameters the group was made with (`NWConnectionGroup.parameters`).
    public let parameters: NWParameters
    private let shared = Guarded(Shared())
    private let delegate: GroupSocketDelegate

    /// A group for `descriptor` with `parameters` (UDP's) (`NWConnectionGroup.init(with:using:)`); nothing
    /// happens until `start(queue:)`.
    public init(with descriptor: any NWGroupDescriptor, using parameters: NWParameters) {
        self.descriptor = descriptor
        self.parameters = parameters.copy()
        delegate = GroupSocketDelegate()
    }

    /// The current state (`NWConnectionGroup.state`).
    public var state: State { shared.withLock { $0.state } }

    /// The queue given to `start(queue:)`, nil before it (`NWConnectionGroup.queue`).
    public var queue: DispatchQueue? { shared.withLock { $0.queue } }

    /// Called on the queue with each new state (`NWConnectionGroup.stateUpdateHandler`).
    public var stateUpdateHandler: (@Sendable (_ newState: State) -> Void)? {
        get { shared.withLock { $0.stateUpdate } }
        set { shared.withLock { $0.stateUpdate = newValue } }
    }

    /// "[group multicast group: 239.1.2.3:5000, ready]" (`NWConnectionGroup.debugDescription`).
    public var debugDescription: String {
        "[group \((descriptor as? NWMulticastGroup)?.debugDescription ?? "\(descriptor)"), \(state)]"
    }

    /// Sets the handler called on the queue with each message received, its content, and whether it is
    /// complete (`NWConnectionGroup.setReceiveHandler(maximumMessageSize:rejectOversizedMessages:handler:)`).
    /// A datagram larger than `maximumMessageSize` is dropped if `rejectOversizedMessages`, else its
    /// beginning is delivered, not complete. Set it before `start(queue:)`.
    public func setReceiveHandler(
        maximumMessageSize: Int = Int.max, rejectOversizedMessages: Bool = true,
        handler: (@Sendable (_ message: Message, _ content: Data?, _ isComplete: Bool) -> Void)?
    ) {
        let receiving = handler.map {
            Receiving(maximumMessageSize: max(0, maximumMessageSize), rejectOversized: rejectOversizedMessages, handler: $0)
        }
        shared.withLock { $0.receiving = receiving }
    }

    /// Joins the group, starts receiving, and makes `queue` the one every handler runs on
    /// (`NWConnectionGroup.start(queue:)`). A second call is ignored.
    public func start(queue: DispatchQueue) {
        let turns = DelegateTurns(queue: queue)
        let started = shared.withLock { shared -> Bool in
            guard shared.queue == nil, shared.state == .setup else { return false }
            shared.queue = queue
            shared.turns = turns
            shared.keptAlive = self
            return true
        }
        guard started else { return }
        guard turns != nil else { return queue.async { self.finish(.failed(.posix(.EMFILE))) } }
        delegate.group.withLock { $0 = self }
        let outcome: State
        do throws(NWError) {
            try join(queue: queue)
            outcome = .ready
        } catch {
            outcome = .failed(error)
        }
        onOwner { self.finish(outcome) }
    }

    /// Makes the socket, binds it, joins every member group on every interface allowed.
    private func join(queue: DispatchQueue) throws(NWError) {
        guard let group = descriptor as? NWMulticastGroup else { throw NWError.posix(.EINVAL) }
        guard parameters.defaultProtocolStack.transportProtocol is NWProtocolUDP.Options,
            parameters.defaultProtocolStack.applicationProtocols.isEmpty
        else { throw NWError.posix(.EPROTONOSUPPORT) }
        let members = group.members.compactMap(NWMulticastGroup.address)
        guard let first = members.first else { throw NWError.posix(.EINVAL) }
        let interfaces = allowedInterfaces(family: first.family)
        guard !interfaces.isEmpty else { throw NWError.posix(.ENETDOWN) }
        let socket: DatagramSocket
        do {
            socket = try DatagramSocket(family: first.family, owner: .delegateQueue(queue), delegate: delegate)
        } catch {
            throw NWError(datagramError: error)
        }
        do throws(DatagramSendError) {
            if parameters.allowLocalEndpointReuse {
                try socket.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
                try socket.setOption(level: SOL_SOCKET, name: SO_REUSEPORT, value: 1)
            }
            let ip = (parameters.defaultProtocolStack.internetProtocol as? NWProtocolIP.Options)?.values.withLock { $0 }
            let (level, loop, hops) =
                first.family == AF_INET
                ? (Int32(IPPROTO_IP), IP_MULTICAST_LOOP, IP_MULTICAST_TTL) : (Int32(IPPROTO_IPV6), IPV6_MULTICAST_LOOP, IPV6_MULTICAST_HOPS)
            if ip?.disableMulticastLoopback == true { try socket.setOption(level: level, name: loop, value: 0) }
            if let limit = ip?.hopLimit, limit > 0 { try socket.setOption(level: level, name: hops, value: Int32(limit)) }
            let bound = group.disableUnicast && members.count == 1 ? first : SocketAddress.any(family: first.family, port: first.port)
            try socket.bind(to: bound)
            var joined = 0
            var failure = DatagramSendError.system(code: ENODEV, function: "setsockopt")
            for interface in interfaces {
                do throws(DatagramSendError) {
                    for member in members { try socket.setMembership(true, group: member, interface: interface) }
                    if joined == 0 { try socket.setMulticastInterface(interface) }
                    joined += 1
                } catch {
                    failure = error
                }
            }
            guard joined > 0 else { throw failure }
        } catch {
            socket.close()
            throw NWError(datagramError: error)
        }
        let port = socket.localAddress?.port ?? first.port
        let local = NWEndpoint.hostPort(
            host: NWEndpoint.Host(first.family == AF_INET ? "0.0.0.0" : "::"),
            port: NWEndpoint.Port(rawValue: UInt16(clamping: port)) ?? .any)
        let kept = shared.withLock { shared -> Bool in
            guard shared.state == .setup else { return false }
            shared.socket = socket
            shared.targets = members.map { $0.port == 0 ? $0.withPort(port) : $0 }
            shared.local = local
            return true
        }
        guard kept else {
            socket.close()
            throw NWError.posix(.ECANCELED)
        }
        socket.setReceiveMode(.continuous)
    }

    /// The interfaces to join on: one address of `family` each, of those the parameters allow.
    private func allowedInterfaces(family: Int32) -> [Posix.InterfaceAddress] {
        let (required, requiredType, prohibited, prohibitedTypes) = parameters.values.withLock {
            ($0.requiredInterface, $0.requiredInterfaceType, $0.prohibitedInterfaces ?? [], $0.prohibitedInterfaceTypes ?? [])
        }
        var seen = Set<String>()
        return Posix.interfaceAddresses().filter { entry in
            guard entry.address.family == family, !seen.contains(entry.name) else { return false }
            if let required, required.name != entry.name { return false }
            if prohibited.contains(where: { $0.name == entry.name }) { return false }
            let type = NWInterface(systemName: entry.name)?.type ?? .other
            if requiredType != .other, type != requiredType { return false }
            if prohibitedTypes.contains(type) { return false }
            seen.insert(entry.name)
            return true
        }
    }

    /// Sends `content` as one datagram to `endpoint`, or to every member group when nil
    /// (`NWConnectionGroup.send(content:to:message:completion:)`); `completion` is called once on the
    /// queue, when the kernel took it or with the error that stopped it (a datagram refused fails that
    /// send alone). A send before `start` is held until the group is ready.
    public func send(
        content: Data?, to endpoint: NWEndpoint? = nil, message: Message = .default,
        completion: @escaping @Sendable (_ error: NWError?) -> Void
    ) {
        var targets: [SocketAddress]?
        if let endpoint {
            guard let address = NWMulticastGroup.address(of: endpoint) else { return fail(completion, .posix(.EINVAL)) }
            targets = [address]
        }
        send(content, to: targets, completion: completion)
    }

    private func send(_ content: Data?, to targets: [SocketAddress]?, completion: (@Sendable (NWError?) -> Void)?) {
        enum Next {
            case held
            case fail(NWError)
            case send(DatagramSocket, [(SocketAddress, Int)])
        }
        let next = shared.withLock { shared -> Next in
            switch shared.state {
            case .setup, .waiting:
                shared.held.append((content, targets, completion))
                return .held
            case .failed(let error): return .fail(error)
            case .cancelled: return .fail(.posix(.ECANCELED))
            case .ready: break
            }
            guard let socket = shared.socket else { return .fail(.posix(.ECANCELED)) }
            let destinations = (targets ?? shared.targets).map { address -> (SocketAddress, Int) in
                shared.nextTag &+= 1
                return (address, shared.nextTag)
            }
            if let completion, let last = destinations.last { shared.sends[last.1] = completion }
            return .send(socket, destinations)
        }
        switch next {
        case .held: return
        case .fail(let error): if let completion { fail(completion, error) }
        case .send(let socket, let destinations):
            guard let content else {
                if let completion { onOwnerUnlessCancelled { completion(nil) } }
                return
            }
            for (address, tag) in destinations { socket.send(content, to: address, timeout: nil, tag: tag) }
        }
    }

    private func fail(_ completion: @escaping @Sendable (NWError?) -> Void, _ error: NWError) {
        onOwnerUnlessCancelled { completion(error) }
    }

    /// Runs `body` on the owner unless `.cancelled` has been reported by then: nothing is called after it.
    private func onOwnerUnlessCancelled(_ body: @escaping @Sendable () -> Void) {
        onOwner { [self] in
            if shared.withLock({ $0.state }) != .cancelled { body() }
        }
    }

    /// Leaves the group and closes the socket (`NWConnectionGroup.cancel()`): sends not yet done complete
    /// with `.posix(.ECANCELED)`, then `.cancelled` is reported, last; nothing is called after it (a send
    /// made then is dropped).
    public func cancel() {
        let (socket, started) = shared.withLock { shared -> (DatagramSocket?, Bool) in
            guard shared.state != .cancelled else { return (nil, false) }
            defer { shared.socket = nil }
            if shared.queue == nil { shared.state = .cancelled }
            return (shared.socket, shared.queue != nil)
        }
        socket?.close()
        if started { onOwner { self.finish(.cancelled) } }
    }

    /// What `finish` carries out once the lock is let go of.
    private struct Finishing {
        var handler: (@Sendable (State) -> Void)?
        var held: [(Data?, [SocketAddress]?, (@Sendable (NWError?) -> Void)?)] = []
        var outstanding: [@Sendable (NWError?) -> Void] = []
        var socket: DatagramSocket?
        /// The turns, taken out at `.cancelled` so that nothing is queued behind the report; let go of last.
        var turns: DelegateTurns?
    }

    /// Moves to `state` and reports it, on the owner; sends held for ready go out or fail.
    private func finish(_ state: State) {
        let finishing = shared.withLock { shared -> Finishing? in
            if shared.state == .cancelled || shared.state == state { return nil }
            if case .failed = shared.state, state != .cancelled { return nil }
            shared.state = state
            var finishing = Finishing(handler: shared.stateUpdate, held: shared.held)
            shared.held = []
            if state != .ready {
                finishing.outstanding = shared.sends.sorted { $0.key < $1.key }.map(\.value)
                shared.sends = [:]
                finishing.socket = shared.socket
                shared.socket = nil
            }
            if state == .cancelled {
                finishing.turns = shared.turns
                shared.turns = nil
            }
            return finishing
        }
        guard let finishing else { return }
        finishing.socket?.close()
        let error: NWError? =
            switch state {
            case .failed(let error): error
            case .cancelled: .posix(.ECANCELED)
            default: nil
            }
        // `.ready` first, then the sends held for it; a failure's or a cancel's errors before its state.
        if state == .ready { finishing.handler?(state) }
        for (content, targets, completion) in finishing.held {
            if let error { completion?(error) } else { send(content, to: targets, completion: completion) }
        }
        for completion in finishing.outstanding { completion(error ?? .posix(.ECANCELED)) }
        if state != .ready { finishing.handler?(state) }
        guard state == .cancelled else { return }
        // Last: the handlers and the group's hold on itself (the turns went at the report: nothing is
        // called after `.cancelled`).
        let released = shared.withLock { shared -> (NWConnectionGroup?, Receiving?, (@Sendable (State) -> Void)?) in
            defer {
                shared.keptAlive = nil
                shared.receiving = nil
                shared.stateUpdate = nil
            }
            return (shared.keptAlive, shared.receiving, shared.stateUpdate)
        }
        delegate.group.withLock { $0 = nil }
        withExtendedLifetime(finishing.turns) { _ = released }
    }

    private func onOwner(_ body: @escaping @Sendable () -> Void) {
        guard let turns = shared.withLock({ $0.turns }) else { return }
        turns.enqueue(OwnerTurn(body))
    }

    // MARK: the socket's reports (on the owner)

    fileprivate func received(_ datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        guard let (receiving, local) = shared.withLock({ shared in shared.receiving.map { ($0, shared.local) } }) else { return }
        let source = (descriptor as? NWMulticastGroup)?.source.flatMap(NWMulticastGroup.address)
        for datagram in datagrams {
            if let source, source.addressBytes != datagram.sender.addressBytes || (source.port != 0 && source.port != datagram.sender.port)
            {
                continue
            }
            var content = Data(datagram.bytes)
            var complete = true
            if content.count > receiving.maximumMessageSize {
                if receiving.rejectOversized { continue }
                content = content.prefix(receiving.maximumMessageSize)
                complete = false
            }
            receiving.handler(Message(received: datagram.sender, local: local, group: self), content, complete)
        }
    }

    fileprivate func sent(_ outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        for outcome in outcomes {
            guard let completion = shared.withLock({ $0.sends.removeValue(forKey: outcome.tag) }) else { continue }
            completion(outcome.error.map { NWError(datagramError: $0) })
        }
    }
}

/// The group's socket's delegate, apart from the group so that the public class does not take the engine's
/// protocol on; it reaches the group from `start` to `.cancelled`.
private final class GroupSocketDelegate: DatagramSocketDelegate {
    let group = Guarded<NWConnectionGroup?>(nil)

    func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        group.withLock { $0 }?.received(datagrams)
    }

    func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        group.withLock { $0 }?.sent(outcomes)
    }

    func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {}
}
