// rtnetlink's wire format, as a pure parser: a datagram from a `NETLINK_ROUTE` socket in, typed records
// out, nothing read from the system. The layouts are the kernel's ABI (`linux/netlink.h`,
// `linux/rtnetlink.h`, `linux/if_link.h`, `linux/if_addr.h`), in host byte order, every header and
// attribute padded to 4 bytes:
//
//     nlmsghdr  (16)  len u32 · type u16 · flags u16 · seq u32 · pid u32
//     ifinfomsg (16)  family u8 · pad u8 · type u16 (ARPHRD_*) · index i32 · flags u32 (IFF_*) · change u32
//     ifaddrmsg  (8)  family u8 · prefixlen u8 · flags u8 · scope u8 · index u32
//     rtmsg     (12)  family u8 · dst_len u8 · src_len u8 · tos u8 · table u8 · protocol u8 · scope u8 · type u8 · flags u32
//     rtattr     (4)  len u16 · type u16, then len - 4 bytes of value
//     rtnexthop  (8)  len u16 · flags u8 · hops u8 · ifindex i32, then attributes (inside RTA_MULTIPATH)
//
// Bounds: every length is checked against what is left before anything is read, so no input can read
// outside the datagram. A message whose length is impossible (under 16 bytes, or past the datagram's
// end) ends the datagram, since nothing after it can be found; a message whose body or attributes do
// not fit is skipped. Either way one error is counted, and the messages before it are kept. Unknown
// message types and attributes are skipped silently, as the kernel's ABI promises new ones.
//
// Glibc's module does not carry these headers, so the constants are spelled here, by their C names.

import Foundation

/// rtnetlink's constants, by their C names.
package enum Netlink {
    package static let routeProtocol: Int32 = 0  // NETLINK_ROUTE
    // Multicast groups (RTMGRP_*).
    package static let groupLink: UInt32 = 0x1
    package static let groupIPv4Address: UInt32 = 0x10
    package static let groupIPv4Route: UInt32 = 0x40
    package static let groupIPv6Address: UInt32 = 0x100
    package static let groupIPv6Route: UInt32 = 0x400
    /// Every group a path monitor listens to.
    package static let pathGroups = groupLink | groupIPv4Address | groupIPv6Address | groupIPv4Route | groupIPv6Route

    // Message types.
    package static let noop: UInt16 = 1  // NLMSG_NOOP
    package static let error: UInt16 = 2  // NLMSG_ERROR
    package static let done: UInt16 = 3  // NLMSG_DONE
    package static let overrun: UInt16 = 4  // NLMSG_OVERRUN
    package static let newLink: UInt16 = 16  // RTM_NEWLINK
    package static let deleteLink: UInt16 = 17  // RTM_DELLINK
    package static let getLink: UInt16 = 18  // RTM_GETLINK
    package static let newAddress: UInt16 = 20  // RTM_NEWADDR
    package static let deleteAddress: UInt16 = 21  // RTM_DELADDR
    package static let getAddress: UInt16 = 22  // RTM_GETADDR
    package static let newRoute: UInt16 = 24  // RTM_NEWROUTE
    package static let deleteRoute: UInt16 = 25  // RTM_DELROUTE
    package static let getRoute: UInt16 = 26  // RTM_GETROUTE

    // Header flags.
    package static let request: UInt16 = 0x1  // NLM_F_REQUEST
    package static let multi: UInt16 = 0x2  // NLM_F_MULTI
    package static let dumpInterrupted: UInt16 = 0x10  // NLM_F_DUMP_INTR
    package static let dump: UInt16 = 0x300  // NLM_F_ROOT | NLM_F_MATCH

    // Attributes.
    static let linkName: UInt16 = 3  // IFLA_IFNAME
    static let linkInfo: UInt16 = 18  // IFLA_LINKINFO (nested)
    static let linkInfoKind: UInt16 = 1  // IFLA_INFO_KIND
    static let addressAddress: UInt16 = 1  // IFA_ADDRESS
    static let addressLocal: UInt16 = 2  // IFA_LOCAL
    static let addressFlags: UInt16 = 8  // IFA_FLAGS (32 bits; the header's 8 are its low byte)
    static let routeDestination: UInt16 = 1  // RTA_DST
    static let routeOutput: UInt16 = 4  // RTA_OIF
    static let routeGateway: UInt16 = 5  // RTA_GATEWAY
    static let routePriority: UInt16 = 6  // RTA_PRIORITY
    static let routeMultipath: UInt16 = 9  // RTA_MULTIPATH
    static let routeTable: UInt16 = 15  // RTA_TABLE
    static let routeVia: UInt16 = 18  // RTA_VIA
    /// An attribute type's flag bits (NLA_F_NESTED, NLA_F_NET_BYTEORDER), masked off.
    static let attributeTypeMask: UInt16 = 0x3FFF

    // Values.
    package static let familyUnspecified: UInt8 = 0  // AF_UNSPEC
    package static let familyIPv4: UInt8 = 2  // AF_INET
    package static let familyIPv6: UInt8 = 10  // AF_INET6
    package static let familyBridge: UInt8 = 7  // AF_BRIDGE
    package static let linkUp: UInt32 = 0x1  // IFF_UP
    package static let linkLoopback: UInt32 = 0x8  // IFF_LOOPBACK
    package static let linkRunning: UInt32 = 0x40  // IFF_RUNNING
    package static let addressTentative: UInt32 = 0x40  // IFA_F_TENTATIVE
    package static let addressDADFailed: UInt32 = 0x08  // IFA_F_DADFAILED
    package static let scopeLink: UInt8 = 253  // RT_SCOPE_LINK
    package static let tableMain: UInt32 = 254  // RT_TABLE_MAIN
    package static let routeUnicast: UInt8 = 1  // RTN_UNICAST
    package static let hardwareEthernet: UInt16 = 1  // ARPHRD_ETHER
    package static let hardwareRawIP: UInt16 = 519  // ARPHRD_RAWIP
    package static let hardwareLoopback: UInt16 = 772  // ARPHRD_LOOPBACK
    package static let hardwareNone: UInt16 = 0xFFFE  // ARPHRD_NONE (tun, WireGuard)
}

/// A netlink message's header (`struct nlmsghdr`, less its length).
package struct NetlinkHeader: Equatable, Sendable {
    package var type: UInt16
    package var flags: UInt16
    package var sequence: UInt32
    /// The port the message answers (a request's sender), 0 for the kernel's own notifications.
    package var port: UInt32

    package init(type: UInt16, flags: UInt16 = 0, sequence: UInt32 = 0, port: UInt32 = 0) {
        self.type = type
        self.flags = flags
        self.sequence = sequence
        self.port = port
    }
}

/// A link (`RTM_NEWLINK`/`RTM_DELLINK`): what a path needs of an interface.
package struct LinkRecord: Equatable, Hashable, Sendable {
    package var index: Int32
    package var name: String
    /// The link-layer type (`ifi_type`, ARPHRD_*).
    package var hardwareType: UInt16
    /// `ifi_flags` (IFF_UP, IFF_RUNNING, IFF_LOOPBACK, …).
    package var flags: UInt32
    /// The driver's kind for a virtual link (`IFLA_INFO_KIND`: "veth", "bridge", "dummy", "tun", …); nil
    /// for a physical device.
    package var kind: String?
    /// `ifi_family`: AF_UNSPEC for the link itself, AF_INET6 or AF_BRIDGE for a protocol's view of it.
    package var family: UInt8

    package init(index: Int32, name: String, hardwareType: UInt16, flags: UInt32, kind: String? = nil, family: UInt8 = 0) {
        self.index = index
        self.name = name
        self.hardwareType = hardwareType
        self.flags = flags
        self.kind = kind
        self.family = family
    }
}

/// An interface address (`RTM_NEWADDR`/`RTM_DELADDR`).
package struct AddressRecord: Equatable, Hashable, Sendable {
    package var family: UInt8
    package var index: Int32
    package var prefixLength: UInt8
    /// `ifa_scope` (RT_SCOPE_UNIVERSE 0, SITE 200, LINK 253, HOST 254).
    package var scope: UInt8
    /// `IFA_FLAGS` when present, else `ifa_flags` (IFA_F_TENTATIVE, IFA_F_DADFAILED, …).
    package var flags: UInt32
    /// The address itself: `IFA_LOCAL` when present (IPv4's own address on a point-to-point link), else
    /// `IFA_ADDRESS`; 4 or 16 bytes.
    package var address: [UInt8]

    package init(family: UInt8, index: Int32, prefixLength: UInt8, scope: UInt8 = 0, flags: UInt32 = 0, address: [UInt8]) {
        self.family = family
        self.index = index
        self.prefixLength = prefixLength
        self.scope = scope
        self.flags = flags
        self.address = address
    }
}

/// A route (`RTM_NEWROUTE`/`RTM_DELROUTE`), with its next hops (one, or those of `RTA_MULTIPATH`).
package struct RouteRecord: Equatable, Hashable, Sendable {
    package struct NextHop: Equatable, Hashable, Sendable {
        package var interface: Int32
        /// The gateway's 4 or 16 bytes (`RTA_GATEWAY`, or `RTA_VIA`'s address), nil for a direct route.
        package var gateway: [UInt8]?

        package init(interface: Int32, gateway: [UInt8]? = nil) {
            self.interface = interface
            self.gateway = gateway
        }
    }

    package var family: UInt8
    package var destinationLength: UInt8
    /// `RTA_TABLE` when present, else `rtm_table`.
    package var table: UInt32
    /// `rtm_type` (RTN_UNICAST 1, RTN_BLACKHOLE 6, RTN_UNREACHABLE 7, …).
    package var type: UInt8
    /// `RTA_PRIORITY` (the metric), 0 when absent.
    package var priority: UInt32
    package var nextHops: [NextHop]

    package init(
        family: UInt8, destinationLength: UInt8 = 0, table: UInt32 = Netlink.tableMain, type: UInt8 = Netlink.routeUnicast,
        priority: UInt32 = 0, nextHops: [NextHop]
    ) {
        self.family = family
        self.destinationLength = destinationLength
        self.table = table
        self.type = type
        self.priority = priority
        self.nextHops = nextHops
    }
}

/// One parsed message's meaning.
package enum RoutingMessageBody: Equatable, Sendable {
    case link(LinkRecord, removed: Bool)
    case address(AddressRecord, removed: Bool)
    case route(RouteRecord, removed: Bool)
    /// The end of a dump (`NLMSG_DONE`).
    case done
    /// An answer to a request: `code` 0 is an acknowledgement, else a negative errno (`NLMSG_ERROR`).
    case error(code: Int32)
    /// Anything else (`NLMSG_NOOP`, `NLMSG_OVERRUN`, a type this parser does not need).
    case other
}

/// One parsed message.
package struct RoutingMessage: Equatable, Sendable {
    package var header: NetlinkHeader
    package var body: RoutingMessageBody

    package init(header: NetlinkHeader, body: RoutingMessageBody) {
        self.header = header
        self.body = body
    }
}

/// What one datagram held.
package struct ParsedDatagram: Equatable, Sendable {
    /// The messages that parsed, in order.
    package var messages: [RoutingMessage] = []
    /// Messages skipped as malformed (a datagram's unreadable tail counts once).
    package var malformed = 0

    package init(messages: [RoutingMessage] = [], malformed: Int = 0) {
        self.messages = messages
        self.malformed = malformed
    }
}

/// The parser (see the file's header). Stateless: a datagram in, its messages out.
package enum RoutingMessageParser {
    static let headerSize = 16

    /// Parses one datagram's messages.
    package static func parse(_ datagram: UnsafeRawBufferPointer) -> ParsedDatagram {
        var parsed = ParsedDatagram()
        var offset = 0
        while offset < datagram.count {
            let left = datagram.count - offset
            guard left >= headerSize else {
                parsed.malformed += 1
                break
            }
            let length = Int(datagram.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            guard length >= headerSize, length <= left else {
                parsed.malformed += 1
                break
            }
            let header = NetlinkHeader(
                type: datagram.loadUnaligned(fromByteOffset: offset + 4, as: UInt16.self),
                flags: datagram.loadUnaligned(fromByteOffset: offset + 6, as: UInt16.self),
                sequence: datagram.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self),
                port: datagram.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
            let payload = UnsafeRawBufferPointer(rebasing: datagram[(offset + headerSize)..<(offset + length)])
            if let body = parseBody(type: header.type, payload) {
                parsed.messages.append(RoutingMessage(header: header, body: body))
            } else {
                parsed.malformed += 1
            }
            // The next message starts at the aligned end; a final message's padding may be missing.
            offset += min(align(length), left)
        }
        return parsed
    }

    /// Parses one datagram held in an array (tests, fuzzing).
    package static func parse(_ bytes: [UInt8]) -> ParsedDatagram {
        bytes.withUnsafeBytes { parse($0) }
    }

    static func align(_ length: Int) -> Int { (length + 3) & ~3 }

    /// A message's meaning, or nil when its body is malformed.
    private static func parseBody(type: UInt16, _ payload: UnsafeRawBufferPointer) -> RoutingMessageBody? {
        switch type {
        case Netlink.newLink, Netlink.deleteLink:
            return parseLink(payload).map { .link($0, removed: type == Netlink.deleteLink) }
        case Netlink.newAddress, Netlink.deleteAddress:
            return parseAddress(payload).map { .address($0, removed: type == Netlink.deleteAddress) }
        case Netlink.newRoute, Netlink.deleteRoute:
            return parseRoute(payload).map { .route($0, removed: type == Netlink.deleteRoute) }
        case Netlink.done:
            return .done
        case Netlink.error:
            guard payload.count >= 4 else { return nil }
            return .error(code: payload.loadUnaligned(as: Int32.self))
        default:
            return .other
        }
    }

    /// Calls `body` with each attribute's type (flag bits masked off) and value; false when one does
    /// not fit (its length under 4 or past the end).
    private static func attributes(_ bytes: UnsafeRawBufferPointer, _ body: (UInt16, UnsafeRawBufferPointer) -> Bool) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let left = bytes.count - offset
            guard left >= 4 else { return false }
            let length = Int(bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            guard length >= 4, length <= left else { return false }
            let type = bytes.loadUnaligned(fromByteOffset: offset + 2, as: UInt16.self) & Netlink.attributeTypeMask
            guard body(type, UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + length)])) else { return false }
            offset += min(align(length), left)
        }
        return true
    }

    /// A NUL-terminated string attribute (the NUL, and anything after it, left out).
    private static func string(_ value: UnsafeRawBufferPointer) -> String {
        String(decoding: value.prefix { $0 != 0 }, as: UTF8.self)
    }

    /// An address attribute: exactly 4 or 16 bytes, else nil.
    private static func address(_ value: UnsafeRawBufferPointer) -> [UInt8]? {
        value.count == 4 || value.count == 16 ? Array(value) : nil
    }

    private static func parseLink(_ payload: UnsafeRawBufferPointer) -> LinkRecord? {
        guard payload.count >= 16 else { return nil }
        var link = LinkRecord(
            index: payload.loadUnaligned(fromByteOffset: 4, as: Int32.self), name: "",
            hardwareType: payload.loadUnaligned(fromByteOffset: 2, as: UInt16.self),
            flags: payload.loadUnaligned(fromByteOffset: 8, as: UInt32.self), family: payload[0])
        let fits = attributes(UnsafeRawBufferPointer(rebasing: payload[16...])) { type, value in
            switch type {
            case Netlink.linkName: link.name = string(value)
            case Netlink.linkInfo:
                return attributes(value) { type, value in
                    if type == Netlink.linkInfoKind { link.kind = string(value) }
                    return true
                }
            default: break
            }
            return true
        }
        return fits ? link : nil
    }

    private static func parseAddress(_ payload: UnsafeRawBufferPointer) -> AddressRecord? {
        guard payload.count >= 8 else { return nil }
        var local: [UInt8]?
        var remote: [UInt8]?
        var flags = UInt32(payload[2])
        var wrongSize = false
        let fits = attributes(UnsafeRawBufferPointer(rebasing: payload[8...])) { type, value in
            switch type {
            case Netlink.addressLocal:
                local = address(value)
                wrongSize = wrongSize || local == nil
            case Netlink.addressAddress:
                remote = address(value)
                wrongSize = wrongSize || remote == nil
            case Netlink.addressFlags:
                guard value.count >= 4 else { return false }
                flags = value.loadUnaligned(as: UInt32.self)
            default: break
            }
            return true
        }
        guard fits, !wrongSize, let bytes = local ?? remote else { return nil }
        return AddressRecord(
            family: payload[0], index: Int32(bitPattern: payload.loadUnaligned(fromByteOffset: 4, as: UInt32.self)),
            prefixLength: payload[1], scope: payload[3], flags: flags, address: bytes)
    }

    private static func parseRoute(_ payload: UnsafeRawBufferPointer) -> RouteRecord? {
        guard payload.count >= 12 else { return nil }
        var route = RouteRecord(
            family: payload[0], destinationLength: payload[1], table: UInt32(payload[4]), type: payload[7], priority: 0, nextHops: [])
        var single = RouteRecord.NextHop(interface: 0)
        var multipath: [RouteRecord.NextHop]?
        let fits = attributes(UnsafeRawBufferPointer(rebasing: payload[12...])) { type, value in
            switch type {
            case Netlink.routeTable:
                guard value.count >= 4 else { return false }
                route.table = value.loadUnaligned(as: UInt32.self)
            case Netlink.routePriority:
                guard value.count >= 4 else { return false }
                route.priority = value.loadUnaligned(as: UInt32.self)
            case Netlink.routeOutput:
                guard value.count >= 4 else { return false }
                single.interface = value.loadUnaligned(as: Int32.self)
            case Netlink.routeGateway:
                guard let gateway = address(value) else { return false }
                single.gateway = gateway
            case Netlink.routeVia:
                guard let gateway = via(value) else { return false }
                single.gateway = gateway
            case Netlink.routeMultipath:
                guard let hops = nextHops(value) else { return false }
                multipath = hops
            default: break
            }
            return true
        }
        guard fits else { return nil }
        route.nextHops = multipath ?? [single]
        return route
    }

    /// `RTA_VIA`'s value: a 16-bit family, then the address.
    private static func via(_ value: UnsafeRawBufferPointer) -> [UInt8]? {
        guard value.count >= 2 else { return nil }
        return address(UnsafeRawBufferPointer(rebasing: value[2...]))
    }

    /// `RTA_MULTIPATH`'s next hops (`struct rtnexthop` each, its attributes after it).
    private static func nextHops(_ value: UnsafeRawBufferPointer) -> [RouteRecord.NextHop]? {
        var hops: [RouteRecord.NextHop] = []
        var offset = 0
        while offset < value.count {
            let left = value.count - offset
            guard left >= 8 else { return nil }
            let length = Int(value.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            guard length >= 8, length <= left else { return nil }
            var hop = RouteRecord.NextHop(interface: value.loadUnaligned(fromByteOffset: offset + 4, as: Int32.self))
            let fits = attributes(UnsafeRawBufferPointer(rebasing: value[(offset + 8)..<(offset + length)])) { type, value in
                switch type {
                case Netlink.routeGateway:
                    guard let gateway = address(value) else { return false }
                    hop.gateway = gateway
                case Netlink.routeVia:
                    guard let gateway = via(value) else { return false }
                    hop.gateway = gateway
                default: break
                }
                return true
            }
            guard fits else { return nil }
            hops.append(hop)
            offset += min(align(length), left)
        }
        return hops
    }

    /// A dump request: `type` (RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE) for every family, with the
    /// request's fixed header (`ifinfomsg`, `ifaddrmsg`, `rtmsg`) all zero.
    package static func dumpRequest(type: UInt16, sequence: UInt32) -> [UInt8] {
        let body =
            switch type {
            case Netlink.getLink: 16
            case Netlink.getAddress: 8
            default: 12
            }
        var bytes = [UInt8](repeating: 0, count: headerSize + body)
        bytes.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt32(headerSize + body), toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: type, toByteOffset: 4, as: UInt16.self)
            raw.storeBytes(of: Netlink.request | Netlink.dump, toByteOffset: 6, as: UInt16.self)
            raw.storeBytes(of: sequence, toByteOffset: 8, as: UInt32.self)
        }
        return bytes
    }
}
