// What the UDP clients share for udp-fanin (its control steps are DatagramControl's): the check every
// datagram passes, whatever the client: it came from 127.0.0.1
// and one of the peers' ports, its sequence number is its peer's next (or a later) one, and the session
// ends once every peer's end marker has arrived, so that every peer has been seen as a sender.

import Glibc

/// The client's record of a fan-in: which peer each port is, where each peer's sequence got to, and
/// whose end marker has arrived.
struct FanInTracker {
    let peers: Int
    /// Peer index + 1 by port (0: no peer's port), a look-up a C program would make.
    private var peerByPort: [UInt16]
    private var trackers: [SequenceTracker]
    private var markerArrived: [Bool]
    private var sent: [Bool]
    /// The peers whose end marker has arrived, and those any datagram came from.
    private(set) var markers = 0
    private(set) var senders = 0
    /// When the first end marker arrived (CLOCK_MONOTONIC nanoseconds): every datagram still in the
    /// socket came after it, since the peers sent no marker before their last datagram.
    private(set) var end: UInt64 = 0

    /// `ports[i]` is peer i's; each sends sequence numbers 0 … `count` − 1.
    init(ports: [UInt16], count: Int) throws {
        peers = ports.count
        peerByPort = [UInt16](repeating: 0, count: 1 << 16)
        for (index, port) in ports.enumerated() {
            if peerByPort[Int(port)] != 0 { throw BenchError("udp-fanin: the server answered port \(port) twice") }
            peerByPort[Int(port)] = UInt16(index + 1)
        }
        trackers = [SequenceTracker](repeating: SequenceTracker(count: UInt64(count)), count: ports.count)
        markerArrived = [Bool](repeating: false, count: ports.count)
        sent = [Bool](repeating: false, count: ports.count)
    }

    /// Records a datagram of `sequence` from the `sockaddr` at `address` (`length` bytes); throws when
    /// it is no peer's. Returns true once every peer's end marker has arrived.
    @inline(__always)
    mutating func record(_ sequence: UInt64, from address: UnsafeRawPointer, length: Int) throws -> Bool {
        let peer = try self.peer(address, length: length)
        if !sent[peer] {
            sent[peer] = true
            senders += 1
        }
        guard sequence == DatagramPayload.endMarker else {
            trackers[peer].record(sequence)
            return false
        }
        if end == 0 { end = Posix.monotonicNanoseconds() }
        if !markerArrived[peer] {
            markerArrived[peer] = true
            markers += 1
        }
        return markers == peers
    }

    /// The peer a `sockaddr_in` of 127.0.0.1 is (its port's).
    @inline(__always)
    private func peer(_ address: UnsafeRawPointer, length: Int) throws -> Int {
        guard length >= MemoryLayout<sockaddr_in>.size, address.loadUnaligned(as: sa_family_t.self) == sa_family_t(AF_INET) else {
            throw BenchError("udp-fanin: a datagram from an address of \(length) bytes, not IPv4")
        }
        let sender = address.loadUnaligned(as: sockaddr_in.self)
        let index = Int(peerByPort[Int(UInt16(bigEndian: sender.sin_port))])
        guard index != 0, sender.sin_addr.s_addr == in_addr_t(0x7f00_0001).bigEndian else {
            throw BenchError("udp-fanin: a datagram from port \(UInt16(bigEndian: sender.sin_port)), none of the peers'")
        }
        return index - 1
    }

    /// The outcome: the peers' datagrams, those that arrived and those that came after a later one of
    /// the same peer; throws if a sequence number was beyond the session's.
    func outcome(seconds: Double, senderSeconds: Double) throws -> DatagramOutcome {
        var received = 0
        var outOfOrder = 0
        for tracker in trackers {
            try foreignDatagram(tracker)
            received += tracker.received
            outOfOrder += tracker.outOfOrder
        }
        if senders != peers { throw BenchError("udp-fanin: datagrams from \(senders) of the \(peers) peers") }
        return DatagramOutcome(
            seconds: seconds, count: peers * Int(trackers.first?.count ?? 0), received: received, outOfOrder: outOfOrder,
            senderSeconds: senderSeconds, senders: senders)
    }
}
