// What a socket's traffic is marked with: a DSCP (`IP_TOS`, `IPV6_TCLASS`) and a queueing priority
// (`SO_PRIORITY`). `kCFStreamNetworkServiceType`'s values map onto it (Properties/NetworkServiceType.swift).

import CSocketStreamsShims
import Foundation
import Glibc

struct TrafficClass: Equatable {
    let dscp: Int32
    let priority: Int32

    /// No service class: what a socket has unless one is set.
    static let standard = TrafficClass(dscp: 0, priority: 0)

    /// Marks `fd`'s traffic. The TOS or traffic class first: on Linux setting `IP_TOS` also sets the
    /// priority, which `SO_PRIORITY` then fixes. Errors are ignored, as CFNetwork ignores a socket
    /// option the platform refuses (a Unix-domain socket never gets here).
    func apply(to fd: Int32) {
        guard let domain = Posix.option(fd, level: SOL_SOCKET, name: SO_DOMAIN) else { return }
        let tos = dscp << 2
        if domain == AF_INET6 {
            try? Posix.setOption(fd, level: Int32(IPPROTO_IPV6), name: IPV6_TCLASS, value: tos)
        }
        // Also for an IPv6 socket, whose IPv4-mapped traffic uses it.
        try? Posix.setOption(fd, level: Int32(IPPROTO_IP), name: IP_TOS, value: tos)
        try? Posix.setOption(fd, level: SOL_SOCKET, name: SO_PRIORITY, value: priority)
    }
}
