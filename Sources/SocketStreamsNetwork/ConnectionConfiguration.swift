// What an endpoint and parameters make of a connection's stream pair: the target (a host and port, or
// a Unix path), TLS's settings, TCP's options, and where the connection comes from. What Linux cannot
// honour is refused here with a clear error (a Bonjour service, DTLS), never silently.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

/// An attempt's stream-pair configuration, from an endpoint and parameters.
struct ConnectionConfiguration {
    enum Target {
        case host(String, port: Int)
        case unix(String)
    }

    let target: Target
    let tls: TLSSettings?
    let tcp: NWProtocolTCP.Options?
    let local: LocalBinding?
    /// `NWParameters.serviceClass` as CFNetwork's network service type (the DSCP and queueing priority
    /// SocketStreams marks a pair's socket with); nil for best effort.
    let serviceType: CFString?
    /// TCP Fast Open on the connect: `NWProtocolTCP.Options.enableFastOpen` or
    /// `NWParameters.allowFastOpen` (which Apple says may enable it in the stack's protocols).
    let fastOpen: Bool

    init(endpoint: NWEndpoint, parameters: NWParameters, accepted: Bool) throws(NWError) {
        switch endpoint {
        case .hostPort(let host, let port):
            target = .host(Self.text(of: host), port: Int(port.rawValue))
        case .unix(let path):
            target = .unix(path)
        case .url(let url):
            guard let host = url.host, !host.isEmpty else { throw NWError.posix(.EINVAL) }
            let secure = ["https", "wss"].contains(url.scheme?.lowercased() ?? "")
            target = .host(host, port: url.port ?? (secure ? 443 : 80))
        case .service:
            // Bonjour: no mDNSResponder on Linux to browse or resolve with.
            throw NWError.dns(-65544)  // kDNSServiceErr_Unsupported
        }
        let stack = parameters.defaultProtocolStack
        if let transport = stack.transportProtocol, !(transport is NWProtocolTCP.Options) {
            // UDP connections are flows of their own (`DatagramFlow`) and never come here; QUIC is not
            // there at all. Never fall back to plain TCP for a transport asked for.
            throw NWError.posix(.EPROTONOSUPPORT)
        }
        tcp = stack.transportProtocol as? NWProtocolTCP.Options
        let tlsOptions = stack.applicationProtocols.compactMap { $0 as? NWProtocolTLS.Options }
        guard tlsOptions.count <= 1, FramerDriver.isSupported(stack.applicationProtocols) else {
            throw NWError.posix(.EPROTONOSUPPORT)  // a framer or WebSocket below TLS, or more than one
        }
        if let options = tlsOptions.first {
            var host: String?
            if case .host(let name, _) = target { host = name }
            tls = try options.settings(role: accepted ? .server : .client, endpointHost: host)
        } else {
            tls = nil
        }
        local = accepted ? nil : try Self.localBinding(parameters)
        serviceType = Self.serviceType(parameters.values.withLock { $0.serviceClass })
        fastOpen = !accepted && (parameters.values.withLock { $0.allowFastOpen } || tcp?.values.withLock { $0.enableFastOpen } == true)
    }

    /// The network service type a service class marks traffic with.
    static func serviceType(_ serviceClass: NWParameters.ServiceClass) -> CFString? {
        switch serviceClass {
        case .bestEffort: nil
        case .background: kCFStreamNetworkServiceTypeBackground
        case .interactiveVideo: kCFStreamNetworkServiceTypeVideo
        case .interactiveVoice: kCFStreamNetworkServiceTypeVoIP
        case .responsiveData: kCFStreamNetworkServiceTypeResponsiveData
        case .signaling: kCFStreamNetworkServiceTypeCallSignaling
        }
    }

    /// The text a stream pair is given for `host`: the name, or the numeric address (with its scope).
    static func text(of host: NWEndpoint.Host) -> String {
        switch host {
        case .name(let name, _): name
        case .ipv4(let address): address.debugDescription
        case .ipv6(let address): address.debugDescription
        }
    }

    /// Where the connection must come from: `requiredLocalEndpoint` (an address and port), else
    /// `requiredInterface` (its addresses).
    private static func localBinding(_ parameters: NWParameters) throws(NWError) -> LocalBinding? {
        let (endpoint, interface) = parameters.values.withLock { ($0.requiredLocalEndpoint, $0.requiredInterface) }
        if let endpoint {
            guard case .hostPort(let host, let port) = endpoint else { throw NWError.posix(.EINVAL) }
            var text: String? = text(of: host)
            if text == "0.0.0.0" || text == "::" { text = nil }
            guard let binding = LocalBinding(address: text, port: Int(port.rawValue)) else { throw NWError.posix(.EADDRNOTAVAIL) }
            return binding
        }
        if let interface {
            guard let binding = LocalBinding(interface: interface.name) else { throw NWError.posix(.ENXIO) }
            return binding
        }
        return nil
    }

    /// A new, unopened pair for the target.
    func makePair() throws(NWError) -> (InputStream, OutputStream) {
        switch target {
        case .host(let host, let port):
            let pair = createStreamPair(host: host, port: port)
            return (pair.input, pair.output)
        case .unix(let path):
            let pair = createStreamPair(unixSocketPath: path)
            return (pair.input, pair.output)
        }
    }

    /// Sets the pair's properties before it opens: TLS, the connect timeout, `TCP_NODELAY`, the local
    /// binding, TCP Fast Open.
    func configure(_ input: InputStream) throws(NWError) {
        if let tls, !input.setProperty(tls, forKey: .tlsSettingsKey) { throw NWError.tls(-9830) }  // errSSLIllegalParam
        if let tcp {
            let (timeout, noDelay) = tcp.values.withLock { ($0.connectionTimeout, $0.noDelay) }
            if timeout > 0 { _ = input.setProperty(NSNumber(value: timeout), forKey: .connectTimeoutKey) }
            if noDelay { _ = input.setProperty(true as NSNumber, forKey: .tcpNoDelayKey) }
        }
        if let local, !input.setProperty(local, forKey: .localBindingKey) { throw NWError.posix(.EINVAL) }
        if fastOpen, case .host = target { _ = input.setProperty(true as NSNumber, forKey: .tcpFastOpenKey) }
        if let serviceType { _ = input.setProperty(serviceType, forKey: Stream.PropertyKey(kCFStreamNetworkServiceType as String)) }
    }
}

/// TCP's options that take effect on a connected socket, set with `setsockopt(2)`.
struct TCPSocketOptions {
    let values: NWProtocolTCP.Options.Values

    init(_ options: NWProtocolTCP.Options) {
        values = options.values.withLock { $0 }
    }

    /// Keep-alive (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`), the drop time
    /// (`TCP_USER_TIMEOUT`, milliseconds), and the segment size (`TCP_MAXSEG`, which on a connected
    /// socket only lowers what is sent). 0 leaves the system's default, as on Apple platforms.
    func applyOnceConnected(to fd: Int32) {
        if values.enableKeepalive {
            set(fd, SOL_SOCKET, SO_KEEPALIVE, 1)
            if values.keepaliveIdle > 0 { set(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, values.keepaliveIdle) }
            if values.keepaliveInterval > 0 { set(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, values.keepaliveInterval) }
            if values.keepaliveCount > 0 { set(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, values.keepaliveCount) }
        }
        if values.connectionDropTime > 0 {
            set(fd, Int32(IPPROTO_TCP), TCP_USER_TIMEOUT, values.connectionDropTime.multipliedReportingOverflow(by: 1000).partialValue)
        }
        if values.maximumSegmentSize > 0 { set(fd, Int32(IPPROTO_TCP), TCP_MAXSEG, values.maximumSegmentSize) }
    }

    private func set(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int) {
        var value = Int32(clamping: value)
        _ = setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    /// `SO_LINGER` with a zero timeout: the close that follows sends a reset (`forceCancel()`).
    static func resetOnClose(_ fd: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }
}

extension NWProtocolTCP {
    /// TCP's metadata on a ready connection: Network.framework's `NWProtocolTCP.Metadata`, read from the
    /// socket when asked for.
    // @unchecked Sendable: only `let`s.
    public final class Metadata: NWProtocolMetadata, @unchecked Sendable {
        /// Bytes received and not yet read (`NWProtocolTCP.Metadata.availableReceiveBuffer`; `FIONREAD`).
        public let availableReceiveBuffer: UInt32
        /// Room left in the send buffer (`NWProtocolTCP.Metadata.availableSendBuffer`): `SO_SNDBUF`
        /// less the bytes not yet sent (`TIOCOUTQ`).
        public let availableSendBuffer: UInt32

        init(socket fd: Int32) {
            var unread: Int32 = 0
            var unsent: Int32 = 0
            var size: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            _ = ioctl(fd, UInt(FIONREAD), &unread)
            _ = ioctl(fd, UInt(TIOCOUTQ), &unsent)
            _ = getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &length)
            availableReceiveBuffer = UInt32(clamping: unread)
            availableSendBuffer = UInt32(clamping: max(0, size - unsent))
        }
    }
}
