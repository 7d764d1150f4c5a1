/// One step between "TCP is up" and "the stream is live": a proxy handshake, a TLS handshake, or
/// (in tests) a toy exchange. The connection runs its stages in order after `openCompleted`, each
/// driven by the readiness it asks for, on the open's home run loop and within the open deadline;
/// `hasBytesAvailable`/`hasSpaceAvailable` wait until the last one is done.
///
/// A stage is called with the connection's lock held and must not call back into the connection.
/// It does only non-blocking I/O on the transport it is given.
protocol HandshakeStage: AnyObject, Sendable {
    /// How failures name the operation, e.g. "SOCKS5 handshake".
    var name: String { get }

    /// Makes what progress it can over `transport`. Called once when the stage starts, then each time
    /// the readiness it waited for is reported.
    func advance(over transport: any Transport) -> HandshakeStep
}

/// What a stage says after each step.
enum HandshakeStep {
    /// Call again once the socket reports this readiness.
    case wait(Interest)
    /// Finished: the next stage (or the stream) uses this transport, the one given or one layered
    /// over it (TLS, or a `PrefixedTransport` holding bytes read past the stage's reply).
    case done(any Transport)
    /// The handshake failed; the connection fails with this.
    case failed(StreamFailure)
}
