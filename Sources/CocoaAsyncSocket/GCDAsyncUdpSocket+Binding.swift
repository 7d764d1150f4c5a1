// GCDAsyncUdpSocket.h's "Binding", "Connecting" and "Multicast" sections, and the sockets they make.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

extension GCDAsyncUdpSocket {
    // MARK: the datagram sockets

    /// Makes the sockets of `families` (each if enabled and not yet made). Lock held. Beside an IPv4
    /// socket the IPv6 one is `IPV6_V6ONLY`, so both can bind the same port (on Linux a wildcard IPv6
    /// bind would otherwise take the IPv4 port too).
    static func makeSockets(_ state: inout UdpState, _ socket: GCDAsyncUdpSocket, families: [Int32]) throws {
        for family in families where state.socket(family) == nil {
            guard family == AF_INET ? state.ipv4Enabled : state.ipv6Enabled else { continue }
            let made: DatagramSocket
            do {
                made = try DatagramSocket(
                    family: family, owner: socket.owner(&state), delegate: socket,
                    maximumDatagramSize: family == AF_INET ? Int(state.maxReceive4) : Int(min(state.maxReceive6, 65_535)))
            } catch {
                throw posixError(error, reason: "Error in socket() function")
            }
            if family == AF_INET { state.socket4 = made } else { state.socket6 = made }
            // A socket made while receiving (the first send to the other family) receives too: its replies
            // would otherwise wait unread. (Its pump reports nothing: nothing is queued on it yet.)
            if state.receiving != .paused { made.setReceiveMode(state.receiving) }
        }
        if let socket6 = state.socket6, state.socket4 != nil {
            try? socket6.setOption(level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: 1)
        }
    }

    /// An error of the datagram socket as GCDAsyncUdpSocket gives a failed call: `NSPOSIXErrorDomain`,
    /// errno, `strerror`, and `reason` naming the call.
    static func posixError(_ error: Error, reason: String) -> NSError {
        switch error as? DatagramSendError {
        case .system(let code, _): return .udpPOSIX(code, reason: reason)
        case .timedOut: return GCDAsyncUdpSocketError(.sendTimeoutError, message: "Send operation timed out") as NSError
        case nil: return error as NSError
        }
    }

    /// The checks every bind, connect and join makes first (`preCheck` in GCDAsyncUdpSocket).
    static func checkConfiguration(_ state: UdpState) throws {
        guard state.delegate != nil else {
            throw GCDAsyncUdpSocketError(.badConfigError, message: "Attempting to use socket without a delegate. Set a delegate first.")
        }
        guard state.delegateQueue != nil else {
            throw GCDAsyncUdpSocketError(
                .badConfigError, message: "Attempting to use socket without a delegate queue. Set a delegate queue first.")
        }
    }

    /// The addresses an interface description names, by family: nil for any, `localhost`/`loopback`,
    /// an interface's name (`lo`, `eth0`) or one of its numeric addresses (the first of each family).
    static func interfaceAddresses(_ interface: String?, port: Int) -> (v4: SocketAddress?, v6: SocketAddress?) {
        guard let interface else { return (.any(family: AF_INET, port: port), .any(family: AF_INET6, port: port)) }
        if interface == "localhost" || interface == "loopback" {
            return (SocketAddress(numericHost: "127.0.0.1", port: port), SocketAddress(numericHost: "::1", port: port))
        }
        let numeric = SocketAddress(numericHost: interface, port: port)
        var v4: SocketAddress?
        var v6: SocketAddress?
        for entry in Posix.interfaceAddresses() {
            let matches = entry.name == interface || (numeric.map { $0.addressBytes == entry.address.addressBytes } ?? false)
            guard matches else { continue }
            if entry.address.family == AF_INET, v4 == nil { v4 = entry.address.withPort(port) }
            if entry.address.family == AF_INET6, v6 == nil { v6 = entry.address.withPort(port) }
        }
        return (v4, v6)
    }

    /// The interface entry of `interface` for `family` (multicast), nil for any.
    static func interfaceEntry(_ interface: String?, family: Int32) -> Posix.InterfaceAddress?? {
        guard let interface else { return .some(nil) }
        if interface == "localhost" || interface == "loopback" {
            return Posix.interfaceAddresses().first {
                $0.address.family == family && ($0.address.host == "127.0.0.1" || $0.address.host == "::1")
            }
            .map { .some($0) } ?? nil
        }
        let numeric = SocketAddress(numericHost: interface, port: 0)
        let entry = Posix.interfaceAddresses().first { entry in
            entry.address.family == family
                && (entry.name == interface || (numeric.map { $0.addressBytes == entry.address.addressBytes } ?? false))
        }
        guard let entry else { return nil }
        return .some(entry)
    }

    // MARK: binding

    /// Binds to `port` on every interface (`bindToPort:error:`); 0 for a port of the kernel's choice
    /// (each family its own, as GCDAsyncUdpSocket's).
    public func bind(toPort port: UInt16) throws {
        try bind(toPort: port, interface: nil)
    }

    /// Binds to `port` on `interface`: nil for any, `localhost`/`loopback`, an interface's name (`lo`,
    /// `eth0`) or one of its addresses (`bindToPort:interface:error:`).
    public func bind(toPort port: UInt16, interface: String?) throws {
        try update { state in
            try Self.checkBindable(state)
            let (v4, v6) = Self.interfaceAddresses(interface, port: Int(port))
            guard v4 != nil || v6 != nil else {
                throw GCDAsyncUdpSocketError(
                    .badParamError, message: "Unknown interface. Specify valid interface by name (e.g. \"en1\") or IP address.")
            }
            let use4 = v4 != nil && state.ipv4Enabled
            let use6 = v6 != nil && state.ipv6Enabled
            guard use4 || use6 else {
                throw GCDAsyncUdpSocketError(
                    .badParamError, message: "Interface does not have a usable IP address of an enabled family.")
            }
            try Self.makeSockets(&state, self, families: (use4 ? [AF_INET] : []) + (use6 ? [AF_INET6] : []))
            try Self.bind(&state, v4: use4 ? v4 : nil, v6: use6 ? v6 : nil)
        }
    }

    /// Binds to one IPv4 or IPv6 `sockaddr` (`bindToAddress:error:`).
    public func bind(toAddress localAddr: Data) throws {
        try update { state in
            try Self.checkBindable(state)
            guard let address = Self.socketAddress(localAddr) else {
                throw GCDAsyncUdpSocketError(.badParamError, message: "A valid IPv4 or IPv6 address was not given")
            }
            guard address.family == AF_INET ? state.ipv4Enabled : state.ipv6Enabled else {
                throw GCDAsyncUdpSocketError(
                    .badParamError, message: "Cannot bind to an address of a family that has been disabled.")
            }
            try Self.makeSockets(&state, self, families: [address.family])
            try Self.bind(&state, v4: address.family == AF_INET ? address : nil, v6: address.family == AF_INET6 ? address : nil)
        }
    }

    private static func checkBindable(_ state: UdpState) throws {
        try checkConfiguration(state)
        guard !state.bound else { throw GCDAsyncUdpSocketError(.badConfigError, message: "Cannot bind a socket more than once.") }
        guard !state.connecting, !state.connected else {
            throw GCDAsyncUdpSocketError(.badConfigError, message: "Cannot bind after connecting. If needed, bind first, then connect.")
        }
        guard state.ipv4Enabled || state.ipv6Enabled else {
            throw GCDAsyncUdpSocketError(
                .badConfigError, message: "Both IPv4 and IPv6 have been disabled. Must enable at least one protocol first.")
        }
    }

    /// Binds the sockets to `v4` and `v6` (nil: that family is not used, and deactivated); on a failure
    /// closes both, as GCDAsyncUdpSocket does.
    private static func bind(_ state: inout UdpState, v4: SocketAddress?, v6: SocketAddress?) throws {
        do {
            if let v4, let socket = state.socket4 { try socket.bind(to: v4) }
            if let v6, let socket = state.socket6 {
                // With port 0 each family gets a port of its own, as GCDAsyncUdpSocket's.
                try socket.bind(to: v6)
            }
        } catch {
            state.drop(AF_INET)
            state.drop(AF_INET6)
            throw posixError(error, reason: "Error in bind() function")
        }
        state.bound = true
        state.didBind = true
        if v4 == nil { state.deactivated4 = true }
        if v6 == nil { state.deactivated6 = true }
    }

    // MARK: connecting

    /// Connects to `host` and `port` (`connectToHost:onPort:error:`): the look-up starts now, the
    /// connect happens in turn with the sends queued before it, and the outcome arrives as
    /// `udpSocket(_:didConnectToAddress:)` or `udpSocket(_:didNotConnect:)`.
    public func connect(toHost host: String, onPort port: UInt16) throws {
        let id = try state.withLock { state -> UInt64 in
            try Self.checkConnectable(state)
            try Self.makeSockets(&state, self, families: [AF_INET, AF_INET6])
            state.connecting = true
            return Self.enqueue(&state, kind: .connect, target: .host(nil))
        }
        startLookup(id: id, host: host, port: Int(port))
    }

    /// Connects to one IPv4 or IPv6 `sockaddr` (`connectToAddress:error:`); the outcome arrives as
    /// for ``connect(toHost:onPort:)``.
    public func connect(toAddress remoteAddr: Data) throws {
        try state.withLock { state in
            try Self.checkConnectable(state)
            guard let address = Self.socketAddress(remoteAddr) else {
                throw GCDAsyncUdpSocketError(.badParamError, message: "A valid IPv4 or IPv6 address was not given")
            }
            try Self.makeSockets(&state, self, families: [address.family])
            state.connecting = true
            _ = Self.enqueue(&state, kind: .connect, target: .address(address))
        }
        advance()
    }

    private static func checkConnectable(_ state: UdpState) throws {
        try checkConfiguration(state)
        guard !state.connecting, !state.connected else {
            throw GCDAsyncUdpSocketError(.badConfigError, message: "Cannot connect a socket more than once.")
        }
        guard state.ipv4Enabled || state.ipv6Enabled else {
            throw GCDAsyncUdpSocketError(
                .badConfigError, message: "Both IPv4 and IPv6 have been disabled. Must enable at least one protocol first.")
        }
    }

    // MARK: multicast, broadcast, port reuse

    /// Joins `group` on any interface (`joinMulticastGroup:error:`).
    public func joinMulticastGroup(_ group: String) throws { try joinMulticastGroup(group, onInterface: nil) }

    /// Joins `group` on `interface` (`joinMulticastGroup:onInterface:error:`): `IP_ADD_MEMBERSHIP` for an
    /// IPv4 group, `IPV6_JOIN_GROUP` for an IPv6 one; the socket of the other family is closed, as
    /// GCDAsyncUdpSocket closes it.
    public func joinMulticastGroup(_ group: String, onInterface interface: String?) throws {
        try changeMembership(join: true, group: group, interface: interface)
    }

    /// Leaves `group` (`leaveMulticastGroup:error:`).
    public func leaveMulticastGroup(_ group: String) throws { try leaveMulticastGroup(group, onInterface: nil) }

    /// Leaves `group` on `interface` (`leaveMulticastGroup:onInterface:error:`).
    public func leaveMulticastGroup(_ group: String, onInterface interface: String?) throws {
        try changeMembership(join: false, group: group, interface: interface)
    }

    private func changeMembership(join: Bool, group: String, interface: String?) throws {
        try update { state in
            try Self.checkConfiguration(state)
            guard state.bound else {
                throw GCDAsyncUdpSocketError(.badConfigError, message: "Must bind a socket before joining a multicast group.")
            }
            guard !state.connecting, !state.connected else {
                throw GCDAsyncUdpSocketError(.badConfigError, message: "Cannot join a multicast group if connected.")
            }
            guard let groupAddress = SocketAddress(numericHost: group, port: 0) else {
                throw GCDAsyncUdpSocketError(.badParamError, message: "Unknown group. Specify valid group IP address.")
            }
            let family = groupAddress.family
            guard let socket = state.socket(family), let entry = Self.interfaceEntry(interface, family: family) else {
                throw GCDAsyncUdpSocketError(.badParamError, message: "Socket, group, and interface do not have matching IP versions")
            }
            do {
                try socket.setMembership(join, group: groupAddress, interface: entry)
            } catch {
                throw Self.posixError(error, reason: "Error in setsockopt() function")
            }
            state.drop(family == AF_INET ? AF_INET6 : AF_INET)
        }
    }

    /// Sends IPv4 multicast datagrams through `interface` (`sendIPv4MulticastOnInterface:error:`):
    /// `IP_MULTICAST_IF` with its address.
    public func sendIPv4Multicast(onInterface interface: String) throws {
        try setMulticastInterface(interface, family: AF_INET)
    }

    /// Sends IPv6 multicast datagrams through `interface` (`sendIPv6MulticastOnInterface:error:`):
    /// `IPV6_MULTICAST_IF` with its index.
    public func sendIPv6Multicast(onInterface interface: String) throws {
        try setMulticastInterface(interface, family: AF_INET6)
    }

    private func setMulticastInterface(_ interface: String, family: Int32) throws {
        try state.withLock { state in
            try Self.checkConfiguration(state)
            try Self.makeSockets(&state, self, families: [family])
            guard let socket = state.socket(family), let found = Self.interfaceEntry(interface, family: family), let entry = found else {
                throw GCDAsyncUdpSocketError(
                    .badParamError, message: "Unknown interface. Specify valid interface by name (e.g. \"en1\") or IP address.")
            }
            do {
                try socket.setMulticastInterface(entry)
            } catch {
                throw Self.posixError(error, reason: "Error in setsockopt() function")
            }
        }
    }

    /// Lets other sockets bind this port too (`enableReusePort:error:`): `SO_REUSEPORT`, and
    /// `SO_REUSEADDR` so multicast receivers share a port as they do on Darwin. Call before binding;
    /// every socket sharing the port must ask. Without it no reuse option is set: on Linux
    /// `SO_REUSEADDR` alone lets another process bind the same port and take its datagrams.
    public func enableReusePort(_ flag: Bool) throws {
        try state.withLock { state in
            try Self.checkConfiguration(state)
            try Self.makeSockets(&state, self, families: [AF_INET, AF_INET6])
            let sockets = [state.socket4, state.socket6].compactMap { $0 }
            guard !sockets.isEmpty else { throw GCDAsyncUdpSocketError(.badConfigError, message: "No socket to set the option on.") }
            do {
                for socket in sockets {
                    try socket.setOption(level: SOL_SOCKET, name: SO_REUSEPORT, value: flag ? 1 : 0)
                    try socket.setOption(level: SOL_SOCKET, name: SO_REUSEADDR, value: flag ? 1 : 0)
                }
            } catch {
                throw Self.posixError(error, reason: "Error in setsockopt() function")
            }
        }
    }

    /// Allows (or forbids) sends to a broadcast address (`enableBroadcast:error:`): `SO_BROADCAST` on
    /// the IPv4 socket (IPv6 has no broadcast).
    public func enableBroadcast(_ flag: Bool) throws {
        try state.withLock { state in
            try Self.checkConfiguration(state)
            try Self.makeSockets(&state, self, families: [AF_INET])
            guard let socket = state.socket4 else {
                throw GCDAsyncUdpSocketError(
                    .badConfigError, message: "Broadcast needs an IPv4 socket, and IPv4 is disabled or was closed.")
            }
            do {
                try socket.setOption(level: SOL_SOCKET, name: SO_BROADCAST, value: flag ? 1 : 0)
            } catch {
                throw Self.posixError(error, reason: "Error in setsockopt() function")
            }
        }
    }
}
