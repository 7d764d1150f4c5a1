import Foundation

// What a QueuedSocket user reaches besides the operations: its addresses, the negotiated TLS facts
// and the streams underneath.

extension QueuedSocket {
    /// This end's port (`localPort`): for a listening socket the port it is bound to (the one the kernel
    /// picked for `accept(onInterface:port: 0)`), for a connected or accepted one its socket's own port
    /// (`getsockname(2)`); 0 before either and once closed.
    public var localPort: Int {
        if let listener = state.withLock({ $0.listener }) { return listener.port }
        return localAddress?.port ?? 0
    }

    /// This end's numeric address (`localHost`): "127.0.0.1", "::1" or "::" (a listener on every
    /// interface); the path of a Unix-domain listener; nil before the socket is listening or connected,
    /// and once closed.
    public var localHost: String? {
        if let listener = state.withLock({ $0.listener }) {
            return listener.localHost
        }
        return localAddress?.host
    }

    /// What the TLS handshake negotiated (version, cipher suite, ALPN protocol, the peer's certificates
    /// as DER, the verification result): the pair's `.tlsConnectionInfoKey`. nil until a handshake
    /// set before the connect, or queued with ``startTLS(_:)``, has completed (read it in
    /// `socket(_:didConnectToHost:port:)` or `socketDidSecure(_:)`).
    public var tlsInfo: TLSConnectionInfo? {
        engine.streams?.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
    }

    /// The stream pair underneath, once the socket has connected or been accepted (nil for a listener).
    ///
    /// Their SocketStreams properties (`property(forKey:)`, `setProperty(_:forKey:)`: the native
    /// handle, TLS details, `.tcpNoDelayKey`) may be used from any thread. Do not read or write from
    /// them, open, close, schedule or remove them: the socket does. Foundation's own `Stream` members
    /// that are not thread-safe must only be touched on the socket's delegate queue or run loop, where
    /// the socket drives the pair. The socket takes the pair's events itself, not as the streams'
    /// delegate: they have none, and a delegate set on them is never called.
    public var streams: (input: InputStream, output: OutputStream)? { engine.streams }

    /// The connected pair's socket address (`getsockname(2)`).
    private var localAddress: SocketAddress? {
        (engine.streams?.input as? SocketInputStream)?.connection.localAddress
    }
}

extension QueuedSocket.State {
    /// Why `connect` or `accept` may not start now: the socket has disconnected (a socket connects
    /// once), or it is connected, accepted or listening (GCDAsyncSocket's "Attempting to connect while
    /// connected or accepting connections").
    var refusal: StreamOperationError? {
        if disconnected { return .closed }
        if attached || listener != nil { return .alreadyConnected }
        return nil
    }
}
