// GCDAsyncSocket.h's "Connecting" section: connecting to a host, an address or a Unix-domain
// socket, and the start of a connection that accepting shares.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension GCDAsyncSocket {
    // MARK: connecting

    /// Connects with no timeout (`connectToHost:onPort:error:`).
    public func connect(toHost host: String, onPort port: UInt16) throws {
        try connect(toHost: host, onPort: port, viaInterface: nil, withTimeout: -1)
    }

    /// Connects; `timeout` covers name resolution and the TCP connect (negative: none)
    /// (`connectToHost:onPort:withTimeout:error:`).
    public func connect(toHost host: String, onPort port: UInt16, withTimeout timeout: TimeInterval) throws {
        try connect(toHost: host, onPort: port, viaInterface: nil, withTimeout: timeout)
    }

    /// Connects from a local interface (`connectToHost:onPort:viaInterface:withTimeout:error:`).
    /// `host` is a name or a numeric address; `didConnectToHost` then gives the peer's numeric address.
    ///
    /// `interface` chooses the local end: an interface name (`lo`, `eth0`), a numeric address,
    /// `localhost`/`loopback`, each optionally with `:port`, or `:port` alone (see ``LocalBinding``).
    ///
    /// - Throws: ``GCDAsyncSocketError`` ``GCDAsyncSocketError/Code/badParamError`` for an empty host
    ///   or an unknown interface,
    ///   ``GCDAsyncSocketError/Code/badConfigError`` without a delegate or delegate queue, or when the
    ///   socket is connected or accepting.
    public func connect(toHost host: String, onPort port: UInt16, viaInterface interface: String?, withTimeout timeout: TimeInterval)
        throws
    {
        guard !host.isEmpty else {
            throw GCDAsyncSocketError(
                .badParamError, message: "Invalid host parameter (nil or \"\"). Should be a domain name or IP address string.")
        }
        let binding = try interface.flatMap { $0.isEmpty ? nil : try Self.binding(forInterface: $0) }
        try checkCanStart("connect")
        let pair = createStreamPair(host: host == "loopback" ? "localhost" : host, port: Int(port))
        if let binding { _ = pair.input.setProperty(binding as AnyObject, forKey: .localBindingKey) }
        try start(input: pair.input, output: pair.output, url: nil, accepted: false, timeout: timeout, verb: "connect")
    }

    /// Connects to a `sockaddr` given as `Data` (16 bytes of `sockaddr_in` or 28 of `sockaddr_in6`)
    /// (`connectToAddress:error:`).
    public func connect(toAddress remoteAddr: Data) throws {
        try connect(toAddress: remoteAddr, viaInterface: nil, withTimeout: -1)
    }

    /// The same with a timeout (`connectToAddress:withTimeout:error:`).
    public func connect(toAddress remoteAddr: Data, withTimeout timeout: TimeInterval) throws {
        try connect(toAddress: remoteAddr, viaInterface: nil, withTimeout: timeout)
    }

    /// The same from a local interface (`connectToAddress:viaInterface:withTimeout:error:`).
    public func connect(toAddress remoteAddr: Data, viaInterface interface: String?, withTimeout timeout: TimeInterval) throws {
        let family = Int32(remoteAddr.count >= 2 ? remoteAddr.withUnsafeBytes { $0.loadUnaligned(as: sa_family_t.self) } : 0)
        guard
            (family == AF_INET && remoteAddr.count == MemoryLayout<sockaddr_in>.size)
                || (family == AF_INET6 && remoteAddr.count == MemoryLayout<sockaddr_in6>.size),
            let host = SocketAddresses.host(remoteAddr)
        else {
            throw GCDAsyncSocketError(.badParamError, message: "A valid IPv4 or IPv6 address was not given")
        }
        let enabled = state.withLock { family == AF_INET ? $0.isIPv4Enabled : $0.isIPv6Enabled }
        guard enabled else {
            throw GCDAsyncSocketError(
                .badParamError,
                message:
                    "Attempting to connect to an IPv\(family == AF_INET ? 4 : 6) address, but IPv\(family == AF_INET ? 4 : 6) is disabled")
        }
        try connect(toHost: host, onPort: SocketAddresses.port(remoteAddr), viaInterface: interface, withTimeout: timeout)
    }

    /// Connects to a Unix-domain socket (`connectToUrl:withTimeout:error:`, which Swift on Apple
    /// platforms spells `connect(to:withTimeout:)`). `socket(_:didConnectTo:)` follows.
    public func connect(to url: URL, withTimeout timeout: TimeInterval) throws {
        guard url.isFileURL, !url.path.isEmpty else {
            throw GCDAsyncSocketError(.badParamError, message: "Invalid unix domain socket url.")
        }
        try checkCanStart("connect")
        let pair = createStreamPair(unixSocketPath: url.path)
        try start(input: pair.input, output: pair.output, url: url, accepted: false, timeout: timeout, verb: "connect")
    }

    /// ``connect(to:withTimeout:)`` under the Objective-C selector's words (`connectToUrl:withTimeout:error:`).
    public func connect(toUrl url: URL, withTimeout timeout: TimeInterval) throws {
        try connect(to: url, withTimeout: timeout)
    }

    /// GCDAsyncSocket's interface string: `name-or-address[:port]` or `:port` (split at a single colon,
    /// so an IPv6 address is taken whole, without a port).
    private static func binding(forInterface interface: String) throws -> LocalBinding {
        var name = interface
        var port = 0
        if interface.filter({ $0 == ":" }).count == 1, let colon = interface.firstIndex(of: ":") {
            name = String(interface[..<colon])
            guard let number = UInt16(interface[interface.index(after: colon)...]) else {
                throw GCDAsyncSocketError(.badParamError, message: "Invalid port in interface \"\(interface)\".")
            }
            port = Int(number)
        }
        let binding = name.isEmpty ? LocalBinding(address: nil, port: port) : LocalBinding(interface: name, port: port)
        guard let binding else {
            throw GCDAsyncSocketError(
                .badParamError, message: "Unknown interface. Specify valid interface by name (e.g. \"lo\") or IP address.")
        }
        return binding
    }

    /// The preconditions GCDAsyncSocket checks before it starts, in its order.
    func checkCanStart(_ verb: String) throws {
        try state.withLock { state in try Self.check(state, verb) }
    }

    static func check(_ state: State, _ verb: String) throws {
        guard state.delegate != nil else {
            throw GCDAsyncSocketError(.badConfigError, message: "Attempting to \(verb) without a delegate. Set a delegate first.")
        }
        guard state.delegateQueue != nil else {
            throw GCDAsyncSocketError(
                .badConfigError, message: "Attempting to \(verb) without a delegate queue. Set a delegate queue first.")
        }
        guard state.link == nil, state.listener == nil else {
            throw GCDAsyncSocketError(
                .badConfigError, message: "Attempting to \(verb) while connected or accepting connections. Disconnect first.")
        }
        guard state.isIPv4Enabled || state.isIPv6Enabled else {
            throw GCDAsyncSocketError(
                .badConfigError, message: "Both IPv4 and IPv6 have been disabled. Must enable at least one protocol first.")
        }
    }

    /// Makes `input`/`output` this socket's connection and opens them where the socket works
    /// (``workQueue(delegateQueue:)``).
    func start(input: InputStream, output: OutputStream, url: URL?, accepted: Bool, timeout: TimeInterval, verb: String) throws {
        let queue = socketQueue ?? Self.workQueue(delegateQueue: state.withLock { $0.delegateQueue })
        let operations = StreamOperations(queue: queue, client: self)
        do {
            try state.withLock { state in
                if !accepted { try Self.check(state, verb) }
                state.reset()
                var link = Link(operations: operations, accepted: accepted)
                // GCDAsyncSocket marks an accepted socket connected at once.
                link.connected = accepted
                state.link = link
                if let url { state.linkURL = url }
                if accepted { Self.learnAddresses(&state, from: input) }
            }
        } catch {
            operations.dropClient(self)
            input.close()
            output.close()
            throw error
        }
        operations.attach(input: input, output: output, queue: queue)
        if timeout >= 0, !accepted {
            (queue ?? .global()).asyncAfter(deadline: .now() + timeout) { [weak self, weak operations] in
                guard let self, let operations else { return }
                let pending = state.withLock { $0.link?.operations === operations && $0.link?.connected == false }
                if pending { operations.close(error: GCDAsyncSocketError(.connectTimeoutError)) }
            }
        }
    }

    /// Where a connection of a socket given no socket queue works: on its delegate's queue, whose
    /// reactor then runs the engine and delivers each delegate call in a turn of its own
    /// (`deliver(_:on:engine:)`), so neither a completion nor the delegate's next read or write waits
    /// for another thread; else (no delegate queue, the main queue, a global queue) on the package's
    /// stream thread (nil). The main queue is left out because a program's main thread often blocks (a
    /// tool that connects and waits), and a global queue because its delegate calls may run side by
    /// side, which one reactor would make one at a time. Chosen for each connection, when it starts:
    /// a delegate queue set later gets its calls as blocks, as GCDAsyncSocket posts them.
    static func workQueue(delegateQueue: DispatchQueue?) -> DispatchQueue? {
        guard let queue = delegateQueue, !queue.isMainOrGlobal else { return nil }
        markQueue(queue)
        return queue
    }

    /// Marks `queue` with its own identity (`queueKey`), once, so that ``perform(_:)`` called there
    /// runs its block inline.
    static func markQueue(_ queue: DispatchQueue) {
        // Once per queue: each `setSpecific` posts a barrier block to the queue, whose continuation
        // libdispatch then keeps cached, memory held for every socket opened on a shared queue.
        guard queue.getSpecific(key: queueKey) == nil else { return }
        queue.setSpecific(key: queueKey, value: ObjectIdentifier(queue))
    }

    static func learnAddresses(_ state: inout State, from input: InputStream?) {
        guard let fd = input?.socketDescriptor else { return }
        state.setAddresses(peer: SocketAddresses.peer(of: fd), local: SocketAddresses.local(of: fd))
    }
}
