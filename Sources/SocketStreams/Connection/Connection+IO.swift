// Reading and writing: CFReadStreamRead / CFWriteStreamWrite semantics over the non-blocking socket.
// Both block (in poll(2), never holding the lock) until at least one byte moves, waiting for the open
// first; neither ever surfaces EAGAIN.

import CSocketStreamsShims
import Foundation
import Glibc

extension Connection {
    /// What a read or write may do after the status check.
    private enum Gate {
        case proceed(Int32)
        case result(Int)
    }

    /// Waits while the half is opening, then checks that it may transfer. Lock held on entry and exit.
    private func gate(_ half: Half) -> Gate {
        if halves[half.rawValue].status == .opening { connectWithoutClientRunLoop() }
        while halves[half.rawValue].status == .opening { lock.wait() }
        switch halves[half.rawValue].status {
        case .open, .reading, .writing:
            guard let socket else { return .result(-1) }
            return .proceed(socket.fd)
        case .atEnd:
            return .result(half == .input ? 0 : -1)
        default:
            return .result(-1)
        }
    }

    /// `CFReadStreamRead`: >0 bytes, 0 at end of stream, -1 on error or when not open.
    func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        lock.lock()
        let fd: Int32
        switch gate(.input) {
        case .result(let value):
            lock.unlock()
            return value
        case .proceed(let descriptor):
            fd = descriptor
        }
        let resume = halves[0].suppressed
        halves[0].awaitingClient = false
        halves[0].suppressed = false
        halves[0].pending &= ~Stream.Event.hasBytesAvailable.rawValue
        if resume { syncInterest() }
        lock.unlock()
        guard maxLength > 0 else { return 0 }

        while true {
            let result: IOResult<Int>
            do {
                result = try Posix.recv(fd, buffer, maxLength)
            } catch {
                lock.withLock { fail(StreamErrors.posix(error.code, "Read from \(endpoint.label) failed"), from: .input) }
                return -1
            }
            switch result {
            case .processed(let count) where count > 0:
                return count
            case .processed:
                return lock.withLock { () -> Int in
                    if let deferred = deferredInputError {
                        signal(.input, .errorOccurred, error: deferred)
                        return -1
                    }
                    signal(.input, .endEncountered)
                    syncInterest()
                    return 0
                }
            case .wouldBlock:
                let failed = lock.withLock { () -> Bool in
                    guard let deferred = deferredInputError else { return false }
                    signal(.input, .errorOccurred, error: deferred)
                    syncInterest()
                    return true
                }
                if failed { return -1 }
                _ = try? Posix.poll(fd, events: Int16(POLLIN), timeout: -1)
            }
        }
    }

    /// `CFWriteStreamWrite`: ≥1 bytes written (short writes are normal), -1 on error or when not open.
    func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int {
        lock.lock()
        let fd: Int32
        switch gate(.output) {
        case .result(let value):
            lock.unlock()
            return value
        case .proceed(let descriptor):
            fd = descriptor
        }
        halves[Half.output.rawValue].awaitingClient = false
        halves[Half.output.rawValue].pending &= ~Stream.Event.hasSpaceAvailable.rawValue
        lock.unlock()
        guard maxLength > 0 else { return 0 }

        while true {
            let result: IOResult<Int>
            do {
                result = try Posix.send(fd, buffer, maxLength)
            } catch {
                lock.withLock { fail(StreamErrors.posix(error.code, "Write to \(endpoint.label) failed"), from: .output) }
                return -1
            }
            switch result {
            case .processed(let count):
                // Re-signal hasSpaceAvailable now if the socket still takes bytes, else when epoll says so.
                // Only a scheduled stream has anyone to tell.
                lock.lock()
                defer { lock.unlock() }
                guard halves[Half.output.rawValue].status == .open, !halves[Half.output.rawValue].reactors.isEmpty else {
                    return count
                }
                let writable = count == maxLength && ((try? Posix.poll(fd, events: Int16(POLLOUT), timeout: 0)) ?? 0) != 0
                if writable {
                    signal(.output, .hasSpaceAvailable)
                } else if !halves[Half.output.rawValue].watchingSpace {
                    halves[Half.output.rawValue].watchingSpace = true
                    syncInterest()
                }
                return count
            case .wouldBlock:
                _ = try? Posix.poll(fd, events: Int16(POLLOUT), timeout: -1)
            }
        }
    }

    /// `CFReadStreamHasBytesAvailable`: never blocks; true if a read would not block. Like
    /// CFNetwork, it answers from the signalled event while that is unconsumed (only a read can
    /// consume the bytes), and otherwise asks the socket.
    var hasBytesAvailable: Bool {
        lock.withLock {
            if halves[0].status == .opening { connectWithoutClientRunLoop() }
            guard halves[Half.input.rawValue].status == .open, let socket else { return false }
            if deferredInputError != nil || halves[0].awaitingClient { return true }
            return ((try? Posix.poll(socket.fd, events: Int16(POLLIN), timeout: 0)) ?? 0) != 0
        }
    }

    /// `CFWriteStreamCanAcceptBytes`: never blocks; true if a write would not block. Answers from an
    /// unconsumed `hasSpaceAvailable` event (only a write can use the space up), else asks the socket.
    var hasSpaceAvailable: Bool {
        lock.withLock {
            if halves[1].status == .opening { connectWithoutClientRunLoop() }
            guard halves[Half.output.rawValue].status == .open, let socket else { return false }
            if halves[1].awaitingClient { return true }
            return ((try? Posix.poll(socket.fd, events: Int16(POLLOUT), timeout: 0)) ?? 0) != 0
        }
    }
}
