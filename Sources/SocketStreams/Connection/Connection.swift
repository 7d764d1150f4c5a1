// The context shared by the two streams of a pair: one socket, one status machine per half, one
// lifecycle. It decides little itself: each set of rules is a value it owns, calls under its lock
// and carries out (none calls back): `PairHalves` (readiness into has-events), `PairLifecycle` (the
// legal moves), `PairOpen` (the open's home, deadline and stages), `PairSettings` (what may change
// when), `PairRegistrations` (the epoll sets), `TransferGate` (the transfers in flight), `SendSpace`.
//
// Its four jobs, a room each:
// 1. The halves and their events (this file; the halves' state and rules in PairHalves.swift):
//    `signal` (CFNetwork's filter, `StreamEventState`) and `deliverEvents`.
// 2. Carrying out the lifecycle (Connection+Lifecycle.swift, Connection+Settings.swift): the open,
//    the handshake stages, settings changed on the way, failure and teardown.
// 3. Where it listens (Connection+Scheduling.swift, Connection+Interest.swift): run loops and queues
//    as reactors, and what epoll reports on each.
// 4. Transfers (Connection+IO.swift): read, write, has-bytes, has-space, half-close; the output's
//    send-space bound (SendSpace.swift) says whether a write leaves room without a system call.
// What it does not do: know CFNetwork's property names (the Properties layer maps them onto
// `PairSettings.Change`s), or parse any dictionary.
//
// `openCompleted` fires when TCP is up, then the handshake stages run (a proxy, then TLS); has-events
// wait until the last is done, as in CFNetwork. Every byte goes through `transport`, which a stage
// may replace with one layered over it (TLS, or bytes read past a proxy's reply).
//
// Locking: `lock` guards everything below it (`opening` and `registrations` included, values only ever
// called with it held; `transfers` is atomic). Delegate callouts and blocking waits happen without it;
// stages run under it. Lock order: connection lock, then the connector's, a reactor's or the reactor
// registry's; never the other way round.

import Foundation

final class Connection: EventTarget, @unchecked Sendable {
    typealias Lifecycle = PairLifecycle<Connector, NSError>

    /// What the pair was created for: what stages and error messages name.
    let target: Endpoint
    // The one-byte fields fill `target`'s padding (25 bytes), and what few pairs need lives in
    // `options`, which keeps the object small, since every open pair holds one (what an idle pair
    // holds, as the scale run measures it, is in Guides/Performance.md).
    // Guarded by `lock`, as everything below but `lock` and `transfers`.
    /// `kCFStreamPropertyShouldCloseNativeSocket` as set (nil: never set, which reads back as nil, as
    /// in CFNetwork: the pair then closes an fd it made and not one it was given).
    var closesNativeSocketAsSet: Bool?
    /// The round delivering events right now, if any, and the halves (a bit each) that wait for it:
    /// never two callouts at once for one pair. No dynamic exclusivity check (the lock serialises
    /// it): its mutating calls cost two runtime calls each, on every event.
    @exclusivity(unchecked) var callouts = SerialRunner()
    /// `kCFStreamPropertyNoDelay` as set (nil: never set).
    var noDelay: Bool?
    /// Also the condition blocking calls wait on (an open, a handshake). Not a `Guarded`: callers wait on it.
    let lock = ConditionLock.make()

    // `@exclusivity(unchecked)` on the fields every read, write and event touches: the lock serialises
    // them, and Swift's dynamic checks were a large share of every round trip's instructions.
    @exclusivity(unchecked) var lifecycle = Lifecycle()
    /// The socket's owner, for properties and ShouldCloseNativeSocket. Nil until TCP is up.
    var socket: SocketHandle?
    /// What reads and writes go through: the socket, or layers over it. Nil until TCP is up.
    @exclusivity(unchecked) var transport: HeldTransport?
    /// The transfers past their gate, which use the transport and its fd without the lock, and the
    /// release a teardown left to the last of them (TransferGate.swift).
    let transfers = TransferGate()
    /// Blocking reads waiting for the socket (`Connection.waitForInput`): while one waits, readiness on
    /// a reactor does not let a layered transport take bytes off the socket (a TLS peek), which the
    /// waiting read would never see arrive. Guarded by `lock`.
    @exclusivity(unchecked) var readersWaiting = 0
    /// Each half's state (PairHalves.swift).
    let halves = PairHalves(HalfState(), HalfState())
    /// The streams, for delegate callouts, unretained (the client owns them; not `weak`, which would
    /// slow every retain and release of a stream: `UnretainedReference`). A stream's deinit clears its
    /// entry under `lock` first (`close(_:deinitialised:)`). Guarded by `lock`.
    @exclusivity(unchecked) var inputStream: UnretainedReference<Stream>?
    @exclusivity(unchecked) var outputStream: UnretainedReference<Stream>?

    /// The owner that takes the pair's events instead of its streams' delegate, unretained under the
    /// same rule as the streams (PairReceiver.swift). Guarded by `lock`.
    @exclusivity(unchecked) var receiver: UnretainedReference<PairReceiver>?

    /// The half's stream, retained, unless it is gone or being deinitialised. Lock held.
    @inline(__always) func stream(_ half: Half) -> Stream? {
        lock.assertHeld()
        return (half == .input ? inputStream : outputStream)?.retained()
    }

    /// The fd's registration on each reactor it listens on.
    @exclusivity(unchecked) var registrations = PairRegistrations()
    /// The open's home, deadline and stages (the open in progress, and where the next one runs).
    @exclusivity(unchecked) var opening = PairOpen()
    /// What few pairs need (PairOptions.swift), the tests' seams for time and name resolution included.
    var options: PairOptions?

    /// The options, created on first use.
    var someOptions: PairOptions {
        if let options { return options }
        let created = PairOptions()
        options = created
        return created
    }

    init(endpoint: Endpoint) {
        self.target = endpoint
    }

    /// Whether the fd is closed with the pair. Lock held.
    var closesNativeSocket: Bool {
        if let closesNativeSocketAsSet { return closesNativeSocketAsSet }
        if case .native = target { return false }
        return true
    }

    /// Whether a handshake stage runs (the lifecycle's `negotiating`). Lock held.
    var isNegotiating: Bool { lifecycle.isNegotiating }

    // MARK: status and events

    func status(_ half: Half) -> Stream.Status {
        lock.withLock {
            let status = halves[half].events.status
            if status == .opening || isNegotiating { moveOpenToStreamThread() }  // a polling client must see progress
            return status
        }
    }

    func error(_ half: Half) -> NSError? {
        lock.withLock { halves[half].error }
    }

    /// Applies CFNetwork's event filter and status rules to `event` on `half` (`_CFStreamSignalEvent`),
    /// and asks the half's reactors to deliver it. Lock held.
    func signal(_ half: Half, _ event: Stream.Event, error: NSError? = nil) {
        lock.assertHeld()
        let scheduled = !halves[half].reactors.isEmpty
        guard halves[half].events.signal(event, scheduled: scheduled || halves[half].schedulesPending > 0) else { return }
        if event == .errorOccurred { halves[half].error = error }
        guard scheduled else { return }
        halves[half].reactors.forEach { $0.markReady(ReadyItem(target: self, slot: half.rawValue)) }
    }

    /// Delivers a half's pending events to its delegate, lowest bit first, one callout each, on the
    /// thread of `reactor` (which runs in a mode the half is scheduled in).
    func deliverEvents(_ slot: Int, on reactor: Reactor) {
        reactor.assertOwner("a pair's event delivery")
        let half = Half(slot: slot)
        var entry: SerialRunner.Entry?
        while true {
            lock.lock()
            guard halves[half].events.hasPending, halves.isScheduled(half, on: reactor) else { break }
            if entry == nil {
                // The pair may deliver on several threads (its halves on two queues or run loops, or
                // one half scheduled on two run loops): never two callouts at once for one pair, not
                // even for the same half. The round running elsewhere, when it ends, hands this one
                // back to its reactors. A round already running on this thread is a delegate running
                // a run loop inside its callout: deliver, as before.
                let entered = callouts.enter(request: 1 << slot, reentrant: true)
                if entered == .busy { break }
                entry = entered
            }
            // The stream is taken after every `break`: releasing it with the lock held could run its deinit.
            guard let event = halves[half].events.next(), let stream = stream(half) else { break }
            // A half scheduled on several reactors can be read (or written) in a callout on another
            // thread after its has-event was signalled, even by the read that was in progress when it
            // was: the event is delivered only if the socket still confirms it, so that the delegate's
            // read (or write) never blocks inside its callout. One it does not confirm is cleared, and
            // the stream watches again.
            if halves[half].reactors.count > 1,
                event.rawValue & (StreamEventState.hasBytesAvailable | StreamEventState.hasSpaceAvailable) != 0,
                !confirm(half)
            {
                lock.unlock()
                continue
            }
            if let receiver {
                // The pair's owner (PairReceiver.swift); gone (its deinit has begun): nobody.
                #if DEBUG
                    lock.assertHeld()  // the receiver's rule: loaded with the lock held (UnretainedReference)
                #endif
                let owner = receiver.taken()
                lock.unlock()
                if let owner {
                    owner._withUnsafeGuaranteedRef { $0.pair(stream, handle: event) }
                    owner.release()
                }
                continue
            }
            let client = options.flatMap { $0.hasClients ? $0.clients[slot] : nil }
            lock.unlock()
            // `stream` is released at the end of this iteration, before the lock is taken again: the
            // client may have let go of it during the callout, and its deinit takes the lock.
            if let client {
                client.deliver(stream, event)
            } else {
                stream.delegate?.stream(stream, handle: event)
            }
        }
        // The lock is held here.
        if entry == .run {
            let waiting = callouts.leave()
            for other in 0..<2 where waiting & (1 << other) != 0 {
                halves[Half(slot: other)].reactors.forEach { $0.markReady(ReadyItem(target: self, slot: other)) }
            }
        }
        lock.unlock()
    }

    /// `CFReadStreamSetClient`/`CFWriteStreamSetClient`: nil removes the client (its context is released).
    func setClient(_ client: StreamClient?, for half: Half) {
        let replaced = lock.withLock { () -> StreamClient? in
            if client == nil && options == nil { return nil }
            let old = someOptions.clients[half.rawValue]
            someOptions.clients[half.rawValue] = client
            if client != nil { someOptions.hasClients = true }
            return old
        }
        _ = replaced  // released outside the lock: its context's release callback is the client's code
    }
}
