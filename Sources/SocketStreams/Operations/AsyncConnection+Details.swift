import Foundation

// What an AsyncConnection user reaches besides reads and writes: the negotiated TLS facts and the
// streams underneath (issue 21, finding 7).

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
    /// own `Stream` members that are not thread-safe, `delegate` first of all, must only be touched on
    /// the connection's owner, the package's stream thread (`RunLoop.socketStreams`), where the
    /// connection drives the pair; the connection is their delegate, and replacing it stops the connection.
    public var streams: (input: InputStream, output: OutputStream)? { engine.streams }
}

extension AsyncConnection {
    /// The stream thread's run loop, where `open()` schedules the pair; nil when the thread cannot
    /// start (out of file descriptors), after closing the connection with that error, which `open()`
    /// then throws. Never waits, as `RunLoop.socketStreams` would.
    func streamRunLoop() -> RunLoop? {
        do {
            return try RunLoop.startSocketStreams()
        } catch {
            engine.close(error: error)
            return nil
        }
    }
}
