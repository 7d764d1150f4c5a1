// The engine's datagram socket: one UDP socket of one family, owned by one reactor, the peer of
// `Connection` for datagrams (no byte stream, no end of stream, no stages). Its faces (GCDAsyncUdpSocket
// in CocoaAsyncSocket, the async face) decide what a failure does to them; the socket reports every
// outcome as a value and decides nothing for them.
//
// Who owns what: the receive and send I/O, the epoll interest and the teardown run only on the owner
// (inside the reactor's `perform`); everything other threads may ask for (a datagram to send, a
// receive mode, a close) is recorded in `DatagramState` under the socket's lock and the owner is
// `execute`d. The fd is closed only by the owner, under that lock, so a configuration call made from
// another thread (bind, an option), which holds the lock for its system call, never meets a closed or
// reused fd. Sends: one FIFO, consecutive datagrams in one `sendmmsg`; EAGAIN waits for writability,
// with the head datagram's timeout running from then. Receives: `recvmmsg` into the reactor's batch
// buffer (`Reactor.withBatchBuffer`), at most `receiveBudget` batches a readiness, so one flooded socket
// cannot keep the reactor from the rest; pausing stops reading, and the kernel's buffer then applies
// back-pressure.

import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc

/// Where a datagram socket's work runs: the reactor of a dispatch queue (its callouts run on that
/// queue), or the package's stream thread.
package enum DatagramOwner: Sendable {
    /// A serial queue given for the socket's work (GCDAsyncUdpSocket's socket queue): any block on it
    /// may act as the owner.
    case queue(DispatchQueue)
    /// The queue of the face's delegate, which other code uses too and which may be concurrent: only
    /// the reactor's perform acts as the owner (a block on a concurrent queue runs beside a perform).
    case delegateQueue(DispatchQueue)
    case streamThread
}

/// How a datagram socket reads.
package enum DatagramReceiveMode: Sendable, Equatable {
    /// Not reading: datagrams wait in the kernel's buffer (and beyond it are dropped by the kernel).
    case paused
    /// Exactly one datagram off the kernel, then `paused`.
    case once
    /// Every datagram, as it comes.
    case continuous
}

/// Why one datagram was not sent.
package enum DatagramSendError: Error, Sendable, Equatable {
    /// The kernel refused it (`code` is errno: EMSGSIZE too large, EACCES a broadcast without
    /// `SO_BROADCAST`, ENETUNREACH, ECONNREFUSED after an ICMP error on a connected socket, …).
    case system(code: Int32, function: String)
    /// It waited for buffer space longer than its timeout.
    case timedOut
}

/// One send's outcome: its tag, and nil when the kernel took it, else why not.
package struct DatagramOutcome: Sendable {
    package let tag: Int
    package let error: DatagramSendError?
}

/// One datagram a receive batch brought, valid only during the delegate call that hands it out.
package struct ReceivedDatagram {
    /// Its bytes (at most the socket's `maximumDatagramSize`).
    package let bytes: UnsafeRawBufferPointer
    /// The sender's address.
    package let sender: SocketAddress
    /// The kernel cut it to `maximumDatagramSize` (`MSG_TRUNC`): `bytes` is its beginning.
    package let truncated: Bool
}

/// What a datagram socket tells its face, on its owner's thread, never under its lock.
package protocol DatagramSocketDelegate: AnyObject, Sendable {
    /// Datagrams that arrived, in order (a zero-length one is a datagram like any other).
    func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>)
    /// The outcomes of sends, in the order the sends were made: a `sendmmsg` batch's together.
    func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>)
    /// Reading failed (any errno but EAGAIN: an ICMP error reported on a connected socket, ECONNREFUSED,
    /// is the usual one). The socket stays open; reading goes on if the mode says so.
    func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError)
}

/// One UDP socket (see the file's header). Every method may be called from any thread.
package final class DatagramSocket: ReactorHandler, TimerTarget {
    /// The most datagrams one `recvmmsg` or `sendmmsg` moves.
    static let batch = Int(CSSH_DATAGRAM_BATCH)
    /// How many receive batches one readiness report may read before the reactor's other sockets get
    /// their turn (level-triggered: what is left is reported again in the next round).
    static let receiveBudget = 4

    package let family: Int32
    let reactor: Reactor
    /// Whether a block on the owner's queue (or its thread) may act as the owner outside a perform
    /// (`DatagramOwner.delegateQueue`: no).
    private let ownsQueueBlocks: Bool
    let handle: SocketHandle
    private let token: UInt64
    private let state: Guarded<DatagramState>

    /// A new UDP socket of `family` (`AF_INET`, `AF_INET6`) on `owner`'s reactor, not yet bound.
    /// `maximumDatagramSize`: the largest datagram a receive hands out whole (a larger one is truncated
    /// and reported so). Fails as `socket(2)` fails (EMFILE, EAFNOSUPPORT) or when the owner's reactor
    /// cannot be had.
    package init(family: Int32, owner: DatagramOwner, delegate: any DatagramSocketDelegate, maximumDatagramSize: Int = 65_535)
        throws(DatagramSendError)
    {
        let reactor: Reactor
        do {
            switch owner {
            case .queue(let queue), .delegateQueue(let queue): reactor = try ReactorRegistry.shared.acquire(queue: queue)
            case .streamThread:
                reactor = try StreamThread.reactor()
                ReactorRegistry.shared.retain(reactor)
            }
        } catch {
            throw .system(code: error.code, function: error.function)
        }
        let fd: Int32
        do {
            fd = try Posix.datagramSocket(family: family)
        } catch {
            ReactorRegistry.shared.release(reactor)
            throw .system(code: error.code, function: error.function)
        }
        self.family = family
        self.reactor = reactor
        if case .delegateQueue = owner { ownsQueueBlocks = false } else { ownsQueueBlocks = true }
        handle = SocketHandle(fd: fd, closesOnRelease: true)
        state = Guarded(DatagramState(delegate: delegate, maximumDatagramSize: max(1, min(maximumDatagramSize, 65_535))))
        do {
            token = try reactor.add(fd: fd, events: 0, handler: Unregistered.shared)
        } catch {
            handle.release()
            ReactorRegistry.shared.release(reactor)
            throw .system(code: error.code, function: error.function)
        }
        reactor.replaceHandler(token: token, with: self)
    }

    deinit {
        let open = state.withLock { $0.fdOpen }
        if open {
            reactor.remove(fd: handle.fd, token: token)
            handle.release()
        }
        ReactorRegistry.shared.release(reactor)
    }

    // MARK: configuration (any thread; the system call under the lock, see the header)

    /// Runs `body` with the fd unless the socket is closed (then EBADF, as the kernel would say).
    private func withOpenFD<T>(_ function: String, _ body: (Int32) throws(SystemError) -> T) throws(DatagramSendError) -> T {
        let outcome = state.withLock { state -> Result<T, SystemError> in
            guard state.fdOpen else { return .failure(SystemError(code: EBADF, function: function)) }
            do throws(SystemError) {
                return .success(try body(handle.fd))
            } catch {
                return .failure(error)
            }
        }
        switch outcome {
        case .success(let value): return value
        case .failure(let error): throw .system(code: error.code, function: error.function)
        }
    }

    /// `bind(2)`.
    package func bind(to address: SocketAddress) throws(DatagramSendError) {
        try withOpenFD("bind") { fd throws(SystemError) in try Posix.bind(fd, to: address) }
    }

    /// `connect(2)`: from now on the socket sends to `address` alone and the kernel passes on only its
    /// datagrams (those already queued from others are dropped as they are read).
    package func connect(to address: SocketAddress) throws(DatagramSendError) {
        try withOpenFD("connect") { fd throws(SystemError) in
            guard case .processed = try Posix.connect(fd, to: address) else { throw SystemError(code: EINPROGRESS, function: "connect") }
        }
        state.withLock { $0.peer = address }
    }

    /// An `Int32` socket option (`SO_BROADCAST`, `SO_REUSEPORT`, `IPV6_V6ONLY`, `IP_MULTICAST_LOOP`, …).
    package func setOption(level: Int32, name: Int32, value: Int32) throws(DatagramSendError) {
        try withOpenFD("setsockopt") { fd throws(SystemError) in try Posix.setOption(fd, level: level, name: name, value: value) }
    }

    /// Joins (or leaves) the multicast `group` on the interface whose address (IPv4) or index (IPv6)
    /// is given, any interface when nil: `IP_ADD_MEMBERSHIP`/`IP_DROP_MEMBERSHIP` with an `ip_mreq`,
    /// `IPV6_JOIN_GROUP`/`IPV6_LEAVE_GROUP` with an `ipv6_mreq` (Linux's IPv6 names, not the IPv4 numbers
    /// GCDAsyncUdpSocket passes, which Linux refuses at the IPv6 level).
    package func setMembership(_ join: Bool, group: SocketAddress, interface: Posix.InterfaceAddress?) throws(DatagramSendError) {
        try withOpenFD("setsockopt") { fd throws(SystemError) in
            if family == AF_INET {
                var request = ip_mreq()
                request.imr_multiaddr = group.withSockAddr { pointer, _ in
                    pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                }
                request.imr_interface.s_addr =
                    interface.map { address in
                        address.address.withSockAddr { pointer, _ in
                            pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
                        }
                    } ?? 0
                try Posix.setOption(fd, level: Int32(IPPROTO_IP), name: join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, structure: request)
            } else {
                var request = ipv6_mreq()
                request.ipv6mr_multiaddr = group.withSockAddr { pointer, _ in
                    pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                }
                request.ipv6mr_interface = interface?.index ?? 0
                try Posix.setOption(fd, level: Int32(IPPROTO_IPV6), name: join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, structure: request)
            }
        }
    }

    /// The interface multicast datagrams leave by: `IP_MULTICAST_IF` with its IPv4 address, or
    /// `IPV6_MULTICAST_IF` with its index.
    package func setMulticastInterface(_ interface: Posix.InterfaceAddress) throws(DatagramSendError) {
        try withOpenFD("setsockopt") { fd throws(SystemError) in
            if family == AF_INET {
                let address = interface.address.withSockAddr { pointer, _ in
                    pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                }
                try Posix.setOption(fd, level: Int32(IPPROTO_IP), name: IP_MULTICAST_IF, structure: address)
            } else {
                try Posix.setOption(fd, level: Int32(IPPROTO_IPV6), name: IPV6_MULTICAST_IF, value: Int32(bitPattern: interface.index))
            }
        }
    }

    /// `getsockname(2)`; nil once closed.
    package var localAddress: SocketAddress? {
        try? withOpenFD("getsockname") { fd throws(SystemError) in try Posix.localAddress(fd) }
    }

    /// The connected peer (`connect(to:)`), if any.
    package var peer: SocketAddress? { state.withLock { $0.peer } }

    /// Whether the socket is closed.
    package var isClosed: Bool { state.withLock { !$0.fdOpen || $0.closing } }

    /// The fd, for a face's `socketFD()`; -1 once closed.
    package var fd: Int32 { state.withLock { $0.fdOpen ? handle.fd : -1 } }

    /// The largest datagram a receive hands out whole.
    package var maximumDatagramSize: Int {
        get { state.withLock { $0.maximumDatagramSize } }
        set { state.withLock { $0.maximumDatagramSize = max(1, min(newValue, 65_535)) } }
    }

    // MARK: requests (any thread: recorded under the lock, carried out by the owner)

    /// Queues `data` for `destination` (nil: the connected peer). Its outcome is reported, in send
    /// order, through `datagramSocket(_:sent:error:)`; `timeout` (nanoseconds, nil for none) runs only
    /// while the datagram waits for buffer space. A send after `close` is dropped without a report.
    package func send(_ data: Data, to destination: SocketAddress?, timeout: UInt64?, tag: Int) {
        let post = state.withLock { state -> Bool in
            guard state.fdOpen, !state.closing else { return false }
            state.sends.append(OutgoingDatagram(data: data, destination: destination, timeout: timeout, tag: tag))
            return state.queueing ? false : state.requestPump()
        }
        if post { onOwner { self.pump() } }
    }

    /// Runs `body` with the sends made meanwhile only queued, and then sends them, in batches: for a
    /// face handing over datagrams it held, on the owner (where each send would otherwise go out at
    /// once, in a `sendmmsg` of its own). Not nested.
    package func queueingSends(_ body: () -> Void) {
        state.withLock { $0.queueing = true }
        body()
        let post = state.withLock { state -> Bool in
            state.queueing = false
            guard state.fdOpen, !state.closing, !state.sends.isEmpty else { return false }
            return state.requestPump()
        }
        if post { onOwner { self.pump() } }
    }

    /// Sets how the socket reads.
    package func setReceiveMode(_ mode: DatagramReceiveMode) {
        let post = state.withLock { state -> Bool in
            guard state.fdOpen, !state.closing, state.receiving != mode else { return false }
            state.receiving = mode
            return state.requestPump()
        }
        if post { onOwner { self.pump() } }
    }

    /// The current receive mode.
    package var receiveMode: DatagramReceiveMode { state.withLock { $0.receiving } }

    /// Closes the socket: no more reports; datagrams still queued go out as far as the kernel takes them
    /// at once, the rest are dropped. On the owner the fd is closed before this returns; from another
    /// thread, as soon as the owner runs.
    package func close() {
        // The delegate is let go of after the lock: it may be the face's last reference, and a face's
        // deinit takes the face's lock, which the face holds around calls into this socket.
        let (post, delegate) = state.withLock { state -> (Bool, (any DatagramSocketDelegate)?) in
            guard state.fdOpen, !state.closing else { return (false, nil) }
            state.closing = true
            defer { state.delegate = nil }
            return (true, state.delegate)
        }
        withExtendedLifetime(delegate) {}
        if post { onOwner { self.tearDown() } }
    }

    // MARK: the owner's work

    /// Whether the caller may act as the owner now: inside a perform, or (unless the owner is a
    /// delegate's queue) a block on the owner's serial queue, or its thread.
    private var isOwner: Bool { ownsQueueBlocks ? reactor.isOwnerContext : reactor.isPerformingHere }

    /// Runs `work` now if the caller may act as the owner, else posts it to the owner.
    private func onOwner(_ work: @escaping @Sendable () -> Void) {
        if isOwner { return work() }
        reactor.post(work)
    }

    /// Brings the epoll interest up to date, sends what can be sent, and closes when asked to.
    private func pump() {
        assert(isOwner, "a datagram socket's pump off its owner")
        let open = state.withLock { state -> Bool in
            state.pumpRequested = false
            return state.fdOpen && !state.closing
        }
        guard open else { return }
        flush()
        updateInterest()
    }

    func reactor(_ reactor: Reactor, fired events: UInt32) {
        let writable = events & cssh_epollout() != 0
        let (open, receiving) = state.withLock { state -> (Bool, Bool) in
            if writable { state.waitingForSpace = false }
            return (state.fdOpen && !state.closing, state.receiving != .paused)
        }
        guard open else { return }
        if writable { flush() }
        if events & (cssh_epollin() | cssh_epollerr()) != 0 {
            if receiving {
                receive(budget: Self.receiveBudget)
            } else if events & cssh_epollerr() != 0 {
                // An ICMP error on a connected socket, with nobody reading: the pending error is taken
                // (else the level-triggered report would come back every round) and reported.
                let code = Posix.pendingError(handle.fd)
                if code != 0, let delegate = state.withLock({ $0.delegate }) {
                    delegate.datagramSocket(self, receiveFailed: .system(code: code, function: "recvmmsg"))
                }
            }
        }
        updateInterest()
    }

    /// Reads up to `budget` batches (one datagram in `.once` mode) and hands each batch to the delegate.
    private func receive(budget: Int) {
        for _ in 0..<budget {
            let (mode, size, delegate, hint) = state.withLock { state in
                (state.closing ? .paused : state.receiving, state.maximumDatagramSize, state.delegate, state.receiveBatch)
            }
            guard mode != .paused, let delegate else { return }
            let count = mode == .once ? 1 : hint
            // Each slot takes at most `size` bytes (MSG_TRUNC says when a datagram was longer), 16-byte aligned.
            let slotSize = (size + 15) & ~15
            let headers = count * MemoryLayout<cssh_datagram>.stride
            let outcome = self.reactor.withBatchBuffer(size: headers + count * slotSize) { buffer -> BatchOutcome in
                let slots = buffer.baseAddress!.bindMemory(to: cssh_datagram.self, capacity: count)
                let data = buffer.baseAddress! + headers
                for index in 0..<count {
                    slots[index].bytes = data + index * slotSize
                    slots[index].capacity = UInt(size)
                }
                let received: Int
                do throws(SystemError) {
                    guard case .processed(let n) = try Posix.receiveBatch(handle.fd, slots, count: count) else { return .drained }
                    received = n
                } catch {
                    return .failed(.system(code: error.code, function: error.function))
                }
                let peer = state.withLock { state -> SocketAddress? in
                    if mode == .once { state.receiving = .paused } else { state.adaptReceiveBatch(received: received, of: count) }
                    return state.peer
                }
                // Handed over in a temporary buffer, not an array: nothing is allocated a batch.
                withUnsafeTemporaryAllocation(of: ReceivedDatagram.self, capacity: received) { datagrams in
                    var kept = 0
                    for index in 0..<received {
                        let slot = slots + index
                        let sender = withUnsafePointer(to: &slot.pointee.address) { pointer in
                            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                                SocketAddress($0, length: slot.pointee.address_length)
                            }
                        }
                        // Connected: what the kernel queued from others before the connect is not the peer's.
                        if let peer, sender != peer { continue }
                        (datagrams.baseAddress! + kept).initialize(
                            to: ReceivedDatagram(
                                bytes: UnsafeRawBufferPointer(start: slot.pointee.bytes, count: Int(slot.pointee.length)), sender: sender,
                                truncated: slot.pointee.truncated != 0))
                        kept += 1
                    }
                    defer { datagrams.baseAddress!.deinitialize(count: kept) }
                    if kept > 0 { delegate.datagramSocket(self, received: UnsafeBufferPointer(rebasing: datagrams[0..<kept])) }
                }
                return received < count ? .drained : .more
            }
            switch outcome {
            case .more: continue
            case .drained: return
            case .failed(let error):
                delegate.datagramSocket(self, receiveFailed: error)
                return
            }
        }
    }

    private enum BatchOutcome {
        case more, drained
        case failed(DatagramSendError)
    }

    /// Sends queued datagrams, a batch per `sendmmsg`, until the queue is empty or the kernel is full.
    /// Not reentrant: a send made from inside a report (a face's next datagram) only queues, and this
    /// loop takes it next, so reports keep the order of the sends. Three lock sections for a batch
    /// alone: entering with the batch, the batch's removal with the delegate, leaving with the next.
    private func flush() {
        var next = state.withLock { state -> OutgoingBatch? in
            guard !state.flushing else { return nil }
            state.flushing = true
            return state.nextBatch()
        }
        while let batch = next {
            let result: Result<Int, DatagramSendError>
            if let sent = send(batch) {
                result = sent
            } else {
                // The kernel is full: wait for writability, the head's timeout running from now.
                state.withLock { state in
                    state.flushing = false
                    state.waitingForSpace = true
                    if state.timer == nil, let timeout = batch[0].timeout {
                        state.timerSequence &+= 1
                        state.timer = reactor.schedule(after: timeout, target: self, context: state.timerSequence)
                    }
                }
                return
            }
            let (sent, failed): (Int, DatagramSendError?) =
                switch result {
                case .success(let count): (count, nil)
                case .failure(let error): (1, error)
                }
            // The delegate asked afresh each batch: a report may close the socket, and then nothing
            // more is reported.
            let (timer, delegate) = state.withLock { state -> (UInt64?, (any DatagramSocketDelegate)?) in
                for _ in 0..<sent { state.sends.removeFirst() }
                defer { state.timer = nil }
                return (state.timer, state.delegate)
            }
            if let timer { reactor.cancelTimer(timer) }
            if let delegate {
                withUnsafeTemporaryAllocation(of: DatagramOutcome.self, capacity: sent) { outcomes in
                    for index in 0..<sent {
                        let outcome = DatagramOutcome(tag: batch[index].tag, error: index == sent - 1 ? failed : nil)
                        (outcomes.baseAddress! + index).initialize(to: outcome)
                    }
                    defer { outcomes.baseAddress!.deinitialize(count: sent) }
                    delegate.datagramSocket(self, sent: UnsafeBufferPointer(outcomes))
                }
            }
            next = state.withLock { $0.nextBatch() }
        }
    }

    /// One `sendmmsg` of `batch`: how many the kernel took, the first one's error when it took none, or
    /// nil when it would block.
    private func send(_ batch: OutgoingBatch) -> Result<Int, DatagramSendError>? {
        withUnsafeTemporaryAllocation(of: cssh_datagram.self, capacity: batch.count) { slots in
            func call() -> Result<Int, DatagramSendError>? {
                do throws(SystemError) {
                    guard case .processed(let count) = try Posix.sendBatch(handle.fd, slots.baseAddress!, count: batch.count) else {
                        return nil
                    }
                    return .success(count)
                } catch {
                    return .failure(.system(code: error.code, function: error.function))
                }
            }
            switch batch {
            case .one(let datagram): return withPayload(of: datagram, in: slots.baseAddress!, call)
            case .many(let datagrams): return withPayloads(of: datagrams, from: 0, into: slots.baseAddress!, call)
            }
        }
    }

    /// Fills `slots[index...]` from `batch`, each payload's bytes pinned for the length of `body`.
    private func withPayloads<R>(
        of batch: [OutgoingDatagram], from index: Int, into slots: UnsafeMutablePointer<cssh_datagram>, _ body: () -> R
    ) -> R {
        guard index < batch.count else { return body() }
        return withPayload(of: batch[index], in: slots + index) { withPayloads(of: batch, from: index + 1, into: slots, body) }
    }

    /// Fills `slot` from `datagram`, its payload's bytes pinned for the length of `body`.
    private func withPayload<R>(of datagram: OutgoingDatagram, in slot: UnsafeMutablePointer<cssh_datagram>, _ body: () -> R) -> R {
        datagram.data.withUnsafeBytes { bytes in
            slot.initialize(to: cssh_datagram())
            slot.pointee.bytes = UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!)
            slot.pointee.length = UInt(bytes.count)
            if let destination = datagram.destination {
                destination.withSockAddr { pointer, length in
                    withUnsafeMutableBytes(of: &slot.pointee.address) {
                        $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: Int(length)))
                    }
                    slot.pointee.address_length = length
                }
            }
            return body()
        }
    }

    /// A head datagram's timeout: it fails, and the next one is tried.
    func timerFired(_ context: UInt64) {
        let (delegate, tag) = state.withLock { state -> ((any DatagramSocketDelegate)?, Int?) in
            guard state.timer != nil, state.timerSequence == context, let head = state.sends.first else { return (nil, nil) }
            state.timer = nil
            state.sends.removeFirst()
            state.waitingForSpace = false
            return (state.delegate, head.tag)
        }
        guard let tag else { return }
        [DatagramOutcome(tag: tag, error: .timedOut)].withUnsafeBufferPointer { delegate?.datagramSocket(self, sent: $0) }
        flush()
        updateInterest()
    }

    /// Watches for what the socket waits for: readable while reading, writable while the kernel is full.
    private func updateInterest() {
        state.withLock { state in
            guard state.fdOpen, !state.closing else { return }
            let wanted = (state.receiving != .paused ? cssh_epollin() : 0) | (state.waitingForSpace ? cssh_epollout() : 0)
            guard wanted != state.interest else { return }
            state.interest = wanted
            try? reactor.modify(fd: handle.fd, token: token, events: wanted)
        }
    }

    /// Sends what the kernel takes at once, then leaves the epoll set and closes the fd.
    private func tearDown() {
        assert(isOwner, "a datagram socket's close off its owner")
        state.withLock { $0.finalFlush = true }
        flush()
        let timer = state.withLock { state -> UInt64? in
            guard state.fdOpen else { return nil }
            state.sends.removeAll()
            reactor.remove(fd: handle.fd, token: token)
            handle.release()
            state.fdOpen = false
            defer { state.timer = nil }
            return state.timer
        }
        if let timer { reactor.cancelTimer(timer) }
    }

    /// Holds a token's place in the epoll set until `init` can hand it to the socket itself.
    private final class Unregistered: ReactorHandler {
        static let shared = Unregistered()
        func reactor(_ reactor: Reactor, fired events: UInt32) {}
    }
}
