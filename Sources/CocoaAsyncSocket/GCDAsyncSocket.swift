import Foundation
import SocketStreams
import Synchronization

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
/// streams runs, and each delegate call is delivered from there to the delegate queue with the order a
/// block of its own (`dispatch_async`) would have: the calls arrive in order and never overtake a
/// block posted to that queue before them. Reads and writes are queued with a timeout and a tag and
/// complete in order; every method may be called from any thread. That place is the socket queue
/// given to `init`; for a socket given none, where GCDAsyncSocket would make a private serial queue,
/// its delegate's queue, whose reactor then delivers each call in a turn of its own, so neither a
/// completion nor the delegate's next read or write waits for another thread; with the main queue or
/// a global queue as delegate queue, or none, the package's stream thread (`RunLoop.socketStreams`).
/// GCDAsyncSocket's private queue is seen only through ``perform(_:)``, which runs its block where the
/// socket works instead (Guides/Performance.md, Guides/PortingFromApplePlatforms.md).
///
/// `disconnect()` takes effect at once (``isDisconnected`` is true when it returns) and posts
/// `socketDidDisconnect(_:withError:)` with nil; what the kernel accepts at once of the writes queued
/// before it is still sent. After a disconnect the same socket can connect or accept again.
public final class GCDAsyncSocket: NSObject, @unchecked Sendable {
    // @unchecked: every stored property is a `let` of a Sendable type or `state`, reached only
    // under its lock.

    let state = Guarded(State())
    /// The queue given for the socket's own work; nil: the package's stream thread (see the type's
    /// documentation).
    let socketQueue: DispatchQueue?
    /// The next id for the engine (see `takeID`): here, in the object's spare 8 bytes, rather than in
    /// `state`, which it would push past the size `GCDAsyncSocketLayoutTests` holds it to.
    let nextID = Atomic<UInt32>(1)
    /// Marks a socket queue with its own identity: one key for every socket (a key per socket would add
    /// an entry per socket to a shared queue's specifics, which libdispatch searches linearly, so opening
    /// the n-th socket on one queue would cost O(n); Benchmarks/results/scale-notes.md).
    static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

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
        if let socketQueue { Self.markQueue(socketQueue) }
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
        #if DEBUG
            link?.operations.checkLetGo(afterDeinitOf: self)
        #endif
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
}
