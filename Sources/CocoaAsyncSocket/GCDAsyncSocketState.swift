// GCDAsyncSocket's state (its room: GCDAsyncSocket.swift and its GCDAsyncSocket+*.swift sections are
// the API and the engine's events): what one socket knows, kept small for idle sockets. Every value
// here lives in the socket's `state` and is reached only under its lock.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension GCDAsyncSocket {
    /// One connection (outgoing or accepted) and what is known about it: 23 bytes. An IPv4
    /// connection's addresses are inline (`ipv4`); what fewer connections have (other addresses, a
    /// Unix-domain URL, a held trust question) is in the state's `Rare` box (the two addresses inline
    /// as `sockaddr`s, and a pointer to a box of their own, made a link several times as large).
    struct Link {
        /// The engine, which also holds the pair (the socket's descriptor comes from its input).
        let operations: StreamOperations
        /// Both ends' addresses when both are IPv4; else `IPv4Pair.none` (see `State.peer`).
        var ipv4 = IPv4Pair.none
        /// Made by a listening socket: no `didConnectToHost`.
        let accepted: Bool
        var connected = false
        var readClosedReported = false

        init(operations: StreamOperations, accepted: Bool) {
            self.operations = operations
            self.accepted = accepted
        }
    }

    /// An IPv4 connection's peer and local `sockaddr_in`, in 12 bytes: such an address holds nothing
    /// but its address and port (its family is known, its padding zero), so both are kept as those
    /// and rebuilt byte for byte. Both in network byte order, as in the `sockaddr_in`. All zero is
    /// `none` (a connection's ports are never 0).
    struct IPv4Pair {
        let peerAddress: UInt32
        let localAddress: UInt32
        let peerPort: UInt16
        let localPort: UInt16

        static let none = IPv4Pair(peerAddress: 0, localAddress: 0, peerPort: 0, localPort: 0)

        var isNone: Bool { peerPort == 0 }

        private init(peerAddress: UInt32, localAddress: UInt32, peerPort: UInt16, localPort: UInt16) {
            self.peerAddress = peerAddress
            self.localAddress = localAddress
            self.peerPort = peerPort
            self.localPort = localPort
        }

        /// nil unless both are a `sockaddr_in` (16 bytes, `AF_INET`, zero padding) with a port.
        init?(peer: Data?, local: Data?) {
            guard let peer, let local, let (peerAddress, peerPort) = Self.parts(peer), let (localAddress, localPort) = Self.parts(local)
            else { return nil }
            self.init(peerAddress: peerAddress, localAddress: localAddress, peerPort: peerPort, localPort: localPort)
        }

        private static func parts(_ address: Data) -> (UInt32, UInt16)? {
            guard address.count == MemoryLayout<sockaddr_in>.size else { return nil }
            return address.withUnsafeBytes { bytes -> (UInt32, UInt16)? in
                let sin = bytes.loadUnaligned(as: sockaddr_in.self)
                guard Int32(sin.sin_family) == AF_INET, sin.sin_port != 0, bytes[8...].allSatisfy({ $0 == 0 }) else { return nil }
                return (sin.sin_addr.s_addr, sin.sin_port)
            }
        }

        static func sockaddr(_ address: UInt32, _ port: UInt16) -> Data {
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port
            sin.sin_addr.s_addr = address
            return withUnsafeBytes(of: &sin) { Data($0) }
        }
    }

    /// A `sockaddr` of a link that is not IPv4 at both ends (in the state's `Rare`), kept inline when it
    /// fits in 28 bytes (IPv4's 16, IPv6's 28): a `Data` of more than 14 bytes is an object and a
    /// buffer of its own, which every idle connection would hold for the peer's and for the local
    /// address. Others (a Unix-domain path) stay a `Data`.
    enum StoredAddress {
        case inline(bytes: (UInt64, UInt64, UInt64, UInt32), count: UInt8)
        case data(Data)

        init(_ data: Data) {
            var bytes: (UInt64, UInt64, UInt64, UInt32) = (0, 0, 0, 0)
            guard data.count <= MemoryLayout.size(ofValue: bytes) else {
                self = .data(data)
                return
            }
            _ = withUnsafeMutableBytes(of: &bytes) { data.copyBytes(to: $0) }
            self = .inline(bytes: bytes, count: UInt8(data.count))
        }

        var data: Data {
            switch self {
            case .inline(let bytes, let count): return withUnsafeBytes(of: bytes) { Data($0.prefix(Int(count))) }
            case .data(let data): return data
            }
        }
    }

    /// The TLS stage's trust question and how to answer it (a class: a link holds one only while a
    /// question waits, so it costs a link 8 bytes rather than 24).
    final class HeldTrust: Sendable {
        let trust: TLSPeerTrust
        let completion: @Sendable (Bool) -> Void

        init(trust: TLSPeerTrust, completion: @escaping @Sendable (Bool) -> Void) {
            self.trust = trust
            self.completion = completion
        }
    }

    /// A queued read: its tag and the caller's buffer.
    struct ReadInfo {
        let tag: Int
        /// The caller's buffer and where in it, boxed: most reads have none (8 bytes here, not 16).
        private let target: Target?

        init(tag: Int, buffer: NSMutableData?, offset: Int) {
            self.tag = tag
            target = buffer.map { Target(buffer: $0, offset: offset) }
        }

        var buffer: NSMutableData? { target?.buffer }
        var offset: Int { target?.offset ?? 0 }

        private final class Target {
            let buffer: NSMutableData
            let offset: Int

            init(buffer: NSMutableData, offset: Int) {
                self.buffer = buffer
                self.offset = offset
            }
        }
    }

    /// Every socket's state: 96 bytes, in a guarded allocation of 16 + 96 + 40 (a 160-byte malloc
    /// chunk; see GCDAsyncSocketLayoutTests). Swift lays the fields out as declared, in this order with
    /// no padding. What few sockets use is in `rare`.
    struct State {
        weak var delegate: GCDAsyncSocketDelegate?
        var delegateQueue: DispatchQueue?
        /// What few sockets use, allocated when first needed and released once unused again.
        private var rare: Rare?
        var link: Link?
        var isIPv4Enabled = true
        var isIPv6Enabled = true
        var isIPv4PreferredOverIPv6 = true
        var autoDisconnectOnClosedReadStream = true
        var tlsQueued = false
        var isSecure = false
        /// The first queued read (its tag and buffer) and write (its tag), by the id the engine knows
        /// them by (the engine's tag, 1 to `UInt32.max`: see `GCDAsyncSocket.takeID`); the rest, in
        /// the order queued, in `rare`. The engine completes each direction in order, so the one it
        /// names is nearly always the first (another only when two threads queued at once, or the
        /// engine refused one): an idle socket with its one read pending allocates nothing for it
        /// (a dictionary allocated its storage). Kept as 32-bit ids, and the write's as two fields
        /// (id 0: none), so that they fill 32 bytes.
        private var readHead: (info: ReadInfo, id: UInt32)?
        private var writeHeadID: UInt32 = 0
        private var writeHeadTag = 0

        private var readsHead: (id: Int, info: ReadInfo)? {
            get { readHead.map { (Int($0.id), $0.info) } }
            set { readHead = newValue.map { (info: $0.info, id: UInt32(truncatingIfNeeded: $0.id)) } }
        }
        private var writesHead: (id: Int, info: Int)? {
            get { writeHeadID == 0 ? nil : (Int(writeHeadID), writeHeadTag) }
            set {
                writeHeadID = newValue.map { UInt32(truncatingIfNeeded: $0.id) } ?? 0
                writeHeadTag = newValue?.info ?? 0
            }
        }

        var userData: Any? {
            get { rare?.userData }
            set { updateRare { $0.userData = newValue } }
        }
        var alternateAddressDelay: TimeInterval {
            get { rare?.alternateAddressDelay ?? Rare.defaultDelay }
            set { updateRare { $0.alternateAddressDelay = newValue } }
        }
        var listener: StreamListener? {
            get { rare?.listener }
            set { updateRare { $0.listener = newValue } }
        }
        var listenerURL: URL? {
            get { rare?.listenerURL }
            set { updateRare { $0.listenerURL = newValue } }
        }

        // MARK: the link's rarer facts (nil without a link: `reset` clears them with it)

        /// A Unix-domain connection: its URL.
        var linkURL: URL? {
            get { rare?.linkURL }
            set { updateRare { $0.linkURL = newValue } }
        }
        /// A trust question the TLS stage asked before the engine's `ready` reached the socket: held
        /// until `didConnectToHost` is posted, so the delegate hears of the connection first.
        var heldTrust: HeldTrust? {
            get { rare?.heldTrust }
            set { updateRare { $0.heldTrust = newValue } }
        }
        /// The peer's `sockaddr` (`getpeername`), as `setAddresses` was given it.
        var peer: Data? {
            guard let link else { return nil }
            if !link.ipv4.isNone { return IPv4Pair.sockaddr(link.ipv4.peerAddress, link.ipv4.peerPort) }
            return rare?.peer?.data
        }
        /// The local `sockaddr` (`getsockname`), as `setAddresses` was given it.
        var local: Data? {
            guard let link else { return nil }
            if !link.ipv4.isNone { return IPv4Pair.sockaddr(link.ipv4.localAddress, link.ipv4.localPort) }
            return rare?.local?.data
        }

        /// Keeps the link's two addresses: inline when both are IPv4, else in `rare`.
        mutating func setAddresses(peer: Data?, local: Data?) {
            guard link != nil else { return }
            let pair = IPv4Pair(peer: peer, local: local)
            link?.ipv4 = pair ?? .none
            guard pair == nil || rare != nil else { return }  // IPv4, nothing boxed: no box to make
            updateRare { rare in
                rare.peer = pair == nil ? peer.map(StoredAddress.init) : nil
                rare.local = pair == nil ? local.map(StoredAddress.init) : nil
            }
        }

        // MARK: the queued reads and writes

        mutating func appendRead(_ id: Int, _ info: ReadInfo) {
            guard readsHead != nil else {
                readsHead = (id, info)
                return
            }
            rareForWriting().reads.append(id, info)
        }

        mutating func appendWrite(_ id: Int, tag: Int) {
            guard writesHead != nil else {
                writesHead = (id, tag)
                return
            }
            rareForWriting().writes.append(id, tag)
        }

        /// The read `id`, if queued.
        func readInfo(_ id: Int) -> ReadInfo? {
            if let readsHead, readsHead.id == id { return readsHead.info }
            return rare?.reads.info(id)
        }

        /// The tag of write `id`, if queued.
        func writeTag(_ id: Int) -> Int? {
            if let writesHead, writesHead.id == id { return writesHead.info }
            return rare?.writes.info(id)
        }

        /// Removes the read `id` and returns it, if queued.
        mutating func removeRead(_ id: Int) -> ReadInfo? {
            let rare = rare
            let removed = Self.remove(id, &readsHead, rare, \.reads)
            releaseRareIfUnused()
            return removed
        }

        /// Removes the write `id` and returns its tag, if queued.
        mutating func removeWrite(_ id: Int) -> Int? {
            let rare = rare
            let removed = Self.remove(id, &writesHead, rare, \.writes)
            releaseRareIfUnused()
            return removed
        }

        private static func remove<Info>(
            _ id: Int, _ head: inout (id: Int, info: Info)?, _ rare: Rare?, _ rest: ReferenceWritableKeyPath<Rare, Rest<Info>>
        ) -> Info? {
            if let first = head, first.id == id {
                head = rare?[keyPath: rest].popFirst()
                return first.info
            }
            return rare?[keyPath: rest].remove(id)
        }

        /// Clears what belongs to one connection (lock held): its queued reads and writes, its TLS
        /// state and its rarer facts.
        mutating func reset() {
            readHead = nil
            writesHead = nil
            tlsQueued = false
            isSecure = false
            if let rare {
                rare.reads = Rest()
                rare.writes = Rest()
                rare.linkURL = nil
                rare.heldTrust = nil
                rare.peer = nil
                rare.local = nil
            }
            releaseRareIfUnused()
        }

        /// Changes the box, made if need be, and releases it if the change left it unused.
        private mutating func updateRare(_ change: (Rare) -> Void) {
            change(rareForWriting())
            releaseRareIfUnused()
        }

        private mutating func rareForWriting() -> Rare {
            if let rare { return rare }
            let made = Rare()
            rare = made
            return made
        }

        private mutating func releaseRareIfUnused() {
            if let rare, rare.isUnused { self.rare = nil }
        }
    }

    /// What few sockets use (a listener, user data, a changed delay), what few links have (addresses
    /// that are not both IPv4, a Unix-domain URL, a held trust question) and the reads and writes
    /// queued behind the first, boxed: a socket that uses none of it holds 8 bytes for it.
    /// Reached only through `State`, under its lock.
    final class Rare {
        static let defaultDelay: TimeInterval = 0.3

        var userData: Any?
        var alternateAddressDelay = defaultDelay
        var listener: StreamListener?
        var listenerURL: URL?
        var linkURL: URL?
        var heldTrust: HeldTrust?
        var peer: StoredAddress?
        var local: StoredAddress?
        var reads = Rest<ReadInfo>()
        var writes = Rest<Int>()

        var isUnused: Bool {
            userData == nil && alternateAddressDelay == Self.defaultDelay && listener == nil && listenerURL == nil && linkURL == nil
                && heldTrust == nil && peer == nil && local == nil && reads.isEmpty && writes.isEmpty
        }
    }

    /// The reads or writes queued behind the first, by engine id, in the order queued: an array with
    /// a start index (a removal from the front costs O(1)); a removal from inside leaves a hole,
    /// skipped when it comes first.
    struct Rest<Info> {
        private var items: [(id: Int, info: Info)?] = []
        /// Where the rest starts in `items`.
        private var start = 0

        var isEmpty: Bool { start == items.count }

        mutating func append(_ id: Int, _ info: Info) { items.append((id, info)) }

        func info(_ id: Int) -> Info? {
            guard start < items.count else { return nil }
            return items[start...].lazy.compactMap { $0 }.first { $0.id == id }?.info
        }

        /// Removes operation `id` (a hole) and returns its info, if queued.
        mutating func remove(_ id: Int) -> Info? {
            guard start < items.count, let index = items[start...].firstIndex(where: { $0?.id == id }) else { return nil }
            let removed = items[index].take()?.info
            if index == start { skipHoles() }
            return removed
        }

        /// Takes the first queued (the new head), skipping holes; nil when none is left.
        mutating func popFirst() -> (id: Int, info: Info)? {
            while start < items.count {
                let first = items[start].take()
                start += 1
                if let first {
                    compact()
                    return first
                }
            }
            compact()
            return nil
        }

        /// Drops the holes at the front.
        private mutating func skipHoles() {
            while start < items.count, items[start] == nil { start += 1 }
            compact()
        }

        /// Releases the storage once empty; drops the taken front once it is at least half of it.
        private mutating func compact() {
            if start == items.count {
                if !items.isEmpty { self = Rest() }
            } else if start >= 1024, start * 2 >= items.count {
                items.removeFirst(start)
                start = 0
            }
        }
    }

    /// A read or write for the engine, by its engine id.
    enum EngineOperation {
        case read(ReadRequest, timeout: Double, id: Int)
        case write(WriteBytes, timeout: Double, id: Int)
    }
}
