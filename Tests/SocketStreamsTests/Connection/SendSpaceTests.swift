#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The send-space bound that replaced the poll after each write (SendSpace.swift): it never claims
/// more free space than the kernel has, a write right after `hasSpaceAvailable` never finds the
/// socket full, and `hasSpaceAvailable` still comes again while the socket takes bytes.
final class SendSpaceTests: SocketStreamsTestCase {
    /// Write sizes that cross the bound's edge at every offset: a byte, a small message, an MSS, a
    /// record, the benchmark's chunk.
    private let sizes = [1, 64, 1000, 1448, 4096, 16 * 1024, 65536, 7, 300]

    func testHalfStateStaysThirtyTwoBytes() {
        XCTAssertLessThanOrEqual(MemoryLayout<HalfState>.size, 32)
        var half = HalfState()
        half.watchingSpace = true
        half.spaceConfirmed = true
        XCTAssertFalse(half.gone)
        XCTAssertFalse(half.suppressed)
        half.watchingSpace = false
        XCTAssertTrue(half.spaceConfirmed)
        XCTAssertEqual(half.sendSpace, .unchecked)
    }

    func testTakingRunsTheBoundDownAndLeavesMarksAlone() throws {
        var marked = SendSpace.pollOnly
        XCTAssertFalse(marked.take(1))
        XCTAssertEqual(marked, .pollOnly)
        var unchecked = SendSpace.unchecked
        XCTAssertFalse(unchecked.take(1))
        XCTAssertEqual(unchecked, .unchecked)
        var exhausted = SendSpace.exhausted
        XCTAssertFalse(exhausted.take(1))
        XCTAssertEqual(exhausted, .exhausted)
        // The charge: three bytes a byte and two skb heads, taken off the bound once.
        XCTAssertEqual(SendSpace.charge(64), 64 * 3 + 2 * SendSpace.headTruesize)
        XCTAssertNil(SendSpace.measure(-1), "no bound from a bad fd")
    }

    func testAFreshSocketMeasuresWritableAndEachSendTakesItsCharge() throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        defer {
            close(client)
            close(server)
        }
        var measured = try XCTUnwrap(SendSpace.measure(client))
        XCTAssertTrue(measured.writable)
        let before = Int(measured.space.kib)
        XCTAssertGreaterThan(before, 8, "an idle socket's whole send buffer is free")
        XCTAssertTrue(measured.space.take(64))
        // 3 × 64 + 2 × 2,048 = 4,288 bytes: 5 KiB, rounded up.
        XCTAssertEqual(Int(measured.space.kib), before - 5)
    }

    /// The bound a host pair starts with, so that its first write needs no `getsockopt`: never more
    /// than what the kernel measures on a socket just connected (over several, v4 and v6), and it is
    /// what a direct host pair holds once it is open.
    func testAFreshlyConnectedBoundIsNoMoreThanTheKernelMeasures() throws {
        let fresh = try XCTUnwrap(SendSpace.freshlyConnected, "tcp_wmem unreadable or tcp_notsent_lowat set")
        XCTAssertTrue(fresh.isBound)
        XCTAssertGreaterThan(fresh.kib, 0)
        for _ in 0..<20 {
            let (client, server) = try RawSocket.connectedTCPPair()
            defer {
                close(client)
                close(server)
            }
            let measured = try XCTUnwrap(SendSpace.measure(client))
            XCTAssertTrue(measured.writable)
            XCTAssertLessThanOrEqual(fresh.kib, measured.space.kib, "the seed promises more than the kernel has")
        }
        let listener = try RawSocket.listener(family: .v4, backlog: 1)
        defer { close(listener) }
        let pair = makePair(port: RawSocket.boundPort(listener))
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { pair.output.streamStatus == .open })
        let server = try XCTUnwrap(RawSocket.accept(listener, timeout: 10))
        defer { close(server) }
        let space = pair.output.connection.lock.withLock { pair.output.connection.halves[.output].sendSpace }
        XCTAssertEqual(space, fresh, "a direct host pair starts from the seed")
    }

    /// A real socket whose peer stops reading, with a small send buffer: after every send the bound
    /// took, the kernel's own free space (`sk_sndbuf` less the queued memory: a send takes bytes
    /// while it is above zero) is at least the bound, and no send the bound (or a measurement)
    /// allowed returns EAGAIN; the writer fills the buffer past the point where POLLOUT turns off. The peer reads a little between
    /// rounds so the socket is measured again many times.
    func testTheBoundNeverExceedsTheKernelsFreeSpace() throws {
        for (sendBuffer, peerReceiveBuffer): (Int32, Int32) in [(4096, 0), (16384, 0), (0, 0), (8192, 4096)] {
            try checkBound(sendBuffer: sendBuffer, peerReceiveBuffer: peerReceiveBuffer)
        }
    }

    private func checkBound(sendBuffer: Int32, peerReceiveBuffer: Int32) throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        defer {
            close(client)
            close(server)
        }
        if sendBuffer > 0 { try setOption(client, SO_SNDBUF, sendBuffer) }
        if peerReceiveBuffer > 0 { try setOption(server, SO_RCVBUF, peerReceiveBuffer) }
        let buffer = [UInt8](repeating: 0x33, count: 65536)
        var sends = 0
        var measurements = 0
        var refused = 0
        var pastPollout = 0
        let started = Date()
        // A tiny peer window makes the kernel wait in zero-window probes: fewer rounds there.
        let rounds = peerReceiveBuffer > 0 ? 8 : 40
        for round in 0..<rounds {
            // Fill: send while the bound or a fresh measurement says there is space.
            var measured = try XCTUnwrap(SendSpace.measure(client))
            measurements += 1
            var space = measured.space
            while measured.writable {
                let count = sizes[(sends + round) % sizes.count]
                var entry = pollfd(fd: client, events: Int16(POLLOUT), revents: 0)
                if poll(&entry, 1, 0) == 0 { pastPollout += 1 }
                let sent = buffer.withUnsafeBytes { send(client, $0.baseAddress!, count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
                if sent < 0 {
                    XCTAssertTrue(errno == EAGAIN || errno == EWOULDBLOCK, "send: errno \(errno)")
                    refused += 1
                    break
                }
                sends += 1
                if sent == count, space.take(sent) {
                    let free = try kernelFree(client)
                    XCTAssertGreaterThanOrEqual(
                        free, Int(space.kib) * 1024,
                        "bound \(space.kib) KiB but the kernel has \(free) bytes free (sndbuf \(sendBuffer), send \(sends))")
                    continue
                }
                measured = try XCTUnwrap(SendSpace.measure(client))
                measurements += 1
                space = measured.space
            }
            // The peer takes some bytes; the socket drains a little.
            _ = try RawSocket.readSome(server, max: 24 * 1024, timeout: shortTimeout)
        }
        print(
            "sndbuf \(sendBuffer) peer rcvbuf \(peerReceiveBuffer): \(sends) sends (\(pastPollout) with POLLOUT off), \(measurements) measured, \(Date().timeIntervalSince(started)) s"
        )
        XCTAssertEqual(refused, 0, "a send the bound or a measurement allowed found the socket full")
        XCTAssertGreaterThan(sends, rounds, "sndbuf \(sendBuffer)")
        XCTAssertGreaterThan(measurements, rounds, "sndbuf \(sendBuffer)")
        if sendBuffer == 0 {
            // The default buffer, whose sends are small beside it: the fill goes on past POLLOUT.
            XCTAssertGreaterThan(pastPollout, 0, "the writer stopped where POLLOUT turns off, not where the buffer is full")
        }
    }

    /// How far the socket's send queue can grow before a send fails, from SO_MEMINFO: `sk_sndbuf`
    /// less the larger of `sk_wmem_queued` and `sk_wmem_alloc`.
    private func kernelFree(_ fd: Int32) throws -> Int {
        var info = [UInt32](repeating: 0, count: 9)
        var length = socklen_t(info.count * 4)
        guard getsockopt(fd, SOL_SOCKET, SO_MEMINFO, &info, &length) == 0 else {
            throw CallFailed(call: "getsockopt(SO_MEMINFO)", code: errno)
        }
        return Int(info[3]) - max(Int(info[5]), Int(info[2]))
    }

    private func setOption(_ fd: Int32, _ name: Int32, _ value: Int32) throws {
        var value = value
        guard setsockopt(fd, SOL_SOCKET, name, &value, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            throw CallFailed(call: "setsockopt", code: errno)
        }
    }

    /// A delegate writes on every `hasSpaceAvailable` (sizes that cross the bound's edge) over an
    /// adopted TCP socket with a 4 KiB send buffer (8 KiB as the kernel doubles it) whose peer reads
    /// 1,000 bytes at a time: thousands of writes land right after the event, and none finds the
    /// socket full (the debug build counts every EAGAIN `write` meets).
    func testWritesAfterHasSpaceAvailableNeverFindTheSocketFull() throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        defer { close(server) }
        try setOption(client, SO_SNDBUF, 4096)
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        XCTAssertTrue(pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket))
        try writeThroughSlowPeer(pair, peer: server, total: 4 << 20)
    }

    /// The same over a pair the library connected (`createStreamPair(host:port:)`), whose send
    /// buffer autotunes.
    func testWritesAfterHasSpaceAvailableNeverFindTheSocketFullOnAHostPair() throws {
        let listener = try RawSocket.listener(family: .v4, backlog: 1)
        defer { close(listener) }
        let pair = makePair(port: RawSocket.boundPort(listener))
        pair.input.open()
        let connected = Signal()
        let peer = Locked<Int32>(-1)
        let acceptor = Thread {
            peer.value = (try? RawSocket.accept(listener, timeout: 10)) ?? -1
            connected.raise()
        }
        acceptor.start()
        XCTAssertTrue(connected.wait(timeout: 10))
        let server = peer.value
        XCTAssertGreaterThanOrEqual(server, 0)
        defer { close(server) }
        try writeThroughSlowPeer(pair, peer: server, total: 8 << 20)
    }

    /// The same over a Unix-domain socket, which the bound does not model: the poll answers, and
    /// the re-signal still comes.
    func testAUnixDomainPairKeepsThePoll() throws {
        let (client, server) = try RawSocket.socketPair()
        defer { close(server) }
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        XCTAssertTrue(pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket))
        try writeThroughSlowPeer(pair, peer: server, total: 4 << 20, modelled: false)
    }

    /// A writer on `hasSpaceAvailable` whose peer reads nothing fills the send buffer as a blocking
    /// send does: `hasSpaceAvailable` still comes after POLLOUT has turned off (free space below half
    /// the queued memory), while sends take bytes, and no write finds the socket full. Before, the
    /// events stopped where POLLOUT turns off, a third of the buffer still free, and a writer was
    /// woken again as soon as the peer had read a little (every 3 chunks of a 64 KiB upload, where a
    /// blocking C sender sleeps every 24).
    func testAWriterFillsTheBufferAsABlockingSendDoes() throws {
        let listener = try RawSocket.listener(family: .v4, backlog: 1)
        defer { close(listener) }
        let pair = makePair(port: RawSocket.boundPort(listener))
        let writer = ChunkWriter(sizes: [1000])
        writer.limit = 0
        pair.output.delegate = writer
        pair.output.schedule(in: .current, forMode: .default)
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { pair.output.streamStatus == .open })
        let server = try XCTUnwrap(RawSocket.accept(listener, timeout: 10))
        defer { close(server) }
        let refusedBefore = SendSpace.sendsRefused.load(ordering: .relaxed)
        writer.watch(try XCTUnwrap(nativeHandle(of: pair.output)))
        writer.limit = .max
        _ = pair.output.write([0x44], maxLength: 1)  // the writes go on from the re-signal this one gets
        XCTAssertTrue(runUntil(timeout: 10) { writer.writesPastPollout > 0 || writer.failure != nil }, "\(writer.writes) writes")
        XCTAssertNil(writer.failure)
        XCTAssertEqual(SendSpace.sendsRefused.load(ordering: .relaxed) - refusedBefore, 0, "a write found the socket full")
    }

    private func writeThroughSlowPeer(_ pair: StreamPair, peer server: Int32, total: Int, modelled: Bool = true) throws {
        let refusedBefore = SendSpace.sendsRefused.load(ordering: .relaxed)
        // Mostly small writes, so that thousands of them cross the bound's edge.
        let writer = ChunkWriter(sizes: sizes.filter { $0 < 65536 }, total: total)
        pair.output.delegate = writer
        pair.output.schedule(in: .current, forMode: .default)
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { pair.output.streamStatus == .open })
        writer.watch(try XCTUnwrap(nativeHandle(of: pair.output)))
        let received = Locked(0)
        let finished = Signal()
        let reader = Thread {
            while received.value < total, let data = try? RawSocket.readSome(server, max: 1000, timeout: 10), !data.isEmpty {
                received.value += data.count
            }
            finished.raise()
        }
        reader.start()
        XCTAssertTrue(runUntil(timeout: 60) { writer.bytes >= total || writer.failure != nil }, "wrote \(writer.bytes) of \(total)")
        XCTAssertTrue(finished.wait(timeout: 30))
        XCTAssertNil(writer.failure)
        XCTAssertEqual(received.value, writer.bytes)
        XCTAssertGreaterThan(writer.writes, 1000)
        XCTAssertEqual(
            SendSpace.sendsRefused.load(ordering: .relaxed) - refusedBefore, 0,
            "a write right after hasSpaceAvailable found the socket full (of \(writer.writes))")
        XCTAssertLessThan(writer.slowestWrite, 1, "a write in a hasSpaceAvailable callout blocked")
        // The re-signals came from the bound, not from the poll it replaced.
        XCTAssertTrue(SendSpace.lowWaterMarkUnlimited)
        let space = pair.output.connection.lock.withLock { pair.output.connection.halves[.output].sendSpace }
        if modelled {
            XCTAssertTrue(space.isBound, "the socket was not modelled: \(space)")
        } else {
            XCTAssertEqual(space, .pollOnly)
            XCTAssertEqual(writer.writesPastPollout, 0, "the poll answers: space only while POLLOUT is on")
        }
        print("\(writer.writes) writes after hasSpaceAvailable (\(writer.writesPastPollout) with POLLOUT off), \(writer.bytes) bytes")
    }
}

/// A socket call the test makes itself failed.
private struct CallFailed: Error {
    let call: String
    let code: Int32
}
