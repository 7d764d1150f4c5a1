import SocketStreams
import Synchronization

/// What GCDAsyncSocket learns with `respondsToSelector:` before it posts a delegate call: whether the
/// delegate implements the method at all. A Swift protocol's optional methods are defaults, which
/// cannot be asked about, so the defaults of the calls made per read or write say so when they run:
/// once one has run, a delegate of that type is not posted that call again, as GCDAsyncSocket posts
/// nothing to a delegate that does not respond (a block posted only to do nothing wakes a dispatch
/// worker, a hop between threads for every write).
///
/// Keyed by the delegate's dynamic type: a conformance binds the default for the class and for its
/// subclasses alike, so a method of that name that only a subclass declares is never called either
/// way. The types are few (one entry per delegate class), and the entries stay.
enum DelegateDefaults {
    /// The methods whose defaults report themselves.
    struct Methods: OptionSet, Sendable {
        let rawValue: UInt8
        /// `socket(_:didWriteDataWithTag:)`.
        static let didWrite = Methods(rawValue: 1 << 0)
        /// `socket(_:didReadPartialDataOfLength:tag:)` with a `UInt` length.
        static let readPartial = Methods(rawValue: 1 << 1)
        /// `socket(_:didReadPartialDataOfLength:tag:)` with an `Int` length.
        static let readPartialInt = Methods(rawValue: 1 << 2)
        /// `socket(_:didWritePartialDataOfLength:tag:)` with a `UInt` length.
        static let writePartial = Methods(rawValue: 1 << 3)
        /// `socket(_:didWritePartialDataOfLength:tag:)` with an `Int` length.
        static let writePartialInt = Methods(rawValue: 1 << 4)
        /// `udpSocket(_:didSendDataWithTag:)` (GCDAsyncUdpSocketDelegate).
        static let didSendDatagram = Methods(rawValue: 1 << 5)
        /// `udpSocket(_:didReceiveData:fromAddress:withFilterContext:)`, the selector's words.
        static let receiveDataNearMiss = Methods(rawValue: 1 << 6)
    }

    /// The defaults seen to run, by delegate type (`Guarded`, not `Mutex`, whose lock Thread Sanitizer
    /// cannot see).
    private static let known = Guarded<[ObjectIdentifier: Methods]>([:])

    /// Counts the entries' changes, so that a `Cache` knows when it is stale.
    private static let version = Atomic<UInt>(0)

    /// Called by the default of `method`: `delegate`'s type leaves it to the default.
    static func note(_ method: Methods, of delegate: some AnyObject) {
        let type = ObjectIdentifier(Swift.type(of: delegate))
        known.withLock { known in
            guard known[type]?.isSuperset(of: method) != true else { return }
            known[type, default: []].formUnion(method)
            version.add(1, ordering: .releasing)
        }
    }

    /// One delegate type's entry as a caller last read it: `leaves(_:to:cache:)` asks the table only
    /// when the type or the table has changed since, where a datagram's calls would otherwise take its
    /// lock and hash the type each time.
    struct Cache {
        fileprivate var version: UInt = 0
        fileprivate var type: ObjectIdentifier?
        fileprivate var methods: Methods = []
    }

    /// `leaves(_:to:)` through `cache`.
    static func leaves(_ methods: Methods, to delegate: AnyObject, cache: inout Cache) -> Bool {
        let type = ObjectIdentifier(Swift.type(of: delegate))
        let current = version.load(ordering: .acquiring)
        if cache.type != type || cache.version != current {
            cache = Cache(version: current, type: type, methods: known.withLock { $0[type] ?? [] })
        }
        return cache.methods.isSuperset(of: methods)
    }

    /// Whether every one of `methods` is known to be left to its default by `delegate`'s type.
    static func leaves(_ methods: Methods, to delegate: AnyObject) -> Bool {
        let type = ObjectIdentifier(Swift.type(of: delegate))
        return known.withLock { $0[type]?.isSuperset(of: methods) ?? false }
    }

    /// Delegate types already warned about (`warnOnce`).
    private static let warned = Guarded<Set<ObjectIdentifier>>([])

    /// Writes `message` to standard error the first time it is asked for `delegate`'s type.
    static func warnOnce(about delegate: AnyObject, _ message: @autoclosure () -> String) {
        let first = warned.withLock { $0.insert(ObjectIdentifier(Swift.type(of: delegate))).inserted }
        guard first else { return }
        FileHandle.standardError.write(Data((message() + "\n").utf8))
    }
}
