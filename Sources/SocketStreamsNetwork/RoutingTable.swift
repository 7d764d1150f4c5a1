// What the kernel's routing socket has said so far, as plain values: the links, their addresses and the
// default routes (`RoutingTable`), and the dumps that keep it whole (`RoutingState`). No I/O: the path
// monitor's center feeds messages in and sends the requests that come out, and a path is computed from
// the table alone (`NWPath.init(table:constraints:resolverConfigured:)`).
//
// Keeping the table true:
// - At start, three dumps in turn (netlink serves one dump at a time per socket): links, addresses,
//   routes (RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE, every family). A dump's records are collected apart
//   and replace that part of the table at its NLMSG_DONE, so a record the kernel no longer has goes.
//   Notifications that arrive meanwhile apply to the table and to the dump being collected.
// - A dump marked NLM_F_DUMP_INTR (the kernel's tables changed under it) is made again.
// - ENOBUFS (the kernel dropped notifications): all three again.
// - The kernel removes IPv4 routes without a word when their link goes down or goes away, or when the
//   address they depend on is deleted: each of those events queues a routes dump.
// - While a dump is under way the table is not published (`isSynchronized` is false), so no path is
//   computed from a half-updated table.
//
// Only default routes (destination length 0) of the main table (RT_TABLE_MAIN) that are unicast are
// kept: a path is about reaching the Internet, and a full routing table can be large. Links seen in a
// protocol's view (an `ifinfomsg` of family AF_INET6 or AF_BRIDGE) only update the flags of a known link:
// a bridge port's RTM_DELLINK of family AF_BRIDGE is a port leaving its bridge, not the link going away.

import Foundation

/// A link as a path sees it: the kernel's record and the kind of interface it is.
package struct PathLink: Equatable, Sendable {
    package var record: LinkRecord
    package var type: NWInterface.InterfaceType

    package init(record: LinkRecord, type: NWInterface.InterfaceType) {
        self.record = record
        self.type = type
    }

    /// Administratively up (IFF_UP) and able to pass traffic (IFF_RUNNING: carrier, operstate up or unknown).
    package var isUp: Bool { record.flags & Netlink.linkUp != 0 && record.flags & Netlink.linkRunning != 0 }
}

/// One next hop of a default route of the main table.
package struct DefaultRoute: Hashable, Sendable {
    package var family: UInt8
    /// The metric (`RTA_PRIORITY`): lower is preferred.
    package var priority: UInt32
    package var interface: Int32
    /// The gateway's 4 or 16 bytes; nil for a route straight onto the link (a point-to-point link).
    package var gateway: [UInt8]?

    package init(family: UInt8, priority: UInt32 = 0, interface: Int32, gateway: [UInt8]? = nil) {
        self.family = family
        self.priority = priority
        self.interface = interface
        self.gateway = gateway
    }
}

/// The links, addresses and default routes the kernel has reported.
package struct RoutingTable: Equatable, Sendable {
    /// An address's identity to the kernel: its link, family, bytes and prefix length.
    package struct AddressKey: Hashable, Sendable {
        var family: UInt8
        var index: Int32
        var prefixLength: UInt8
        var address: [UInt8]
    }

    package var links: [Int32: PathLink] = [:]
    package var addresses: [AddressKey: AddressRecord] = [:]
    package var defaultRoutes: Set<DefaultRoute> = []

    package init() {}

    /// Adds or replaces an address.
    package mutating func insert(_ address: AddressRecord) {
        addresses[Self.key(address)] = address
    }

    static func key(_ address: AddressRecord) -> AddressKey {
        AddressKey(family: address.family, index: address.index, prefixLength: address.prefixLength, address: address.address)
    }

    /// The routes a route record contributes: one per next hop, when it is a unicast default route of the
    /// main table.
    static func defaultRoutes(of route: RouteRecord) -> [DefaultRoute] {
        guard route.destinationLength == 0, route.table == Netlink.tableMain, route.type == Netlink.routeUnicast else { return [] }
        return route.nextHops.map {
            DefaultRoute(family: route.family, priority: route.priority, interface: $0.interface, gateway: $0.gateway)
        }
    }

    /// Applies one record. `classify` names a new or changed link's kind (sysfs in production). Returns
    /// true when the kernel may have removed IPv4 routes silently (see the file's header): a link went
    /// down, stopped running or went away, or an IPv4 address was deleted.
    @discardableResult
    package mutating func apply(
        _ body: RoutingMessageBody, flags: UInt16 = 0, classify: (LinkRecord) -> NWInterface.InterfaceType
    ) -> Bool {
        switch body {
        case .link(let record, let removed):
            guard record.family == Netlink.familyUnspecified else {
                // A protocol's view of the link: its flags, nothing else, and never a removal.
                if !removed, var link = links[record.index], link.record.flags != record.flags {
                    let wasUp = link.isUp
                    link.record.flags = record.flags
                    links[record.index] = link
                    return wasUp && !link.isUp
                }
                return false
            }
            if removed {
                guard links.removeValue(forKey: record.index) != nil else { return false }
                addresses = addresses.filter { $0.key.index != record.index }
                defaultRoutes = defaultRoutes.filter { $0.interface != record.index }
                return true
            }
            let old = links[record.index]
            var record = record
            // A later message without IFLA_LINKINFO says nothing of the kind: keep the one known.
            if record.kind == nil, let old, old.record.name == record.name { record.kind = old.record.kind }
            let type =
                old.map { $0.record.name == record.name && $0.record.kind == record.kind && $0.record.hardwareType == record.hardwareType }
                    == true ? old!.type : classify(record)
            let link = PathLink(record: record, type: type)
            links[record.index] = link
            return (old?.isUp ?? false) && !link.isUp
        case .address(let address, let removed):
            if removed {
                return addresses.removeValue(forKey: Self.key(address)) != nil && address.family == Netlink.familyIPv4
            }
            insert(address)
            return false
        case .route(let route, let removed):
            let routes = Self.defaultRoutes(of: route)
            if removed {
                for entry in routes { defaultRoutes.remove(entry) }
            } else {
                // NLM_F_REPLACE: the route took the place of the one with its family and metric.
                if flags & 0x100 != 0, !routes.isEmpty {
                    defaultRoutes = defaultRoutes.filter { $0.family != route.family || $0.priority != route.priority }
                }
                defaultRoutes.formUnion(routes)
            }
            return false
        case .done, .error, .other:
            return false
        }
    }
}

/// One of the three dumps.
package enum DumpKind: Equatable, Sendable, CaseIterable {
    case links, addresses, routes

    var requestType: UInt16 {
        switch self {
        case .links: Netlink.getLink
        case .addresses: Netlink.getAddress
        case .routes: Netlink.getRoute
        }
    }

    func covers(_ body: RoutingMessageBody) -> Bool {
        switch (self, body) {
        case (.links, .link), (.addresses, .address), (.routes, .route): true
        default: false
        }
    }
}

/// A dump to ask the kernel for: send `bytes`.
package struct DumpRequest: Equatable, Sendable {
    package var kind: DumpKind
    package var sequence: UInt32

    package init(kind: DumpKind, sequence: UInt32) {
        self.kind = kind
        self.sequence = sequence
    }

    package var bytes: [UInt8] { RoutingMessageParser.dumpRequest(type: kind.requestType, sequence: sequence) }
}

/// The table and the dumps that keep it whole (see the file's header). Every input returns the dump to
/// ask for now, if one should start.
package struct RoutingState: Sendable {
    package private(set) var table = RoutingTable()
    /// Malformed messages skipped so far, and dump answers that were errors.
    package private(set) var errors = 0
    /// The first three dumps are done.
    package private(set) var hasSynchronized = false
    /// The socket's port id: the answers to its dumps carry it.
    package let port: UInt32

    private struct Dump: Sendable {
        var kind: DumpKind
        var sequence: UInt32
        var collected = RoutingTable()
        var interrupted = false
    }

    private var current: Dump?
    private var queued: [DumpKind] = []
    private var failures: [DumpKind: Int] = [:]
    private var sequence: UInt32
    private var started = false

    /// A dump whose answer is an error is asked for again this many times, then given up (the part of
    /// the table it would have replaced stays as it is).
    static let dumpAttempts = 3

    package init(port: UInt32, firstSequence: UInt32 = 1) {
        self.port = port
        sequence = firstSequence
    }

    /// Nothing is being dumped or waiting to be, and the first dumps are done: the table may be published.
    package var isSynchronized: Bool { hasSynchronized && current == nil && queued.isEmpty }

    /// The dump in progress (tests).
    package var dumping: DumpKind? { current?.kind }

    /// The first dumps.
    package mutating func start() -> DumpRequest? {
        started = true
        enqueue(DumpKind.allCases)
        return next()
    }

    /// The kernel dropped notifications (ENOBUFS): everything again, the dump in progress included.
    package mutating func lostMessages() -> DumpRequest? {
        current?.interrupted = true
        enqueue(DumpKind.allCases)
        return next()
    }

    /// The request for the dump in progress could not be sent: it waits in front of the queue, for `resume`.
    package mutating func requestFailed() {
        guard let dump = current else { return }
        current = nil
        queued.removeAll { $0 == dump.kind }
        queued.insert(dump.kind, at: 0)
    }

    /// The next dump, if none is in progress (after `requestFailed`).
    package mutating func resume() -> DumpRequest? { next() }

    /// Parsed messages of one datagram, and its malformed count.
    package mutating func handle(_ datagram: ParsedDatagram, classify: (LinkRecord) -> NWInterface.InterfaceType) -> DumpRequest? {
        errors += datagram.malformed
        var request: DumpRequest?
        for message in datagram.messages {
            if let next = handle(message, classify: classify) { request = next }
        }
        return request
    }

    /// One message.
    package mutating func handle(_ message: RoutingMessage, classify: (LinkRecord) -> NWInterface.InterfaceType) -> DumpRequest? {
        if var dump = current, message.header.port == port, message.header.sequence == dump.sequence {
            if message.header.flags & Netlink.dumpInterrupted != 0 { dump.interrupted = true }
            switch message.body {
            case .done:
                current = nil
                finish(dump)
                return next()
            case .error(let code) where code != 0:
                current = nil
                errors += 1
                failures[dump.kind, default: 0] += 1
                if failures[dump.kind, default: 0] < Self.dumpAttempts { queued.insert(dump.kind, at: 0) }
                return next()
            default:
                if dump.kind.covers(message.body) { dump.collected.apply(message.body, flags: message.header.flags, classify: classify) }
                current = dump
                return nil
            }
        }
        let resync = table.apply(message.body, flags: message.header.flags, classify: classify)
        if var dump = current, dump.kind.covers(message.body) {
            dump.collected.apply(message.body, flags: message.header.flags, classify: classify)
            current = dump
        }
        if resync { enqueue([.routes]) }
        return next()
    }

    private mutating func enqueue(_ kinds: [DumpKind]) {
        for kind in kinds where !queued.contains(kind) { queued.append(kind) }
    }

    private mutating func finish(_ dump: Dump) {
        if dump.interrupted {
            queued.removeAll { $0 == dump.kind }
            queued.insert(dump.kind, at: 0)
            return
        }
        failures[dump.kind] = nil
        switch dump.kind {
        case .links:
            table.links = dump.collected.links
            table.addresses = table.addresses.filter { table.links[$0.key.index] != nil }
            table.defaultRoutes = table.defaultRoutes.filter { table.links[$0.interface] != nil }
        case .addresses:
            table.addresses = dump.collected.addresses
        case .routes:
            table.defaultRoutes = dump.collected.defaultRoutes
        }
    }

    private mutating func next() -> DumpRequest? {
        guard current == nil else { return nil }
        guard !queued.isEmpty else {
            if started { hasSynchronized = true }
            return nil
        }
        let kind = queued.removeFirst()
        sequence &+= 1
        if sequence == 0 { sequence = 1 }
        current = Dump(kind: kind, sequence: sequence)
        return DumpRequest(kind: kind, sequence: sequence)
    }
}
