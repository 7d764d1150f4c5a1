import Foundation

// What an AsyncConnection user reaches besides reads and writes: the negotiated TLS facts and the
// streams underneath.

extension AsyncConnection {
    /// What the TLS handshake negotiated (version, cipher suite, ALPN protocol, the peer's certificates
    /// as DER, the verification result): the pair's `.tlsConnectionInfoKey`. nil until ``open()`` (with
    /// TLS set on the pair) or ``startTLS(_:)`` has returned, and for a connection without TLS.
    public var tlsInfo: TLSConnectionInfo? {
        streams?.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
    }

    /// The stream pair underneath, once ``open()`` has been called (before, the pair passed to
    /// ``init(input:output:)`` is still the caller's own).
    ///
    /// Their SocketStreams properties (`property(forKey:)`, `setProperty(_:forKey:)`: the native
    /// handle, the peer's address, TLS details, `.tcpNoDelayKey`) may be used from any thread. Do not
    /// read or write from them, open, close, schedule or remove them: the connection does. Foundation's
    /// own `Stream` members that are not thread-safe must only be touched on the connection's owner,
    /// the package's stream thread (where ``AsyncConnection/executor`` runs its jobs), on which the
    /// connection drives the pair. The connection takes the pair's events itself, not as the streams'
    /// delegate: they have none, and a delegate set on them is never called.
    public var streams: (input: InputStream, output: OutputStream)? { engine.streams }
}

extension AsyncConnection {
    /// Whether the engine has the stream thread's reactor, where `open()` attaches the pair. Without it
    /// (the thread could not start when the connection was made: out of file descriptors)
    /// the engine would refuse the pair and `open()` would never return: the connection is closed with
    /// EMFILE instead, which `open()` then throws.
    func hasReactor() -> Bool {
        guard engine.reactor == nil else { return true }
        engine.close(error: StreamErrors.posix(EMFILE, "Could not start the SocketStreams stream thread"))
        return false
    }
}
