// GCDAsyncSocket's state (its room: GCDAsyncSocket.swift is the API and the engine's events): what
// one socket knows, kept small for idle sockets (issue 25). Every value here lives in the socket's
// `state` and is reached only under its lock.

import Foundation
import SocketStreams

extension GCDAsyncSocket {
    /// One connection (outgoing or accepted) and what is known about it. (The fields' order packs the
    /// flags into the addresses' padding; what few connections have is in `extras`: 88 bytes, not 112.)
    struct Link {
        /// The engine, which also holds the pair (the socket's descriptor comes from its input).
        let operations: StreamOperations
        var storedPeer: StoredAddress?
        /// Made by a listening socket: no `didConnectToHost`.
        let accepted: Bool
        var connected = false
        var storedLocal: StoredAddress?
        var readClosedReported = false
        private var extras: LinkExtras?

        init(operations: StreamOperations, url: URL?, accepted: Bool) {
            self.operations = operations
            self.accepted = accepted
            if let url { extras = LinkExtras(url: url) }
        }

        /// A Unix-domain connection: its URL.
        var url: URL? { extras?.url }
        /// A trust question the TLS stage asked before the engine's `ready` reached the socket: held
        /// until `didConnectToHost` is posted, so the delegate hears of the connection first.
        var heldTrust: HeldTrust? {
            get { extras?.heldTrust }
            set {
                if extras == nil, newValue == nil { return }
                let box = extras ?? LinkExtras(url: nil)
                box.heldTrust = newValue
                extras = box
            }
        }

        var peer: Data? { storedPeer?.data }
        var local: Data? { storedLocal?.data }
    }

    /// What few links have: a Unix-domain URL, a held trust question. Reached only through `Link`,
    /// under the state's lock.
    final class LinkExtras {
        let url: URL?
        var heldTrust: HeldTrust?

        init(url: URL?) { self.url = url }
    }

    /// A `sockaddr` kept inline when it fits in 28 bytes (IPv4's 16, IPv6's 28): a `Data` of more
    /// than 14 bytes is an object and a buffer of its own, ~125 bytes per idle connection for the peer's
    /// and the local address together (issue 25). Others (a Unix-domain path) stay a `Data`.
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

    struct State {
        weak var delegate: GCDAsyncSocketDelegate?
        var delegateQueue: DispatchQueue?
        var isIPv4Enabled = true
        var isIPv6Enabled = true
        var isIPv4PreferredOverIPv6 = true
        var autoDisconnectOnClosedReadStream = true
        var tlsQueued = false
        var isSecure = false
        var link: Link?
        /// Reads (their tag and buffer) and writes (their tag) by the id the engine knows them by
        /// (the engine's tag), in the order queued.
        var reads = Pending<ReadInfo>()
        var writes = Pending<Int>()
        var nextID = 1
        /// What few sockets use, allocated when first set.
        private var rare: Rare?

        var userData: Any? {
            get { rare?.userData }
            set { if newValue != nil || rare != nil { rareForWriting().userData = newValue } }
        }
        var alternateAddressDelay: TimeInterval {
            get { rare?.alternateAddressDelay ?? 0.3 }
            set { rareForWriting().alternateAddressDelay = newValue }
        }
        var listener: StreamListener? {
            get { rare?.listener }
            set { if newValue != nil || rare != nil { rareForWriting().listener = newValue } }
        }
        var listenerURL: URL? {
            get { rare?.listenerURL }
            set { if newValue != nil || rare != nil { rareForWriting().listenerURL = newValue } }
        }

        private mutating func rareForWriting() -> Rare {
            if let rare { return rare }
            let made = Rare()
            rare = made
            return made
        }
    }

    /// The state few sockets use (a listener, user data, a changed delay), boxed: a connected socket
    /// that uses none of it holds 8 bytes for it rather than 64 (issue 25). Reached only through
    /// `State`, under its lock.
    final class Rare {
        var userData: Any?
        var alternateAddressDelay: TimeInterval = 0.3
        var listener: StreamListener?
        var listenerURL: URL?
    }

    /// The reads or writes queued on the engine, by engine id, in the order queued. The engine
    /// completes each direction in order, so the one it names is nearly always the first (another only
    /// when two threads queued at once, or the engine refused one); the first is kept inline, so an
    /// idle socket with its one read pending allocates nothing (issue 25: a dictionary for it held
    /// ~130 bytes per idle connection). The rest are an array with a start index, released once empty.
    struct Pending<Info> {
        private var head: (id: Int, info: Info)?
        /// The rest, boxed: an idle socket holds 8 bytes for it, not 16.
        private var overflow: Overflow?

        private final class Overflow {
            var rest: [(id: Int, info: Info)?] = []
            /// Where the rest starts in `rest`.
            var start = 0
        }

        mutating func append(_ id: Int, _ info: Info) {
            guard head != nil else {
                head = (id, info)
                return
            }
            if overflow == nil { overflow = Overflow() }
            overflow?.rest.append((id, info))
        }

        /// The info of operation `id`, if queued.
        func info(_ id: Int) -> Info? {
            if let head, head.id == id { return head.info }
            guard let overflow, overflow.start < overflow.rest.count else { return nil }
            return overflow.rest[overflow.start...].lazy.compactMap { $0 }.first { $0.id == id }?.info
        }

        /// Removes operation `id` and returns its info, if queued.
        mutating func remove(_ id: Int) -> Info? {
            if let head, head.id == id {
                self.head = nil
                guard let overflow else { return head.info }
                while overflow.start < overflow.rest.count, self.head == nil {
                    self.head = overflow.rest[overflow.start].take()
                    overflow.start += 1
                }
                if overflow.start == overflow.rest.count {
                    self.overflow = nil
                } else if overflow.start >= 1024, overflow.start * 2 >= overflow.rest.count {
                    overflow.rest.removeFirst(overflow.start)
                    overflow.start = 0
                }
                return head.info
            }
            guard let overflow, overflow.start < overflow.rest.count,
                let index = overflow.rest[overflow.start...].firstIndex(where: { $0?.id == id })
            else { return nil }
            return overflow.rest[index].take()?.info  // a hole: skipped when it comes first
        }
    }

    /// A read or write for the engine, by its engine id.
    enum EngineOperation {
        case read(ReadRequest, timeout: Double, id: Int)
        case write([UInt8], timeout: Double, id: Int)
    }

    /// Clears what belongs to one connection. Lock held.
    static func reset(_ state: inout State) {
        state.reads = Pending()
        state.writes = Pending()
        state.tlsQueued = false
        state.isSecure = false
    }
}
