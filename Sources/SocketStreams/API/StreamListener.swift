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
            } catch {
                handle.release()
                throw error
            }
            self.handle = handle
        } catch let error as SystemError {
            throw StreamErrors.posix(error.code, "Could not listen on \(address)")
        }
        self.unixPath = nil
    }

    /// Binds and listens on a Unix-domain socket path (`socket(AF_UNIX)`, `bind`, `listen`). An existing
    /// socket file at `path` is replaced; the file is removed again by `close()`.
    public init(unixSocketPath path: String, backlog: Int32 = 128) throws {
        guard let address = SocketAddress(unixPath: path) else {
            throw StreamErrors.posix(ENAMETOOLONG, "Could not listen on \(path)")
        }
        do {
            let fd = try Posix.socket(family: AF_UNIX)
            let handle = SocketHandle(fd: fd, closesOnRelease: true)
            do {
                var info = stat()
                if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK { unlink(path) }
                try Posix.bind(fd, to: address)
                try Posix.listen(fd, backlog: backlog)
            } catch {
                handle.release()
                throw error
            }
            self.handle = handle
        } catch let error as SystemError {
            throw StreamErrors.posix(error.code, "Could not listen on \(path)")
        }
        self.unixPath = path
        self.port = 0
        self.localAddress = path
    }

    deinit {
        close()
    }

    /// Refuses a port that does not fit TCP's 16 bits: `sin_port` would keep only the low 16
    /// (70000 would listen on 4464, 65536 on a port the kernel picks).
    private static func checkPort(_ port: Int, host: String?) throws {
        guard !(0...65535).contains(port) else { return }
        throw StreamErrors.posix(EINVAL, "Could not listen on \(host ?? "every interface") port \(port) (not in 0...65535)")
    }

    /// The handler `start(in:forMode:accept:)` calls with each accepted pair, on the listener's run loop.
    public typealias AcceptHandler = @Sendable (SocketInputStream, SocketOutputStream) -> Void

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

    /// Stops accepting and closes the listening socket (`close(2)`; `unlink(2)` for a Unix socket file).
    /// Pairs already handed out are not affected.
    public func close() {
        let old = state.withLock { state -> Reactor? in
            guard !state.closed else { return nil }
            state.closed = true
            let old = stop(&state)
            handle.release()
            if let unixPath { unlink(unixPath) }
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
            do {
                result = try Posix.accept(fd)
            } catch {
                if error.code == EMFILE || error.code == ENFILE {
                    listener?.backOff(from: reactor)
                    return
                }
                continue  // ECONNABORTED and the like: that connection is lost, the listener is not
            }
            guard case .processed(let client) = result else { return }
            let connection = Connection(endpoint: .native(fd: client))
            connection.closesNativeSocket = true  // as an app does with kCFStreamPropertyShouldCloseNativeSocket
            connection.closesNativeSocketWasSet = true
            let pair = makePair(connection)
            accept(pair.input, pair.output)
        }
    }
}
