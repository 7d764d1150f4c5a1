// CFNetwork's status machine and event rules for one stream, as a value with no I/O and no locks, so
// they can be tested as a table (StreamEventStateTests). The connection keeps one per half and
// applies it under its lock.
//
// The rules (CoreFoundation's `_CFStreamSignalEvent`, `CFReadStreamRead`, `CFWriteStreamWrite`,
// `CFReadStreamClose`):
// - A stream that is not open yet, closed, or in error drops every event; at end it lets only
//   `errorOccurred` through; `openCompleted` counts only while opening.
// - `openCompleted` makes it open, `endEncountered` at end, `errorOccurred` in error (terminal:
//   `close()` keeps the error status).
// - Events wait in a bitmask (`whatToSignal`) and are delivered lowest bit first, one callout each;
//   signalling an event already pending merges with it. An event signalled while the stream is
//   scheduled nowhere is not recorded.
// - `hasBytesAvailable`/`hasSpaceAvailable` are one-shot: once signalled, the stream waits for the
//   client to read (or write) before the connection signals them again.

import Foundation

struct StreamEventState: Sendable, Equatable {
    /// `CFStreamStatus`. The transient `.reading`/`.writing` are never reported.
    private(set) var status: Stream.Status = .notOpen
    /// Signalled events not yet delivered (`Stream.Event` bits; five of them, so a byte holds them).
    private(set) var pending: UInt8 = 0
    /// `hasBytesAvailable` (input) or `hasSpaceAvailable` (output) was signalled and the client has
    /// not read (or written) since.
    private(set) var awaitingClient = false

    /// `open()`: only a stream that was never opened starts opening. Returns whether it did.
    mutating func open() -> Bool {
        guard status == .notOpen else { return false }
        status = .opening
        return true
    }

    /// Applies `event`. Returns whether it was accepted; an accepted event is recorded for delivery
    /// only if `scheduled` (the caller then asks the stream's run loops to deliver).
    @discardableResult
    mutating func signal(_ event: Stream.Event, scheduled: Bool) -> Bool {
        switch status {
        case .notOpen, .closed, .error:
            return false
        case .atEnd where event.rawValue != Self.errorOccurred:
            return false
        default:
            break
        }
        // By raw value: Foundation's `Stream.Event` constants are accessor calls across modules.
        switch event.rawValue {
        case Self.openCompleted:
            guard status == .opening else { return false }
            status = .open
        case Self.endEncountered:
            status = .atEnd
        case Self.errorOccurred:
            status = .error
        case Self.hasBytesAvailable, Self.hasSpaceAvailable:
            awaitingClient = true
        default:
            break
        }
        if scheduled { pending |= UInt8(truncatingIfNeeded: event.rawValue) }
        return true
    }

    // `Stream.Event` raw values (CFStreamEventType), the same on every platform.
    static let openCompleted: UInt = 1
    static let hasBytesAvailable: UInt = 2
    static let hasSpaceAvailable: UInt = 4
    static let errorOccurred: UInt = 8
    static let endEncountered: UInt = 16

    /// The client read (or wrote): the one-shot event is consumed, and one still pending is dropped
    /// (CFNetwork clears it before the transfer).
    mutating func clientTransferred(_ event: Stream.Event) {
        awaitingClient = false
        pending &= ~UInt8(truncatingIfNeeded: event.rawValue)
    }

    /// `close()`: status `.closed`, unless in error, which is terminal. Pending events are dropped.
    /// Returns false for a stream that was never opened or is already closed (nothing to do).
    mutating func close() -> Bool {
        guard status != .notOpen, status != .closed else { return false }
        if status != .error { status = .closed }
        pending = 0
        return true
    }

    /// Withholds a pending has-bytes/has-space event (a handshake began on a live pair).
    mutating func withdraw(_ event: Stream.Event) {
        pending &= ~UInt8(truncatingIfNeeded: event.rawValue)
        awaitingClient = false
    }

    var hasPending: Bool { pending != 0 }

    /// Takes the next event to deliver, lowest bit first.
    mutating func next() -> Stream.Event? {
        guard pending != 0 else { return nil }
        let bit = pending & (~pending &+ 1)
        pending &= ~bit
        return Stream.Event(rawValue: UInt(bit))
    }
}
