// GCDAsyncSocket.h's "Diagnostics" section (state, addresses, `isSecure`), with "Advanced"'s
// `performBlock:` and `socketFD`, and the "Utilities" section (separators, `sockaddr` helpers).

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension GCDAsyncSocket {
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
    /// queue given to `init`; for a socket given none, where its connection works (its delegate's
    /// queue, or the package's stream thread: see the type's documentation); inline when called there.
    public func perform(_ block: () -> Void) {
        let queue =
            socketQueue
            ?? state.withLock { state in
                state.link.map { $0.operations.workQueue } ?? Self.workQueue(delegateQueue: state.delegateQueue)
            }
        guard let queue else { return StreamOperations.performOnStreamThread(block) }
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(queue) { return block() }
        queue.sync(execute: block)
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
}
