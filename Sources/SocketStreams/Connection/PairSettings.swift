// What a pair is set to, as typed values: the proxy, TLS, the connect timeout, the local binding,
// no-delay and whether the native socket closes with the pair. The Properties layer maps CFNetwork's
// property spellings onto these setters and reads them back; nothing here names a property key.
// `PairSettings` builds the handshake stages the settings ask for at open.

import CSocketStreamsShims
import Foundation
import Glibc

/// The settings few pairs change, kept in `Connection.Options` so a pair that sets none carries none.
struct PairSettings {
    var proxy: ProxyConfiguration?
    /// The pair's target as the proxy is asked for it (worked out once, when the proxy is set).
    var proxyTarget: ProxyTarget?
    /// In seconds; nil or 0: no limit.
    var connectTimeout: Double?
    var localBinding: LocalBinding?
    /// What the socket's traffic is marked with, and the name it was set with (for reading back).
    var trafficClass: TrafficClass?
    var trafficClassAsSet: String?
    /// TLS to run after TCP (and a proxy), if any.
    var tls: TLSSettings?
    /// The values that set TLS and the proxy as the client gave them, by property name: kept with
    /// the setting they made, for reading back (the Properties layer fills them in).
    var tlsAsSet: [String: AnyObject] = [:]
    var proxyAsSet: [String: AnyObject] = [:]

    /// What is dialled when it is not the target: the proxy.
    var firstHop: Endpoint? {
        proxy.map { .host($0.host, port: $0.port) }
    }

    /// The stages the settings ask for at open: the proxy's, then TLS. `resume` gives, for the TLS
    /// settings, what runs the stages again when one waited for something other than the socket (a
    /// trust evaluation's answer); see `Connection.resumer(for:)`.
    func stages(for target: Endpoint, resume: (TLSSettings) -> @Sendable () -> Void) -> [any HandshakeStage] {
        var stages: [any HandshakeStage] = []
        if let proxy, let proxyTarget {
            stages.append(ProxyHandshake(configuration: proxy, target: proxyTarget))
        }
        if let tls { stages.append(TLSHandshake(settings: tls, target: target, resume: resume(tls))) }
        return stages
    }
}

extension Connection {
    /// The pair's settings (the defaults when none was set). Lock held.
    var settings: PairSettings {
        options?.settings ?? PairSettings()
    }

    /// The TLS transport in use, once its handshake is done. Lock held.
    var activeTLS: TLSTransport? {
        if case .layered(let layered)? = transport { return layered as? TLSTransport }
        return nil
    }

    /// Whether a TLS handshake has been queued or started, or TLS is up. Lock held.
    private var tlsStarted: Bool {
        activeTLS != nil || opening.stages.contains { $0 is TLSHandshake }
    }

    /// TLS (nil: none), with the values that set it as given. Before TCP is up it waits for the open;
    /// on a live plain pair it starts now (STARTTLS); once a TLS handshake has started it cannot
    /// change. Lock held. Returns whether it was taken.
    func setTLS(_ tls: TLSSettings?, asSet: [String: AnyObject]) -> Bool {
        lock.assertHeld()
        switch phase {
        case .idle, .connecting:
            someOptions.settings.tls = tls
            someOptions.settings.tlsAsSet = asSet
            return true
        case .live:
            guard !tlsStarted else { return false }
            guard let tls else { return true }  // no TLS on a plain pair: nothing to do
            someOptions.settings.tls = tls
            someOptions.settings.tlsAsSet = asSet
            return queueStage(TLSHandshake(settings: tls, target: target, resume: resumer(for: tls)))
        case .negotiating, .failed, .closed:
            return false
        }
    }

    /// A proxy (nil: none), with the values that set it as given. Before open only, on a pair made for
    /// a host and port, and only a configuration the proxy can be sent (`ProxyValidation`). Lock held.
    func setProxy(_ proxy: ProxyConfiguration?, asSet: [String: AnyObject]) -> Bool {
        lock.assertHeld()
        guard lifecycle.isIdle, let proxyTarget = ProxyTarget(target) else { return false }
        if let proxy {
            guard ProxyValidation.accepts(proxy, target: proxyTarget) else { return false }
        }
        someOptions.settings.proxy = proxy
        someOptions.settings.proxyTarget = proxy == nil ? nil : proxyTarget
        someOptions.settings.proxyAsSet = proxy == nil ? [:] : asSet
        return true
    }

    /// The longest the open may take, in seconds (0: no limit). Before open only. Lock held.
    func setConnectTimeout(_ seconds: Double) -> Bool {
        lock.assertHeld()
        guard lifecycle.isIdle else { return false }
        someOptions.settings.connectTimeout = seconds
        return true
    }

    /// Where outgoing connections come from (nil: anywhere). Before open only, on a pair made for a
    /// host and port. Lock held.
    func setLocalBinding(_ binding: LocalBinding?) -> Bool {
        lock.assertHeld()
        guard lifecycle.isIdle, case .host = target else { return false }
        if let binding {
            someOptions.settings.localBinding = binding
        } else {
            options?.settings.localBinding = nil
        }
        return true
    }

    /// `TCP_NODELAY`, now if the socket is up, else once it is; refused on Unix-domain pairs. Lock held.
    func setNoDelay(_ flag: Bool) -> Bool {
        lock.assertHeld()
        if case .unix = target { return false }
        noDelay = flag
        if let socket {
            try? Posix.setOption(socket.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: flag ? 1 : 0)
        }
        return true
    }

    /// The traffic class (nil: none), with the name it was set with; at once on a connected pair, else
    /// when TCP is up. Refused on Unix-domain pairs. Lock held.
    func setTrafficClass(_ trafficClass: TrafficClass?, asSet name: String?) -> Bool {
        lock.assertHeld()
        if case .unix = target { return false }
        if trafficClass != nil || options != nil {
            someOptions.settings.trafficClass = trafficClass
            someOptions.settings.trafficClassAsSet = name
        }
        if let socket { (trafficClass ?? .standard).apply(to: socket.fd) }
        return true
    }

    /// Whether the fd is closed with the pair; may change at any time. Lock held.
    func setClosesNativeSocket(_ flag: Bool) {
        lock.assertHeld()
        closesNativeSocket = flag
        closesNativeSocketWasSet = true
        socket?.closesOnRelease = flag
    }

    /// Whether the output was shut (`shutdownOutput`). Lock held.
    var outputShutDown: Bool {
        options?.outputShutDown ?? false
    }

    /// The socket's own address (`getsockname(2)`); nil before it is connected and once it is closed.
    /// Under the lock, so the fd cannot be closed (and its number reused) during the call.
    var localAddress: SocketAddress? {
        lock.withLock { socket.flatMap { try? Posix.localAddress($0.fd) } }
    }
}
