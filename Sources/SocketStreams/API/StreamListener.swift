import CoreFoundation
import CSocketStreamsShims
import Foundation
import Glibc

/// Accepts connections and hands each one over as a stream pair: the accept side of CFNetwork
/// (`CFSocketCreate` with `kCFSocketAcceptCallBack`, then `CFStreamCreatePairWithSocket`).
///
/// Listens on TCP (IPv4, IPv6 or both) or on a Unix-domain socket path. Each accepted connection
/// arrives on the run loop given to `start(in:forMode:accept:)` as an UNOPENED pair that owns its fd
/// (`kCFStreamPropertyShouldCloseNativeSocket` is true); set delegates, schedule and open it there,
/// and `open()` completes at once.
public final class StreamListener: Sendable {
    private let handle: SocketHandle
    private let unixPath: String?
    /// The socket file a Unix listener created, which `close()` removes while it is still there.
    private let socketFile: Posix.FileIdentity?

    private struct State {
        var reactor: Reactor?
        var token: UInt64 = 0
        var acceptor: Acceptor?
        var closed = false
    }

    private let state = Guarded(State())

    /// The port the listener is bound to (the one picked by the kernel when created with port 0);
    /// 0 for a Unix-domain listener. `getsockname(2)`.
    public let port: Int

    /// The address the listener is bound to (`getsockname(2)`), e.g. `127.0.0.1:4321`, `[::]:4321`, or the socket path.
    public let localAddress: String

    /// The bound address alone: "127.0.0.1", "::" (every interface), or the socket path.
    let localHost: String

    /// Binds and listens on a TCP port (`socket`, `bind`, `listen`).
    ///
    /// - Parameters:
    ///   - host: An interface address (`"127.0.0.1"`, `"::1"`) or a name resolved with `getaddrinfo`
    ///     (its first address is used). nil listens on every interface, IPv6 and IPv4 on one socket.
    ///   - port: The port, 0...65535; 0 lets the kernel pick a free one, which `port` reports.
    ///   - backlog: The `listen(2)` backlog.
    /// - Throws: An `NSError` in `NSPOSIXErrorDomain` (e.g. EADDRINUSE; EINVAL for a port outside
    ///   0...65535, which is never cut to 16 bits), or the name-lookup error.
    public init(host: String? = nil, port: Int = 0, backlog: Int32 = 128) throws {
        StreamThread.prepare()  // the stream thread's fds, set aside while the process has some
        try Self.checkPort(port, host: host)
        var address: SocketAddress
        if let host {
            if let numeric = SocketAddress(numericHost: host, port: port) {
                address = numeric
            } else {
                switch Resolver.resolve(host: host, port: port, family: AF_UNSPEC, passive: true) {
                case .success(let addresses): address = addresses[0]
                case .failure(let error):
                    throw StreamErrors.error(for: StreamFailure(.resolution(error), .resolve), target: .host(host, port: port))
                }
            }
        } else {
            address = SocketAddress.any(family: AF_INET6, port: port)
        }
        do {
            let fd: Int32
            if host == nil, let dualStack = try? Posix.socket(family: AF_INET6) {
                fd = dualStack
            } else {
                if host == nil { address = SocketAddress.any(family: AF_INET, port: port) }  // no IPv6 here
                fd = try Posix.socket(family: address.family)
            }
            let handle = SocketHandle(fd: fd, closesOnRelease: true)
            do {
                try Posix.setOption(fd, level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
                if address.family == AF_INET6 {
                    try Posix.setOption(fd, level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: host == nil ? 0 : 1)
                }
                try Posix.bind(fd, to: address)
                try Posix.listen(fd, backlog: backlog)
                let bound = try Posix.localAddress(fd)
                self.port = bound.port
                self.localAddress = bound.description
                self.localHost = bound.host
            } catch {
                handle.release()
                throw error
            }
            self.handle = handle
        } catch let error as SystemError {
            throw StreamErrors.posix(error.code, "Could not listen on \(address)")
        }
        self.unixPath = nil
        self.socketFile = nil
    }

    /// Lets clients connecting with TCP Fast Open send their first bytes in the SYN (`TCP_FASTOPEN`,
    /// up to `queueLength` such connections waiting to be accepted), where the system lets servers use
    /// it (`net.ipv4.tcp_fastopen` with bit 2). False on a Unix-domain listener or where the kernel
    /// refuses the option. Network.framework's listeners set it for `NWParameters.allowFastOpen` and
    /// `NWProtocolTCP.Options.enableFastOpen`.
    package func allowFastOpen(queueLength: Int32 = 16) -> Bool {
        guard unixPath == nil else { return false }
        return Posix.setFastOpenQueue(handle.fd, length: queueLength)
    }

    /// Binds and listens on a Unix-domain socket path (`socket(AF_UNIX)`, `bind`, `listen`).
    ///
    /// Nothing at `path` is taken over or deleted unless it is a stale socket file:
    /// - a socket file whose probing `connect(2)` is refused (ECONNREFUSED: its listener closed
    ///   without unlinking it, or its process died) is replaced;
    /// - a socket a listener answers on (the probe connects, or its backlog is full) is left alone,
    ///   and this throws EADDRINUSE. The live listener sees the probe as one connection that ends
    ///   at once;
    /// - any other file (a regular file, a directory, a symbolic link) is never deleted: EADDRINUSE
    ///   too, which is what `bind(2)` reports for a path that exists, so one code means "the path
    ///   is taken" whatever holds it.
    ///
    /// `close()` removes the socket file, but only while it is still the one this listener created
    /// (same `st_dev` and `st_ino` as right after `bind`): a file put at the path since stays.
    /// - Throws: An `NSError` in `NSPOSIXErrorDomain`: EADDRINUSE (above), ENAMETOOLONG, EACCES, …
    public init(unixSocketPath path: String, backlog: Int32 = 128) throws {
        StreamThread.prepare()
        guard let address = SocketAddress(unixPath: path) else {
            throw StreamErrors.posix(ENAMETOOLONG, "Could not listen on \(path)")
        }
        do {
            try Self.makeWay(at: path, for: address)
            let fd = try Posix.socket(family: AF_UNIX)
            let handle = SocketHandle(fd: fd, closesOnRelease: true)
            var created: Posix.FileIdentity?
            do {
                try Posix.bind(fd, to: address)
                created = try Posix.fileIdentity(atPath: path)
                try Posix.listen(fd, backlog: backlog)
            } catch {
                handle.release()
                if let created { Posix.unlink(path, ifStill: created) }
                throw error
            }
            self.handle = handle
            self.socketFile = created
        } catch let error as SystemError {
            throw StreamErrors.posix(error.code, "Could not listen on \(path)")
        }
        self.unixPath = path
        self.port = 0
        self.localAddress = path
        self.localHost = path
    }

    /// Clears `path` for a new Unix listener: removes a stale socket file, throws EADDRINUSE when a
    /// listener answers there or the path holds something other than a socket (see `init(unixSocketPath:)`).
    private static func makeWay(at path: String, for address: SocketAddress) throws {
        guard let existing = try Posix.fileIdentity(atPath: path) else { return }
        guard existing.isSocket else {
            throw StreamErrors.posix(EADDRINUSE, "Could not listen on \(path) (not a socket, left in place)")
        }
        if try isAnswered(address) {
            throw StreamErrors.posix(EADDRINUSE, "Could not listen on \(path) (a listener answers there)")
        }
        Posix.unlink(path, ifStill: existing)
    }

    /// Whether a listener answers on the Unix socket at `address`: a probing non-blocking `connect(2)`
    /// that connects, or would block because the backlog is full. ECONNREFUSED (no socket behind the
    /// file) and ENOENT (the file is gone) are no listener; EPROTOTYPE (a datagram socket is bound
    /// there) is one; anything else (EACCES, …) is thrown: what cannot be probed is not deleted.
    private static func isAnswered(_ address: SocketAddress) throws(SystemError) -> Bool {
        let probe = SocketHandle(fd: try Posix.socket(family: AF_UNIX), closesOnRelease: true)
        defer { probe.release() }
        do {
            _ = try Posix.connect(probe.fd, to: address)
            return true
        } catch {
            switch error.code {
            case ECONNREFUSED, ENOENT: return false
            case EPROTOTYPE: return true
            default: throw error
            }
        }
    }

    deinit {
        close()
    }

    /// Refuses a port that does not fit TCP's 16 bits: `sin_port` would keep only the low 16
    /// (70000 would listen on 4464, 65536 on a port the kernel picks).
    private static func checkPort(_ port: Int, host: String?) throws {
        try PortNumber.check(port, "Could not listen on \(host ?? "every interface")")
    }

    /// The handler `start(in:forMode:accept:)` calls with each accepted pair, on the listener's run loop.
    /// The pair is `sending`: nothing else holds it, so the handler may hand it on to a `Task`, an actor
    /// or another thread (Swift 6 region isolation) without an unsafe opt-out.
    public typealias AcceptHandler = @Sendable (sending SocketInputStream, sending SocketOutputStream) -> Void

    /// Starts accepting (`accept4(2)` whenever the listening socket is readable, as CFSocket's
    /// `kCFSocketAcceptCallBack` does). `accept` runs on `runLoop`'s thread while it runs in `mode`, once
    /// per connection, with the new pair. Calling `start` again moves the listener to another run loop.
    ///
    /// If the run loop's event source cannot be created (the process is out of file descriptors),
    /// the listener does not accept; `start` may be called again later.
    public func start(in runLoop: RunLoop, forMode mode: RunLoop.Mode = .default, accept: @escaping AcceptHandler) {
        onCFRunLoop(of: runLoop, mode: mode) { [weak self] cfRunLoop in
            self?.start(on: cfRunLoop, mode: mode.rawValue, accept: accept)
        }
    }

    private func start(on runLoop: CFRunLoop, mode: String, accept: @escaping AcceptHandler) {
        guard let newReactor = try? ReactorRegistry.shared.acquire(cfRunLoop: runLoop, mode: mode) else { return }
        let acceptor = Acceptor(fd: handle.fd, accept: accept)
        acceptor.listener = self
        let old = state.withLock { state -> Reactor? in
            guard !state.closed else { return newReactor }
            let old = stop(&state)
            if let token = try? newReactor.add(fd: handle.fd, events: cssh_epollin(), handler: acceptor) {
                state.token = token
                state.reactor = newReactor
                state.acceptor = acceptor
            }
            return old
        }
        if let old { ReactorRegistry.shared.release(old) }
    }

    /// Stops accepting and closes the listening socket (`close(2)`; `unlink(2)` for a Unix socket file,
    /// if the path still names the file this listener created).
    /// Pairs already handed out are not affected.
    public func close() {
        let old = state.withLock { state -> Reactor? in
            guard !state.closed else { return nil }
            state.closed = true
            let old = stop(&state)
            handle.release()
            if let unixPath, let socketFile { Posix.unlink(unixPath, ifStill: socketFile) }
            return old
        }
        if let old { ReactorRegistry.shared.release(old) }
    }

    /// Out of file descriptors: the pending connection stays queued and the listening fd stays
    /// readable, so stop watching it for a while instead of making the run loop spin.
    fileprivate func backOff(from reactor: Reactor) {
        state.withLock { state in
            guard !state.closed, state.reactor === reactor else { return }
            reactor.remove(fd: handle.fd, token: state.token)
            reactor.schedule(after: Self.exhaustionBackOff) { [weak self] in self?.resume(on: reactor) }
        }
    }

    private func resume(on reactor: Reactor) {
        state.withLock { state in
            guard !state.closed, state.reactor === reactor, let acceptor = state.acceptor else { return }
            if let token = try? reactor.add(fd: handle.fd, events: cssh_epollin(), handler: acceptor) { state.token = token }
        }
    }

    /// `accept4(2)` on the listening socket, unless it has been closed (nil). Under the state lock,
    /// which `close()` holds while it closes the fd.
    fileprivate func acceptLocked(_ peer: inout SocketAddress) throws(SystemError) -> IOResult<Int32>? {
        let outcome = state.withLock { state -> Result<IOResult<Int32>, SystemError>? in
            guard !state.closed else { return nil }
            return Result { () throws(SystemError) in try Posix.accept(handle.fd, peer: &peer) }
        }
        return try outcome?.get()
    }

    /// How long accepting pauses when the process is out of file descriptors.
    static let exhaustionBackOff: UInt64 = 100_000_000

    private func stop(_ state: inout State) -> Reactor? {
        guard let reactor = state.reactor else { return nil }
        reactor.remove(fd: handle.fd, token: state.token)
        state.reactor = nil
        state.acceptor = nil
        return reactor
    }
}

/// Accepts every pending connection when the listening fd is readable, on the listener's run loop.
private final class Acceptor: ReactorHandler, @unchecked Sendable {
    let fd: Int32
    weak var listener: StreamListener?
    let accept: StreamListener.AcceptHandler

    init(fd: Int32, accept: @escaping StreamListener.AcceptHandler) {
        self.fd = fd
        self.accept = accept
    }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        // A bounded batch per wake-up keeps one busy listener from starving the run loop.
        for _ in 0..<64 {
            let result: IOResult<Int32>
            var peer = SocketAddress()
            do {
                // Under the listener's lock: close() may run on another thread, between the reactor
                // finding this handler and this call, and the fd must not be closed during it.
                guard let listener, let accepted = try listener.acceptLocked(&peer) else { return }
                result = accepted
            } catch {
                if error.code == EMFILE || error.code == ENFILE {
                    listener?.backOff(from: reactor)
                    return
                }
                continue  // ECONNABORTED and the like: that connection is lost, the listener is not
            }
            guard case .processed(let client) = result else { return }
            // The peer's address names the pair in error messages and in its remote host and port properties.
            let connection = Connection(endpoint: .native(fd: client, peer: PeerAddress(peer)))
            connection.closesNativeSocketAsSet = true  // as an app does with kCFStreamPropertyShouldCloseNativeSocket
            accept(makeInput(connection), makeOutput(connection))
        }
    }
}
