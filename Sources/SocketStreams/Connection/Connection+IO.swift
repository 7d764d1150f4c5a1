// Reading and writing: CFReadStreamRead / CFWriteStreamWrite semantics over the connection's
// transport. Both block (in poll(2), never holding the lock) until at least one byte moves, waiting
// for the open and its handshakes first; neither ever surfaces EAGAIN.

import CSocketStreamsShims
import Foundation
import Glibc

extension Connection {
    /// Waits while the half is opening or a handshake runs, then checks that it may transfer: nil if
    /// it may, else what the read or write returns. Lock held on entry and exit.
    @inline(__always)
    private func gate(_ half: Half) -> Int? {
        let h = half.rawValue
        if halves[h].events.status == .opening || isNegotiating {
            moveOpenToStreamThread()
            while halves[h].events.status == .opening || isNegotiating && halves[h].events.status == .open {
                lock.wait()
            }
        }
        switch halves[h].events.status {
        case .open, .reading, .writing:
            return transport == nil ? -1 : nil
        case .atEnd:
            return half == .input ? 0 : -1
        default:
            return -1
        }
    }

    /// `poll(2)` for the readiness a transport waits for.
    private func wait(for interest: Interest, on fd: Int32, timeout: Int32 = -1) -> Bool {
        var events: Int16 = 0
        if interest.contains(.readable) { events |= Int16(POLLIN) }
        if interest.contains(.writable) { events |= Int16(POLLOUT) }
        return ((try? Posix.poll(fd, events: events, timeout: timeout)) ?? 0) != 0
    }

    /// `CFReadStreamRead`: >0 bytes, 0 at end of stream, -1 on error or when not open.
    func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        lock.lock()
        if let result = gate(.input) {
            lock.unlock()
            return result
        }
        let transport = self.transport.unsafelyUnwrapped
        let resume = halves[0].suppressed
        halves[0].events.clientTransferred(.hasBytesAvailable)
        halves[0].suppressed = false
        if resume { syncInterest() }
        lock.unlock()
        guard maxLength > 0 else { return 0 }

        while true {
            switch transport.read(buffer, maxLength) {
            case .processed(let count):
                // Bytes the transport still holds are readable though the fd may not be: say so now.
                if transport.hasBufferedInput {
                    lock.withLock {
                        if halves[0].events.status == .open, !isNegotiating { signal(.input, .hasBytesAvailable) }
                    }
                }
                return count
            case .end:
                return lock.withLock { () -> Int in
                    if let deferred = deferredInputError {
                        signal(.input, .errorOccurred, error: deferred)
                        return -1
                    }
                    signal(.input, .endEncountered)
                    syncInterest()
                    return 0
                }
            case .failed(let failure):
                lock.withLock { fail(failure, from: .input) }
                return -1
            case .wouldBlock:
                let failed = lock.withLock { () -> Bool in
                    guard let deferred = deferredInputError else { return false }
                    signal(.input, .errorOccurred, error: deferred)
                    syncInterest()
                    return true
                }
                if failed { return -1 }
                _ = wait(for: transport.readInterest, on: transport.fd)
            }
        }
    }

    /// `CFWriteStreamWrite`: ≥1 bytes written (short writes are normal), -1 on error or when not open.
    func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int {
        lock.lock()
        if let result = gate(.output) {
            lock.unlock()
            return result
        }
        let transport = self.transport.unsafelyUnwrapped
        halves[1].events.clientTransferred(.hasSpaceAvailable)
        lock.unlock()
        guard maxLength > 0 else { return 0 }

        while true {
            switch transport.write(buffer, maxLength) {
            case .processed(let count):
                // Re-signal hasSpaceAvailable now if the socket still takes bytes, else when epoll says so.
                // Only a scheduled stream has anyone to tell.
                lock.lock()
                defer { lock.unlock() }
                guard halves[1].events.status == .open, !halves[1].reactors.isEmpty, !isNegotiating else {
                    // Unscheduled: nobody would send bytes the transport still holds (a TLS record's
                    // tail) once this returns, so send them now, as a blocking write would.
                    if transport.hasPendingOutput {
                        lock.unlock()
                        while transport.hasPendingOutput, case .wouldBlock = transport.flush() {
                            _ = wait(for: transport.writeInterest, on: transport.fd)
                        }
                        lock.lock()
                    }
                    return count
                }
                if count == maxLength && !transport.hasPendingOutput && wait(for: transport.writeInterest, on: transport.fd, timeout: 0) {
                    signal(.output, .hasSpaceAvailable)
                } else if !halves[1].watchingSpace {
                    halves[1].watchingSpace = true
                    syncInterest()
                }
                return count
            case .wouldBlock:
                _ = wait(for: transport.writeInterest, on: transport.fd)
            case .failed(let failure):
                lock.withLock { fail(failure, from: .output) }
                return -1
            case .end:
                return -1
            }
        }
    }

    /// `CFReadStreamHasBytesAvailable`: never blocks; true if a read would not block. Like
    /// CFNetwork, it answers from the signalled event while that is unconsumed (only a read can
    /// consume the bytes), then from bytes the transport holds, and otherwise asks the socket.
    var hasBytesAvailable: Bool {
        lock.withLock {
            if halves[0].events.status == .opening || isNegotiating { moveOpenToStreamThread() }
            guard halves[0].events.status == .open, !isNegotiating, let transport else { return false }
            if deferredInputError != nil || halves[0].events.awaitingClient || transport.hasBufferedInput { return true }
            return wait(for: transport.readInterest, on: transport.fd, timeout: 0)
        }
    }

    /// `CFWriteStreamCanAcceptBytes`: never blocks; true if a write would not block. Answers from an
    /// unconsumed `hasSpaceAvailable` event (only a write can use the space up), else asks the socket.
    var hasSpaceAvailable: Bool {
        lock.withLock {
            if halves[1].events.status == .opening || isNegotiating { moveOpenToStreamThread() }
            guard halves[1].events.status == .open, !isNegotiating, let transport else { return false }
            if halves[1].events.awaitingClient { return true }
            return wait(for: transport.writeInterest, on: transport.fd, timeout: 0)
        }
    }
}
