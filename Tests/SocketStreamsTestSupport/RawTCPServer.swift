#if canImport(Glibc)
    import Glibc
#endif
import Foundation

/// One accepted connection of a `RawTCPServer`, driven with blocking calls from its own thread.
package final class RawConnection: @unchecked Sendable {
    // @unchecked: `fd` is immutable; `closed` is read and written only under `lock`.
    package let fd: Int32
    private let lock = NSLock()
    private var closed = false

    package init(fd: Int32) { self.fd = fd }

    package func write(_ data: Data) throws { try RawSocket.writeAll(fd, data) }
    package func write(_ string: String) throws { try write(Data(string.utf8)) }

    package func readExactly(_ count: Int, timeout: TimeInterval = 5) throws -> Data {
        try RawSocket.readExactly(fd, count: count, timeout: timeout)
    }

    package func readToEOF(timeout: TimeInterval = 5) throws -> (data: Data, sawEOF: Bool) {
        try RawSocket.readToEOF(fd, timeout: timeout)
    }

    /// shutdown(SHUT_WR): sends FIN, the connection stays readable.
    package func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// Makes the next close send RST.
    package func resetOnClose() throws { try RawSocket.setResetOnClose(fd) }

    package func close() {
        lock.lock()
        defer { lock.unlock() }
        if !closed {
            closed = true
            Glibc.close(fd)
        }
    }
}

/// A real loopback TCP server made of plain sockets. Each accepted connection is handed to
/// `handler` on a thread of its own; the connection is closed when the handler returns.
/// `stop()` (also run by deinit) stops accepting and closes the listener.
package final class RawTCPServer: @unchecked Sendable {
    // @unchecked: the `let`s are immutable; the counters and flags are touched only under `condition`.
    package let family: IPFamily
    package let port: Int
    private let listenFD: Int32
    private let handler: @Sendable (RawConnection) -> Void
    private let condition = NSCondition()
    private var stopping = false
    private var acceptLoopDone = false
    private var accepted = 0
    private var finished = 0

    /// Listens on the family's loopback address, on `port` (0: an ephemeral one).
    package init(
        family: IPFamily = .v4, port: Int = 0, backlog: Int32 = 128,
        handler: @escaping @Sendable (RawConnection) -> Void
    ) throws {
        self.family = family
        self.handler = handler
        listenFD = try RawSocket.listener(family: family, port: port, backlog: backlog)
        self.port = RawSocket.boundPort(listenFD)
        let thread = Thread { [self] in self.acceptLoop() }
        thread.name = "RawTCPServer.accept"
        thread.start()
    }

    deinit { stop() }

    /// Connections accepted so far.
    package var acceptedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return accepted
    }

    /// Handlers that have returned so far.
    package var finishedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return finished
    }

    /// Waits until at least `count` connections were accepted.
    package func waitForAccepted(_ count: Int, timeout: TimeInterval) -> Bool {
        waitFor(timeout: timeout) { self.accepted >= count }
    }

    /// Waits until at least `count` handlers have returned.
    package func waitForFinished(_ count: Int, timeout: TimeInterval) -> Bool {
        waitFor(timeout: timeout) { self.finished >= count }
    }

    private func waitFor(timeout: TimeInterval, _ predicate: () -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate() {
            if !condition.wait(until: deadline) { return predicate() }
        }
        return true
    }

    package func stop() {
        condition.lock()
        let alreadyStopping = stopping
        stopping = true
        let deadline = Date(timeIntervalSinceNow: 2)
        while !acceptLoopDone && condition.wait(until: deadline) {}
        condition.unlock()
        if !alreadyStopping { Glibc.close(listenFD) }
    }

    private func acceptLoop() {
        while true {
            condition.lock()
            let stop = stopping
            condition.unlock()
            if stop { break }
            // Short poll slices so that stop() is noticed quickly.
            guard let fd = try? RawSocket.accept(listenFD, timeout: 0.05) else { continue }
            condition.lock()
            accepted += 1
            condition.broadcast()
            condition.unlock()
            let connection = RawConnection(fd: fd)
            let worker = Thread { [self] in
                self.handler(connection)
                connection.close()
                self.condition.lock()
                self.finished += 1
                self.condition.broadcast()
                self.condition.unlock()
            }
            worker.name = "RawTCPServer.connection"
            worker.start()
        }
        condition.lock()
        acceptLoopDone = true
        condition.broadcast()
        condition.unlock()
    }
}

/// A one-shot flag another thread can raise and a test can wait for with a deadline.
package final class Signal: @unchecked Sendable {
    // @unchecked: its only state is a DispatchSemaphore, which is thread-safe.
    private let semaphore = DispatchSemaphore(value: 0)
    package init() {}
    package func raise() { semaphore.signal() }
    /// True if the signal was raised within `timeout` seconds.
    package func wait(timeout: TimeInterval) -> Bool {
        semaphore.wait(timeout: .now() + timeout) == .success
    }
}

/// A thread-safe holder for a value written by one thread and read by another.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `storage` is read and written only under `lock`.
    private let lock = NSLock()
    private var storage: Value
    package init(_ value: Value) { storage = value }
    package var value: Value {
        get {
            lock.lock()
            defer { lock.unlock() }
            return storage
        }
        set {
            lock.lock()
            defer { lock.unlock() }
            storage = newValue
        }
    }
    package func mutate<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&storage)
    }
}
