// The scale run's baseline: raw sockets from Swift (Glibc), the physical limit. Connections open one
// after another with blocking calls; each joins one epoll set, which every round trip waits on, as an
// event loop holding N connections would.

import CSocketStreamsShims
import Foundation
import Glibc

final class ScaleBaselineFace: ScaleFace {
    private let port: UInt16
    private let group: UInt64
    private let sources: ScaleSources
    private var fds: [Int32] = []
    private let epollFD: Int32

    init(port: UInt16, group: UInt64, sources: ScaleSources) {
        self.port = port
        self.group = group
        self.sources = sources
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
    }

    deinit {
        for fd in fds { Posix.close(fd) }
        Posix.close(epollFD)
    }

    func open(count: Int, inFlight: Int) throws {
        guard epollFD >= 0 else { throw BenchError.syscall("epoll_create1", errno: cssh_errno()) }
        fds.reserveCapacity(count)
        let header = Request.heldEcho(group: group).encoded + Scale.messages[0]
        for i in 0..<count {
            let fd = try Posix.connectToLoopback(port: port, from: sources.address(i))
            fds.append(fd)
            try Posix.sendAll(fd, header)
            try readEcho(fd, message: 0, connection: i)
            var event = epoll_event()
            event.events = cssh_epollin()
            event.data.u64 = UInt64(i)
            if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 { throw BenchError.syscall("epoll_ctl(ADD)", errno: cssh_errno()) }
        }
    }

    func roundTrips() throws {
        var event = epoll_event()
        for (i, fd) in fds.enumerated() {
            try Posix.sendAll(fd, Scale.messages[1])
            var received = 0
            while received < Scale.messageSize {
                let ready = epoll_wait(epollFD, &event, 1, 60_000)
                if ready < 0, cssh_errno() == EINTR { continue }
                guard ready == 1 else { throw BenchError("connection \(i): no echo within 60 s (epoll_wait \(ready))") }
                guard event.data.u64 == UInt64(i) else { throw BenchError("connection \(event.data.u64) readable out of turn") }
                received += try readSome(fd, expecting: Scale.messageSize - received, message: 1, at: received, connection: i)
            }
        }
    }

    func release() throws {
        try Scale.sendRelease(port: port, group: group)
        var byte: UInt8 = 0
        for (i, fd) in fds.enumerated() {
            let n = Glibc.read(fd, &byte, 1)
            if n != 0 { throw BenchError("connection \(i): expected the end of stream, read returned \(n)") }
            Posix.close(fd)
        }
        fds = []
    }

    private func readEcho(_ fd: Int32, message: Int, connection: Int) throws {
        var received = 0
        while received < Scale.messageSize {
            received += try readSome(fd, expecting: Scale.messageSize - received, message: message, at: received, connection: connection)
        }
    }

    /// One read of at most `expecting` bytes, checked against the message from `offset`.
    private func readSome(_ fd: Int32, expecting: Int, message: Int, at offset: Int, connection: Int) throws -> Int {
        var buffer = [UInt8](repeating: 0, count: expecting)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, expecting) }
        if n < 0 { throw BenchError.syscall("read", errno: cssh_errno()) }
        if n == 0 { throw BenchError("connection \(connection): end of stream before the echo") }
        if !buffer[..<n].elementsEqual(Scale.messages[message][offset..<(offset + n)]) {
            throw BenchError("connection \(connection): echo of message \(message) differs from what was sent")
        }
        return n
    }
}
