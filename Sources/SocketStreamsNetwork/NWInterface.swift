// `NWInterface`: a network interface as Network.framework names one (its name, its index, its kind). On
// Linux an interface is looked up by name or index (`if_nametoindex(3)`, `if_indextoname(3)`) and its
// kind read from sysfs: the link type (`/sys/class/net/<name>/type`, ARPHRD_*), a `wireless` directory,
// and `DEVTYPE=wwan` in its `uevent`.

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An interface that a connection uses to send and receive data: Network.framework's `NWInterface`
/// (a struct, `Hashable`, `CustomDebugStringConvertible`, `Sendable`).
///
/// As on Apple platforms, code does not make one from nothing: interfaces come from scoped addresses
/// (`IPv6Address("fe80::1%eth0")`) and, later, from `NWPath.availableInterfaces`.
public struct NWInterface: Hashable, CustomDebugStringConvertible, Sendable {
    /// The kind of an interface, from its link-layer medium: Network.framework's
    /// `NWInterface.InterfaceType`.
    ///
    /// On Linux: `.loopback` for a loopback link, `.wifi` for a link with a wireless extension,
    /// `.cellular` for a WWAN device, `.wiredEthernet` for any other Ethernet link, `.other` for
    /// everything else (tunnels, bridges' virtual links are Ethernet and count as wired).
    public enum InterfaceType: Hashable, Sendable {
        /// A virtual or otherwise unknown interface type (`NWInterface.InterfaceType.other`).
        case other
        /// A Wi-Fi link (`NWInterface.InterfaceType.wifi`).
        case wifi
        /// A cellular link (`NWInterface.InterfaceType.cellular`).
        case cellular
        /// A wired Ethernet link (`NWInterface.InterfaceType.wiredEthernet`).
        case wiredEthernet
        /// The local loopback interface (`NWInterface.InterfaceType.loopback`).
        case loopback
    }

    /// The interface's kind (`NWInterface.type`).
    public let type: InterfaceType
    /// The interface's name, such as `lo` or `eth0` (`NWInterface.name`).
    public let name: String
    /// The system's index of the interface (`NWInterface.index`, `if_nametoindex(3)`).
    public let index: Int

    /// The interface's name, as Network.framework prints an interface.
    public var debugDescription: String { name }

    package init(name: String, index: Int, type: InterfaceType) {
        self.name = name
        self.index = index
        self.type = type
    }

    /// The interface with this name, if the system has one (`if_nametoindex(3)`).
    package init?(systemName name: String) {
        guard !name.isEmpty, !name.utf8.contains(0) else { return nil }
        let index = if_nametoindex(name)
        guard index != 0 else { return nil }
        self.init(name: name, index: Int(index), type: Self.type(ofLink: name))
    }

    /// The interface with this index, if the system has one (`if_indextoname(3)`).
    package init?(systemIndex index: Int) {
        guard let index = UInt32(exactly: index), index != 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(index, &buffer) != nil else { return nil }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.init(name: name, index: Int(index), type: Self.type(ofLink: name))
    }

    /// The link's kind, from sysfs; `.other` when sysfs says nothing.
    static func type(ofLink name: String) -> InterfaceType {
        let directory = "/sys/class/net/\(name)"
        let linkType = (try? String(contentsOfFile: directory + "/type", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        switch linkType.flatMap({ Int($0) }) {
        case 772:  // ARPHRD_LOOPBACK
            return .loopback
        case 1:  // ARPHRD_ETHER
            if FileManager.default.fileExists(atPath: directory + "/wireless") { return .wifi }
            let uevent = (try? String(contentsOfFile: directory + "/uevent", encoding: .utf8)) ?? ""
            return uevent.split(separator: "\n").contains("DEVTYPE=wwan") ? .cellular : .wiredEthernet
        case 519:  // ARPHRD_RAWIP: a WWAN modem's raw-IP link
            return .cellular
        default:
            return .other
        }
    }
}
