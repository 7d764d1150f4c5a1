// `NWPath`: what the network offers, as a plain value, and the rule that computes a monitor's path from
// the kernel's routing table (`RoutingTable`) and the monitor's interface constraints, as a pure function.
//
// The rule (also in Guides/NetworkFramework.md, "Paths: NWPathMonitor"):
// - An interface *serves* a family (IPv4, IPv6) when its link is up and running (IFF_UP and IFF_RUNNING),
//   the monitor's constraints allow its kind, it has a usable address of that family (not tentative nor
//   failed duplicate detection, and not link- or host-scoped) and a unicast default route of that family
//   in the main table leaves through it.
// - Loopback serves nothing unless loopback is the required kind (`init(requiredInterfaceType: .loopback)`):
//   then `lo` serves each family it has an address of once it is up, no route needed. So a network
//   namespace with only loopback is `.unsatisfied` for `NWPathMonitor()`, as a Mac with every interface
//   down is, and code that reconnects on `.satisfied` waits for a real network rather than spinning.
// - `.satisfied` when at least one interface serves a family; else `.unsatisfied` (reason
//   `.notAvailable`). Linux has no on-demand interfaces: `.requiresConnection` is never reported.
// - `availableInterfaces`: the serving interfaces, the one with the lowest-metric default route first
//   (the one a new connection takes), then by index. `usesInterfaceType` asks about that first one, as
//   on Apple platforms, where a phone on Wi-Fi lists its cellular interface too and does not "use" it.
// - `gateways`: the default routes' gateways through the serving interfaces, by metric (port 0).
// - `isExpensive`: the first interface is cellular. `isConstrained`: never (Linux has no Low Data Mode).
// - `supportsDNS`: satisfied, and the resolver has a name server (`/etc/resolv.conf`, read when the
//   path is computed).

import Foundation

/// The network a connection or a monitor sees: Network.framework's `NWPath` (a struct, `Equatable`,
/// `CustomDebugStringConvertible`, `Sendable`).
///
/// A monitor's path (`NWPathMonitor.currentPath`, `pathUpdateHandler`) follows the rule in
/// Guides/NetworkFramework.md ("Paths: NWPathMonitor"): `.satisfied` when a non-loopback interface allowed
/// by the monitor is up, has an address and carries a default route; a monitor that requires
/// `.loopback` is satisfied by `lo` alone.
public struct NWPath: Equatable, CustomDebugStringConvertible, Sendable {
    /// Whether the path can be used: Network.framework's `NWPath.Status`.
    public enum Status: Equatable, Hashable, Sendable {
        /// The path is available to establish connections and send data (`NWPath.Status.satisfied`).
        case satisfied
        /// The path is not available for use (`NWPath.Status.unsatisfied`).
        case unsatisfied
        /// The path is not currently available, but establishing a new connection may activate it
        /// (`NWPath.Status.requiresConnection`). Never reported on Linux, which has no on-demand interfaces.
        case requiresConnection
    }

    /// Why a path is unsatisfied: Network.framework's `NWPath.UnsatisfiedReason` (macOS 11; `vpnInactive`
    /// macOS 14). On Linux always `.notAvailable`: no per-app policy denies a network.
    public enum UnsatisfiedReason: Equatable, Hashable, Sendable {
        /// No reason is given (`NWPath.UnsatisfiedReason.notAvailable`).
        case notAvailable
        /// The user has disabled cellular (`NWPath.UnsatisfiedReason.cellularDenied`).
        case cellularDenied
        /// The user has disabled Wi-Fi (`NWPath.UnsatisfiedReason.wifiDenied`).
        case wifiDenied
        /// The user has disabled local network access (`NWPath.UnsatisfiedReason.localNetworkDenied`).
        case localNetworkDenied
        /// A required VPN is not active (`NWPath.UnsatisfiedReason.vpnInactive`).
        case vpnInactive
    }

    /// Whether the path is usable (`NWPath.status`).
    public let status: NWPath.Status
    /// Why it is not, when it is not (`NWPath.unsatisfiedReason`).
    public let unsatisfiedReason: NWPath.UnsatisfiedReason
    /// The interfaces the path may use, the preferred one first (`NWPath.availableInterfaces`).
    public let availableInterfaces: [NWInterface]
    /// Whether the path uses an interface the system counts as expensive: cellular
    /// (`NWPath.isExpensive`).
    public let isExpensive: Bool
    /// Whether the path uses an interface in Low Data Mode (`NWPath.isConstrained`): never on Linux.
    public let isConstrained: Bool
    /// Whether the path can route IPv4 traffic (`NWPath.supportsIPv4`).
    public let supportsIPv4: Bool
    /// Whether the path can route IPv6 traffic (`NWPath.supportsIPv6`).
    public let supportsIPv6: Bool
    /// Whether the path has a DNS server configured (`NWPath.supportsDNS`).
    public let supportsDNS: Bool
    /// The routers the path's default routes go through, as endpoints with port 0 (`NWPath.gateways`).
    public let gateways: [NWEndpoint]
    /// The local endpoint of a connection's path; nil for a monitor's (`NWPath.localEndpoint`).
    public let localEndpoint: NWEndpoint?
    /// The remote endpoint of a connection's path; nil for a monitor's (`NWPath.remoteEndpoint`).
    public let remoteEndpoint: NWEndpoint?

    /// Whether the path's preferred interface (the first of `availableInterfaces`) is of `type`
    /// (`NWPath.usesInterfaceType(_:)`).
    public func usesInterfaceType(_ type: NWInterface.InterfaceType) -> Bool {
        availableInterfaces.first?.type == type
    }

    /// "satisfied (Path is satisfied), interface: eth0, ipv4, ipv6, dns", "unsatisfied (No network
    /// route)", as Network.framework prints a path (`NWPath.debugDescription`).
    public var debugDescription: String {
        var text: String
        switch status {
        case .satisfied: text = "satisfied (Path is satisfied)"
        case .unsatisfied: text = "unsatisfied (No network route)"
        case .requiresConnection: text = "requiresConnection (Path requires a connection)"
        }
        if !availableInterfaces.isEmpty { text += ", interface: " + availableInterfaces.map(\.name).joined(separator: ", ") }
        if isExpensive { text += ", expensive" }
        if supportsIPv4 { text += ", ipv4" }
        if supportsIPv6 { text += ", ipv6" }
        if supportsDNS { text += ", dns" }
        return text
    }

    /// Every field (for a connection's path, which the connection builds).
    package init(
        status: NWPath.Status, unsatisfiedReason: NWPath.UnsatisfiedReason = .notAvailable, availableInterfaces: [NWInterface] = [],
        isExpensive: Bool = false, isConstrained: Bool = false, supportsIPv4: Bool = false, supportsIPv6: Bool = false,
        supportsDNS: Bool = false, gateways: [NWEndpoint] = [], localEndpoint: NWEndpoint? = nil, remoteEndpoint: NWEndpoint? = nil
    ) {
        self.status = status
        self.unsatisfiedReason = unsatisfiedReason
        self.availableInterfaces = availableInterfaces
        self.isExpensive = isExpensive
        self.isConstrained = isConstrained
        self.supportsIPv4 = supportsIPv4
        self.supportsIPv6 = supportsIPv6
        self.supportsDNS = supportsDNS
        self.gateways = gateways
        self.localEndpoint = localEndpoint
        self.remoteEndpoint = remoteEndpoint
    }

    /// A monitor's path before anything is known: unsatisfied, no interface.
    package static let unknown = NWPath(status: .unsatisfied)

    /// The same path with a connection's endpoints.
    package func with(localEndpoint: NWEndpoint?, remoteEndpoint: NWEndpoint?) -> NWPath {
        NWPath(
            status: status, unsatisfiedReason: unsatisfiedReason, availableInterfaces: availableInterfaces, isExpensive: isExpensive,
            isConstrained: isConstrained, supportsIPv4: supportsIPv4, supportsIPv6: supportsIPv6, supportsDNS: supportsDNS,
            gateways: gateways, localEndpoint: localEndpoint, remoteEndpoint: remoteEndpoint)
    }
}

/// What a monitor (or a connection's parameters) allows: a required kind, or kinds it refuses.
package struct PathConstraints: Equatable, Hashable, Sendable {
    package var required: NWInterface.InterfaceType?
    package var prohibited: [NWInterface.InterfaceType]

    package init(required: NWInterface.InterfaceType? = nil, prohibited: [NWInterface.InterfaceType] = []) {
        self.required = required
        self.prohibited = prohibited
    }

    /// Whether an interface of `type` may serve the path.
    package func allows(_ type: NWInterface.InterfaceType) -> Bool {
        if let required { return type == required }
        return type != .loopback && !prohibited.contains(type)
    }
}

extension NWPath {
    /// The path `table` gives a monitor with `constraints` (the rule in the file's header).
    /// `resolverConfigured`: the system has a DNS server.
    package init(table: RoutingTable, constraints: PathConstraints, resolverConfigured: Bool) {
        struct Candidate {
            var link: PathLink
            var families: Set<UInt8>
            var bestMetric: UInt32
        }
        let families = [Netlink.familyIPv4, Netlink.familyIPv6]
        var candidates: [Candidate] = []
        for link in table.links.values where link.isUp && constraints.allows(link.type) {
            let loopback = link.type == .loopback
            let addresses = table.addresses.values.filter { address in
                address.index == link.record.index && address.flags & (Netlink.addressTentative | Netlink.addressDADFailed) == 0
                    && (loopback || address.scope < Netlink.scopeLink)
            }
            var served = Set<UInt8>()
            var bestMetric = UInt32.max
            for family in families where addresses.contains(where: { $0.family == family }) {
                if loopback {
                    served.insert(family)
                    bestMetric = 0
                    continue
                }
                let routes = table.defaultRoutes.filter { $0.family == family && $0.interface == link.record.index }
                guard let metric = routes.map(\.priority).min() else { continue }
                served.insert(family)
                bestMetric = min(bestMetric, metric)
            }
            if !served.isEmpty { candidates.append(Candidate(link: link, families: served, bestMetric: bestMetric)) }
        }
        candidates.sort { ($0.bestMetric, $0.link.record.index) < ($1.bestMetric, $1.link.record.index) }
        let interfaces = candidates.map { NWInterface(name: $0.link.record.name, index: Int($0.link.record.index), type: $0.link.type) }
        var gateways: [(metric: UInt32, index: Int32, endpoint: NWEndpoint)] = []
        for candidate in candidates {
            let interface = NWInterface(
                name: candidate.link.record.name, index: Int(candidate.link.record.index), type: candidate.link.type)
            for route in table.defaultRoutes
            where route.interface == candidate.link.record.index && candidate.families.contains(route.family) {
                guard let bytes = route.gateway, let host = Self.host(bytes, interface: interface) else { continue }
                gateways.append((route.priority, route.interface, .hostPort(host: host, port: .any)))
            }
        }
        gateways.sort { ($0.metric, $0.index, $0.endpoint.debugDescription) < ($1.metric, $1.index, $1.endpoint.debugDescription) }
        let satisfied = !candidates.isEmpty
        self.init(
            status: satisfied ? .satisfied : .unsatisfied, availableInterfaces: interfaces,
            isExpensive: interfaces.first?.type == .cellular, isConstrained: false,
            supportsIPv4: candidates.contains { $0.families.contains(Netlink.familyIPv4) },
            supportsIPv6: candidates.contains { $0.families.contains(Netlink.familyIPv6) },
            supportsDNS: satisfied && resolverConfigured, gateways: gateways.map(\.endpoint))
    }

    /// A gateway's address as a host; an IPv6 link-local one scoped to its interface.
    private static func host(_ bytes: [UInt8], interface: NWInterface) -> NWEndpoint.Host? {
        if bytes.count == 4 { return IPv4Address(Data(bytes)).map { .ipv4($0) } }
        let bare = IPv6Address(Data(bytes))
        guard let bare else { return nil }
        return .ipv6(bare.isLinkLocal ? IPv6Address(Data(bytes), interface) ?? bare : bare)
    }

    /// Whether `/etc/resolv.conf` names a server (a `nameserver` line).
    package static func resolverConfigured(resolvConf path: String = "/etc/resolv.conf") -> Bool {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return false }
        return text.split(separator: "\n").contains { line in
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            return words.count >= 2 && words[0] == "nameserver"
        }
    }
}

extension NWInterface.InterfaceType {
    /// Virtual link kinds (`IFLA_INFO_KIND`) that carry Ethernet frames to other hosts, as a wired port
    /// does: a container's veth, a bridge, a bond, a VLAN, macvlan and ipvlan links.
    static let wiredKinds: Set<String> = ["veth", "bridge", "bond", "team", "vlan", "macvlan", "macvtap", "ipvlan", "ipvtap"]

    /// A link's kind, from its link-layer type, its driver's kind and, for a physical Ethernet device,
    /// sysfs (`probe(name)`: whether `/sys/class/net/NAME` has `wireless` or `phy80211`, and whether its
    /// `uevent` says `DEVTYPE=wwan`):
    /// - ARPHRD_LOOPBACK (or IFF_LOOPBACK): `.loopback`.
    /// - ARPHRD_ETHER without a driver kind (a physical device): `.wifi` for a wireless one, `.cellular`
    ///   for a WWAN one, else `.wiredEthernet`.
    /// - ARPHRD_ETHER with a kind in `wiredKinds` (veth, bridge, bond, VLAN, macvlan, ipvlan):
    ///   `.wiredEthernet`; any other kind (dummy, tap, VXLAN, GRE taps…): `.other`.
    /// - ARPHRD_RAWIP (a modem's raw-IP link): `.cellular`.
    /// - Anything else (tun, WireGuard, PPP, IP-in-IP, SIT…): `.other`, as Apple reports a VPN's `utun`.
    static func of(_ link: LinkRecord, probe: (String) -> (wireless: Bool, wwan: Bool)) -> Self {
        if link.hardwareType == Netlink.hardwareLoopback || link.flags & Netlink.linkLoopback != 0 { return .loopback }
        switch link.hardwareType {
        case Netlink.hardwareEthernet:
            guard let kind = link.kind else {
                let found = probe(link.name)
                return found.wireless ? .wifi : found.wwan ? .cellular : .wiredEthernet
            }
            return wiredKinds.contains(kind) ? .wiredEthernet : .other
        case Netlink.hardwareRawIP:
            return .cellular
        default:
            return .other
        }
    }

    /// `of(_:probe:)` with sysfs. Under a network namespace of its own, sysfs shows the namespace that
    /// mounted it; a physical device seen only through netlink then reads as wired.
    static func of(_ link: LinkRecord) -> Self {
        of(link) { name in
            guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else { return (false, false) }
            let directory = "/sys/class/net/\(name)"
            let manager = FileManager.default
            let wireless = manager.fileExists(atPath: directory + "/wireless") || manager.fileExists(atPath: directory + "/phy80211")
            let uevent = (try? String(contentsOfFile: directory + "/uevent", encoding: .utf8)) ?? ""
            return (wireless, uevent.split(separator: "\n").contains("DEVTYPE=wwan"))
        }
    }
}
