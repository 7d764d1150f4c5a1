// The state a connection keeps beside its lifecycle and its open (`PairOpen`): each half's
// (`HalfState`) and what few pairs need (`PairOptions`). Guarded by the connection's lock.

import Foundation

/// A `getaddrinfo`-shaped function; tests inject their own to exercise Happy Eyeballs.
typealias ResolveFunction = @Sendable (_ host: String, _ port: Int, _ family: Int32) -> Result<[SocketAddress], ResolutionError>

/// One half's state in its connection (guarded by the connection's lock).
struct HalfState {
    // References first, then the bytes: 32 bytes a half (`HalfStateLayoutTests`).
    /// The reactors (run loop + mode) this half is scheduled on.
    var reactors: SmallList<Reactor> = []
    var error: NSError?
    /// Status, pending events, and whether the one-shot has-event awaits the client.
    var events = StreamEventState()
    /// Closed or deinitialised: the half no longer holds the socket open.
    var gone: Bool {
        get { flags & Self.goneFlag != 0 }
        set { set(Self.goneFlag, newValue) }
    }
    /// Input: readiness came again while `hasBytesAvailable` awaited the client; stop watching until `read`.
    var suppressed: Bool {
        get { flags & Self.suppressedFlag != 0 }
        set { set(Self.suppressedFlag, newValue) }
    }
    /// Output: epoll watches the fd for writability (from a write that left it unwritable until
    /// epoll reports it writable while `hasSpaceAvailable` still awaits the client).
    var watchingSpace: Bool {
        get { flags & Self.watchingSpaceFlag != 0 }
        set { set(Self.watchingSpaceFlag, newValue) }
    }
    /// Output, plain socket: the kernel (a poll, or the send-space bound) said the socket takes
    /// bytes and nothing has been written since, so `hasSpaceAvailable` can answer without asking
    /// the kernel again. Only writes take space away; every write clears it on its way in.
    var spaceConfirmed: Bool {
        get { flags & Self.spaceConfirmedFlag != 0 }
        set { set(Self.spaceConfirmedFlag, newValue) }
    }
    /// The four flags above, a bit each (one byte, so `sendSpace` fits in the 32 bytes).
    private var flags: UInt8 = 0
    /// Schedules waiting for their run loop's CFRunLoop (`onCFRunLoop`'s fallback): events are
    /// kept for them meanwhile, as for a scheduled half.
    var schedulesPending: UInt8 = 0
    /// Output, plain TCP socket: a lower bound of the send buffer's free space, so the re-signal after
    /// a write needs no poll (SendSpace.swift).
    var sendSpace = SendSpace.unchecked

    private static let goneFlag: UInt8 = 1
    private static let suppressedFlag: UInt8 = 2
    private static let watchingSpaceFlag: UInt8 = 4
    private static let spaceConfirmedFlag: UInt8 = 8

    @inline(__always)
    private mutating func set(_ flag: UInt8, _ on: Bool) {
        flags = on ? flags | flag : flags & ~flag
    }
}

/// What few pairs need: their settings, clients, a deferred error, and the tests' seams.
final class PairOptions {
    var settings = PairSettings()
    var time: any TimeSource = SystemTime()
    var resolve: ResolveFunction = PairOptions.systemResolve
    /// `CFReadStreamSetClient`/`CFWriteStreamSetClient` per half: while set, it gets the events.
    var clients: [StreamClient?] = [nil, nil]
    /// An error that reaches the input stream only once the bytes that arrived before it are read.
    var deferredInputError: NSError?
    /// Whether a client was ever set (so deliveries need not look in `clients`).
    var hasClients = false
    /// `shutdownOutputKey` was set: the write side is shut (close_notify, FIN), the read side is not.
    var outputShutDown = false
    /// What `tearDown` could not close yet, a transfer being in flight (`TransferGate.deferRelease`).
    var deferredRelease: (transport: ActiveTransport?, socket: SocketHandle?)?
}

extension PairOptions {
    static let systemResolve: ResolveFunction = { Resolver.resolve(host: $0, port: $1, family: $2) }
}
