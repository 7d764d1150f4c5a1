// A pair's two halves: each one's state (`HalfState`, the two in place in a `FixedPair`) and the
// rules that turn socket readiness into has-events, as functions of that state: what each half wants
// epoll to report on a reactor, what a report becomes, and what a read, a write, a schedule or a
// stage does to the watching. Readiness is semi-level-triggered: a has-event is signalled while the
// socket is ready, but once signalled it is not signalled again until the client reads (or writes);
// meanwhile the fd leaves the epoll set for that half, so nothing spins. No locks, and no I/O but the
// send-space bound's own look at the socket after a write: the connection calls these with its lock
// held and does the signalling and the epoll changes. `PairHalvesTests` checks them without one.

import CSocketStreamsShims
import Foundation

/// One half's state in its connection (guarded by the connection's lock).
struct HalfState {
    // References first, then the bytes: 32 bytes a half (`SendSpaceTests.testHalfStateStaysThirtyTwoBytes`).
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
    /// Input: whether each read also says what the kernel still holds (`TCP_INQ`), so that a read
    /// leaving bytes there re-signals `hasBytesAvailable` without an epoll round (read-ahead,
    /// Connection+IO.swift). Decided by the first read that fills its buffer. Bits 4 and 5 of `flags`.
    var inputCount: InputCount {
        get { InputCount(rawValue: (flags >> 4) & 3) ?? .undecided }
        set { flags = flags & ~(3 << 4) | newValue.rawValue << 4 }
    }
    enum InputCount: UInt8 {
        case undecided, off, on
    }
    /// The four flags above, a bit each, and `inputCount` (one byte, so `sendSpace` fits in the 32 bytes).
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

/// A pair's two halves, in place: what the guide, the comments and `PairHalvesTests` call the halves'
/// rules are the members below.
typealias PairHalves = FixedPair<HalfState>

extension FixedPair where Element == HalfState {
    /// Whether `half` is scheduled on `reactor`.
    @inline(__always)
    func isScheduled(_ half: Half, on reactor: Reactor) -> Bool {
        self[half].reactors.contains(where: { $0 === reactor })
    }

    /// The epoll events the halves want from `reactor` while no stage runs: `reading` while the
    /// input is open, scheduled there and not waiting for its client to read; `writing` while the
    /// output is open, scheduled there and watching for space.
    @inline(__always)
    func wantedEvents(on reactor: Reactor, reading: UInt32, writing: UInt32) -> UInt32 {
        var events: UInt32 = 0
        if self[.input].events.status == .open, !self[.input].suppressed, isScheduled(.input, on: reactor) {
            events |= reading
        }
        if self[.output].events.status == .open, self[.output].watchingSpace, isScheduled(.output, on: reactor) {
            events |= writing
        }
        return events
    }

    /// Readiness `ready` (as the transport reads it) reported from `reactor`: whether to signal
    /// `hasBytesAvailable` and `hasSpaceAvailable` now. A half whose has-event still awaits its client
    /// is not signalled again; it stops watching instead (the input until a read, the output until
    /// a write). An output that is signalled keeps watching: a writer that fills the socket again in
    /// its callout then needs no `epoll_ctl` (an upload makes two fewer each time it fills the socket).
    @inline(__always)
    func takeReadiness(_ ready: Interest, from reactor: Reactor) -> (bytes: Bool, space: Bool) {
        var bytes = false
        var space = false
        if ready.contains(.readable), self[.input].events.status == .open, isScheduled(.input, on: reactor) {
            if self[.input].events.awaitingClient {
                self[.input].suppressed = true
            } else {
                bytes = true
            }
        }
        if ready.contains(.writable), self[.output].events.status == .open, self[.output].watchingSpace,
            isScheduled(.output, on: reactor)
        {
            if self[.output].events.awaitingClient {
                self[.output].watchingSpace = false
            } else {
                space = true
            }
        }
        return (bytes, space)
    }

    /// A read passed its gate: the input's has-event is the client's now. True if the input had
    /// stopped watching and must watch again.
    @inline(__always)
    func clientReads() -> Bool {
        let resume = self[.input].suppressed
        self[.input].events.clientTransferred(.hasBytesAvailable)
        self[.input].suppressed = false
        return resume
    }

    /// A write passed its gate: the output's has-event is the client's now, and no earlier answer
    /// about space holds.
    @inline(__always)
    func clientWrites() {
        self[.output].events.clientTransferred(.hasSpaceAvailable)
        self[.output].spaceConfirmed = false
    }

    /// A write through `transport` on a scheduled, open output took `count` of the `offered` bytes:
    /// `signal` if `hasSpaceAvailable` is due at once, the socket surely taking more (a plain TCP
    /// socket, or TLS straight over one, answers from its send-space bound, with no system call
    /// while the bound lasts; anything else polls); else the output watches for space, and `watch`
    /// says that epoll's interest must change. `alone`: no other transfer is in flight, so the answer
    /// holds until the next write (`spaceConfirmed`).
    @inline(__always)
    func wrote(
        _ count: Int, of offered: Int, through transport: ActiveTransport, madeFor target: Endpoint, alone: Bool
    ) -> (signal: Bool, watch: Bool) {
        let remains: Bool
        let pending: Bool
        if case .socket(let fd) = transport {
            pending = false
            remains = count == offered && self[.output].sendSpace.remains(afterSending: count, through: fd, madeFor: target)
        } else {
            (remains, pending) = layeredWrote(count, of: offered, through: transport, madeFor: target)
        }
        if remains {
            if alone { self[.output].spaceConfirmed = true }
            return (true, false)
        }
        if count < offered || pending { self[.output].sendSpace.ranOut() }
        guard !self[.output].watchingSpace else { return (false, false) }
        self[.output].watchingSpace = true
        return (false, true)
    }

    /// `wrote` through a layered transport (out of line: the plain socket's path stays small): whether
    /// the socket surely takes more, and whether the transport holds output back. The charge is
    /// dropped where the write left bytes behind: the bound is spent then (`ranOut`).
    @inline(never)
    private func layeredWrote(
        _ count: Int, of offered: Int, through transport: ActiveTransport, madeFor target: Endpoint
    ) -> (remains: Bool, pending: Bool) {
        let sent = transport.takeSendState()
        let remains =
            count == offered && !sent.pending
            && self[.output].sendSpace.remains(
                afterCharge: sent.charge, fd: transport.fd, writeInterest: transport.writeInterest, madeFor: target)
        return (remains, sent.pending)
    }

    /// The socket did not confirm what `half`'s unconsumed has-event said (another thread's transfer
    /// used it up): it is cleared, and the half watches again. True if epoll's interest must change.
    func unconfirmed(_ half: Half) -> Bool {
        guard self[half].events.awaitingClient else { return false }
        self[half].events.clientTransferred(half == .input ? .hasBytesAvailable : .hasSpaceAvailable)
        if half == .input {
            defer { self[.input].suppressed = false }
            return self[.input].suppressed
        }
        guard !self[.output].reactors.isEmpty, !self[.output].watchingSpace else { return false }
        self[.output].watchingSpace = true
        return true
    }

    /// `half` was just scheduled on a live pair: its readiness is derived again, as CFNetwork does
    /// the first time (the input watches; the output watches unless its has-event awaits the client).
    func rederive(_ half: Half) {
        guard self[half].events.status == .open else { return }
        if half == .input {
            self[half].suppressed = false
        } else if !self[half].events.awaitingClient {
            self[half].watchingSpace = true
        }
    }

    /// A handshake stage starts: has-events already raised are withdrawn and the halves watch
    /// nothing until it is done (the stage says what the socket is watched for).
    func suspend() {
        self[.input].events.withdraw(.hasBytesAvailable)
        self[.output].events.withdraw(.hasSpaceAvailable)
        self[.input].suppressed = false
        self[.output].watchingSpace = false
        self[.output].spaceConfirmed = false
    }
}
