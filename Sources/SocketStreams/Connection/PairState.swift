// The state a connection keeps beside its lifecycle and its open (`PairOpen`): each half's
// (`HalfState`) and what few pairs need (`PairOptions`). Guarded by the connection's lock.

import Foundation

/// A `getaddrinfo`-shaped function; tests inject their own to exercise Happy Eyeballs.
typealias ResolveFunction = @Sendable (_ host: String, _ port: Int, _ family: Int32) -> Result<[SocketAddress], ResolutionError>

/// One half's state in its connection (guarded by the connection's lock).
struct HalfState {
    // References first, then the bytes: 32 bytes a half.
    /// The reactors (run loop + mode) this half is scheduled on.
    var reactors: SmallList<Reactor> = []
    var error: NSError?
    /// Status, pending events, and whether the one-shot has-event awaits the client.
    var events = StreamEventState()
    /// Closed or deinitialised: the half no longer holds the socket open.
    var gone = false
    /// Input: readiness came again while `hasBytesAvailable` awaited the client; stop watching until `read`.
    var suppressed = false
    /// Output: epoll watches the fd for writability (from a write that left it unwritable until
    /// epoll reports it writable while `hasSpaceAvailable` still awaits the client).
    var watchingSpace = false
    /// Output, plain socket: a poll found the socket writable and nothing has been written since,
    /// so `hasSpaceAvailable` can answer without asking the kernel again. Only writes take space
    /// away; every write clears it on its way in.
    var spaceConfirmed = false
    /// Schedules waiting for their run loop's CFRunLoop (`onCFRunLoop`'s fallback): events are
    /// kept for them meanwhile, as for a scheduled half.
    var schedulesPending: UInt8 = 0
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
