// The transport a connection holds (`HeldTransport`, which owns it) and the view its reads, writes
// and readiness checks call it through (`ActiveTransport`, which does not).

/// The transport a connection holds, and owns: `active`, the view every call goes through, and the
/// layer's object retained (nil for the bare socket), which is what the view refers to unretained.
/// One field beside the view rather than an enum of strong references beside it: 8 bytes a
/// connection, and loading `active` from the connection copies no reference.
struct HeldTransport {
    let active: ActiveTransport
    private let owner: AnyObject?

    init(_ transport: any Transport) {
        if let socket = transport as? SocketTransport {
            self = .socket(fd: socket.fd)
        } else if let tls = transport as? TLSTransport {
            active = .tls(ActiveTransport.UnretainedTLS(tls))
            owner = tls
        } else {
            active = .layered(ActiveTransport.UnretainedLayer(transport: transport))
            owner = transport
        }
    }

    private init(socket fd: Int32) {
        active = .socket(fd: fd)
        owner = nil
    }

    /// The bare socket.
    static func socket(fd: Int32) -> HeldTransport { HeldTransport(socket: fd) }

    /// The TLS layer on top, if that is what this is.
    var tls: TLSTransport? {
        if case .tls(let tls) = active { return tls.object.takeUnretainedValue() }
        return nil
    }

    /// As a transport a stage can wrap.
    var base: any Transport {
        switch active {
        case .socket(let fd): return SocketTransport(fd: fd)
        case .tls(let tls): return tls.object.takeUnretainedValue()
        case .layered(let layer): return layer.transport
        }
    }

    /// Ends the transport (see `Transport.close`).
    func close() {
        switch active {
        case .socket: break
        case .tls(let tls): tls.object._withUnsafeGuaranteedRef { $0.close() }
        case .layered(let layer): layer.transport.close()
        }
    }
}

/// What a connection calls its transport through: the plain socket as its bare fd, called directly,
/// so the common path has neither witness-table dispatch nor reference counting; TLS unretained and
/// called directly; any other layer unretained, called as `any Transport`. (The plain socket as
/// `any Transport`, and TLS retained and released with each copy of the view a round trip makes and
/// called through its witness table, each cost a share of every round trip that this view does not:
/// Benchmarks/results/syscalls.md.)
///
/// Lifetime: the TLS and layered cases refer to what the connection's `HeldTransport` owns, so a view
/// is used only while that is certain to be held: with the connection's lock held (it changes only
/// under the lock, and nothing under it lets the connection go), or by a transfer past its gate (a
/// teardown leaves the release to the last transfer out, `TransferGate`, and a handshake stage
/// replaces a layer only by wrapping it, so the new layer holds the old).
///
/// Checked in debug builds (UnretainedChecks.swift): each case that calls a layer keeps a weak shadow
/// of it beside the unretained reference, and every call through the view first checks that the
/// shadow still names a live layer (`lifetimeProblem`). Release builds hold the reference alone.
enum ActiveTransport {
    case socket(fd: Int32)
    case tls(UnretainedTLS)
    case layered(UnretainedLayer)

    /// The TLS layer, unretained, called directly (`call`).
    struct UnretainedTLS {
        let object: Unmanaged<TLSTransport>
        #if DEBUG
            /// Debug builds only: the layer, weakly (nil once its deinit has begun), to check each call by.
            private weak var shadow: TLSTransport?
        #endif

        init(_ tls: TLSTransport) {
            object = Unmanaged.passUnretained(tls)
            #if DEBUG
                shadow = tls
            #endif
        }

        /// `body` with the layer, neither retained nor released (`_withUnsafeGuaranteedRef`).
        @inline(__always)
        func call<Result>(_ body: (TLSTransport) -> Result) -> Result {
            #if DEBUG
                UnretainedChecks.check(problem)
            #endif
            return object._withUnsafeGuaranteedRef(body)
        }

        #if DEBUG
            /// Debug builds: what each call checks first: nil, or the rule broken.
            var problem: String? { UnretainedChecks.viewProblem(target: object.toOpaque(), shadow: shadow) }
        #endif
    }

    /// Another layer, unretained as TLS is.
    struct UnretainedLayer {
        #if DEBUG
            private unowned(unsafe) let unretained: any Transport
            /// Debug builds only: the layer, weakly (nil once its deinit has begun), to check each call by.
            private weak var shadow: AnyObject?

            init(transport: any Transport) {
                unretained = transport
                shadow = transport
            }

            /// The layer, after the check (debug builds call it through here).
            var transport: any Transport {
                UnretainedChecks.check(problem)
                return unretained
            }

            /// Debug builds: what each call checks first: nil, or the rule broken. The shadow first: a
            /// freed layer's unretained reference is not touched.
            var problem: String? {
                guard let live = shadow else { return UnretainedChecks.viewProblem(target: nil, shadow: nil) }
                return UnretainedChecks.viewProblem(target: Unmanaged.passUnretained(unretained as AnyObject).toOpaque(), shadow: live)
            }
        #else
            unowned(unsafe) let transport: any Transport
        #endif
    }

    #if DEBUG
        /// Debug builds: nil, or the rule broken if the layer this view calls is gone (what each call
        /// checks first; the bare socket has no layer).
        var lifetimeProblem: String? {
            switch self {
            case .socket: return nil
            case .tls(let tls): return tls.problem
            case .layered(let layer): return layer.problem
            }
        }
    #endif

    @inline(__always)
    var fd: Int32 {
        switch self {
        case .socket(let fd): return fd
        case .tls(let tls): return tls.call { $0.fd }
        case .layered(let layer): return layer.transport.fd
        }
    }

    /// Whether this is a layer over the socket (TLS or another), not the bare socket.
    @inline(__always)
    var isLayered: Bool {
        if case .socket = self { return false }
        return true
    }

    @inline(__always)
    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO {
        switch self {
        case .socket(let fd): return SocketTransport.read(fd, buffer, count)
        case .tls(let tls): return tls.call { $0.read(buffer, count) }
        case .layered(let layer): return layer.transport.read(buffer, count)
        }
    }

    @inline(__always)
    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO {
        switch self {
        case .socket(let fd): return SocketTransport.write(fd, buffer, count)
        case .tls(let tls): return tls.call { $0.write(buffer, count) }
        case .layered(let layer): return layer.transport.write(buffer, count)
        }
    }

    @inline(__always)
    var readInterest: Interest {
        switch self {
        case .socket: return .readable
        case .tls(let tls): return tls.call { $0.readInterest }
        case .layered(let layer): return layer.transport.readInterest
        }
    }

    @inline(__always)
    var writeInterest: Interest {
        switch self {
        case .socket: return .writable
        case .tls(let tls): return tls.call { $0.writeInterest }
        case .layered(let layer): return layer.transport.writeInterest
        }
    }

    @inline(__always)
    var hasBufferedInput: Bool {
        switch self {
        case .socket: return false
        case .tls(let tls): return tls.call { $0.hasBufferedInput }
        case .layered(let layer): return layer.transport.hasBufferedInput
        }
    }

    @inline(__always)
    var hasPendingOutput: Bool {
        switch self {
        case .socket: return false
        case .tls(let tls): return tls.call { $0.hasPendingOutput }
        case .layered(let layer): return layer.transport.hasPendingOutput
        }
    }

    func takeSendCharge() -> Int? {
        switch self {
        case .socket: return nil
        case .tls(let tls): return tls.call { $0.takeSendCharge() }
        case .layered(let layer): return layer.transport.takeSendCharge()
        }
    }

    /// `hasPendingOutput` and `takeSendCharge()` at once (TLS: under one acquisition of its lock).
    @inline(__always)
    func takeSendState() -> (pending: Bool, charge: Int?) {
        switch self {
        case .socket: return (false, nil)
        case .tls(let tls): return tls.call { $0.takeSendState() }
        case .layered(let layer): return (layer.transport.hasPendingOutput, layer.transport.takeSendCharge())
        }
    }

    func flush() -> TransportIO {
        switch self {
        case .socket: return .processed(0)
        case .tls(let tls): return tls.call { $0.flush() }
        case .layered(let layer): return layer.transport.flush()
        }
    }

    func ready(_ events: Interest) -> Interest {
        switch self {
        case .socket: return events
        case .tls(let tls): return tls.call { $0.ready(events) }
        case .layered(let layer): return layer.transport.ready(events)
        }
    }

    func shutdownOutput() -> TransportIO {
        switch self {
        case .socket(let fd): return SocketTransport.shutdownOutput(fd)
        case .tls(let tls): return tls.call { $0.shutdownOutput() }
        case .layered(let layer): return layer.transport.shutdownOutput()
        }
    }
}
