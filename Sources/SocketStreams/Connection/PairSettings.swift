// What a pair is set to, as typed values (the proxy, TLS, the connect timeout, the local binding, the
// traffic class), the rules for when each may change, and the handshake stages they ask for at open.
// A value with no I/O and no locks: the connection keeps one in its options and carries out what a
// change leaves it to do (`PairSettings.Effect`); `PairSettingsTests` checks the rules as a table.
// The Properties layer maps CFNetwork's property spellings onto `Change`s and reads the values
// back; nothing here names a property key.

import CSocketStreamsShims
import Foundation
import Glibc

/// The settings few pairs change, kept in `PairOptions` so a pair that sets none carries none.
struct PairSettings {
    var proxy: ProxyConfiguration?
    /// The pair's target as the proxy is asked for it (worked out once, when the proxy is set).
    var proxyTarget: ProxyTarget?
    /// In seconds; nil or 0: no limit.
    var connectTimeout: Double?
    var localBinding: LocalBinding?
    /// Whether the connect uses TCP Fast Open (`TCP_FASTOPEN_CONNECT`): the first bytes written go in
    /// the SYN once the kernel holds a cookie for the peer.
    var fastOpen = false
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
        proxy.map { .host(IDNA.asciiOrSame($0.host), port: $0.port) }
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

// MARK: the rules of change

extension PairSettings {
    /// A change the Properties layer asks for, each with the values that set it as given (for reading back).
    enum Change {
        /// TLS (nil: none).
        case tls(TLSSettings?, asSet: [String: AnyObject])
        /// A proxy (nil: none).
        case proxy(ProxyConfiguration?, asSet: [String: AnyObject])
        /// The longest the open may take, in seconds (0: no limit).
        case connectTimeout(Double)
        /// Where outgoing connections come from (nil: anywhere).
        case localBinding(LocalBinding?)
        /// TCP Fast Open on the connect, or not.
        case fastOpen(Bool)
        /// The traffic class (nil: none), with the name it was set with.
        case trafficClass(TrafficClass?, asSet: String?)

        /// Whether the change only clears a setting (one a pair with no settings need not store).
        var clears: Bool {
            switch self {
            case .tls(let tls, _): return tls == nil
            case .proxy(let proxy, _): return proxy == nil
            case .connectTimeout: return false
            case .localBinding(let binding): return binding == nil
            case .fastOpen(let on): return !on
            case .trafficClass(let trafficClass, _): return trafficClass == nil
            }
        }
    }

    /// Where the pair is, as far as the rules of change go.
    enum Moment: Equatable {
        /// Not opened yet.
        case idle
        /// TCP connects.
        case connecting
        /// Live; `tlsStarted`: a TLS handshake has been queued or started, or TLS is up.
        case live(tlsStarted: Bool)
        /// Negotiating, failed or closed.
        case settled
    }

    /// What the connection does once a change is taken.
    enum Effect: Equatable {
        /// Not taken: nothing changed.
        case refused
        /// Taken; the connection has nothing more to do.
        case taken
        /// Taken on a live plain pair: start TLS now (STARTTLS).
        case startTLS
        /// Taken: mark a connected socket's traffic with the new class (the standard one for nil).
        case markSocket
    }

    /// Applies `change` to a pair for `target` at `moment`, by the rules below, and says what is left
    /// for the connection to do.
    /// - TLS: before TCP is up it waits for the open; on a live plain pair it starts now; once a TLS
    ///   handshake has started it cannot change (turning it off on a plain live pair changes nothing).
    /// - A proxy: before open only, on a pair made for a host and port, and only a configuration the
    ///   proxy can be sent (`ProxyValidation`).
    /// - The connect timeout: before open only. The local binding and TCP Fast Open: before open, on
    ///   a host pair only.
    /// - The traffic class: at any time but on a Unix-domain pair.
    mutating func apply(_ change: Change, at moment: Moment, target: Endpoint) -> Effect {
        switch change {
        case .tls(let tls, let asSet):
            switch moment {
            case .idle, .connecting:
                (self.tls, tlsAsSet) = (tls, asSet)
                return .taken
            case .live(tlsStarted: false):
                guard let tls else { return .taken }
                (self.tls, tlsAsSet) = (tls, asSet)
                return .startTLS
            case .live(tlsStarted: true), .settled:
                return .refused
            }
        case .proxy(let proxy, let asSet):
            guard moment == .idle, let proxyTarget = ProxyTarget(target) else { return .refused }
            if let proxy, !ProxyValidation.accepts(proxy, target: proxyTarget) { return .refused }
            self.proxy = proxy
            self.proxyTarget = proxy == nil ? nil : proxyTarget
            proxyAsSet = proxy == nil ? [:] : asSet
        case .connectTimeout(let seconds):
            guard moment == .idle else { return .refused }
            connectTimeout = seconds
        case .localBinding(let binding):
            guard moment == .idle, case .host = target else { return .refused }
            localBinding = binding
        case .fastOpen(let on):
            guard moment == .idle, case .host = target else { return .refused }
            fastOpen = on
        case .trafficClass(let trafficClass, let name):
            if case .unix = target { return .refused }
            (self.trafficClass, trafficClassAsSet) = (trafficClass, name)
            return .markSocket
        }
        return .taken
    }
}
