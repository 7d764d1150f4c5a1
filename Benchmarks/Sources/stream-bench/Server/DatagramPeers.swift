// The server's UDP peers (see Protocol/WireProtocol.swift): a sink and an echo socket per control
// connection that asks for one, in the server's own epoll loop, and the blast and the fan-in, which run
// at once (the fan-in once the client has its peers' ports). They
// are in the server process, like the TCP peer, so that callgrind and strace of a `measure` child count
// the client alone. Every receive is a recvmmsg of up to 64 datagrams and every send a sendmmsg (the
// engine's C shim), so the peers cost little next to the clients they serve; the fan-in's peers are
// a socket each and no system call sends from several sockets, so it sends with `sendto`, one datagram
// a call.

import CSocketStreamsShims
import Glibc

/// One UDP socket of the server, tied to the control connection that asked for it.
final class DatagramPeer {
    enum Role {
        /// Counts what arrives and checks the sequence numbers (and sizes).
        case sink(size: Int)
        /// Sends every datagram back to its sender.
        case echo
    }

    let fd: Int32
    let port: UInt16
    let role: Role
    var tracker: SequenceTracker
    /// Datagrams whose size was not the session's (sink), or that were echoed (echo).
    var wrongSize = 0
    var echoed = 0

    init(fd: Int32, port: UInt16, role: Role, count: UInt64) {
        self.fd = fd
        self.port = port
        self.role = role
        tracker = SequenceTracker(count: count)
    }
}

/// A fan-in's sending sockets, each bound to a port of its own on 127.0.0.1 (closed with the session).
final class FanInPeers {
    let fds: [Int32]
    let ports: [UInt16]
    private var isClosed = false

    /// `count` UDP sockets; none is left open if one fails.
    init(count: Int) throws {
        var opened: [(fd: Int32, port: UInt16)] = []
        do {
            for _ in 0..<count { opened.append(try Posix.boundUDPSocket(nonBlocking: true)) }
        } catch {
            for peer in opened { Posix.close(peer.fd) }
            throw error
        }
        fds = opened.map(\.fd)
        ports = opened.map(\.port)
    }

    deinit { close() }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        for fd in fds { Posix.close(fd) }
    }
}

/// The server's UDP sockets, by fd, and the batch slots they all read into.
final class DatagramPeers {
    private var peers: [Int32: DatagramPeer] = [:]
    /// 64 slots of the largest datagram (4 MiB), made when the first session starts.
    private var buffer: DatagramSlots?
    /// The sink's receive buffer: large enough that a client on the same CPU, which runs while the
    /// sink waits for the CPU, does not overflow it (the kernel's default holds ~300 small datagrams).
    private static let sinkReceiveBuffer: Int32 = 64 << 20

    private var slots: DatagramSlots {
        if let buffer { return buffer }
        let made = DatagramSlots(capacity: DatagramPayload.maximumSize + 1)
        buffer = made
        return made
    }

    func peer(_ fd: Int32) -> DatagramPeer? { peers.isEmpty ? nil : peers[fd] }

    /// A new sink or echo socket, watched for input in `epollFD`.
    func open(_ role: DatagramPeer.Role, count: UInt64, epollFD: Int32) throws -> DatagramPeer {
        let (fd, port) = try Posix.boundUDPSocket(nonBlocking: true)
        if case .sink = role { Posix.enlargeReceiveBuffer(fd, bytes: Self.sinkReceiveBuffer) }
        var event = epoll_event()
        event.events = cssh_epollin()
        event.data.fd = fd
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
            let code = cssh_errno()
            Posix.close(fd)
            throw BenchError.syscall("epoll_ctl(ADD, UDP)", errno: code)
        }
        let peer = DatagramPeer(fd: fd, port: port, role: role, count: count)
        peers[fd] = peer
        return peer
    }

    /// Closes the peer's socket (which also leaves the epoll set).
    func close(_ peer: DatagramPeer) {
        guard peers.removeValue(forKey: peer.fd) != nil else { return }
        Posix.close(peer.fd)
    }

    /// Reads everything the socket holds, a batch at a time: counts it (sink) or sends it back (echo).
    func drain(_ peer: DatagramPeer) throws {
        let slots = self.slots
        while let count = try Posix.receiveBatch(peer.fd, slots.slots, count: slots.count), count > 0 {
            switch peer.role {
            case .sink(let size):
                for index in 0..<count {
                    let slot = slots.slots[index]
                    guard Int(slot.length) == size, slot.truncated == 0 else {
                        peer.wrongSize += 1
                        continue
                    }
                    peer.tracker.record(DatagramPayload.sequence(at: slot.bytes!))
                }
            case .echo:
                // Each slot holds its datagram's length and sender: sent back as they are.
                try Posix.sendAllBatch(peer.fd, slots.slots, count: count)
                peer.echoed += count
            }
            if count < slots.count { return }
        }
    }

    /// The client has sent its last datagram ('F'): whatever is still on its way is read (until 2 ms
    /// pass without one), and the four counts are the answer.
    func finish(_ peer: DatagramPeer) throws -> [UInt8] {
        repeat {
            try drain(peer)
        } while try Posix.waitFor(peer.fd, events: Int16(POLLIN), milliseconds: 2)
        var reply: [UInt8] = []
        switch peer.role {
        case .sink:
            reply.appendBigEndian(UInt64(peer.tracker.received))
            reply.appendBigEndian(UInt64(peer.tracker.lost))
            reply.appendBigEndian(UInt64(peer.tracker.outOfOrder))
            reply.appendBigEndian(UInt64(peer.wrongSize + peer.tracker.foreign))
        case .echo:
            reply.appendBigEndian(UInt64(peer.echoed))
            reply.appendBigEndian(UInt64(0))
            reply.appendBigEndian(UInt64(0))
            reply.appendBigEndian(UInt64(0))
        }
        return reply
    }

    /// The blast: `count` datagrams of `size` bytes to 127.0.0.1:`port`, 64 per sendmmsg and as fast as
    /// the kernel takes them, then the end marker once a millisecond until the client's 'F' arrives on
    /// `control` (at most two minutes). This holds the server's loop, which has no other client meanwhile.
    /// Returns the nanoseconds the `count` datagrams took to send.
    func blast(count: UInt64, size: Int, port: UInt16, control: Int32) throws -> UInt64 {
        let (fd, _) = try Posix.boundUDPSocket(nonBlocking: true)
        defer { Posix.close(fd) }
        let slots = self.slots
        slots.prepareToSend(size: size, port: port)
        var sequence: UInt64 = 0
        let start = Posix.monotonicNanoseconds()
        while sequence < count {
            let batch = Int(min(UInt64(slots.count), count - sequence))
            for index in 0..<batch { DatagramPayload.setSequence(sequence + UInt64(index), at: slots.bytes(index)) }
            try Posix.sendAllBatch(fd, slots.slots, count: batch)
            sequence += UInt64(batch)
        }
        let sending = Posix.monotonicNanoseconds() - start
        DatagramPayload.setSequence(DatagramPayload.endMarker, at: slots.bytes(0))
        let deadline = Posix.monotonicNanoseconds() + 120_000_000_000
        while Posix.monotonicNanoseconds() < deadline {
            // A marker the full socket dropped, or one the client no longer reads, is no error.
            _ = try? Posix.sendBatch(fd, slots.slots, count: 1)
            guard try Posix.waitFor(control, events: Int16(POLLIN), milliseconds: 1) else { continue }
            var byte: UInt8 = 0
            switch try Posix.read(control, into: &byte, count: 1) {
            case .wouldBlock: continue
            case .endOfFile: throw BenchError("blast: the client closed the control connection")
            case .processed:
                guard byte == Request.datagramFinish else { throw BenchError("blast: expected 'F', got \(byte)") }
                return sending
            }
        }
        throw BenchError("blast: no 'F' from the client within two minutes")
    }

    /// The fan-in's end markers sent each millisecond.
    private static let rollCallBatch = 64

    /// The fan-in, once the client has its peers' ports ('G'): `count` datagrams of `size` bytes from every
    /// one of `peers` to 127.0.0.1:`port`, in rounds (each peer's datagram `n`, one peer after another,
    /// then each one's `n + 1`), so that the client's socket sees the senders interleaved as a server's
    /// does. Then the roll call: the peers send their end markers, `rollCallBatch` peers a millisecond,
    /// round and round until the client's 'F' arrives on `control` (at most two minutes), so that each
    /// peer is seen even when the full receive buffer dropped every datagram it sent. A batch that small
    /// fits any client's receive buffer, so the kernel's drop count stays the datagrams' loss and not
    /// the markers'. Like the blast, this holds the server's loop. Returns the nanoseconds the
    /// datagrams took to send and the end markers sent.
    func fanIn(_ peers: FanInPeers, count: UInt64, size: Int, port: UInt16, control: Int32) throws -> (nanoseconds: UInt64, markers: UInt64)
    {
        let datagram = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { datagram.deallocate() }
        DatagramPayload.fill(datagram)
        return try Posix.withLoopbackSockaddr(port: port) { address, length in
            let start = Posix.monotonicNanoseconds()
            for sequence in 0..<count {
                DatagramPayload.setSequence(sequence, at: datagram.baseAddress!)
                for fd in peers.fds {
                    while !(try Posix.sendTo(fd, datagram.baseAddress!, count: size, to: address, length: length)) {
                        if !(try Posix.waitFor(fd, events: Int16(POLLOUT), milliseconds: 10_000)) {
                            throw BenchError("fan-in: no room in a peer's socket for 10 s")
                        }
                    }
                }
            }
            let sending = Posix.monotonicNanoseconds() - start
            DatagramPayload.setSequence(DatagramPayload.endMarker, at: datagram.baseAddress!)
            var markers: UInt64 = 0
            let deadline = Posix.monotonicNanoseconds() + 120_000_000_000
            while Posix.monotonicNanoseconds() < deadline {
                for _ in 0..<min(Self.rollCallBatch, peers.fds.count) {
                    let fd = peers.fds[Int(markers % UInt64(peers.fds.count))]
                    // A marker the full socket dropped, or one the client no longer reads, is no error.
                    _ = try? Posix.sendTo(fd, datagram.baseAddress!, count: size, to: address, length: length)
                    markers += 1
                }
                guard try Posix.waitFor(control, events: Int16(POLLIN), milliseconds: 1) else { continue }
                var byte: UInt8 = 0
                switch try Posix.read(control, into: &byte, count: 1) {
                case .wouldBlock: continue
                case .endOfFile: throw BenchError("fan-in: the client closed the control connection")
                case .processed:
                    guard byte == Request.datagramFinish else { throw BenchError("fan-in: expected 'F', got \(byte)") }
                    return (sending, markers)
                }
            }
            throw BenchError("fan-in: no 'F' from the client within two minutes")
        }
    }
}
