import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

/// GCDAsyncUdpSocket (CocoaAsyncSocket) with the Swift interface it has on Apple platforms, over the
/// package's datagram socket (one per address family in use).
///
/// ```swift
/// let socket = GCDAsyncUdpSocket(delegate: self, delegateQueue: queue)
/// try socket.bind(toPort: 0)
/// try socket.beginReceiving()
/// socket.send("ping".data(using: .utf8)!, toHost: "127.0.0.1", port: 9000, withTimeout: 5, tag: 1)
/// ```
///
/// Its model is GCDAsyncUdpSocket's: the socket's work runs in one place, and each delegate call is
/// posted from there to the delegate queue as its own block, in order; datagrams that arrive together
/// are handed over in one block, one `udpSocket(_:didReceive:fromAddress:withFilterContext:)` call each.
/// That place is the socket queue given to `init`; for a socket given none (where GCDAsyncUdpSocket
/// makes a private serial queue) it is the delegate queue itself, so that a datagram and the delegate
/// call it brings cost no thread hand-over: the calls then run in turns of that queue, each behind the
/// blocks already queued, as separate blocks would (a delegate queue that is the main queue or a global
/// one leaves the work to the package's stream thread; Guides/Datagrams.md). Sends are one FIFO with the
/// connect: outcomes are reported in send order, a host name is resolved for each send, and
/// consecutive datagrams leave in one `sendmmsg`. Every method may be called from any thread.
///
/// Where GCDAsyncUdpSocket's code and its header disagree, this follows the header (Guides/UDP.md): a
/// datagram the kernel refuses (too large, no route, a broadcast without `enableBroadcast(true)`)
/// fails with `udpSocket(_:didNotSendDataWithTag:dueToError:)` and the socket stays open and bound; a
/// send that finds the kernel's buffer full waits for room (its timeout running), where the original
/// never retries. On Linux `SO_REUSEADDR` is not set unless `enableReusePort(true)` asks (there it lets
/// another process take the port), the IPv6 socket is `IPV6_V6ONLY` beside an IPv4 one, and the
/// receive buffer is left at the kernel's size.
public final class GCDAsyncUdpSocket: NSObject, @unchecked Sendable {
    // @unchecked: every stored property is a `let` of a Sendable type or `state`, reached only under
    // its lock.

    let state = Guarded(UdpState())
    /// The queue given for the socket's own work; nil: the package's stream thread.
    let socketQueue: DispatchQueue?
    /// Marks a socket queue with its own identity (one key for every socket, as GCDAsyncSocket's).
    static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    // MARK: creating (GCDAsyncUdpSocket.h: "Initialization")

    /// A socket with no delegate yet (`init`).
    public convenience override init() {
        self.init(delegate: nil, delegateQueue: nil, socketQueue: nil)
    }

    /// A socket with no delegate yet, working on `socketQueue` (`initWithSocketQueue:`).
    public convenience init(socketQueue: DispatchQueue?) {
        self.init(delegate: nil, delegateQueue: nil, socketQueue: socketQueue)
    }

    /// A socket whose delegate is called on `delegateQueue` (`initWithDelegate:delegateQueue:`).
    public convenience init(delegate: GCDAsyncUdpSocketDelegate?, delegateQueue: DispatchQueue?) {
        self.init(delegate: delegate, delegateQueue: delegateQueue, socketQueue: nil)
    }

    /// A socket whose delegate is called on `delegateQueue` and whose own work runs on `socketQueue`,
    /// which must be serial; nil for the package's stream thread (`initWithDelegate:delegateQueue:socketQueue:`).
    public init(delegate: GCDAsyncUdpSocketDelegate?, delegateQueue: DispatchQueue?, socketQueue: DispatchQueue?) {
        self.socketQueue = socketQueue
        super.init()
        if let queue = socketQueue, queue.getSpecific(key: Self.queueKey) == nil {
            queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(queue))
        }
        state.withLock { state in
            state.delegate = delegate
            state.delegateQueue = delegateQueue
        }
    }

    deinit {
        // Reached only once closed: an open socket's datagram sockets hold it.
        let sockets = state.withLock { state in [state.socket4, state.socket6].compactMap { $0 } }
        for socket in sockets { socket.close() }
    }

    /// Where the datagram sockets work, chosen when the first is made and kept: the socket queue given to
    /// `init`; else the delegate queue, whose reactor then runs the sockets' work and delivers each
    /// delegate call in a turn of its own (`DelegateTurns`), so neither a datagram nor a delegate call
    /// waits for another thread; else (no delegate queue yet, the main queue, a global queue) the
    /// package's stream thread. The main queue is left out because a program's main thread often
    /// blocks (a tool that sends and waits), and a global queue because its delegate calls may run side
    /// by side, which one reactor would make one at a time. Lock held.
    func owner(_ state: inout UdpState) -> DatagramOwner {
        if let socketQueue { return .queue(socketQueue) }
        if let turns = state.turns { return .delegateQueue(turns.queue) }
        guard !state.ownerChosen else { return .streamThread }
        state.ownerChosen = true
        guard let queue = state.delegateQueue, !queue.isMainOrGlobal, let turns = DelegateTurns(queue: queue) else {
            return .streamThread
        }
        state.turns = turns
        return .delegateQueue(queue)
    }

    /// Marks the queue of a synchronous filter (one key for every socket's), so that a filter asked from
    /// that queue itself (the delegate queue's turns, a send made in a block on it) runs inline instead
    /// of waiting for itself.
    static let filterQueueKey = DispatchSpecificKey<ObjectIdentifier>()

    static func markFilterQueue(_ queue: DispatchQueue) {
        guard queue.getSpecific(key: filterQueueKey) != ObjectIdentifier(queue) else { return }
        queue.setSpecific(key: filterQueueKey, value: ObjectIdentifier(queue))
    }

    /// `queue.sync(execute: body)`, or `body()` when called on `queue` (marked by `markFilterQueue`).
    static func runSynchronously<Result>(on queue: DispatchQueue, _ body: () -> Result) -> Result {
        if DispatchQueue.getSpecific(key: filterQueueKey) == ObjectIdentifier(queue) { return body() }
        return queue.sync(execute: body)
    }

    /// `state.withLock`, then closes the sockets `body` let go of (`UdpState.drop`), whether or not it
    /// threw: one lock for both.
    func update<Result, Failure: Error>(_ body: (inout UdpState) throws(Failure) -> Result) throws(Failure) -> Result {
        var failure: Failure?
        let (result, dropped) = state.withLock { state -> (Result?, [DatagramSocket]) in
            var result: Result?
            do throws(Failure) {
                result = try body(&state)
            } catch {
                failure = error
            }
            guard !state.dropped.isEmpty else { return (result, []) }
            defer { state.dropped = [] }
            return (result, state.dropped)
        }
        for socket in dropped { socket.close() }
        if let failure { throw failure }
        return result!
    }

    // MARK: configuration (GCDAsyncUdpSocket.h: "Configuration")

    /// The delegate, held weakly (`delegate`).
    public func delegate() -> GCDAsyncUdpSocketDelegate? { state.withLock { $0.delegate } }
    /// Sets the delegate (`setDelegate:`).
    public func setDelegate(_ delegate: GCDAsyncUdpSocketDelegate?) { state.withLock { $0.delegate = delegate } }
    /// Sets the delegate; calls already posted to the old one still reach it (`synchronouslySetDelegate:`).
    public func synchronouslySetDelegate(_ delegate: GCDAsyncUdpSocketDelegate?) { setDelegate(delegate) }

    /// The delegate queue (`delegateQueue`).
    public func delegateQueue() -> DispatchQueue? { state.withLock { $0.delegateQueue } }
    /// Sets the delegate queue (`setDelegateQueue:`).
    public func setDelegateQueue(_ queue: DispatchQueue?) { state.withLock { $0.delegateQueue = queue } }
    /// Sets the delegate queue (`synchronouslySetDelegateQueue:`).
    public func synchronouslySetDelegateQueue(_ queue: DispatchQueue?) { setDelegateQueue(queue) }

    /// Both at once, read together (`getDelegate:delegateQueue:`).
    public func getDelegate(
        _ delegate: UnsafeMutablePointer<GCDAsyncUdpSocketDelegate?>?, delegateQueue: UnsafeMutablePointer<DispatchQueue?>?
    ) {
        let (current, queue) = state.withLock { ($0.delegate, $0.delegateQueue) }
        delegate?.pointee = current
        delegateQueue?.pointee = queue
    }

    /// Sets both at once (`setDelegate:delegateQueue:`).
    public func setDelegate(_ delegate: GCDAsyncUdpSocketDelegate?, delegateQueue: DispatchQueue?) {
        state.withLock { state in
            state.delegate = delegate
            state.delegateQueue = delegateQueue
        }
    }

    /// Sets both at once (`synchronouslySetDelegate:delegateQueue:`).
    public func synchronouslySetDelegate(_ delegate: GCDAsyncUdpSocketDelegate?, delegateQueue: DispatchQueue?) {
        setDelegate(delegate, delegateQueue: delegateQueue)
    }

    /// Whether IPv4 may be used (`isIPv4Enabled`; default true).
    public func isIPv4Enabled() -> Bool { state.withLock { $0.ipv4Enabled } }
    /// Allows or forbids IPv4 for later binds, connects and sends (`setIPv4Enabled:`).
    public func setIPv4Enabled(_ flag: Bool) { state.withLock { $0.ipv4Enabled = flag } }
    /// Whether IPv6 may be used (`isIPv6Enabled`; default true).
    public func isIPv6Enabled() -> Bool { state.withLock { $0.ipv6Enabled } }
    /// Allows or forbids IPv6 (`setIPv6Enabled:`).
    public func setIPv6Enabled(_ flag: Bool) { state.withLock { $0.ipv6Enabled = flag } }

    /// Whether a look-up answering both families picks IPv4 (`isIPv4Preferred`).
    public func isIPv4Preferred() -> Bool { state.withLock { $0.preference == .ipv4 } }
    /// Whether it picks IPv6 (`isIPv6Preferred`).
    public func isIPv6Preferred() -> Bool { state.withLock { $0.preference == .ipv6 } }
    /// Whether it picks the resolver's first answer (`isIPVersionNeutral`; the default).
    public func isIPVersionNeutral() -> Bool { state.withLock { $0.preference == .neutral } }
    /// `setPreferIPv4`.
    public func setPreferIPv4() { state.withLock { $0.preference = .ipv4 } }
    /// `setPreferIPv6`.
    public func setPreferIPv6() { state.withLock { $0.preference = .ipv6 } }
    /// `setIPVersionNeutral`.
    public func setIPVersionNeutral() { state.withLock { $0.preference = .neutral } }

    /// The largest IPv4 datagram received whole (`maxReceiveIPv4BufferSize`; default 65535): a larger one
    /// is cut to it.
    public func maxReceiveIPv4BufferSize() -> UInt16 { state.withLock { $0.maxReceive4 } }
    /// `setMaxReceiveIPv4BufferSize:`.
    public func setMaxReceiveIPv4BufferSize(_ max: UInt16) {
        let socket = state.withLock { state -> DatagramSocket? in
            state.maxReceive4 = max
            return state.socket4
        }
        socket?.maximumDatagramSize = Int(max)
    }
    /// The largest IPv6 datagram received whole (`maxReceiveIPv6BufferSize`; default 65535).
    public func maxReceiveIPv6BufferSize() -> UInt32 { state.withLock { $0.maxReceive6 } }
    /// `setMaxReceiveIPv6BufferSize:`.
    public func setMaxReceiveIPv6BufferSize(_ max: UInt32) {
        let socket = state.withLock { state -> DatagramSocket? in
            state.maxReceive6 = max
            return state.socket6
        }
        socket?.maximumDatagramSize = Int(min(max, 65_535))
    }

    /// `maxSendBufferSize` (default 65535). Kept for the API: GCDAsyncUdpSocket sets `SO_SNDBUF` and
    /// `SO_RCVBUF` to it because Darwin caps a datagram at the send buffer; Linux does not, and there
    /// the value would shrink both buffers below the kernel's default, so it is not applied.
    public func maxSendBufferSize() -> UInt16 { state.withLock { $0.maxSend } }
    /// `setMaxSendBufferSize:` (see ``maxSendBufferSize()``).
    public func setMaxSendBufferSize(_ max: UInt16) { state.withLock { $0.maxSend = max } }

    /// The application's own value, never read by the socket (`userData`).
    public func userData() -> Any? { state.withLock { $0.userData } }
    /// `setUserData:`.
    public func setUserData(_ value: Any?) { state.withLock { $0.userData = value } }

    // MARK: diagnostics (GCDAsyncUdpSocket.h: "Diagnostics")

    /// The local address, once bound (by `bind`, `connect`, or the first send): the IPv4 socket's if
    /// there is one (`localAddress`).
    public func localAddress() -> Data? { localSocketAddress(family: nil).map { Data($0.sockaddrBytes) } }
    /// Its host (`localHost`).
    public func localHost() -> String? { localSocketAddress(family: nil)?.host }
    /// Its port, 0 before (`localPort`).
    public func localPort() -> UInt16 { UInt16(truncatingIfNeeded: localSocketAddress(family: nil)?.port ?? 0) }
    /// The IPv4 socket's local address (`localAddress_IPv4`).
    public func localAddress_IPv4() -> Data? { localSocketAddress(family: AF_INET).map { Data($0.sockaddrBytes) } }
    /// `localHost_IPv4`.
    public func localHost_IPv4() -> String? { localSocketAddress(family: AF_INET)?.host }
    /// `localPort_IPv4`.
    public func localPort_IPv4() -> UInt16 { UInt16(truncatingIfNeeded: localSocketAddress(family: AF_INET)?.port ?? 0) }
    /// The IPv6 socket's local address (`localAddress_IPv6`).
    public func localAddress_IPv6() -> Data? { localSocketAddress(family: AF_INET6).map { Data($0.sockaddrBytes) } }
    /// `localHost_IPv6`.
    public func localHost_IPv6() -> String? { localSocketAddress(family: AF_INET6)?.host }
    /// `localPort_IPv6`.
    public func localPort_IPv6() -> UInt16 { UInt16(truncatingIfNeeded: localSocketAddress(family: AF_INET6)?.port ?? 0) }

    private func localSocketAddress(family: Int32?) -> SocketAddress? {
        let socket = state.withLock { state -> DatagramSocket? in
            guard state.didBind else { return nil }
            switch family {
            case AF_INET: return state.socket4
            case AF_INET6: return state.socket6
            default: return state.socket4 ?? state.socket6
            }
        }
        return socket?.localAddress
    }

    /// The connected peer's address (`connectedAddress`); as GCDAsyncUdpSocket, it still answers after
    /// `close()`.
    public func connectedAddress() -> Data? { state.withLock { $0.connectedAddress }.map { Data($0.sockaddrBytes) } }
    /// `connectedHost`.
    public func connectedHost() -> String? { state.withLock { $0.connectedAddress }?.host }
    /// `connectedPort` (0 if none).
    public func connectedPort() -> UInt16 { UInt16(truncatingIfNeeded: state.withLock { $0.connectedAddress }?.port ?? 0) }

    /// Whether `connect` succeeded and no close followed (`isConnected`).
    public func isConnected() -> Bool { state.withLock { $0.connected } }
    /// Whether no socket exists: never used, or closed (`isClosed`).
    public func isClosed() -> Bool { state.withLock { $0.socket4 == nil && $0.socket6 == nil } }
    /// Whether an IPv4 socket exists, or before any does, whether IPv4 is enabled (`isIPv4`).
    public func isIPv4() -> Bool {
        state.withLock { $0.socket4 != nil || $0.socket6 != nil ? $0.socket4 != nil : $0.ipv4Enabled }
    }
    /// Whether an IPv6 socket exists, or before any does, whether IPv6 is enabled (`isIPv6`).
    public func isIPv6() -> Bool {
        state.withLock { $0.socket4 != nil || $0.socket6 != nil ? $0.socket6 != nil : $0.ipv6Enabled }
    }

    // MARK: advanced (GCDAsyncUdpSocket.h: "Advanced")

    /// Runs `block` where the socket's own work runs, and waits for it (`performBlock:`): on the socket
    /// queue, or on the package's stream thread for a socket given none; inline when called there.
    public func perform(_ block: () -> Void) {
        guard let socketQueue else { return StreamOperations.performOnStreamThread(block) }
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(socketQueue) { return block() }
        socketQueue.sync(execute: block)
    }

    /// Marks `queue`, a target of the socket queue, so that calls made on it run inline
    /// (`markSocketQueueTargetQueue:`).
    public func markSocketQueueTargetQueue(_ queue: DispatchQueue) {
        guard let socketQueue else { return }
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(socketQueue))
    }

    /// Undoes ``markSocketQueueTargetQueue(_:)`` (`unmarkSocketQueueTargetQueue:`).
    public func unmarkSocketQueueTargetQueue(_ queue: DispatchQueue) {
        queue.setSpecific(key: Self.queueKey, value: nil)
    }

    /// The one socket's descriptor, or -1 when there are none or two (`socketFD`). GCDAsyncUdpSocket
    /// answers only inside ``perform(_:)``; here anywhere. Do not close it.
    public func socketFD() -> Int32 {
        state.withLock { state in
            switch (state.socket4, state.socket6) {
            case (let socket?, nil), (nil, let socket?): socket.fd
            default: -1
            }
        }
    }
    /// The IPv4 socket's descriptor, or -1 (`socket4FD`).
    public func socket4FD() -> Int32 { state.withLock { $0.socket4 }?.fd ?? -1 }
    /// The IPv6 socket's descriptor, or -1 (`socket6FD`).
    public func socket6FD() -> Int32 { state.withLock { $0.socket6 }?.fd ?? -1 }

    // MARK: utilities (GCDAsyncUdpSocket.h: "Utilities")

    /// The host of a `sockaddr` `Data` (`hostFromAddress:`).
    public class func host(fromAddress address: Data) -> String? { socketAddress(address)?.host }
    /// Its port, 0 if it is not an IPv4 or IPv6 address (`portFromAddress:`).
    public class func port(fromAddress address: Data) -> UInt16 { UInt16(truncatingIfNeeded: socketAddress(address)?.port ?? 0) }
    /// Its family, `AF_UNSPEC` if it is not an IPv4 or IPv6 address (`familyFromAddress:`).
    public class func family(fromAddress address: Data) -> Int32 { socketAddress(address)?.family ?? AF_UNSPEC }
    /// `isIPv4Address:`.
    public class func isIPv4Address(_ address: Data) -> Bool { socketAddress(address)?.family == AF_INET }
    /// `isIPv6Address:`.
    public class func isIPv6Address(_ address: Data) -> Bool { socketAddress(address)?.family == AF_INET6 }

    /// Host and port of a `sockaddr` `Data`; false if it is not an IPv4 or IPv6 address
    /// (`getHost:port:fromAddress:`).
    @discardableResult
    public class func getHost(
        _ host: AutoreleasingUnsafeMutablePointer<NSString?>?, port: UnsafeMutablePointer<UInt16>?, fromAddress address: Data
    ) -> Bool {
        getHost(host, port: port, family: nil, fromAddress: address)
    }

    /// Host, port and family of a `sockaddr` `Data` (`getHost:port:family:fromAddress:`).
    @discardableResult
    public class func getHost(
        _ host: AutoreleasingUnsafeMutablePointer<NSString?>?, port: UnsafeMutablePointer<UInt16>?,
        family: UnsafeMutablePointer<Int32>?, fromAddress address: Data
    ) -> Bool {
        guard let parsed = socketAddress(address) else { return false }
        host?.pointee = parsed.host as NSString
        port?.pointee = UInt16(truncatingIfNeeded: parsed.port)
        family?.pointee = parsed.family
        return true
    }

    static func socketAddress(_ data: Data) -> SocketAddress? {
        data.withUnsafeBytes { SocketAddress(sockaddrBytes: $0) }
    }
}

/// A receive filter, its queue and how it is called.
struct UdpReceiveFilter {
    let block: GCDAsyncUdpSocketReceiveFilterBlock
    let queue: DispatchQueue
    let isAsynchronous: Bool
}

/// A send filter, its queue and how it is called.
struct UdpSendFilter {
    let block: GCDAsyncUdpSocketSendFilterBlock
    let queue: DispatchQueue
    let isAsynchronous: Bool
}

/// A send or a connect waiting its turn.
struct UdpPacket {
    enum Kind {
        case send(Data, timeout: TimeInterval, tag: Int)
        case connect
    }
    /// Where it goes: nothing said (the connected peer), an address, or a host name's look-up (nil
    /// while it runs; its answer then waits in `UdpState.lookups` until the packet is at the head).
    enum Target {
        case unspecified
        case address(SocketAddress)
        case host(Result<[SocketAddress], NSError>?)
    }
    /// What the send filter said, if there is one.
    enum Filtering {
        case notAsked, asking, passed, dropped
    }
    let id: UInt64
    let kind: Kind
    var target: Target
    var filtering = Filtering.notAsked
}

/// A call to the delegate, carried to its queue: the delegate is used only there.
final class UdpDelegateCall: TurnCall, @unchecked Sendable {
    // @unchecked: built under the socket's lock and then read only by the block that runs it.
    let socket: GCDAsyncUdpSocket
    let delegate: GCDAsyncUdpSocketDelegate
    let call: (GCDAsyncUdpSocket, GCDAsyncUdpSocketDelegate) -> Void

    init(
        _ socket: GCDAsyncUdpSocket, _ delegate: GCDAsyncUdpSocketDelegate,
        _ call: @escaping (GCDAsyncUdpSocket, GCDAsyncUdpSocketDelegate) -> Void
    ) {
        self.socket = socket
        self.delegate = delegate
        self.call = call
    }

    package func run() { call(socket, delegate) }
}

extension GCDAsyncUdpSocket {
    /// Posts `call` to the delegate queue as its own block (or, when the sockets work on that queue, in
    /// a turn of its own), unless the delegate's type leaves every one of `methods` to its default (see
    /// `DelegateDefaults`). Lock held: posts keep the order of the events behind them, whichever thread
    /// saw them.
    static func post(
        _ state: inout UdpState, _ socket: GCDAsyncUdpSocket, unlessDefault methods: DelegateDefaults.Methods = [],
        _ call: @escaping (GCDAsyncUdpSocket, GCDAsyncUdpSocketDelegate) -> Void
    ) {
        guard let delegate = state.delegate, let queue = state.delegateQueue else { return }
        if !methods.isEmpty, DelegateDefaults.leaves(methods, to: delegate, cache: &state.defaults) { return }
        deliver(&state, UdpDelegateCall(socket, delegate, call), on: queue)
    }

    /// Delivers `call` on `queue`: in a turn of its own when the sockets work there, else as a block.
    /// Lock held.
    static func deliver(_ state: inout UdpState, _ call: some TurnCall, on queue: DispatchQueue) {
        if let turns = state.turns, turns.serves(queue) { return turns.enqueue(call) }
        queue.async { call.run() }
    }
}
