import Foundation

/// `kCFStreamNetworkServiceType` (`Stream.PropertyKey.networkServiceType`) on Linux: Darwin's service
/// classes mapped onto what Linux marks a socket's traffic with, the DSCP in the IP header (`IP_TOS`,
/// `IPV6_TCLASS`, after RFC 8325's mapping of the Wi-Fi access categories Darwin uses) and the queueing
/// priority (`SO_PRIORITY`, the 802.1D user priority; 0...6 need no privilege).
///
/// | Value | DSCP | `SO_PRIORITY` |
/// |---|---|---|
/// | `kCFStreamNetworkServiceTypeVoIP`, `…Voice` | EF (46) | 6 |
/// | `…Video`, `…ResponsiveAV` | AF41 (34) | 5 |
/// | `…AVStreaming` | AF31 (26) | 4 |
/// | `…CallSignaling` | CS3 (24) | 4 |
/// | `…ResponsiveData` | AF21 (18) | 0 |
/// | `…Background` | CS1 (8) | 1 |
///
/// Applied to the socket when TCP is up, or at once on a connected pair; setting nil (or `NSNull`)
/// puts back DSCP 0 and priority 0. Reads back as the value set.
struct NetworkServiceType: Equatable {
    let name: String
    /// What the socket's traffic is marked with.
    let trafficClass: TrafficClass

    static let all: [NetworkServiceType] = [
        NetworkServiceType(name: kCFStreamNetworkServiceTypeVoIP as String, dscp: 46, priority: 6),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeVoice as String, dscp: 46, priority: 6),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeVideo as String, dscp: 34, priority: 5),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeResponsiveAV as String, dscp: 34, priority: 5),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeAVStreaming as String, dscp: 26, priority: 4),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeCallSignaling as String, dscp: 24, priority: 4),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeResponsiveData as String, dscp: 18, priority: 0),
        NetworkServiceType(name: kCFStreamNetworkServiceTypeBackground as String, dscp: 8, priority: 1),
    ]

    /// One of the `kCFStreamNetworkServiceType…` values, as a `CFString`, `String` or Foundation's
    /// `StreamNetworkServiceTypeValue`; nil for anything else.
    init?(_ value: AnyObject?) {
        let text: String?
        if let typed = value as? StreamNetworkServiceTypeValue {
            text = typed.rawValue
        } else {
            text = value as? String
        }
        guard let text, let known = Self.all.first(where: { $0.name == text }) else { return nil }
        self = known
    }

    private init(name: String, dscp: Int32, priority: Int32) {
        self.name = name
        self.trafficClass = TrafficClass(dscp: dscp, priority: priority)
    }
}
