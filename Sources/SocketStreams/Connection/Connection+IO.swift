// Reading and writing: CFReadStreamRead / CFWriteStreamWrite over the transport, after the open and
// its handshakes. Past its gate (`TransferGate`) a transfer runs without the lock and blocks in
// poll(2) until a byte moves; -1 once its stream has been closed from another thread.

import CSocketStreamsShims
import Foundation
import Glibc

extension Connection {
    /// Waits while the half is opening or a handshake runs, then checks that it may transfer: nil if
    /// it may, else what the read or write returns. Lock held on entry and exit.
    @inline(__always)
    private func gate(_ half: Half) -> Int? {
        lock.assertHeld()
        if halves[half].events.status == .opening || isNegotiating {
            moveOpenToStreamThread()
            while halves[half].events.status == .opening || isNegotiating && halves[half].events.status == .open {
                lock.wait()
            }
        }
        switch halves[half].events.status {
        case .open, .reading, .writing:
            guard transport != nil else { return -1 }
            transfers.enter()
            return nil
        case .atEnd:
            return half == .input ? 0 : -1
        default:
            return -1
        }
    }

    /// Leaves a transfer that passed its gate: the last one out closes what a teardown deferred.
    @inline(__always)
    private func endTransfer() {
        if transfers.leave() { lock.withLock { releaseIfIdle() } }
    }

    /// Blocks until `fd` is ready for `interest`: true, or false once `half` was closed by another thread.
    private func block(for interest: Interest, on fd: Int32, _ half: Half) -> Bool {
        TransferGate.block(for: interest, on: fd) { lock.withLock { halves[half].gone } }
    }

    /// `CFReadStreamRead`: >0 bytes, 0 at end of stream, -1 on error or when not open.
    func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        lock.lock()
        if let result = gate(.input) {
            lock.unlock()
            return result
        }
        let transport = self.transport.unsafelyUnwrapped.active
        if halves.clientReads() { syncInterest() }
        let inputCount = halves[.input].inputCount
        // Only an input scheduled somewhere decides: read-ahead signals events, which a polling
        // reader never gets, so its reads would pay for the count (`recvmsg`) for nothing.
        let deciding = inputCount == .undecided && !halves[.input].reactors.isEmpty
        lock.unlock()
        let result =
            maxLength > 0
            ? read(buffer, maxLength: maxLength, through: transport, counting: inputCount == .on, deciding: deciding) : 0
        endTransfer()
        return result
    }

    /// The read past the gate (one exit: `read` ends the transfer inline, where a `defer` cost more).
    /// `counting`: the socket counts its input (`HalfState.inputCount`), so the read learns what the
    /// kernel still holds; `deciding`: a read that fills its buffer may turn the count on.
    @inline(__always)
    private func read(
        _ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int, through transport: ActiveTransport, counting: Bool,
        deciding: Bool
    ) -> Int {
        while true {
            var left: Int32 = -1
            let outcome: TransportIO
            if counting, case .socket(let fd) = transport {
                outcome = SocketTransport.read(fd, buffer, maxLength, left: &left)
            } else {
                outcome = transport.read(buffer, maxLength)
            }
            switch outcome {
            case .processed(let count):
                if left > 0 {
                    lock.withLock { readAhead() }
                } else if transport.hasBufferedInput {
                    // Bytes the transport still holds are readable though the fd may not be: say so now.
                    lock.withLock {
                        if halves[.input].events.status == .open, !isNegotiating { signal(.input, .hasBytesAvailable) }
                    }
                } else if deciding, count == maxLength, maxLength >= Self.readAheadBuffer, case .socket(let fd) = transport {
                    decideInputCount(fd)
                }
                return count
            case .end:
                return lock.withLock {
                    if reportDeferredInputError() { return -1 }
                    signal(.input, .endEncountered)
                    syncInterest()
                    return 0
                }
            case .failed(let failure):
                lock.withLock { fail(failure, from: .input) }
                return -1
            case .wouldBlock:
                if lock.withLock({ halves[.input].gone || reportDeferredInputError() }) { return -1 }
                if !waitForInput(through: transport) { return -1 }
            }
        }
    }

    // Read-ahead. A read of a plain socket that leaves bytes in the kernel is followed by another
    // `hasBytesAvailable`, as CFNetwork's is; finding that out from epoll costs an `epoll_wait` per read
    // (a download in 64 KiB reads makes one beside each `recvfrom`, where a blocking C reader makes only
    // the reads). With `TCP_INQ` on, the kernel says with each read how many bytes it
    // still holds (a control message of `recvmsg`, no further call), and a read that leaves some signals
    // `hasBytesAvailable` again at once: the delegate's next read finds them, so it cannot block. It is
    // turned on, one `setsockopt`, by the first read that fills a buffer of at least `readAheadBuffer`
    // (1 KiB): a reader of a stream (Apple's sample code reads in 1 KiB), not a reader of small messages
    // read to their exact size, for whom each `recvmsg` would cost more than a `recv` and save nothing
    // (Benchmarks/results/syscalls.md; a connect with 1 byte each way and a ping-pong of small messages
    // keep their `recvfrom`s); and only by an input scheduled on a run loop or queue, since the
    // re-signal is all the count is for (a polling reader's input stays undecided). Only on sockets
    // the pair closes itself (not an fd a client lent it, whose own `recvmsg` would start getting the
    // control message). The re-signal is made only inside a callout of a reactor the input is
    // scheduled on, at most `Reactor.readAheadsPerRound` times a round; past that, and everywhere
    // else, epoll (level-triggered) reports the bytes as before. After the peer's FIN the kernel
    // reports a byte left, so the reader goes on to the end.

    /// The smallest buffer whose filling turns read-ahead on (see above).
    static let readAheadBuffer = 1024

    /// A read left bytes in the kernel: `hasBytesAvailable` again at once, if the read runs on a reactor
    /// the input is scheduled on and that reactor's round has a read-ahead left. Lock held.
    private func readAhead() {
        lock.assertHeld()
        guard halves[.input].events.status == .open, !isNegotiating else { return }
        if halves[.input].reactors.contains(where: { $0.takeReadAhead() }) { signal(.input, .hasBytesAvailable) }
    }

    /// The first read of a scheduled input that filled a buffer of `readAheadBuffer` or more: turns on
    /// `TCP_INQ` (see Read-ahead above), once, on a socket the pair closes itself. (Unscheduled, the
    /// input stays undecided: a polling reader would pay for the count and never use it.)
    private func decideInputCount(_ fd: Int32) {
        let decide = lock.withLock { () -> Bool in
            guard halves[.input].inputCount == .undecided, !halves[.input].reactors.isEmpty else { return false }
            halves[.input].inputCount = .off
            return closesNativeSocket
        }
        guard decide, Posix.countInput(fd) else { return }
        lock.withLock { halves[.input].inputCount = .on }
    }

    /// A blocking read's wait: for the socket, or for bytes the transport took off it meanwhile. A
    /// reactor's readiness on a TLS pair peeks at what arrived (`TLSTransport.ready`), which moves a
    /// record from the socket into OpenSSL's buffer; had it done so between this read finding nothing
    /// and its poll, the poll would wait for bytes that already came, for good. So the wait is
    /// announced first (`readersWaiting`: no peek from then on, `handleReadiness`), then the buffer is
    /// looked at, then the socket is polled. False once the input was closed by another thread.
    private func waitForInput(through transport: ActiveTransport) -> Bool {
        lock.withLock { readersWaiting += 1 }
        defer { lock.withLock { readersWaiting -= 1 } }
        if transport.hasBufferedInput { return true }
        return block(for: transport.readInterest, on: transport.fd, .input)
    }

    /// `CFWriteStreamWrite`: ≥1 bytes written (short writes are normal), -1 on error or when not open.
    func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int {
        lock.lock()
        if let result = gate(.output) {
            lock.unlock()
            return result
        }
        let transport = self.transport.unsafelyUnwrapped.active
        halves.clientWrites()
        lock.unlock()
        let result = maxLength > 0 ? write(buffer, maxLength: maxLength, through: transport) : 0
        endTransfer()
        return result
    }

    /// The write itself, past the gate.
    @inline(__always)
    private func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int, through transport: ActiveTransport) -> Int {
        while true {
            switch transport.write(buffer, maxLength) {
            case .processed(let count):
                // Only a scheduled stream has anyone to tell of space (`PairHalves.wrote`).
                lock.lock()
                defer { lock.unlock() }
                guard halves[.output].events.status == .open, !halves[.output].reactors.isEmpty, !isNegotiating else {
                    halves[.output].sendSpace.spend(charge: transport.isLayered ? transport.takeSendCharge() : SendSpace.charge(count))
                    // Unscheduled: nobody would send bytes the transport still holds (a TLS record's
                    // tail) once this returns, so send them now, as a blocking write would.
                    if transport.hasPendingOutput {
                        lock.unlock()
                        while transport.hasPendingOutput, case .wouldBlock = transport.flush(),
                            block(for: transport.writeInterest, on: transport.fd, .output)
                        {}
                        lock.lock()
                    }
                    return count
                }
                // `alone`: no other transfer passed its gate since, so what the check sees still holds.
                let next = halves.wrote(count, of: maxLength, through: transport, madeFor: target, alone: transfers.count == 1)
                if next.signal {
                    signal(.output, .hasSpaceAvailable)
                } else if next.watch {
                    syncInterest()
                }
                return count
            case .wouldBlock:
                #if DEBUG
                    SendSpace.sendsRefused.add(1, ordering: .relaxed)
                #endif
                lock.withLock { halves[.output].sendSpace.ranOut() }
                if !block(for: transport.writeInterest, on: transport.fd, .output) { return -1 }
            case .failed(let failure):
                lock.withLock { failWrite(failure) }
                return -1
            case .end:
                return -1
            }
        }
    }

    /// The bytes that arrived before a failure are read: the input reports it now. Lock held.
    private func reportDeferredInputError() -> Bool {
        guard let deferred = options?.deferredInputError else { return false }
        signal(.input, .errorOccurred, error: deferred)
        syncInterest()
        return true
    }

    /// A write failed: the pair fails, or, the output shut on purpose, only the output reports it. Lock held.
    private func failWrite(_ failure: StreamFailure) {
        guard options?.outputShutDown == true else { return fail(failure, from: .output) }
        signal(.output, .errorOccurred, error: StreamErrors.error(for: failure, target: target))
        syncInterest()
    }

    /// `shutdownOutputKey`: the half-close (close_notify, FIN), waiting in poll(2) for the last bytes.
    /// False unless live with its output open and not shut, or if the socket refused (the pair fails).
    func shutdownOutput() -> Bool {
        lock.lock()
        let status = halves[.output].events.status
        guard lifecycle.isLive, let transport = transport?.active, options?.outputShutDown != true, status == .open || status == .writing
        else {
            lock.unlock()
            return false
        }
        someOptions.outputShutDown = true
        halves[.output].watchingSpace = false
        halves[.output].spaceConfirmed = false
        syncInterest()
        transfers.enter()  // the fd stays ours until endTransfer
        lock.unlock()
        var done = false
        while true {
            switch transport.shutdownOutput() {
            case .processed, .end:
                done = true
            case .wouldBlock:
                if block(for: transport.writeInterest, on: transport.fd, .output) { continue }
            case .failed(let failure):
                lock.withLock { fail(failure, from: .output) }
            }
            break
        }
        endTransfer()
        return done
    }

    /// `CFReadStreamHasBytesAvailable` / `CFWriteStreamCanAcceptBytes`: never blocks; true only if a read
    /// (a write) would not block now. A has-event another thread's transfer used up is not trusted:
    /// one the socket does not confirm is cleared, and the stream watches again.
    func isReady(_ half: Half) -> Bool {
        lock.withLock {
            if halves[half].events.status == .opening || isNegotiating { moveOpenToStreamThread() }
            return confirm(half)
        }
    }

    /// `isReady` with the lock held (also a has-event's check before it is delivered on several reactors).
    func confirm(_ half: Half) -> Bool {
        lock.assertHeld()
        guard halves[half].events.status == .open, !isNegotiating, let transport = transport?.active else { return false }
        if half == .input ? bytesReady(transport) : spaceReady(transport) { return true }
        if halves.unconfirmed(half) { syncInterest() }
        return false
    }

    /// Bytes held (or an error behind them), or a readable socket a read returns on (TLS: not a ticket alone).
    private func bytesReady(_ transport: ActiveTransport) -> Bool {
        if options?.deferredInputError != nil || transport.hasBufferedInput { return true }
        let interest = transport.readInterest
        return interest.poll(transport.fd, timeout: 0) && transport.ready(interest).contains(.readable)
    }

    /// An answer nothing spent since (TLS: its sends since leave the bound), or a writable, drained socket.
    private func spaceReady(_ transport: ActiveTransport) -> Bool {
        if halves[.output].spaceConfirmed {
            if case .socket = transport { return true }
            if halves[.output].sendSpace.stillConfirmed(after: transport.takeSendState()) { return true }
            halves[.output].spaceConfirmed = false
        }
        guard !transport.hasPendingOutput, transport.writeInterest.poll(transport.fd, timeout: 0) else { return false }
        if case .socket = transport, transfers.count == 0 { halves[.output].spaceConfirmed = true }
        return true
    }
}
