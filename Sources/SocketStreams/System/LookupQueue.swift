// Where blocking name lookups (getaddrinfo) run.
//
// Not on `DispatchQueue.global()`: libdispatch on Linux serves the global concurrent queues from a
// pool as wide as the machine has cores, and a lookup blocks its worker until the answer comes. A slow
// AAAA or a silent server (seconds, up to the resolver's timeout) then holds up every other lookup
// queued behind it, the A queries RFC 8305 §3 wants answered at once among them: on two cores, two
// connections waiting for an AAAA kept a third connection's A query from being sent at all. A serial
// queue of its own per lookup is served from the overcommit pool instead, which starts a thread when
// every worker is busy, so each lookup waits only for its own answer.

import Dispatch

package enum LookupQueue {
    /// Runs `lookup` (a call that may block in the resolver) on a queue of its own.
    package static func run(_ lookup: @escaping @Sendable () -> Void) {
        DispatchQueue(label: "SocketStreams.lookup").async(execute: lookup)
    }
}
