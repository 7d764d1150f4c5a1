// The UDP baselines: raw sockets from Swift, as a C program writes them. baseline-udp moves one datagram
// per system call, on a blocking socket (`recvfrom`, `sendto`); baseline-udp-batch moves up to 64 per
// call with recvmmsg and sendmmsg (the engine's C shim, which the datagram socket uses too), waiting in
// `poll` when there is nothing to read. The batch client is the reference of the UDP workloads' ratios:
// the physical limit a datagram library could reach.

import CSocketStreamsShims
import Glibc

struct BaselineDatagramClient: DatagramBenchmarkClient {
    /// recvmmsg/sendmmsg batches of 64 (baseline-udp-batch) or one datagram a call (baseline-udp).
    let batched: Bool

    /// The largest datagram a receive takes whole (a C program's `char buffer[65536]`).
    private static let receiveCapacity = 65_536

    func receive(port: UInt16, count: Int, size: Int) throws -> DatagramOutcome {
        let (fd, clientPort) = try Posix.boundUDPSocket(nonBlocking: false)
        defer { Posix.close(fd) }
        try Posix.setReceiveTimeout(fd, seconds: datagramStallSeconds)
        var tracker = SequenceTracker(count: UInt64(count))
        let start = Posix.monotonicNanoseconds()
        let control = try DatagramControl(port: port, request: .blast(count: UInt64(count), size: UInt32(size), port: clientPort))
        if batched {
            let slots = DatagramSlots(capacity: Self.receiveCapacity)
            receiving: while true {
                guard let n = try Posix.receiveBatch(fd, slots.slots, count: slots.count) else {
                    if !(try Posix.waitFor(fd, events: Int16(POLLIN), milliseconds: Int32(datagramStallSeconds * 1000))) {
                        throw BenchError("udp-receive: no datagram for \(datagramStallSeconds) s")
                    }
                    continue
                }
                for index in 0..<n {
                    let sequence = try checkedSequence(slots.bytes(index), length: Int(slots.slots[index].length), size: size)
                    if sequence == DatagramPayload.endMarker { break receiving }
                    tracker.record(sequence)
                }
            }
        } else {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.receiveCapacity, alignment: 16)
            defer { buffer.deallocate() }
            var sender = sockaddr_storage()
            while true {
                guard let n = try Posix.receiveFrom(fd, into: buffer, capacity: Self.receiveCapacity, address: &sender) else {
                    throw BenchError("udp-receive: no datagram for \(datagramStallSeconds) s")
                }
                let sequence = try checkedSequence(buffer, length: n, size: size)
                if sequence == DatagramPayload.endMarker { break }
                tracker.record(sequence)
            }
        }
        let end = Posix.monotonicNanoseconds()
        let senderSeconds = try control.finishBlast(expected: count)
        try foreignDatagram(tracker)
        return DatagramOutcome(
            seconds: Stopwatch.seconds(from: start, to: end), count: count, received: tracker.received, outOfOrder: tracker.outOfOrder,
            senderSeconds: senderSeconds)
    }

    func send(port: UInt16, count: Int, size: Int, completions: Bool) throws -> DatagramOutcome {
        // A system call's return is the completion: with or without, the same code.
        let control = try DatagramControl(port: port, request: .sink(count: UInt64(count), size: UInt32(size)))
        let sinkPort = try control.readPort()
        let (fd, _) = try Posix.boundUDPSocket(nonBlocking: false)
        defer { Posix.close(fd) }
        let stopwatch = Stopwatch()
        if batched {
            let slots = DatagramSlots(capacity: size)
            slots.prepareToSend(size: size, port: sinkPort)
            var sequence = 0
            while sequence < count {
                let batch = min(slots.count, count - sequence)
                for index in 0..<batch { DatagramPayload.setSequence(UInt64(sequence + index), at: slots.bytes(index)) }
                try Posix.sendAllBatch(fd, slots.slots, count: batch)
                sequence += batch
            }
        } else {
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
            defer { buffer.deallocate() }
            DatagramPayload.fill(buffer)
            try Posix.withLoopbackSockaddr(port: sinkPort) { address, length in
                for sequence in 0..<count {
                    DatagramPayload.setSequence(UInt64(sequence), at: buffer.baseAddress!)
                    while !(try Posix.sendTo(fd, buffer.baseAddress!, count: size, to: address, length: length)) {
                        _ = try Posix.waitFor(fd, events: Int16(POLLOUT), milliseconds: 1000)
                    }
                }
            }
        }
        let report = try control.finish()
        return DatagramOutcome(seconds: stopwatch.elapsedSeconds, count: count, received: report.received, outOfOrder: report.outOfOrder)
    }

    func pingPong(port: UInt16, roundTrips: Int, size: Int) throws -> Double {
        let messages = pingPongMessages(size: size)
        let control = try DatagramControl(port: port, request: .datagramEcho(size: UInt32(size)))
        let echoPort = try control.readPort()
        let (fd, _) = try Posix.boundUDPSocket(nonBlocking: false)
        defer { Posix.close(fd) }
        try Posix.setReceiveTimeout(fd, seconds: datagramStallSeconds)
        let stopwatch = Stopwatch()
        if batched {
            let outgoing = DatagramSlots(count: 2, capacity: size)
            outgoing.prepareToSend(size: size, port: echoPort)
            for index in 0..<2 {
                messages[index].withUnsafeBytes { outgoing.bytes(index).copyMemory(from: $0.baseAddress!, byteCount: size) }
            }
            let incoming = DatagramSlots(capacity: Self.receiveCapacity)
            for i in 0..<roundTrips {
                try Posix.sendAllBatch(fd, outgoing.slots + (i & 1), count: 1)
                var n = 0
                while n == 0 {
                    guard try Posix.waitFor(fd, events: Int16(POLLIN), milliseconds: Int32(datagramStallSeconds * 1000)) else {
                        throw BenchError("udp-pingpong: no echo \(i) for \(datagramStallSeconds) s")
                    }
                    n = try Posix.receiveBatch(fd, incoming.slots, count: incoming.count) ?? 0
                }
                if n != 1 { throw BenchError("udp-pingpong: \(n) datagrams arrived for one sent") }
                try checkEcho(incoming.bytes(0), length: Int(incoming.slots[0].length), messages[i & 1], i)
            }
        } else {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.receiveCapacity, alignment: 16)
            defer { buffer.deallocate() }
            var sender = sockaddr_storage()
            try Posix.withLoopbackSockaddr(port: echoPort) { address, length in
                for i in 0..<roundTrips {
                    let message = messages[i & 1]
                    let sent = try message.withUnsafeBytes {
                        try Posix.sendTo(fd, $0.baseAddress!, count: size, to: address, length: length)
                    }
                    if !sent { throw BenchError("udp-pingpong: sendto would block on a blocking socket") }
                    guard let n = try Posix.receiveFrom(fd, into: buffer, capacity: Self.receiveCapacity, address: &sender) else {
                        throw BenchError("udp-pingpong: no echo \(i) for \(datagramStallSeconds) s")
                    }
                    try checkEcho(buffer, length: n, message, i)
                }
            }
        }
        let seconds = stopwatch.elapsedSeconds
        let report = try control.finish()
        if report.received != roundTrips { throw BenchError("udp-pingpong: the echo peer echoed \(report.received) of \(roundTrips)") }
        return seconds
    }

    func fanIn(port: UInt16, peers: Int, count: Int, size: Int) throws -> DatagramOutcome {
        let (fd, clientPort) = try Posix.boundUDPSocket(nonBlocking: false)
        defer { Posix.close(fd) }
        try Posix.setReceiveTimeout(fd, seconds: datagramStallSeconds)
        let control = try DatagramControl(
            port: port, request: .fanIn(peers: UInt16(peers), count: UInt64(count), size: UInt32(size), port: clientPort))
        var tracker = try FanInTracker(ports: try control.readPorts(count: peers), count: count)
        let start = Posix.monotonicNanoseconds()
        try control.startFanIn()
        if batched {
            let slots = DatagramSlots(capacity: Self.receiveCapacity)
            receiving: while true {
                guard let n = try Posix.receiveBatch(fd, slots.slots, count: slots.count) else {
                    if !(try Posix.waitFor(fd, events: Int16(POLLIN), milliseconds: Int32(datagramStallSeconds * 1000))) {
                        throw BenchError("udp-fanin: no datagram for \(datagramStallSeconds) s")
                    }
                    continue
                }
                for index in 0..<n {
                    let slot = slots.slots + index
                    let sequence = try checkedSequence(slots.bytes(index), length: Int(slot.pointee.length), size: size)
                    let last = try withUnsafePointer(to: &slot.pointee.address) {
                        try tracker.record(sequence, from: $0, length: Int(slot.pointee.address_length))
                    }
                    if last { break receiving }
                }
            }
        } else {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.receiveCapacity, alignment: 16)
            defer { buffer.deallocate() }
            var sender = sockaddr_storage()
            var length = socklen_t(0)
            while true {
                guard
                    let n = try Posix.receiveFrom(
                        fd, into: buffer, capacity: Self.receiveCapacity, address: &sender, addressLength: &length)
                else {
                    throw BenchError("udp-fanin: no datagram for \(datagramStallSeconds) s")
                }
                let sequence = try checkedSequence(buffer, length: n, size: size)
                if try withUnsafePointer(to: &sender, { try tracker.record(sequence, from: $0, length: Int(length)) }) { break }
            }
        }
        let senderSeconds = try control.finishFanIn(expected: peers * count)
        return try tracker.outcome(seconds: Stopwatch.seconds(from: start, to: tracker.end), senderSeconds: senderSeconds)
    }

    private func checkEcho(_ bytes: UnsafeRawPointer, length: Int, _ message: [UInt8], _ index: Int) throws {
        let same = length == message.count && message.withUnsafeBytes { memcmp(bytes, $0.baseAddress!, length) == 0 }
        if !same { throw BenchError("udp-pingpong: echo \(index) differs from the datagram sent") }
    }
}
