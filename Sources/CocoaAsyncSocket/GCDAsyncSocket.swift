import Foundation
import SocketStreams
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// GCDAsyncSocket (CocoaAsyncSocket) with the Swift interface it has on Apple platforms, over the
/// package's one queued-operations engine (the one under `QueuedSocket` and `AsyncConnection`).
///
/// ```swift
/// let socket = GCDAsyncSocket(delegate: self, delegateQueue: queue)
/// try socket.connect(toHost: "127.0.0.1", onPort: 6379, withTimeout: 5)
/// socket.write("PING\r\n".data(using: .utf8)!, withTimeout: -1, tag: 1)
/// socket.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, tag: 2)
/// ```
///
/// Its model is GCDAsyncSocket's: the socket's work runs in one place, where the engine that owns the
/// streams runs, and each delegate call is posted from there to the delegate queue as its own block
/// (`dispatch_async`), so the calls arrive in order and never overtake a block posted to that queue
/// before them. Reads and writes are queued with a timeout and a tag and complete in order; every
/// method may be called from any thread. That place is the socket queue given to `init`, or, for a
/// socket given none, the package's stream thread (`RunLoop.socketStreams`), where GCDAsyncSocket would
/// make a private serial queue: such a queue is seen only through ``perform(_:)``, which runs its block
/// on the stream thread instead, and here a queue of its own would cost each socket an epoll set and a
/// thread to wait in it (issue 25: a connection cost 47 system calls, not 20; a socket 2.4 descriptors).
///
/// `disconnect()` takes effect at once (``isDisconnected`` is true when it returns) and posts
/// `socketDidDisconnect(_:withError:)` with nil; what the kernel accepts at once of the writes queued
/// before it is still sent. After a disconnect the same socket can connect or accept again.
public final class GCDAsyncSocket: NSObject, @unchecked Sendable {
    // @unchecked: every stored property is a `let` of a Sendable type or `state`, reached only
    // under its lock.

    private let state = Guarded(State())
    /// The queue given for the socket's own work; nil: the package's stream thread (see the type's
    /// documentation).
    private let socketQueue: DispatchQueue?
    /// The next id for the engine (see `takeID`): here, in the object's spare 8 bytes, rather than in
    /// `state` (issue 25: it kept `State` from fitting 96 bytes).
    private let nextID = Atomic<UInt32>(1)
    /// Marks a socket queue with its own identity: one key for every socket (issue 25: a key per
    /// socket added an entry per socket to a shared queue's specifics, which libdispatch searches
    /// linearly, so opening the n-th socket on one queue cost O(n): 49 → 83 µs from 1,000 to 10,000).
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    // MARK: creating

    /// A socket with no delegate yet (`init`).
    public convenience override init() {
        self.init(delegate: nil, delegateQueue: nil, socketQueue: nil)
    }

    /// A socket with no delegate yet, working on `socketQueue` (`initWithSocketQueue:`).
    public convenience init(socketQueue: DispatchQueue?) {
        self.init(delegate: nil, delegateQueue: nil, socketQueue: socketQueue)
    }

    /// A socket whose delegate is called on `delegateQueue` (`initWithDelegate:delegateQueue:`).
    public convenience init(delegate: GCDAsyncSocketDelegate?, delegateQueue: DispatchQueue?) {
        self.init(delegate: delegate, delegateQueue: delegateQueue, socketQueue: nil)
    }

    /// A socket whose delegate is called on `delegateQueue` and whose own work runs on `socketQueue`,
    /// which must be serial; nil for the package's stream thread, where GCDAsyncSocket makes a private
    /// queue (see the type's documentation) (`initWithDelegate:delegateQueue:socketQueue:`). The socket
    /// queue may be the delegate queue.
    public init(delegate: GCDAsyncSocketDelegate?, delegateQueue: DispatchQueue?, socketQueue: DispatchQueue?) {
        self.socketQueue = socketQueue
        super.init()
        if let queue = socketQueue, queue.getSpecific(key: Self.queueKey) == nil {
            // Once per queue: each `setSpecific` posts a barrier block to the queue, whose continuation
            // libdispatch then keeps cached (issue 25: ~64 bytes per socket opened on a shared queue).
            queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(queue))
        }
        state.withLock { state in
            state.delegate = delegate
            state.delegateQueue = delegateQueue
        }
    }

    deinit {
        // As GCDAsyncSocket's dealloc: closed without a delegate call (it calls with a nil socket,
        // which Swift's non-optional parameter cannot express).
        let (link, listener) = state.withLock { ($0.link, $0.listener) }
        link?.operations.dropClient(self)  // the engine holds this socket unretained
        link?.operations.close()
        listener?.close()
    }

    // MARK: the delegate

    /// The delegate, held weakly (`delegate`).
    public var delegate: GCDAsyncSocketDelegate? {
        get { state.withLock { $0.delegate } }
        set { state.withLock { $0.delegate = newValue } }
    }

    /// Where the delegate is called (`delegateQueue`).
    public var delegateQueue: DispatchQueue? {
        get { state.withLock { $0.delegateQueue } }
        set { state.withLock { $0.delegateQueue = newValue } }
    }

    /// Sets both (`setDelegate:delegateQueue:`). Calls already posted still go to the old ones.
    public func setDelegate(_ delegate: GCDAsyncSocketDelegate?, delegateQueue: DispatchQueue?) {
        state.withLock { state in
            state.delegate = delegate
            state.delegateQueue = delegateQueue
        }
    }

    /// Sets the delegate; no call is posted to the old one after this returns (`synchronouslySetDelegate:`).
    public func synchronouslySetDelegate(_ delegate: GCDAsyncSocketDelegate?) { self.delegate = delegate }

    /// Sets the delegate queue (`synchronouslySetDelegateQueue:`).
    public func synchronouslySetDelegateQueue(_ delegateQueue: DispatchQueue?) { self.delegateQueue = delegateQueue }

    /// Sets both (`synchronouslySetDelegate:delegateQueue:`).
    public func synchronouslySetDelegate(_ delegate: GCDAsyncSocketDelegate?, delegateQueue: DispatchQueue?) {
        setDelegate(delegate, delegateQueue: delegateQueue)
    }

    // MARK: configuration

    /// Whether IPv4 may be used (`IPv4Enabled`, default true).
    public var isIPv4Enabled: Bool {
        get { state.withLock { $0.isIPv4Enabled } }
        set { state.withLock { $0.isIPv4Enabled = newValue } }
    }

    /// Whether IPv6 may be used (`IPv6Enabled`, default true).
    public var isIPv6Enabled: Bool {
        get { state.withLock { $0.isIPv6Enabled } }
        set { state.withLock { $0.isIPv6Enabled = newValue } }
    }

    /// Whether IPv4 is tried first when a host has both (`IPv4PreferredOverIPv6`, default true). The
    /// connection itself races both families as `createStreamPair(host:port:)` does (Happy Eyeballs).
    public var isIPv4PreferredOverIPv6: Bool {
        get { state.withLock { $0.isIPv4PreferredOverIPv6 } }
        set { state.withLock { $0.isIPv4PreferredOverIPv6 = newValue } }
    }

    /// The delay before the other family is tried (`alternateAddressDelay`, default 0.3 s).
    public var alternateAddressDelay: TimeInterval {
        get { state.withLock { $0.alternateAddressDelay } }
        set { state.withLock { $0.alternateAddressDelay = newValue } }
    }

    /// Anything the application wants to keep with the socket; never read by it (`userData`).
    public var userData: Any? {
        get { state.withLock { $0.userData } }
        set { state.withLock { $0.userData = newValue } }
    }

    /// Whether the peer closing its side disconnects (true, the default, with
    /// ``GCDAsyncSocketError/Code/closedError``) or only calls `socketDidCloseReadStream(_:)`
    /// (`autoDisconnectOnClosedReadStream`).
    public var autoDisconnectOnClosedReadStream: Bool {
        get { state.withLock { $0.autoDisconnectOnClosedReadStream } }
        set { state.withLock { $0.autoDisconnectOnClosedReadStream = newValue } }
    }

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
    private func checkCanStart(_ verb: String) throws {
        try state.withLock { state in try Self.check(state, verb) }
    }

    private static func check(_ state: State, _ verb: String) throws {
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

    /// Makes `input`/`output` this socket's connection and opens them on the socket queue (or the
    /// stream thread).
    private func start(input: InputStream, output: OutputStream, url: URL?, accepted: Bool, timeout: TimeInterval, verb: String) throws {
        let operations = StreamOperations(queue: socketQueue, client: self)
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
        operations.attach(input: input, output: output, queue: socketQueue)
        if timeout >= 0, !accepted {
            (socketQueue ?? .global()).asyncAfter(deadline: .now() + timeout) { [weak self, weak operations] in
                guard let self, let operations else { return }
                let pending = state.withLock { $0.link?.operations === operations && $0.link?.connected == false }
                if pending { operations.close(error: GCDAsyncSocketError(.connectTimeoutError)) }
            }
        }
    }

    private static func learnAddresses(_ state: inout State, from input: InputStream?) {
        guard let fd = input?.socketDescriptor else { return }
        state.setAddresses(peer: SocketAddresses.peer(of: fd), local: SocketAddresses.local(of: fd))
    }

    // MARK: accepting

    /// Listens on every interface (`acceptOnPort:error:`); 0 picks a free port (see ``localPort``).
    public func accept(onPort port: UInt16) throws {
        try accept(onInterface: nil, port: port)
    }

    /// Listens on `interface`: nil for all, `"localhost"`/`"loopback"`, an interface name (`lo`,
    /// `eth0`) or a numeric address (`acceptOnInterface:port:error:`). Each connection arrives in
    /// `socket(_:didAcceptNewSocket:)` as a connected socket with this delegate and delegate queue, on
    /// the queue `newSocketQueueForConnection(fromAddress:on:)` gives.
    ///
    /// - Throws: ``GCDAsyncSocketError`` (bad configuration, unknown interface) or the `bind`/`listen`
    ///   error in `NSPOSIXErrorDomain` (EADDRINUSE).
    public func accept(onInterface interface: String?, port: UInt16) throws {
        try checkCanStart("accept")
        var host: String?
        if let interface, !interface.isEmpty {
            var name = interface
            if let colon = name.lastIndex(of: ":"), !name.contains("::"), name.filter({ $0 == ":" }).count == 1 {
                name = String(name[..<colon])  // GCDAsyncSocket's "interface:port": the port argument wins
            }
            guard name.isEmpty || SocketAddresses.interfaceAddress(name) != nil else {
                throw GCDAsyncSocketError(
                    .badParamError, message: "Unknown interface. Specify valid interface by name (e.g. \"lo\") or IP address.")
            }
            host = name.isEmpty ? nil : SocketAddresses.interfaceAddress(name)
        }
        try listen(try StreamListener(host: host, port: Int(port)), url: nil)
    }

    /// Listens on a Unix-domain socket, removing a file left at the path (`acceptOnUrl:error:`).
    public func accept(on url: URL) throws {
        guard url.isFileURL, !url.path.isEmpty else {
            throw GCDAsyncSocketError(
                .badParamError,
                message: "Invalid unix domain url. Specify a valid file url that does not exist (e.g. \"file:///tmp/socket\")")
        }
        try checkCanStart("accept")
        if FileManager.default.fileExists(atPath: url.path) {
            do {
                try FileManager.default.removeItem(atPath: url.path)
            } catch {
                throw GCDAsyncSocketError(.otherError, message: "Could not remove previous unix domain socket at given url.")
            }
        }
        try listen(try StreamListener(unixSocketPath: url.path), url: url)
    }

    /// ``accept(on:)`` under the Objective-C selector's words (`acceptOnUrl:error:`).
    public func accept(onUrl url: URL) throws { try accept(on: url) }

    private func listen(_ listener: StreamListener, url: URL?) throws {
        do {
            try state.withLock { state in
                try Self.check(state, "accept")
                state.listener = listener
                state.listenerURL = url
            }
        } catch {
            listener.close()
            throw error
        }
        listener.start(in: .socketStreams) { [weak self] input, output in
            guard let self else {
                input.close()
                output.close()
                return
            }
            self.accepted(input: input, output: output, from: listener)
        }
    }

    /// A connection arrived (on the stream thread): on the delegate queue, asks for its queue, makes
    /// its socket and hands it over, as GCDAsyncSocket does in one block.
    private func accepted(input: SocketInputStream, output: SocketOutputStream, from listener: StreamListener) {
        let target = state.withLock { state -> (GCDAsyncSocketDelegate, DispatchQueue)? in
            guard state.listener === listener, let delegate = state.delegate, let queue = state.delegateQueue else { return nil }
            return (delegate, queue)
        }
        guard let (delegate, queue) = target else {
            input.close()
            output.close()
            return
        }
        let peer = input.socketDescriptor.flatMap(SocketAddresses.peer(of:))
        let call = DelegateCall(delegate) { [self] delegate in
            let newQueue = delegate.newSocketQueueForConnection(fromAddress: peer ?? Data(), on: self)
            let socket = GCDAsyncSocket(delegate: delegate, delegateQueue: queue, socketQueue: newQueue)
            try? socket.start(input: input, output: output, url: nil, accepted: true, timeout: -1, verb: "accept")
            delegate.socket(self, didAcceptNewSocket: socket)
        }
        queue.async { call.run() }
    }

    // MARK: reading

    /// Reads whatever has arrived, at least one byte (`readDataWithTimeout:tag:`). A negative timeout
    /// means none; 0 times out at once unless bytes are waiting.
    public func readData(withTimeout timeout: TimeInterval, tag: Int) {
        read(.available(maxLength: 0), timeout: timeout, tag: tag, buffer: nil, offset: 0)
    }

    /// The same into `buffer` from `offset` (`readDataWithTimeout:buffer:bufferOffset:tag:`).
    public func readData(withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, tag: Int) {
        readData(withTimeout: timeout, buffer: buffer, bufferOffset: offset, maxLength: 0, tag: tag)
    }

    /// The same, at most `length` bytes (0: no limit) (`readDataWithTimeout:buffer:bufferOffset:maxLength:tag:`).
    public func readData(
        withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, maxLength length: UInt, tag: Int
    ) {
        guard Self.validOffset(offset, in: buffer) else { return }
        read(.available(maxLength: Int(clamping: length)), timeout: timeout, tag: tag, buffer: buffer, offset: Int(offset))
    }

    /// Reads exactly `length` bytes (`readDataToLength:withTimeout:tag:`); 0 is ignored.
    public func readData(toLength length: UInt, withTimeout timeout: TimeInterval, tag: Int) {
        readData(toLength: length, withTimeout: timeout, buffer: nil, bufferOffset: 0, tag: tag)
    }

    /// The same into `buffer` from `offset` (`readDataToLength:withTimeout:buffer:bufferOffset:tag:`).
    public func readData(
        toLength length: UInt, withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, tag: Int
    ) {
        guard length > 0, Self.validOffset(offset, in: buffer) else { return }
        read(.length(Int(clamping: length)), timeout: timeout, tag: tag, buffer: buffer, offset: Int(offset))
    }

    /// Reads up to and including `data` (`readDataToData:withTimeout:tag:`); nil or empty is ignored.
    public func readData(to data: Data?, withTimeout timeout: TimeInterval, tag: Int) {
        guard let data else { return }
        readData(to: data, withTimeout: timeout, buffer: nil, bufferOffset: 0, maxLength: 0, tag: tag)
    }

    /// The same into `buffer` from `offset` (`readDataToData:withTimeout:buffer:bufferOffset:tag:`).
    public func readData(to data: Data, withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, tag: Int) {
        readData(to: data, withTimeout: timeout, buffer: buffer, bufferOffset: offset, maxLength: 0, tag: tag)
    }

    /// The same, disconnecting with ``GCDAsyncSocketError/Code/readMaxedOutError`` once `length` bytes
    /// (0: no limit) arrived without `data` (`readDataToData:withTimeout:maxLength:tag:`).
    public func readData(to data: Data, withTimeout timeout: TimeInterval, maxLength length: UInt, tag: Int) {
        readData(to: data, withTimeout: timeout, buffer: nil, bufferOffset: 0, maxLength: length, tag: tag)
    }

    /// The same into `buffer` from `offset` (`readDataToData:withTimeout:buffer:bufferOffset:maxLength:tag:`).
    public func readData(
        to data: Data, withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, maxLength length: UInt,
        tag: Int
    ) {
        guard !data.isEmpty, length == 0 || length >= UInt(data.count), Self.validOffset(offset, in: buffer) else { return }
        read(.delimiter([UInt8](data), maxLength: Int(clamping: length)), timeout: timeout, tag: tag, buffer: buffer, offset: Int(offset))
    }

    private static func validOffset(_ offset: UInt, in buffer: NSMutableData?) -> Bool {
        guard let buffer else { return true }  // the socket's own buffer: the offset does not apply
        return offset <= UInt(buffer.length)
    }

    /// Queues a read on the current connection; none (not started, or disconnected): ignored, as
    /// GCDAsyncSocket drops it.
    private func read(_ request: ReadRequest, timeout: TimeInterval, tag: Int, buffer: NSMutableData?, offset: Int) {
        let queued = state.withLock { state -> (StreamOperations, Int)? in
            guard let link = state.link else { return nil }
            let id = takeID()
            state.appendRead(id, ReadInfo(tag: tag, buffer: buffer, offset: offset))
            return (link.operations, id)
        }
        guard let (operations, id) = queued else { return }
        submit(.read(request, timeout: Self.engineTimeout(timeout), id: id), to: operations)
    }

    /// Queues a read or write on the engine; one it refuses (closed meanwhile) is forgotten.
    private func submit(_ operation: EngineOperation, to operations: StreamOperations) {
        switch operation {
        case .read(let request, let timeout, let id):
            if operations.enqueueRead(request, timeout: timeout, tag: id) != nil {
                state.withLock { _ = $0.removeRead(id) }
            }
        case .write(let bytes, let timeout, let id):
            if operations.enqueueWrite(bytes, timeout: timeout, tag: id) != nil {
                state.withLock { _ = $0.removeWrite(id) }
            }
        }
    }

    /// An id for the engine, unique among the reads (and among the writes) queued: 1 to `UInt32.max`,
    /// wrapping (4 billion operations in one direction cannot be queued at once). Taken under the
    /// state's lock, so ids are queued in the order taken.
    private func takeID() -> Int {
        while true {
            let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
            if id != 0 { return Int(id) }
        }
    }

    /// GCDAsyncSocket's timeouts: negative for none, 0 fires at once; the engine's: 0 or less for none.
    private static func engineTimeout(_ timeout: TimeInterval) -> Double {
        if timeout < 0 || timeout.isNaN { return -1 }
        return max(timeout, 1e-6)
    }

    // MARK: writing

    /// Writes `data`; `socket(_:didWriteDataWithTag:)` follows once the kernel accepted every byte
    /// (`writeData:withTimeout:tag:`). nil or empty is ignored; so is a write before connect or after
    /// a disconnect. As in GCDAsyncSocket, which retains the `NSData`, `data` is held until written,
    /// not copied.
    public func write(_ data: Data?, withTimeout timeout: TimeInterval, tag: Int) {
        guard let data, !data.isEmpty else { return }
        let bytes = WriteBytes(data)
        let queued = state.withLock { state -> (StreamOperations, Int)? in
            guard let link = state.link else { return nil }
            let id = takeID()
            state.appendWrite(id, tag: tag)
            return (link.operations, id)
        }
        guard let (operations, id) = queued else { return }
        submit(.write(bytes, timeout: Self.engineTimeout(timeout), id: id), to: operations)
    }

    // MARK: TLS

    /// Secures the connection once every read and write queued before has completed (`startTLS:`),
    /// with GCDAsyncSocket's and CFNetwork's keys (see ``GCDAsyncSocketManuallyEvaluateTrust`` and its
    /// siblings, `kCFStreamSSLPeerName`, `kCFStreamSSLIsServer`, `kCFStreamSSLCertificates`).
    /// `socketDidSecure(_:)` follows; a failed handshake disconnects with the TLS error. A second call,
    /// or one before connect, is ignored. A key GCDAsyncSocket refuses (`kCFStreamSSLAllowsAnyRoot`
    /// and the other security options it removed) or a value of the wrong type disconnects with
    /// ``GCDAsyncSocketError/Code/otherError`` when the handshake's turn comes, as GCDAsyncSocket checks
    /// the settings then: the reads and writes queued before `startTLS` complete first.
    public func startTLS(_ tlsSettings: [String: NSObject]?) {
        var parsed = Result { try GCDAsyncSocketTLS.parse(tlsSettings ?? [:]) }
        let operations = state.withLock { state -> StreamOperations? in
            guard let link = state.link, !state.tlsQueued else { return nil }
            state.tlsQueued = true
            return link.operations
        }
        guard let operations else { return }
        if case .success(var settings) = parsed, settings.manualTrust {
            // The library's trust evaluation (the TLS stage waits for it, so nothing queued after
            // startTLS is read or written before the answer), asked through the delegate queue.
            settings.settings.trustEvaluation = TLSTrustEvaluation { [weak self, weak operations] trust, completion in
                // Weak: the evaluation lives in the pair's settings, which the operations hold.
                guard let self, let operations else { return }
                askDelegate(trust, completion, for: operations)
            }
            parsed = .success(settings)
        }
        switch parsed {
        case .success(let parsed): operations.enqueueTLS(parsed.settings)
        case .failure(let error): operations.enqueueTLSRefusal(error)
        }
    }

    /// Posts the trust question to the delegate (`socket:didReceiveTrust:completionHandler:`); with no
    /// delegate to ask, disconnects as for a delegate that does not implement it.
    private func askDelegate(_ trust: TLSPeerTrust, _ completion: @escaping @Sendable (Bool) -> Void, for operations: StreamOperations) {
        let asked = state.withLock { state -> Bool in
            guard let link = state.link, link.operations === operations else { return true }  // gone: the close answers
            guard state.delegate != nil, state.delegateQueue != nil else { return false }
            guard link.connected || link.accepted else {
                // The stage runs on the engine's thread and can ask before this socket has handled
                // `ready`: GCDAsyncSocket says the socket connected before it asks about trust.
                state.heldTrust = HeldTrust(trust: trust, completion: completion)
                return true
            }
            Self.postTrust(&state, self, HeldTrust(trust: trust, completion: completion))
            return true
        }
        if !asked { trustNotImplemented() }
    }

    private static func postTrust(_ state: inout State, _ socket: GCDAsyncSocket, _ held: HeldTrust) {
        post(&state, socket) { socket, delegate in delegate.socket(socket, didReceive: held.trust, completionHandler: held.completion) }
    }

    /// Called by the default trust method: the delegate cannot decide, so the socket disconnects.
    func trustNotImplemented() {
        state.withLock { $0.link?.operations }?.close(
            error: GCDAsyncSocketError(
                .otherError,
                message:
                    "GCDAsyncSocketManuallyEvaluateTrust specified in tlsSettings, but delegate doesn't implement socket:shouldTrustPeer:"))
    }

    // MARK: disconnecting

    /// Closes now (`disconnect`): queued reads and writes are dropped, except that what the kernel
    /// accepts at once of the queued writes is still sent; `socketDidDisconnect(_:withError:)` with nil
    /// is posted before this returns (behind delegate calls posted earlier). Does nothing on a socket
    /// that is not connecting, connected or accepting.
    public func disconnect() {
        let (link, listener) = state.withLock { state -> (Link?, StreamListener?) in
            let link = state.link
            let listener = state.listener
            guard link != nil || listener != nil else { return (nil, nil) }
            state.link = nil
            state.listener = nil
            state.listenerURL = nil
            state.reset()
            Self.post(&state, self) { socket, delegate in delegate.socketDidDisconnect(socket, withError: nil) }
            return (link, listener)
        }
        listener?.close()
        // Let go of the engine before it closes: it may outlive this socket, and has nothing more to
        // tell it (its events are only for the socket's current connection).
        link?.operations.dropClient(self)
        link?.operations.close()
    }

    /// Closes once every queued read has completed; new reads and writes are ignored (`disconnectAfterReading`).
    public func disconnectAfterReading() {
        state.withLock { $0.link?.operations }?.close(afterReads: true)
    }

    /// Closes once every queued write has completed (`disconnectAfterWriting`).
    public func disconnectAfterWriting() {
        state.withLock { $0.link?.operations }?.close(afterWrites: true)
    }

    /// Closes once every queued read and write has completed (`disconnectAfterReadingAndWriting`).
    public func disconnectAfterReadingAndWriting() {
        state.withLock { $0.link?.operations }?.close(afterReads: true, afterWrites: true)
    }

    // MARK: diagnostics

    /// Whether the socket is neither connecting, connected nor accepting (`isDisconnected`).
    public var isDisconnected: Bool { state.withLock { $0.link == nil && $0.listener == nil } }

    /// Whether the connection is up (`isConnected`); false for a listening socket.
    public var isConnected: Bool { state.withLock { $0.link?.connected ?? false } }

    /// The peer's numeric address (`connectedHost`); nil when not connected.
    public var connectedHost: String? { state.withLock { $0.peer }.flatMap(SocketAddresses.host) }

    /// The peer's port (`connectedPort`); 0 when not connected.
    public var connectedPort: UInt16 { state.withLock { $0.peer }.map(SocketAddresses.port) ?? 0 }

    /// The Unix-domain URL connected to (`connectedUrl`).
    public var connectedUrl: URL? { state.withLock { $0.link?.connected == true ? $0.linkURL : nil } }

    /// The local numeric address (`localHost`); a listening socket's bound address.
    public var localHost: String? {
        state.withLock { state in
            if let local = state.local { return SocketAddresses.host(local) }
            return state.listener.map { Self.hostPart($0.localAddress) }
        }
    }

    /// The local port (`localPort`); a listening socket's port.
    public var localPort: UInt16 {
        state.withLock { state in
            if let local = state.local { return SocketAddresses.port(local) }
            return state.listener.map { UInt16(clamping: $0.port) } ?? 0
        }
    }

    /// The peer's `sockaddr` (`connectedAddress`).
    public var connectedAddress: Data? { state.withLock { $0.peer } }

    /// The local `sockaddr` (`localAddress`).
    public var localAddress: Data? { state.withLock { $0.local } }

    /// Whether the connection is IPv4 (an IPv4 peer of a dual-stack listener included) (`isIPv4`).
    public var isIPv4: Bool {
        state.withLock { state in
            if let peer = state.peer { return SocketAddresses.family(peer) == AF_INET }
            return state.listener != nil && state.listenerURL == nil
        }
    }

    /// Whether the connection is IPv6 (`isIPv6`); a listener on every interface is both.
    public var isIPv6: Bool {
        state.withLock { state in
            if let peer = state.peer { return SocketAddresses.family(peer) == AF_INET6 }
            guard let listener = state.listener, state.listenerURL == nil else { return false }
            return Self.hostPart(listener.localAddress).contains(":")
        }
    }

    /// The host of a listener's "host:port" or "[host]:port".
    private static func hostPart(_ address: String) -> String {
        guard let colon = address.lastIndex(of: ":") else { return address }
        var host = address[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return String(host)
    }

    /// Whether TLS is up (`isSecure`).
    public var isSecure: Bool { state.withLock { $0.isSecure } }

    /// Runs `block` where the socket's own work runs, and waits for it (`performBlock:`): on the socket
    /// queue given to `init`, or on the package's stream thread for a socket given none; inline when
    /// called there.
    public func perform(_ block: () -> Void) {
        guard let socketQueue else { return StreamOperations.performOnStreamThread(block) }
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(socketQueue) { return block() }
        socketQueue.sync(execute: block)
    }

    /// The connection's file descriptor, or -1 (`socketFD`). GCDAsyncSocket answers only inside
    /// ``perform(_:)``; here it answers anywhere, and the descriptor is the streams' own: do not close it.
    public func socketFD() -> Int32 {
        state.withLock { $0.link?.operations }?.streams?.input.socketDescriptor ?? -1
    }

    // MARK: utilities

    /// "\r\n" (`CRLFData`).
    public class func crlfData() -> Data { Data([0x0D, 0x0A]) }
    /// "\r" (`CRData`).
    public class func crData() -> Data { Data([0x0D]) }
    /// "\n" (`LFData`).
    public class func lfData() -> Data { Data([0x0A]) }
    /// A zero byte (`ZeroData`).
    public class func zeroData() -> Data { Data([0x00]) }

    /// The numeric host of a `sockaddr` (`hostFromAddress:`).
    public class func host(fromAddress address: Data) -> String? { SocketAddresses.host(address) }
    /// The port of a `sockaddr` (`portFromAddress:`).
    public class func port(fromAddress address: Data) -> UInt16 { SocketAddresses.port(address) }
    /// Whether a `sockaddr` is IPv4 (`isIPv4Address:`).
    public class func isIPv4Address(_ address: Data) -> Bool { SocketAddresses.family(address) == AF_INET }
    /// Whether a `sockaddr` is IPv6 (`isIPv6Address:`).
    public class func isIPv6Address(_ address: Data) -> Bool { SocketAddresses.family(address) == AF_INET6 }

    // MARK: delivering to the delegate

    /// Posts `call` to the delegate queue as its own block, with the delegate as it is now, unless the
    /// delegate's type leaves every one of `methods` (the ones `call` makes) to its default, which does
    /// nothing (GCDAsyncSocket's `respondsToSelector:` check; see `DelegateDefaults`). Lock held.
    private static func post(
        _ state: inout State, _ socket: GCDAsyncSocket, unlessDefault methods: DelegateDefaults.Methods = [],
        _ call: @escaping (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void
    ) {
        guard let delegate = state.delegate, let queue = state.delegateQueue else { return }
        if !methods.isEmpty, DelegateDefaults.leaves(methods, to: delegate) { return }
        let posted = PostedCall(socket, delegate, call)
        queue.async { posted.run() }
    }

    /// Posts `call` if `operations` is still the socket's connection (events of a connection that
    /// `disconnect()` ended are dropped: its `socketDidDisconnect` is already posted).
    private func post(
        from operations: StreamOperations, unlessDefault methods: DelegateDefaults.Methods,
        _ call: @escaping (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void
    ) {
        state.withLock { state in
            guard state.link?.operations === operations else { return }
            Self.post(&state, self, unlessDefault: methods, call)
        }
    }

    /// A system error before the socket connected, in the shape GCDAsyncSocket gives it
    /// (`errorWithErrno:reason:`): `NSPOSIXErrorDomain` and the errno as they were, `strerror` as the
    /// description and "Error in connect() function" as the failure reason (the stream's other
    /// userInfo kept). Any other error as it is.
    static func connectFailure(_ error: Error?) -> Error? {
        guard let error else { return nil }
        let failure = error as NSError
        guard failure.domain == NSPOSIXErrorDomain, let code = Int32(exactly: failure.code) else { return error }
        var info = failure.userInfo
        info[NSLocalizedDescriptionKey] = String(cString: strerror(code))
        info[NSLocalizedFailureReasonErrorKey] = "Error in connect() function"
        return NSError(domain: NSPOSIXErrorDomain, code: failure.code, userInfo: info)
    }

    /// Maps the engine's own failures to GCDAsyncSocket's; the streams' errors pass through.
    static func map(_ error: Error?) -> Error? {
        guard let error else { return nil }
        guard let failure = error as? StreamOperationError else { return error }
        switch failure.code {
        case .readTimedOut: return GCDAsyncSocketError(.readTimeoutError)
        case .writeTimedOut: return GCDAsyncSocketError(.writeTimeoutError)
        case .readMaxedOut: return GCDAsyncSocketError(.readMaxedOutError)
        case .closedByPeer, .closed: return GCDAsyncSocketError(.closedError)
        case .alreadyConnected: return GCDAsyncSocketError(.badConfigError, message: failure.errorDescription)
        // bytesBeforeTLS, tlsSettingsRefused, and any code added later: GCDAsyncSocket's catch-all.
        default: return GCDAsyncSocketError(.otherError, message: failure.errorDescription)
        }
    }
}

/// An event's delegate call carried to the delegate queue, in one object that the posted block holds
/// (issue 25: a closure around the call to bind the socket was one more allocation a call, two a
/// ping-pong round trip: 21,476 → 21,184 instructions). The delegate is used only there, where the
/// application said it may be called.
// @unchecked Sendable: every field is a `let`; the delegate and the call are used only on the
// delegate queue.
private final class PostedCall: @unchecked Sendable {
    let socket: GCDAsyncSocket
    let delegate: GCDAsyncSocketDelegate
    let call: (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void

    init(_ socket: GCDAsyncSocket, _ delegate: GCDAsyncSocketDelegate, _ call: @escaping (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void) {
        self.socket = socket
        self.delegate = delegate
        self.call = call
    }

    func run() { call(socket, delegate) }
}

/// A delegate call carried to the delegate queue: the delegate is used only there, where the
/// application said it may be called.
private struct DelegateCall: @unchecked Sendable {
    let delegate: GCDAsyncSocketDelegate
    let call: (GCDAsyncSocketDelegate) -> Void

    init(_ delegate: GCDAsyncSocketDelegate, _ call: @escaping (GCDAsyncSocketDelegate) -> Void) {
        self.delegate = delegate
        self.call = call
    }

    func run() { call(delegate) }
}

// MARK: - the engine's events, on the socket queue (or the stream thread)

extension GCDAsyncSocket: StreamOperationsClient {
    package func operations(_ operations: StreamOperations, handle event: OperationEvent) {
        switch event {
        case .ready:
            let input = operations.streams?.input  // the engine's lock, not under the socket's
            state.withLock { state in
                guard var link = state.link, link.operations === operations else { return }
                let wasConnected = link.connected
                link.connected = true
                state.link = link
                Self.learnAddresses(&state, from: input)
                guard !link.accepted, !wasConnected else { return }
                if let url = state.linkURL {
                    Self.post(&state, self) { socket, delegate in delegate.socket(socket, didConnectTo: url) }
                } else {
                    let peer = state.peer
                    let host = peer.flatMap(SocketAddresses.host) ?? ""
                    let port = peer.map(SocketAddresses.port) ?? 0
                    Self.post(&state, self) { socket, delegate in
                        delegate.socket(socket, didConnectToHost: host, port: port)
                        delegate.socket(socket, didConnectToHost: host, port: Int(port))
                    }
                }
                if let held = state.heldTrust {
                    state.heldTrust = nil
                    Self.postTrust(&state, self, held)
                }
            }
        case .read(let bytes, let id):
            state.withLock { state in
                guard state.link?.operations === operations, let info = state.removeRead(id) else { return }
                let data: Data
                if let buffer = info.buffer {
                    if buffer.length < info.offset + bytes.count { buffer.length = info.offset + bytes.count }
                    bytes.withUnsafeBytes { source in
                        (buffer.mutableBytes + info.offset).copyMemory(from: source.baseAddress!, byteCount: source.count)
                    }
                    data = Data(bytes)
                } else {
                    data = Data(bytes)
                }
                Self.post(&state, self) { socket, delegate in
                    delegate.socket(socket, didRead: data, withTag: info.tag)
                    delegate.socket(socket, didRead: bytes, withTag: info.tag)
                }
            }
        case .readPartial(let count, let id):
            post(from: operations, unlessDefault: [.readPartial, .readPartialInt]) {
                [tag = state.withLock { $0.readInfo(id)?.tag ?? 0 }] socket, delegate in
                delegate.socket(socket, didReadPartialDataOfLength: UInt(count), tag: tag)
                delegate.socket(socket, didReadPartialDataOfLength: count, tag: tag)
            }
        case .readEnded(_, let id):
            let close = state.withLock { state -> Bool in
                guard state.link?.operations === operations else { return false }
                _ = state.removeRead(id)
                return state.autoDisconnectOnClosedReadStream
            }
            if close { operations.close(error: GCDAsyncSocketError(.closedError)) }
        case .ended(let pending):
            let close = state.withLock { state -> Bool in
                guard var link = state.link, link.operations === operations else { return false }
                if state.autoDisconnectOnClosedReadStream { return pending == 0 }
                if !link.readClosedReported {
                    link.readClosedReported = true
                    state.link = link
                    Self.post(&state, self) { socket, delegate in delegate.socketDidCloseReadStream(socket) }
                }
                return false
            }
            if close { operations.close(error: GCDAsyncSocketError(.closedError)) }
        case .wrote(let id):
            state.withLock { state in
                guard state.link?.operations === operations, let tag = state.removeWrite(id) else { return }
                Self.post(&state, self, unlessDefault: .didWrite) { socket, delegate in
                    delegate.socket(socket, didWriteDataWithTag: tag)
                }
            }
        case .wrotePartial(let count, let id):
            post(from: operations, unlessDefault: [.writePartial, .writePartialInt]) {
                [tag = state.withLock { $0.writeTag(id) ?? 0 }] socket, delegate in
                delegate.socket(socket, didWritePartialDataOfLength: UInt(count), tag: tag)
                delegate.socket(socket, didWritePartialDataOfLength: count, tag: tag)
            }
        case .outputShutDown:
            break  // GCDAsyncSocket never half-closes: nothing queues a shutdown here
        case .secured:
            state.withLock { state in
                guard state.link?.operations === operations else { return }
                state.isSecure = true
                Self.post(&state, self) { socket, delegate in delegate.socketDidSecure(socket) }
            }
        case .closed(let error):
            let mapped = Self.map(error)
            operations.dropClient(self)  // its last event
            state.withLock { state in
                guard state.link?.operations === operations else { return }
                let mapped = state.link?.connected == true ? mapped : Self.connectFailure(mapped)
                state.link = nil
                state.reset()
                Self.post(&state, self) { socket, delegate in delegate.socketDidDisconnect(socket, withError: mapped) }
            }
        }
    }

    /// Never asked: the engine asks the question below, which waits for the delegate's answer.
    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double { 0 }

    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag id: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    ) {
        let posted = state.withLock { state -> Bool in
            guard state.link?.operations === operations, let delegate = state.delegate, let queue = state.delegateQueue else {
                return false
            }
            let read = direction == .read
            let tag = (read ? state.readInfo(id)?.tag : state.writeTag(id)) ?? 0
            let call = DelegateCall(delegate) { [self] delegate in
                let done = max(0, bytesDone)
                var extra =
                    read
                    ? delegate.socket(self, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: UInt(done))
                    : delegate.socket(self, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: UInt(done))
                if extra <= 0 {
                    // A delegate written with QueuedSocketDelegate's Int length.
                    extra =
                        read
                        ? delegate.socket(self, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: done)
                        : delegate.socket(self, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: done)
                }
                answer(extra)
            }
            queue.async { call.run() }
            return true
        }
        if !posted { answer(0) }
    }
}
