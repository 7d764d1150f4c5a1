// The physical limit: raw POSIX sockets from Swift. Blocking read/write loops for the
// single-connection workloads, one epoll loop for the many-connections workload. For the socks
// workloads, each single connection first does the SOCKS5 exchange on its blocking socket.

import CSocketStreamsShims
import Glibc

struct BaselineClient: BenchmarkClient {
    /// The socks workloads: the server's SOCKS5 port. Download, upload, ping-pong and connect then go
    /// through it (many and idle stay direct; no socks workload uses them).
    var socksPort: UInt16?

    /// A blocking connection to the server's `port`: straight, or through the SOCKS5 port.
    private func dial(_ port: UInt16) throws -> Int32 {
        guard let socksPort else { return try Posix.connectToLoopback(port: port) }
        return try BenchSOCKS.connect(proxyPort: socksPort, targetPort: port)
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Payload.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        let stopwatch = Stopwatch()
        let fd = try dial(port)
        defer { Posix.close(fd) }
        try Posix.sendAll(fd, Request.download(bytes: UInt64(totalBytes)).encoded)
        var received = 0
        while true {
            guard case .processed(let n) = try Posix.read(fd, into: buffer.baseAddress!, count: buffer.count) else { break }
            received += n
        }
        try verifyCount("download", received: received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Payload.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        Payload.fillChunk(buffer)
        let stopwatch = Stopwatch()
        let fd = try dial(port)
        defer { Posix.close(fd) }
        try Posix.sendAll(fd, Request.upload(bytes: UInt64(totalBytes)).encoded)
        var remaining = totalBytes
        while remaining > 0 {
            let count = min(buffer.count, remaining)
            try Posix.sendAll(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            remaining -= count
        }
        var reply = [UInt8](repeating: 0, count: 8)
        try reply.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
        try verifyCount("upload (server's count)", received: Int(Payload.decodeCount(reply)), expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        var echo = [UInt8](repeating: 0, count: messageSize)
        let stopwatch = Stopwatch()
        let fd = try dial(port)
        defer { Posix.close(fd) }
        try Posix.sendAll(fd, Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded)
        for i in 0..<roundTrips {
            let message = messages[i & 1]
            try Posix.sendAll(fd, message)
            try echo.withUnsafeMutableBytes { try Posix.readExactly(fd, into: $0) }
            if !Payload.same(echo, message) { throw BenchError("ping-pong: echo \(i) differs from the message sent") }
        }
        return stopwatch.elapsedSeconds
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let header = Request.connect.encoded
        var reply: UInt8 = 0
        let stopwatch = Stopwatch()
        for _ in 0..<count {
            let fd = try dial(port)
            defer { Posix.close(fd) }
            try Posix.sendAll(fd, header)
            try withUnsafeMutableBytes(of: &reply) { try Posix.readExactly(fd, into: $0) }
            if reply != Request.connectReply { throw BenchError("connect: unexpected reply byte \(reply)") }
        }
        return stopwatch.elapsedSeconds
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        let loop = try BaselineEchoLoop(connections: connections, roundTrips: roundTrips, messageSize: messageSize)
        defer { loop.closeAll() }
        try loop.connectAll(port: port)
        return try loop.run()
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        let group = UInt64.random(in: 1...UInt64.max)
        let header = Request.idle(group: group).encoded
        var fds: [Int32] = []
        fds.reserveCapacity(pairs)
        defer { fds.forEach(Posix.close) }
        let memoryBefore = try ProcessMemory.snapshot()
        var byte: UInt8 = 0
        for _ in 0..<pairs {
            let fd = try Posix.connectToLoopback(port: port)
            fds.append(fd)
            try Posix.sendAll(fd, header)
            try withUnsafeMutableBytes(of: &byte) { try Posix.readExactly(fd, into: $0) }
            if byte != Request.ackReply { throw BenchError("idle: unexpected reply byte \(byte)") }
        }
        let memoryOpen = try ProcessMemory.snapshot()

        // Release: the server sends FIN on every idle connection; each must then read end of stream.
        let releaseFD = try Posix.connectToLoopback(port: port)
        defer { Posix.close(releaseFD) }
        try Posix.sendAll(releaseFD, Request.release(group: group).encoded)
        try withUnsafeMutableBytes(of: &byte) { try Posix.readExactly(releaseFD, into: $0) }
        for fd in fds {
            if case .processed = try Posix.read(fd, into: &byte, count: 1) {
                throw BenchError("idle: data on an idle connection")
            }
        }
        return (memoryBefore, memoryOpen)
    }
}

func verifyCount(_ what: String, received: Int, expected: Int) throws {
    if received != expected {
        throw BenchError("\(what): short transfer, \(received) of \(expected) bytes")
    }
}

/// The baseline "many" client: all connections on one non-blocking epoll loop.
final class BaselineEchoLoop {
    private struct Connection {
        var fd: Int32 = -1
        var awaitingGo = true
        var roundTrip = 0
        var received = 0
        /// A message is (partly) unsent; `sent` bytes of it are out.
        var writing = false
        var sent = 0
        /// EPOLLOUT is armed because the last send would have blocked.
        var armedForOutput = false
        var done = false
    }

    private let roundTrips: Int
    private let messageSize: Int
    private let messages: [[UInt8]]
    private var connections: [Connection]
    private let epollFD: Int32
    private let buffer: UnsafeMutableRawBufferPointer

    init(connections count: Int, roundTrips: Int, messageSize: Int) throws {
        self.roundTrips = roundTrips
        self.messageSize = messageSize
        messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        connections = Array(repeating: Connection(), count: count)
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        if epollFD < 0 { throw BenchError.syscall("epoll_create1", errno: cssh_errno()) }
        buffer = .allocate(byteCount: messageSize, alignment: 16)
    }

    deinit {
        buffer.deallocate()
    }

    /// Untimed set-up: connect each (blocking), send the group header, wait for '+', then switch
    /// the fd to non-blocking and add it to the epoll set.
    func connectAll(port: UInt16) throws {
        let header = Request.groupEcho(
            group: UInt64.random(in: 1...UInt64.max), size: UInt32(connections.count),
            bytes: UInt64(roundTrips * messageSize)
        ).encoded
        var ack: UInt8 = 0
        for index in connections.indices {
            let fd = try Posix.connectToLoopback(port: port)
            connections[index].fd = fd
            try Posix.sendAll(fd, header)
            try withUnsafeMutableBytes(of: &ack) { try Posix.readExactly(fd, into: $0) }
            if ack != Request.ackReply { throw BenchError("many: unexpected acknowledgement byte \(ack)") }
            try Posix.setNonBlocking(fd)
            var event = epoll_event()
            event.events = cssh_epollin()
            event.data.u64 = UInt64(index)
            if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
                throw BenchError.syscall("epoll_ctl(ADD)", errno: cssh_errno())
            }
        }
    }

    /// Runs every round trip; returns seconds from the first 'G' to the last echo.
    func run() throws -> Double {
        let maxEvents: Int32 = 1024
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(maxEvents))
        defer { events.deallocate() }
        var remaining = connections.count
        var goTime: UInt64?
        while remaining > 0 {
            let count = epoll_wait(epollFD, events, maxEvents, -1)
            if count < 0 {
                let code = cssh_errno()
                if code == EINTR { continue }
                throw BenchError.syscall("epoll_wait", errno: code)
            }
            for i in 0..<Int(count) {
                let index = Int(events[i].data.u64)
                if events[i].events & cssh_epollout() != 0 {
                    try writeMessage(index)
                }
                if events[i].events & (cssh_epollin() | cssh_epollerr() | cssh_epollhup()) != 0 {
                    if goTime == nil && connections[index].awaitingGo { goTime = Posix.monotonicNanoseconds() }
                    if try readAvailable(index) { remaining -= 1 }
                }
            }
        }
        return Stopwatch.seconds(from: goTime ?? 0, to: Posix.monotonicNanoseconds())
    }

    /// Reads what the connection is waiting for; returns true when its last echo has arrived.
    private func readAvailable(_ index: Int) throws -> Bool {
        while !connections[index].done {
            let fd = connections[index].fd
            if connections[index].awaitingGo {
                var go: UInt8 = 0
                switch try Posix.read(fd, into: &go, count: 1) {
                case .wouldBlock: return false
                case .endOfFile: throw BenchError("many: connection closed before 'G'")
                case .processed:
                    if go != Request.goReply { throw BenchError("many: expected 'G', got \(go)") }
                    connections[index].awaitingGo = false
                    connections[index].writing = true
                    try writeMessage(index)
                }
                continue
            }
            let wanted = messageSize - connections[index].received
            switch try Posix.read(fd, into: buffer.baseAddress! + connections[index].received, count: wanted) {
            case .wouldBlock: return false
            case .endOfFile: throw BenchError("many: short read, connection closed mid-echo")
            case .processed(let n):
                connections[index].received += n
                guard connections[index].received == messageSize else { continue }
                let expected = messages[connections[index].roundTrip & 1]
                if !expected.withUnsafeBytes({ memcmp($0.baseAddress!, buffer.baseAddress!, messageSize) == 0 }) {
                    throw BenchError("many: echo differs from the message sent")
                }
                connections[index].received = 0
                connections[index].roundTrip += 1
                if connections[index].roundTrip == roundTrips {
                    connections[index].done = true
                    Posix.close(fd)
                    connections[index].fd = -1
                    return true
                }
                connections[index].writing = true
                try writeMessage(index)
            }
        }
        return false
    }

    /// Sends (the rest of) the current message; arms EPOLLOUT if the socket is full.
    private func writeMessage(_ index: Int) throws {
        guard connections[index].writing, connections[index].fd >= 0 else { return }
        let fd = connections[index].fd
        let message = messages[connections[index].roundTrip & 1]
        while connections[index].sent < messageSize {
            let result = try message.withUnsafeBytes {
                try Posix.send(fd, $0.baseAddress! + connections[index].sent, count: messageSize - connections[index].sent)
            }
            guard case .processed(let n) = result else {
                try setOutputArmed(index, true)
                return
            }
            connections[index].sent += n
        }
        connections[index].sent = 0
        connections[index].writing = false
        try setOutputArmed(index, false)
    }

    private func setOutputArmed(_ index: Int, _ armed: Bool) throws {
        guard connections[index].armedForOutput != armed else { return }
        connections[index].armedForOutput = armed
        var event = epoll_event()
        event.events = armed ? cssh_epollin() | cssh_epollout() : cssh_epollin()
        event.data.u64 = UInt64(index)
        if epoll_ctl(epollFD, EPOLL_CTL_MOD, connections[index].fd, &event) != 0 {
            throw BenchError.syscall("epoll_ctl(MOD)", errno: cssh_errno())
        }
    }

    func closeAll() {
        for index in connections.indices where connections[index].fd >= 0 {
            Posix.close(connections[index].fd)
            connections[index].fd = -1
        }
        Posix.close(epollFD)
    }
}
