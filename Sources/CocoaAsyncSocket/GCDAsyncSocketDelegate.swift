import Foundation

/// The delegate of a ``GCDAsyncSocket``, with the Swift signatures `GCDAsyncSocketDelegate` has on
/// Apple platforms (`Data`, `UInt16` ports, `UInt` lengths, `TimeInterval` extensions), so a delegate
/// written there conforms here unchanged.
///
/// Every method is optional, as the Objective-C protocol's are: each has a default that does what
/// GCDAsyncSocket does for a delegate that does not implement it (nothing; for the timeout questions,
/// time out now; for the trust question, disconnect with ``GCDAsyncSocketError/Code/otherError``; for
/// the new socket queue, none: the socket works where a socket given no queue does). Each call is
/// made on the socket's delegate queue, posted there as its own block (`dispatch_async`), so a block
/// posted to that queue earlier runs first. GCDAsyncSocket posts no call a delegate does not respond
/// to; here the defaults of the calls made per read and write (`didWriteDataWithTag` and the
/// partial-progress calls) report themselves when they run, after which that delegate type is not
/// posted them again.
///
/// A method written with ``QueuedSocketDelegate``'s types (`[UInt8]` data, `Int` ports and lengths) is
/// not left uncalled: those spellings are requirements too, called right after GCDAsyncSocket's own
/// (for the timeout questions, when GCDAsyncSocket's spelling returned 0). Swift only warns about a
/// method that nearly matches a defaulted requirement when the conformance is declared in the same
/// extension; declared on the class, as most delegates are, such a method would otherwise be silently
/// ignored. The porting guide lists every signature.
public protocol GCDAsyncSocketDelegate: AnyObject, SendableMetatype {
    /// The queue a socket accepted by `sock` runs on; nil for none, as for a socket made without a socket
    /// queue: the package's stream thread, where GCDAsyncSocket makes a private queue
    /// (`newSocketQueueForConnectionFromAddress:onSocket:`). `address` is the peer's `sockaddr`.
    func newSocketQueueForConnection(fromAddress address: Data, on sock: GCDAsyncSocket) -> DispatchQueue?
    /// A listening socket accepted a connection; keep `newSocket`, which closes when released
    /// (`socket:didAcceptNewSocket:`).
    func socket(_ sock: GCDAsyncSocket, didAcceptNewSocket newSocket: GCDAsyncSocket)
    /// The connection is up; `host` is the peer's numeric address (`socket:didConnectToHost:port:`).
    func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt16)
    /// A Unix-domain connection is up (`socket:didConnectToUrl:`).
    func socket(_ sock: GCDAsyncSocket, didConnectTo url: URL)
    /// A read completed (`socket:didReadData:withTag:`).
    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int)
    /// A read to a length or terminator got `partialLength` more bytes (`socket:didReadPartialDataOfLength:tag:`).
    func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int)
    /// A write completed: the kernel accepted every byte (`socket:didWriteDataWithTag:`).
    func socket(_ sock: GCDAsyncSocket, didWriteDataWithTag tag: Int)
    /// A write moved `partialLength` more bytes (`socket:didWritePartialDataOfLength:tag:`).
    func socket(_ sock: GCDAsyncSocket, didWritePartialDataOfLength partialLength: UInt, tag: Int)
    /// A read's timeout passed: more seconds to extend it, or 0 to disconnect with
    /// ``GCDAsyncSocketError/Code/readTimeoutError`` (`socket:shouldTimeoutReadWithTag:elapsed:bytesDone:`).
    func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval
    /// The same for a write (`socket:shouldTimeoutWriteWithTag:elapsed:bytesDone:`).
    func socket(_ sock: GCDAsyncSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval
    /// The peer closed its side while ``GCDAsyncSocket/autoDisconnectOnClosedReadStream`` is false
    /// (`socketDidCloseReadStream:`).
    func socketDidCloseReadStream(_ sock: GCDAsyncSocket)
    /// The socket closed: nil after `disconnect()` or a `disconnectAfter…`, else the reason; called
    /// once per connection, last (`socketDidDisconnect:withError:`).
    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?)
    /// The handshake queued by ``GCDAsyncSocket/startTLS(_:)`` finished (`socketDidSecure:`).
    func socketDidSecure(_ sock: GCDAsyncSocket)
    /// With ``GCDAsyncSocketManuallyEvaluateTrust`` set, the peer's certificate chain and OpenSSL's own
    /// verdict, to accept (`true`) or reject (`false`) with `completionHandler`, from any thread, once
    /// (`socket:didReceiveTrust:completionHandler:`). `SecTrust` here is SocketStreams' `TLSPeerTrust`
    /// (``GCDAsyncSocketTrust``), the type SocketStreamsNetwork's `SecTrustEvaluateWithError` and the other
    /// Security calls take.
    func socket(_ sock: GCDAsyncSocket, didReceive trust: SecTrust, completionHandler: @escaping (Bool) -> Void)

    // The QueuedSocketDelegate spellings, called too (see above).

    /// `socket(_:didConnectToHost:port:)` with an `Int` port, as
    /// ``QueuedSocketDelegate`` spells it: called right after it.
    func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: Int)
    /// `socket(_:didRead:withTag:)` with `[UInt8]`, as ``QueuedSocketDelegate`` spells
    /// it: called right after it.
    func socket(_ sock: GCDAsyncSocket, didRead data: [UInt8], withTag tag: Int)
    /// `socket(_:didReadPartialDataOfLength:tag:)` with an `Int` length: called right after the `UInt` one.
    func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: Int, tag: Int)
    /// `socket(_:didWritePartialDataOfLength:tag:)` with an `Int` length: called right after the `UInt` one.
    func socket(_ sock: GCDAsyncSocket, didWritePartialDataOfLength partialLength: Int, tag: Int)
    /// `socket(_:shouldTimeoutReadWithTag:elapsed:bytesDone:)` with an `Int` length: asked when the
    /// `UInt` one returns 0.
    func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval
    /// `socket(_:shouldTimeoutWriteWithTag:elapsed:bytesDone:)` with an `Int` length: asked when the
    /// `UInt` one returns 0.
    func socket(_ sock: GCDAsyncSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval
}

extension GCDAsyncSocketDelegate {
    /// Returns nil: the stream thread (where GCDAsyncSocket makes a private queue).
    public func newSocketQueueForConnection(fromAddress address: Data, on sock: GCDAsyncSocket) -> DispatchQueue? { nil }
    /// Does nothing: the new socket is released, which closes it.
    public func socket(_ sock: GCDAsyncSocket, didAcceptNewSocket newSocket: GCDAsyncSocket) {}
    /// Does nothing.
    public func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt16) {}
    /// Does nothing.
    public func socket(_ sock: GCDAsyncSocket, didConnectTo url: URL) {}
    /// Does nothing.
    public func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {}
    /// Does nothing; once it has run, the delegate's type is not posted this call again unless it
    /// implements the `Int` spelling (GCDAsyncSocket posts nothing a delegate does not respond to).
    public func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) {
        DelegateDefaults.note(.readPartial, of: self)
    }
    /// Does nothing; once it has run, the delegate's type is not posted this call again (GCDAsyncSocket
    /// posts nothing a delegate does not respond to).
    public func socket(_ sock: GCDAsyncSocket, didWriteDataWithTag tag: Int) { DelegateDefaults.note(.didWrite, of: self) }
    /// Does nothing; once it has run, the delegate's type is not posted this call again unless it
    /// implements the `Int` spelling.
    public func socket(_ sock: GCDAsyncSocket, didWritePartialDataOfLength partialLength: UInt, tag: Int) {
        DelegateDefaults.note(.writePartial, of: self)
    }
    /// Returns 0: the read times out.
    public func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt)
        -> TimeInterval
    { 0 }
    /// Returns 0: the write times out.
    public func socket(_ sock: GCDAsyncSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt)
        -> TimeInterval
    { 0 }
    /// Does nothing.
    public func socketDidCloseReadStream(_ sock: GCDAsyncSocket) {}
    /// Does nothing.
    public func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {}
    /// Does nothing.
    public func socketDidSecure(_ sock: GCDAsyncSocket) {}
    /// Not implemented: the socket disconnects with ``GCDAsyncSocketError/Code/otherError``, as
    /// GCDAsyncSocket does when manual trust is asked for and the delegate cannot answer.
    public func socket(_ sock: GCDAsyncSocket, didReceive trust: SecTrust, completionHandler: @escaping (Bool) -> Void) {
        sock.trustNotImplemented()
    }
    /// Does nothing.
    public func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: Int) {}
    /// Does nothing.
    public func socket(_ sock: GCDAsyncSocket, didRead data: [UInt8], withTag tag: Int) {}
    /// Does nothing; once it has run, the delegate's type is not posted this call again unless it
    /// implements the `UInt` spelling.
    public func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) {
        DelegateDefaults.note(.readPartialInt, of: self)
    }
    /// Does nothing; once it has run, the delegate's type is not posted this call again unless it
    /// implements the `UInt` spelling.
    public func socket(_ sock: GCDAsyncSocket, didWritePartialDataOfLength partialLength: Int, tag: Int) {
        DelegateDefaults.note(.writePartialInt, of: self)
    }
    /// Returns 0.
    public func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int)
        -> TimeInterval
    { 0 }
    /// Returns 0.
    public func socket(_ sock: GCDAsyncSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int)
        -> TimeInterval
    { 0 }
}

// `SecTrust`, the type GCDAsyncSocket hands its delegate, is declared in SocketStreams (which this
// module re-exports) as `TLSPeerTrust`, so that code importing this module and SocketStreamsNetwork
// sees one `SecTrust`.

/// The peer's certificates and OpenSSL's verdict on them, given to
/// ``GCDAsyncSocketDelegate/socket(_:didReceive:completionHandler:)``: the library's ``TLSPeerTrust``,
/// which `QueuedSocket`, `AsyncConnection` and stream pairs get from a ``TLSTrustEvaluation``.
public typealias GCDAsyncSocketTrust = TLSPeerTrust
