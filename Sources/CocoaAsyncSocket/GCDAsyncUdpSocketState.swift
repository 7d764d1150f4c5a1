// What a GCDAsyncUdpSocket knows under its lock (`UdpState`, with its rarely used part boxed), and the
// queue and caches it keeps there.

import Foundation
import SocketStreams

/// How a look-up's answer is picked (`setPreferIPv4` …).
enum UdpPreference {
    case neutral, ipv4, ipv6
}

/// What a ``GCDAsyncUdpSocket`` knows, under its lock.
struct UdpState {
    weak var delegate: GCDAsyncUdpSocketDelegate?
    var delegateQueue: DispatchQueue?
    var userData: Any? {
        get { rare?.userData }
        set { updateRare { $0.userData = newValue } }
    }
    var ipv4Enabled = true
    var ipv6Enabled = true
    var preference = UdpPreference.neutral
    var maxReceive4: UInt16 = 65_535
    var maxReceive6: UInt32 = 65_535
    var maxSend: UInt16 = 65_535

    /// The delegate queue's turns, when the sockets work on it (`GCDAsyncUdpSocket.owner`).
    var turns: DelegateTurns?

    /// The datagram sockets, made on first use (a bind, a connect, an option, the first send).
    var socket4: DatagramSocket?
    var socket6: DatagramSocket?
    /// A bind or connect used the other family only: this one may not send.
    var deactivated4 = false
    var deactivated6 = false
    var bound = false
    /// Bound by `bind`, `connect` or a completed send: the local address is known.
    var didBind = false
    var connecting = false
    var connected = false
    var closeAfterSending = false
    /// The owner has been chosen (kept across closes).
    var ownerChosen = false
    // (The one-byte fields stay together: Swift lays a struct out in the order written.)
    /// The peer of the last successful connect (kept after a close, as GCDAsyncUdpSocket keeps it).
    var connectedAddress: SocketAddress? {
        get { rare?.connectedAddress }
        set { updateRare { $0.connectedAddress = newValue } }
    }

    var receiving = DatagramReceiveMode.paused
    /// The last sender's address as `Data`.
    var senders = UdpSenderCache()
    var receiveFilter: UdpReceiveFilter? {
        get { rare?.receiveFilter }
        set { updateRare { $0.receiveFilter = newValue } }
    }
    var sendFilter: UdpSendFilter? {
        get { rare?.sendFilter }
        set { updateRare { $0.sendFilter = newValue } }
    }
    /// Delegate calls for datagrams whose async receive filter has not answered.
    var filtersPending: Int {
        get { rare?.filtersPending ?? 0 }
        set { updateRare { $0.filtersPending = newValue } }
    }

    /// What the delegate's type leaves to the defaults, as last read.
    var defaults = DelegateDefaults.Cache()
    /// The last host a send named that needed no look-up, with its addresses.
    var numericHosts = UdpNumericHostCache()
    /// Sends and connects not yet handed to a datagram socket, in call order.
    var packets = UdpPacketQueue()
    var nextPacketID: UInt64 = 1
    /// Look-up answers for packets not yet at the head, by packet id.
    /// Keeps the answer for packet `id`.
    mutating func keepLookup(_ answer: Result<[SocketAddress], NSError>, for id: UInt64) { updateRare { $0.lookups[id] = answer } }
    /// Takes the answer for packet `id`, if it has come.
    mutating func takeLookup(for id: UInt64) -> Result<[SocketAddress], NSError>? {
        guard rare?.lookups[id] != nil else { return nil }
        var answer: Result<[SocketAddress], NSError>?
        updateRare { answer = $0.lookups.removeValue(forKey: id) }
        return answer
    }
    /// Drops every answer kept.
    mutating func dropLookups() { if rare != nil { updateRare { $0.lookups = [:] } } }
    /// Datagrams handed to `inFlightSocket` whose outcome has not come back.
    var inFlight = 0
    var inFlightSocket: DatagramSocket?
    /// One thread at a time hands packets to the datagram sockets (`advance`).
    var dispatcher = SerialRunner()
    /// Counts closes: a filter's answer from before the last one is dropped.
    var generation: UInt64 = 0

    /// What few sockets use (filters, `userData`, look-ups waiting for their packet, a connected peer), boxed: a socket
    /// that uses none of it holds 8 bytes for it. Reached only through `UdpState`, under its lock.
    final class Rare {
        var userData: Any?
        var receiveFilter: UdpReceiveFilter?
        var sendFilter: UdpSendFilter?
        /// Delegate calls for datagrams whose async receive filter has not answered.
        var filtersPending = 0
        var lookups: [UInt64: Result<[SocketAddress], NSError>] = [:]
        /// The peer of the last successful connect (kept after a close, as GCDAsyncUdpSocket keeps it).
        var connectedAddress: SocketAddress?

        var isUnused: Bool {
            userData == nil && receiveFilter == nil && sendFilter == nil && filtersPending == 0 && lookups.isEmpty
                && connectedAddress == nil
        }
    }
    private var rare: Rare?

    private mutating func updateRare(_ change: (Rare) -> Void) {
        let rare = self.rare ?? Rare()
        change(rare)
        self.rare = rare.isUnused ? nil : rare
    }

    /// Sockets let go of under the lock, closed once it is released (`GCDAsyncUdpSocket.update`): a
    /// close on the socket's owner runs at once, and must not run under this lock.
    var dropped: [DatagramSocket] = []

    /// The socket of `family`.
    func socket(_ family: Int32) -> DatagramSocket? { family == AF_INET ? socket4 : socket6 }

    /// Lets go of the socket of `family`, to be closed after the lock.
    mutating func drop(_ family: Int32) {
        if family == AF_INET, let socket = socket4 {
            dropped.append(socket)
            socket4 = nil
        } else if family == AF_INET6, let socket = socket6 {
            dropped.append(socket)
            socket6 = nil
        }
    }
    /// Whether `socket` is one of this socket's current ones.
    func owns(_ socket: DatagramSocket) -> Bool { socket4 === socket || socket6 === socket }
}

/// The queue of sends and connects (`UdpState.packets`). Its own type rather than the engine's `FIFO`:
/// a generic of SocketStreams used from this module runs unspecialised, looking up its element's metadata
/// on every call (about 9 % of a ping-pong round trip). The first packet is held inline, so one at a time
/// allocates nothing; the rest wait in an array read from `next`, compacted once half of it is read.
struct UdpPacketQueue {
    private var head: UdpPacket?
    private var waiting: [UdpPacket] = []
    private var next = 0

    var first: UdpPacket? { head }
    var isEmpty: Bool { head == nil }

    mutating func append(_ packet: UdpPacket) {
        if head == nil { head = packet } else { waiting.append(packet) }
    }

    /// Replaces the first packet (which must exist).
    mutating func replaceFirst(_ packet: UdpPacket) { head = packet }

    mutating func removeFirst() {
        guard next < waiting.count else {
            head = nil
            return
        }
        head = waiting[next]
        next += 1
        if next == waiting.count {
            waiting = []
            next = 0
        } else if next >= 1024, next * 2 >= waiting.count {
            waiting.removeFirst(next)
            next = 0
        }
    }

    mutating func removeAll() { self = UdpPacketQueue() }
}

/// The addresses of the last numeric host (or `localhost`) a send named: a flow of datagrams names
/// one host, which is then parsed once rather than once a datagram.
struct UdpNumericHostCache {
    private var host = ""
    private var port: UInt16 = 0
    private var addresses: [SocketAddress]?

    /// `DatagramSocket.addressesWithoutLookup`, remembered for the last host.
    mutating func addresses(host: String, port: UInt16) -> [SocketAddress]? {
        if let addresses, port == self.port, host == self.host { return addresses }
        guard let found = DatagramSocket.addressesWithoutLookup(host: host, port: Int(port)) else { return nil }
        (self.host, self.port, addresses) = (host, port, found)
        return found
    }
}
