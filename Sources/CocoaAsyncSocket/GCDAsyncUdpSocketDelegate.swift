import Foundation

/// `AutoreleasingUnsafeMutablePointer` exists only where Objective-C does; on Linux the receive
/// filter's context pointer and `getHost(_:port:fromAddress:)`'s host pointer are plain mutable
/// pointers under that name, so Apple-platform code that writes `context.pointee = …` or passes
/// `&host` compiles unchanged.
public typealias AutoreleasingUnsafeMutablePointer<Pointee> = UnsafeMutablePointer<Pointee>

/// A receive filter (`GCDAsyncUdpSocketReceiveFilterBlock`): the datagram, its sender's address, and a
/// context to set for the delegate's `withFilterContext`; true lets the datagram through.
public typealias GCDAsyncUdpSocketReceiveFilterBlock = (Data, Data, AutoreleasingUnsafeMutablePointer<AnyObject?>) -> Bool

/// A send filter (`GCDAsyncUdpSocketSendFilterBlock`): the datagram, its destination and its tag; false
/// skips the send (and the delegate still hears `didSendDataWithTag`, as GCDAsyncUdpSocket does).
public typealias GCDAsyncUdpSocketSendFilterBlock = (Data, Data, Int) -> Bool

/// GCDAsyncUdpSocket's delegate (`GCDAsyncUdpSocketDelegate`), every method optional: each has a
/// default that does nothing. Called on the delegate queue, each call as its own block, in order.
public protocol GCDAsyncUdpSocketDelegate: AnyObject, SendableMetatype {
    /// `connect(toHost:onPort:)` or `connect(toAddress:)` succeeded (`udpSocket:didConnectToAddress:`).
    func udpSocket(_ sock: GCDAsyncUdpSocket, didConnectToAddress address: Data)
    /// The connect failed, its look-up included (`udpSocket:didNotConnect:`).
    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotConnect error: Error?)
    /// The kernel took the datagram sent with `tag`, or the send filter dropped it
    /// (`udpSocket:didSendDataWithTag:`).
    func udpSocket(_ sock: GCDAsyncUdpSocket, didSendDataWithTag tag: Int)
    /// The datagram sent with `tag` failed; the socket stays open (`udpSocket:didNotSendDataWithTag:dueToError:`).
    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?)
    /// A datagram arrived (`udpSocket:didReceiveData:fromAddress:withFilterContext:`).
    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?)
    /// The socket closed, by `close()`, `closeAfterSending()` or an error (`udpSocketDidClose:withError:`).
    func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?)

    // The Objective-C selector's words, as code ported by hand spells the receive method: called too,
    // right after the method above, so a delegate that declares it on its class (where Swift does not
    // warn of a near miss) still hears of its datagrams, and is told once on standard error.

    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceiveData data: Data, fromAddress address: Data, withFilterContext filterContext: Any?)
}

extension GCDAsyncUdpSocketDelegate {
    public func udpSocket(_ sock: GCDAsyncUdpSocket, didConnectToAddress address: Data) {}
    public func udpSocket(_ sock: GCDAsyncUdpSocket, didNotConnect error: Error?) {}
    public func udpSocket(_ sock: GCDAsyncUdpSocket, didSendDataWithTag tag: Int) {
        DelegateDefaults.note(.didSendDatagram, of: self)
    }
    public func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {}
    public func udpSocket(
        _ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?
    ) {}
    public func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {}
    public func udpSocket(
        _ sock: GCDAsyncUdpSocket, didReceiveData data: Data, fromAddress address: Data, withFilterContext filterContext: Any?
    ) {
        DelegateDefaults.note(.receiveDataNearMiss, of: self)
    }
}

extension GCDAsyncUdpSocket {
    /// Delivers one datagram to `delegate`: Swift's spelling, then, unless its type is known to leave
    /// it to the default, the selector's (`didReceiveData:`), warning once per type that declares it.
    static func deliver(
        _ data: Data, from address: Data, context: Any?, to delegate: GCDAsyncUdpSocketDelegate, on socket: GCDAsyncUdpSocket
    ) {
        var cache = DelegateDefaults.Cache()
        deliver(data, from: address, context: context, to: delegate, on: socket, cache: &cache)
    }

    /// `deliver`, asking about the delegate's defaults through `cache` (one for a batch of datagrams).
    static func deliver(
        _ data: Data, from address: Data, context: Any?, to delegate: GCDAsyncUdpSocketDelegate, on socket: GCDAsyncUdpSocket,
        cache: inout DelegateDefaults.Cache
    ) {
        delegate.udpSocket(socket, didReceive: data, fromAddress: address, withFilterContext: context)
        guard !DelegateDefaults.leaves(.receiveDataNearMiss, to: delegate, cache: &cache) else { return }
        delegate.udpSocket(socket, didReceiveData: data, fromAddress: address, withFilterContext: context)
        guard !DelegateDefaults.leaves(.receiveDataNearMiss, to: delegate, cache: &cache) else { return }
        DelegateDefaults.warnOnce(
            about: delegate,
            "SocketStreams: \(type(of: delegate)) implements udpSocket(_:didReceiveData:fromAddress:withFilterContext:), "
                + "the Objective-C selector's words; GCDAsyncUdpSocketDelegate's Swift name is "
                + "udpSocket(_:didReceive:fromAddress:withFilterContext:). It is called for now; rename it.")
    }
}
