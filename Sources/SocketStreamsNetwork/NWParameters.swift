// `NWParameters`: the protocol stack and the path constraints of a connection or listener, as
// Network.framework declares them, with its defaults. Linux has no peer-to-peer links, no multipath TCP
// service modes and no Low Data Mode: those values are kept (code that sets them builds and reads them
// back) and change nothing; the later connection slice documents which it acts on.

import Foundation

/// The protocols, options and path constraints of connections and listeners: Network.framework's
/// `NWParameters` (a final class, `CustomDebugStringConvertible`, `Sendable`).
// @unchecked Sendable: the values are in a `Guarded` state, the stack is a `let`.
public final class NWParameters: CustomDebugStringConvertible, @unchecked Sendable {
    /// An ordered set of protocol options, top (application) first: Network.framework's
    /// `NWParameters.ProtocolStack` (a class, so `parameters.defaultProtocolStack.applicationProtocols
    /// .insert(…, at: 0)` changes the parameters' own stack).
    // @unchecked Sendable: the values are in a `Guarded` state.
    public final class ProtocolStack: @unchecked Sendable {
        struct Values {
            var applicationProtocols: [NWProtocolOptions]
            var transportProtocol: NWProtocolOptions?
            /// Made when first asked for: most stacks never are, and every connection's parameters hold
            /// one.
            var internetProtocol: NWProtocolOptions?
        }

        let values: Guarded<Values>

        init(application: [NWProtocolOptions], transport: NWProtocolOptions?) {
            let values = Values(applicationProtocols: application, transportProtocol: transport, internetProtocol: nil)
            self.values = Guarded(values)
        }

        init(copying other: ProtocolStack) {
            let old = other.values.withLock { $0 }
            values = Guarded(
                Values(
                    applicationProtocols: old.applicationProtocols.map { $0.copied() },
                    transportProtocol: old.transportProtocol?.copied(),
                    internetProtocol: old.internetProtocol?.copied()))
        }

        /// The protocols above the transport, top first: TLS for `.tls`, and what code inserts (a framer,
        /// WebSocket) (`NWParameters.ProtocolStack.applicationProtocols`).
        public var applicationProtocols: [NWProtocolOptions] {
            get { values[\.applicationProtocols] }
            set { values[\.applicationProtocols] = newValue }
        }
        /// The transport's options: an `NWProtocolTCP.Options` or `NWProtocolUDP.Options`, nil for
        /// `NWParameters()` (`NWParameters.ProtocolStack.transportProtocol`).
        public var transportProtocol: NWProtocolOptions? {
            get { values[\.transportProtocol] }
            set { values[\.transportProtocol] = newValue }
        }
        /// IP's options, an `NWProtocolIP.Options`, in every stack (`NWParameters.ProtocolStack.internetProtocol`).
        public var internetProtocol: NWProtocolOptions? {
            values.withLock { values in
                if values.internetProtocol == nil { values.internetProtocol = NWProtocolIP.Options() }
                return values.internetProtocol
            }
        }
    }

    /// Whether connections may use multipath TCP: Network.framework's `NWParameters.MultipathServiceType`.
    /// Linux's MPTCP is not used: any value other than `.disabled` is kept and the connection is plain TCP.
    public enum MultipathServiceType: Hashable, Sendable {
        /// No multipath (`NWParameters.MultipathServiceType.disabled`; the default).
        case disabled
        /// Hand over between interfaces (`NWParameters.MultipathServiceType.handover`).
        case handover
        /// Use the lowest-latency interface (`NWParameters.MultipathServiceType.interactive`).
        case interactive
        /// Use every interface at once (`NWParameters.MultipathServiceType.aggregate`).
        case aggregate
    }

    /// The traffic's kind: Network.framework's `NWParameters.ServiceClass`. On Linux it marks the
    /// socket's DSCP and queueing priority, as SocketStreams' network service types do.
    public enum ServiceClass: Hashable, Sendable {
        /// Ordinary traffic (`NWParameters.ServiceClass.bestEffort`; the default).
        case bestEffort
        /// Bulk, delay-tolerant traffic (`NWParameters.ServiceClass.background`).
        case background
        /// Interactive video (`NWParameters.ServiceClass.interactiveVideo`).
        case interactiveVideo
        /// Interactive voice (`NWParameters.ServiceClass.interactiveVoice`).
        case interactiveVoice
        /// Responsive data, such as requests a user waits for (`NWParameters.ServiceClass.responsiveData`).
        case responsiveData
        /// Signalling, such as call set-up (`NWParameters.ServiceClass.signaling`).
        case signaling
    }

    /// Whether expired DNS answers may be used: Network.framework's `NWParameters.ExpiredDNSBehavior`.
    /// Linux's resolver keeps no expired answers, so every value resolves afresh.
    public enum ExpiredDNSBehavior: Hashable, Sendable {
        /// The system's choice (`NWParameters.ExpiredDNSBehavior.systemDefault`; the default).
        case systemDefault
        /// Expired answers may be used (`NWParameters.ExpiredDNSBehavior.allow`).
        case allow
        /// Expired answers may not be used (`NWParameters.ExpiredDNSBehavior.prohibit`).
        case prohibit
        /// Expired answers are kept and used persistently (`NWParameters.ExpiredDNSBehavior.persistent`).
        case persistent
    }

    struct Values: Hashable {
        var requiredInterface: NWInterface?
        var requiredInterfaceType = NWInterface.InterfaceType.other
        var prohibitedInterfaces: [NWInterface]?
        var prohibitedInterfaceTypes: [NWInterface.InterfaceType]?
        var requiredLocalEndpoint: NWEndpoint?
        var prohibitExpensivePaths = false
        var prohibitConstrainedPaths = false
        var allowLocalEndpointReuse = false
        var acceptLocalOnly = false
        var allowFastOpen = false
        var preferNoProxies = false
        var includePeerToPeer = false
        var requiresDNSSECValidation = false
        var serviceClass = ServiceClass.bestEffort
        var multipathServiceType = MultipathServiceType.disabled
        var expiredDNSBehavior = ExpiredDNSBehavior.systemDefault
    }

    let values: Guarded<Values>

    /// The protocol stack connections and listeners with these parameters use
    /// (`NWParameters.defaultProtocolStack`).
    public let defaultProtocolStack: ProtocolStack

    private init(stack: ProtocolStack, values: Values = Values()) {
        defaultProtocolStack = stack
        self.values = Guarded(values)
    }

    /// Parameters with no protocols: an empty stack above IP (`NWParameters.init()`).
    public convenience init() {
        self.init(stack: ProtocolStack(application: [], transport: nil))
    }

    /// TLS (if `tls` is given) over TCP with these options (`NWParameters.init(tls:tcp:)`).
    public convenience init(tls: NWProtocolTLS.Options?, tcp: NWProtocolTCP.Options = NWProtocolTCP.Options()) {
        self.init(stack: ProtocolStack(application: tls.map { [$0] } ?? [], transport: tcp))
    }

    /// DTLS (if `dtls` is given) over UDP with these options (`NWParameters.init(dtls:udp:)`). DTLS itself
    /// comes with the TLS slice; until then a connection given DTLS options refuses them with a clear error.
    public convenience init(dtls: NWProtocolTLS.Options?, udp: NWProtocolUDP.Options = NWProtocolUDP.Options()) {
        self.init(stack: ProtocolStack(application: dtls.map { [$0] } ?? [], transport: udp))
    }

    /// New parameters for TCP with its defaults (`NWParameters.tcp`).
    public class var tcp: NWParameters { NWParameters(tls: nil) }
    /// New parameters for TLS over TCP with their defaults (`NWParameters.tls`).
    public class var tls: NWParameters { NWParameters(tls: NWProtocolTLS.Options()) }
    /// New parameters for UDP with its defaults (`NWParameters.udp`).
    public class var udp: NWParameters { NWParameters(dtls: nil) }
    /// New parameters for DTLS over UDP with their defaults (`NWParameters.dtls`).
    public class var dtls: NWParameters { NWParameters(dtls: NWProtocolTLS.Options()) }

    /// A deep copy: its own stack and its own options objects, the same values (`NWParameters.copy()`).
    public func copy() -> NWParameters {
        NWParameters(stack: ProtocolStack(copying: defaultProtocolStack), values: values.withLock { $0 })
    }

    /// A copy no one changes, what a connection keeps of the parameters it was made with: parameters of
    /// plain values (no application protocols such as TLS, whose options hold blocks and identities; a
    /// transport and IP options with a ``NWProtocolOptions/sharingKey``) share one, so that thousands of connections made with `.tcp` hold one graph of options rather than
    /// one each. Never handed to code outside the module (`NWConnection.parameters` copies it again).
    func frozen() -> NWParameters {
        guard let key = sharingKey else { return copy() }
        if let shared = Self.frozenCopies.withLock({ $0[key] }) { return shared }
        let made = copy()
        return Self.frozenCopies.withLock { copies in
            if let shared = copies[key] { return shared }
            if copies.count >= Self.frozenCapacity { copies.removeAll() }  // an unusual program: start again
            copies[key] = made
            return made
        }
    }

    /// What makes two parameters act alike, nil unless they can be shared.
    private var sharingKey: FrozenKey? {
        let (values, stack) = (self.values.withLock { $0 }, defaultProtocolStack.values.withLock { $0 })
        guard stack.applicationProtocols.isEmpty else { return nil }
        var transport: OptionsSharingKey?
        if let options = stack.transportProtocol {
            guard let key = options.sharingKey else { return nil }
            transport = key
        }
        var internet: OptionsSharingKey?
        if let options = stack.internetProtocol {
            guard let key = options.sharingKey else { return nil }
            internet = key
        }
        return FrozenKey(values: values, transport: transport, internet: internet)
    }

    /// Parameters with no application protocols: their values and their transport's and IP's options
    /// (nil: none, or IP's not made yet, which is its defaults).
    private struct FrozenKey: Hashable {
        let values: Values
        let transport: OptionsSharingKey?
        let internet: OptionsSharingKey?
    }

    /// The frozen copies by what they hold; bounded, as a program that makes parameters of ever new values
    /// (a new local port each) must not grow it.
    private static let frozenCopies = Guarded<[FrozenKey: NWParameters]>([:])
    private static let frozenCapacity = 64

    /// The one interface connections must use, nil for any (`NWParameters.requiredInterface`).
    public var requiredInterface: NWInterface? {
        get { values[\.requiredInterface] }
        set { values[\.requiredInterface] = newValue }
    }
    /// The kind of interface connections must use; `.other` (the default) requires none
    /// (`NWParameters.requiredInterfaceType`).
    public var requiredInterfaceType: NWInterface.InterfaceType {
        get { values[\.requiredInterfaceType] }
        set { values[\.requiredInterfaceType] = newValue }
    }
    /// Interfaces connections must not use (`NWParameters.prohibitedInterfaces`; default nil).
    public var prohibitedInterfaces: [NWInterface]? {
        get { values[\.prohibitedInterfaces] }
        set { values[\.prohibitedInterfaces] = newValue }
    }
    /// Kinds of interface connections must not use (`NWParameters.prohibitedInterfaceTypes`; default nil).
    public var prohibitedInterfaceTypes: [NWInterface.InterfaceType]? {
        get { values[\.prohibitedInterfaceTypes] }
        set { values[\.prohibitedInterfaceTypes] = newValue }
    }
    /// The local address and port to bind to, nil for the system's choice (`NWParameters.requiredLocalEndpoint`).
    public var requiredLocalEndpoint: NWEndpoint? {
        get { values[\.requiredLocalEndpoint] }
        set { values[\.requiredLocalEndpoint] = newValue }
    }
    /// Keeps connections off paths marked expensive (`NWParameters.prohibitExpensivePaths`; default false).
    /// Linux marks no path expensive, so it excludes nothing.
    public var prohibitExpensivePaths: Bool {
        get { values[\.prohibitExpensivePaths] }
        set { values[\.prohibitExpensivePaths] = newValue }
    }
    /// Keeps connections off paths constrained by Low Data Mode (`NWParameters.prohibitConstrainedPaths`;
    /// default false). Linux has no Low Data Mode, so it excludes nothing.
    public var prohibitConstrainedPaths: Bool {
        get { values[\.prohibitConstrainedPaths] }
        set { values[\.prohibitConstrainedPaths] = newValue }
    }
    /// Lets connections and listeners reuse a local address and port, `SO_REUSEADDR` and `SO_REUSEPORT`
    /// (`NWParameters.allowLocalEndpointReuse`; default false).
    public var allowLocalEndpointReuse: Bool {
        get { values[\.allowLocalEndpointReuse] }
        set { values[\.allowLocalEndpointReuse] = newValue }
    }
    /// Restricts a listener to peers on the local link (`NWParameters.acceptLocalOnly`; default false).
    public var acceptLocalOnly: Bool {
        get { values[\.acceptLocalOnly] }
        set { values[\.acceptLocalOnly] = newValue }
    }
    /// Lets application data go out with the handshake, TCP Fast Open with `.idempotent` sends
    /// (`NWParameters.allowFastOpen`; default false).
    public var allowFastOpen: Bool {
        get { values[\.allowFastOpen] }
        set { values[\.allowFastOpen] = newValue }
    }
    /// Ignores the system's proxies (`NWParameters.preferNoProxies`; default false). SocketStreams'
    /// connections use no system proxy, so either value connects directly.
    public var preferNoProxies: Bool {
        get { values[\.preferNoProxies] }
        set { values[\.preferNoProxies] = newValue }
    }
    /// Allows peer-to-peer links such as AWDL (`NWParameters.includePeerToPeer`; default false). Linux has
    /// none: the value is kept and changes nothing.
    public var includePeerToPeer: Bool {
        get { values[\.includePeerToPeer] }
        set { values[\.includePeerToPeer] = newValue }
    }
    /// Requires DNSSEC-validated answers (`NWParameters.requiresDNSSECValidation`; default false). The
    /// system resolver does not report validation, so a connection that requires it refuses with a clear error.
    public var requiresDNSSECValidation: Bool {
        get { values[\.requiresDNSSECValidation] }
        set { values[\.requiresDNSSECValidation] = newValue }
    }
    /// The traffic's service class (`NWParameters.serviceClass`; default `.bestEffort`).
    public var serviceClass: ServiceClass {
        get { values[\.serviceClass] }
        set { values[\.serviceClass] = newValue }
    }
    /// The multipath mode (`NWParameters.multipathServiceType`; default `.disabled`); see
    /// ``MultipathServiceType``.
    public var multipathServiceType: MultipathServiceType {
        get { values[\.multipathServiceType] }
        set { values[\.multipathServiceType] = newValue }
    }
    /// Whether expired DNS answers may be used (`NWParameters.expiredDNSBehavior`; default `.systemDefault`).
    public var expiredDNSBehavior: ExpiredDNSBehavior {
        get { values[\.expiredDNSBehavior] }
        set { values[\.expiredDNSBehavior] = newValue }
    }

    /// The stack's protocol names, top first ("tls, tcp, ip"), as a one-line summary
    /// (`NWParameters.debugDescription`; Apple's text differs and is not a format to parse).
    public var debugDescription: String {
        let stack = defaultProtocolStack
        let layers = stack.applicationProtocols + [stack.transportProtocol, stack.internetProtocol].compactMap { $0 }
        return layers.map { Self.name(of: $0) }.joined(separator: ", ")
    }

    private static func name(of options: NWProtocolOptions) -> String {
        switch options {
        case is NWProtocolTCP.Options: NWProtocolTCP.definition.name
        case is NWProtocolUDP.Options: NWProtocolUDP.definition.name
        case is NWProtocolIP.Options: NWProtocolIP.definition.name
        case is NWProtocolTLS.Options: NWProtocolTLS.definition.name
        case is NWProtocolWebSocket.Options: NWProtocolWebSocket.definition.name
        case is NWProtocolQUIC.Options: NWProtocolQUIC.definition.name
        default: "\(type(of: options))"
        }
    }
}
