// What few pairs need (`PairOptions`), kept by a connection beside its halves (PairHalves.swift),
// its lifecycle and its open (`PairOpen`). Guarded by the connection's lock.

import Foundation

/// A `getaddrinfo`-shaped function; tests inject their own to exercise Happy Eyeballs.
typealias ResolveFunction = @Sendable (_ host: String, _ port: Int, _ family: Int32) -> Result<[SocketAddress], ResolutionError>

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
    var deferredRelease: (transport: HeldTransport?, socket: SocketHandle?)?
}

extension PairOptions {
    static let systemResolve: ResolveFunction = { Resolver.resolve(host: $0, port: $1, family: $2) }
}
