// The fault relay's own tests: it forwards byte for byte at every segmentation, and each fault does
// what it says, seen from a raw client socket and a raw peer (nothing of the library under test).
// Nothing waits on a sleep: the client waits for bytes, EOF or errors with deadlines, and for the
// relay's counters; a negative check ("nothing arrives") polls for a bounded time.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

final class FaultRelayTests: SocketStreamsTestCase {
    /// A raw echo peer: echoes until EOF.
    private func startEchoPeer() throws -> RawTCPServer {
        try startRawServer { connection in
            while let chunk = try? RawSocket.readSome(connection.fd, timeout: 10), !chunk.isEmpty {
                try? connection.write(chunk)
            }
        }
    }

    /// A peer that sends `data` and then waits for the client's end (EOF or error), which it records.
    private func startSendingPeer(_ data: Data, sawEnd: Signal? = nil, received: Locked<Data>? = nil) throws -> RawTCPServer {
        try startRawServer { connection in
            try? connection.write(data)
            while let chunk = try? RawSocket.readSome(connection.fd, timeout: 10), !chunk.isEmpty {
                received?.mutate { $0.append(chunk) }
            }
            sawEnd?.raise()
        }
    }

    private func connect(_ relay: FaultRelay) throws -> Int32 {
        let fd = try RawSocket.connectTo(family: .v4, port: relay.port)
        addCleanup { close(fd) }
        return fd
    }

    /// Reads until EOF or an error, within `timeout`; the bytes and the errno that ended it (0: EOF,
    /// -1: the deadline).
    private func readUntilEnd(_ fd: Int32, timeout: TimeInterval = 5) -> (data: Data, end: Int32) {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var data = Data()
        while true {
            do {
                guard let chunk = try RawSocket.readSome(fd, timeout: max(0, deadline.timeIntervalSinceNow)) else {
                    return (data, -1)
                }
                if chunk.isEmpty { return (data, 0) }
                data.append(chunk)
            } catch let error as SystemCallError {
                return (data, error.code)
            } catch {
                return (data, -2)
            }
        }
    }

    func testForwardsByteForByteAtEverySegmentation() throws {
        let peer = try startEchoPeer()
        let payload = testPayload(3000)
        for maxSegment in [1, 2, 3, 7, 64, 1500, 65_536] {
            let relay = try startRelay(to: peer.port, fault: .segment(maxSegment: maxSegment))
            let fd = try connect(relay)
            try RawSocket.writeAll(fd, payload)
            XCTAssertEqual(try RawSocket.readExactly(fd, count: payload.count, timeout: 10), payload, "segments of 1...\(maxSegment)")
            XCTAssertTrue(relay.wait(timeout: 5) { $0.forwarded[.downstream] == payload.count }, "\(relay.snapshot)")
            let writes = relay.snapshot.writes
            if maxSegment == 1 {
                XCTAssertEqual(writes[.upstream], payload.count)
                XCTAssertEqual(writes[.downstream], payload.count)
            } else {
                XCTAssertGreaterThanOrEqual(writes[.upstream] ?? 0, payload.count / maxSegment, "1...\(maxSegment)")
            }
            relay.stop()
        }
    }

    func testADelayedSegmentationTakesAtLeastItsDelays() throws {
        let peer = try startEchoPeer()
        let relay = try startRelay(to: peer.port, fault: .segment(maxSegment: 100, delay: 0.01))
        let fd = try connect(relay)
        let payload = testPayload(1000)
        let start = FaultRelay.now
        try RawSocket.writeAll(fd, payload)
        XCTAssertEqual(try RawSocket.readExactly(fd, count: payload.count, timeout: 10), payload)
        // At least 10 segments each way, each after its 10 ms delay.
        XCTAssertGreaterThanOrEqual(FaultRelay.now - start, 0.2)
    }

    func testAStallHoldsTheBytesAfterItsCountForItsDuration() throws {
        let payload = testPayload(2000)
        let peer = try startSendingPeer(payload)
        let relay = try startRelay(to: peer.port, fault: .stall(after: 700, direction: .downstream, duration: 0.3))
        let fd = try connect(relay)
        XCTAssertEqual(try RawSocket.readExactly(fd, count: 700, timeout: 5), payload.prefix(700))
        let stalledAt = FaultRelay.now
        XCTAssertEqual(try RawSocket.readExactly(fd, count: 1300, timeout: 5), payload.dropFirst(700))
        XCTAssertGreaterThanOrEqual(FaultRelay.now - stalledAt, 0.25)
        XCTAssertEqual(relay.snapshot.faultsFired, 1)
    }

    func testCloseAfterNDownstreamSendsAFinAfterExactlyNBytes() throws {
        let peerSawEnd = Signal()
        let peer = try startSendingPeer(testPayload(2000), sawEnd: peerSawEnd)
        let relay = try startRelay(to: peer.port, fault: .close(after: 700, direction: .downstream))
        let fd = try connect(relay)
        let (data, end) = readUntilEnd(fd)
        XCTAssertEqual(data, testPayload(2000).prefix(700))
        XCTAssertEqual(end, 0, "a FIN, not errno \(end)")
        XCTAssertTrue(peerSawEnd.wait(timeout: 5), "the peer's connection was not closed")
        // The client's bytes after the FIN are dropped, and its close is a FIN as well.
        try RawSocket.writeAll(fd, Data(repeating: 1, count: 100))
        close(fd)
        XCTAssertTrue(relay.wait(timeout: 5) { $0.finished == 1 }, "\(relay.snapshot)")
    }

    func testResetAfterNDownstreamDeliversNBytesThenECONNRESET() throws {
        let peer = try startSendingPeer(testPayload(2000))
        let relay = try startRelay(to: peer.port, fault: .reset(after: 900, direction: .downstream))
        let fd = try connect(relay)
        XCTAssertTrue(relay.wait(timeout: 5) { $0.faultsFired == 1 })
        let (data, end) = readUntilEnd(fd)
        XCTAssertEqual(data, testPayload(2000).prefix(900))
        XCTAssertEqual(end, ECONNRESET)
    }

    func testResetAfterNUpstreamForwardsNBytesToThePeerThenResetsTheClient() throws {
        let received = Locked(Data())
        let peerSawEnd = Signal()
        let peer = try startSendingPeer(Data(), sawEnd: peerSawEnd, received: received)
        let relay = try startRelay(to: peer.port, fault: .reset(after: 300, direction: .upstream))
        let fd = try connect(relay)
        try RawSocket.writeAll(fd, testPayload(1000))
        let (data, end) = readUntilEnd(fd)
        XCTAssertEqual(data, Data())
        XCTAssertEqual(end, ECONNRESET)
        XCTAssertTrue(peerSawEnd.wait(timeout: 5))
        XCTAssertEqual(received.value, testPayload(1000).prefix(300))
    }

    func testAcceptAndNeverAnswerAcceptsAndStaysSilent() throws {
        let peer = try startEchoPeer()
        let relay = try startRelay(to: peer.port, fault: .acceptAndNeverAnswer)
        let fd = try connect(relay)
        try RawSocket.writeAll(fd, testPayload(10))
        XCTAssertTrue(relay.wait(timeout: 5) { $0.faultsFired == 1 })
        XCTAssertFalse(try RawSocket.waitReadable(fd, timeout: 0.3), "the relay answered")
        XCTAssertEqual(peer.acceptedCount, 0, "the relay connected to the peer")
    }

    func testStopReadingLetsTheClientsWritesFillTheBuffers() throws {
        let received = Locked(Data())
        let peer = try startSendingPeer(testPayload(100), received: received)
        let relay = try startRelay(to: peer.port, fault: .stopReading)
        let fd = try connect(relay)
        XCTAssertEqual(try RawSocket.readExactly(fd, count: 100, timeout: 5), testPayload(100), "the peer's bytes still flow")
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let chunk = [UInt8](repeating: 7, count: 65_536)
        var total = 0
        while total < 256 << 20 {
            let written = send(fd, chunk, chunk.count, Int32(MSG_NOSIGNAL))
            if written < 0 {
                XCTAssertEqual(errno, EAGAIN)
                break
            }
            total += written
        }
        XCTAssertGreaterThan(total, 0)
        XCTAssertLessThan(total, 256 << 20, "the writes never filled the buffers")
        XCTAssertNil(relay.snapshot.forwarded[.upstream], "the relay read the client's bytes")
        XCTAssertEqual(received.value, Data())
    }

    func testADeadPeerForwardsNBytesThenNothingWithTheConnectionOpen() throws {
        let peer = try startSendingPeer(testPayload(2000))
        let relay = try startRelay(to: peer.port, fault: .deadPeer(after: 500))
        let fd = try connect(relay)
        XCTAssertEqual(try RawSocket.readExactly(fd, count: 500, timeout: 5), testPayload(2000).prefix(500))
        XCTAssertTrue(relay.wait(timeout: 5) { $0.faultsFired == 1 })
        XCTAssertFalse(try RawSocket.waitReadable(fd, timeout: 0.3), "neither more bytes, nor a FIN or a reset")
    }

    func testTLSTruncationCutsAtARecordBoundaryWithAFin() throws {
        // Three application-data records of 100 bytes each, written in 7-byte pieces so that records
        // arrive split.
        var records = Data()
        for index in 0..<3 {
            records.append(contentsOf: [23, 3, 3, 0, 100])
            records.append(testPayload(100, seed: UInt8(index)))
        }
        let peer = try startRawServer { [records] connection in
            var offset = 0
            while offset < records.count {
                let end = min(records.count, offset + 7)
                try? connection.write(records.subdata(in: offset..<end))
                offset = end
            }
            _ = try? connection.readToEOF(timeout: 10)
        }
        let relay = try startRelay(to: peer.port, fault: .truncateTLS(afterRecordBytes: 150))
        let fd = try connect(relay)
        let (data, end) = readUntilEnd(fd)
        XCTAssertEqual(data, records.prefix(210), "two whole records, then the cut")
        XCTAssertEqual(end, 0)
    }

    func testTLSTruncationAfterAPlainPrefixCountsRecordsFromItsEnd() throws {
        // A proxy's 12-byte reply, then three records of 100 bytes, all in 7-byte pieces.
        var bytes = testPayload(12, seed: 9)
        for index in 0..<3 {
            bytes.append(contentsOf: [23, 3, 3, 0, 100])
            bytes.append(testPayload(100, seed: UInt8(index)))
        }
        let peer = try startRawServer { [bytes] connection in
            var offset = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + 7)
                try? connection.write(bytes.subdata(in: offset..<end))
                offset = end
            }
            _ = try? connection.readToEOF(timeout: 10)
        }
        let relay = try startRelay(to: peer.port, fault: .truncateTLS(afterRecordBytes: 150, plainPrefix: 12))
        let fd = try connect(relay)
        let (data, end) = readUntilEnd(fd)
        XCTAssertEqual(data, bytes.prefix(12 + 210), "the prefix, two whole records, then the cut")
        XCTAssertEqual(end, 0)
    }

    func testABandwidthLimitPacesTheBytesWithItsBucket() throws {
        // 60 000 bytes at 100 000 B/s through a 10 000-byte bucket: the first 10 000 at once, the rest
        // at the rate, so the echo takes at least 0.5 s (the bucket refills on the way back too, so not
        // twice that), each write at most the burst; byte for byte.
        let peer = try startEchoPeer()
        let payload = testPayload(60_000)
        let relay = try startRelay(to: peer.port, fault: .bandwidth(bytesPerSecond: 100_000, burst: 10_000))
        let fd = try connect(relay)
        let started = FaultRelay.now
        try RawSocket.writeAll(fd, payload)
        XCTAssertEqual(try RawSocket.readExactly(fd, count: payload.count, timeout: 10), payload)
        let elapsed = FaultRelay.now - started
        XCTAssertGreaterThanOrEqual(elapsed, 0.5, "faster than the limit")
        XCTAssertLessThan(elapsed, 5, "far slower than the limit")
        // The relay counts a write after it returns, which may be after the client has the bytes.
        XCTAssertTrue(relay.wait(timeout: 5) { $0.forwarded[.downstream] == payload.count }, "\(relay.snapshot)")
        let counters = relay.snapshot
        XCTAssertEqual(counters.forwarded[.upstream], payload.count)
        XCTAssertGreaterThanOrEqual(counters.writes[.upstream] ?? 0, 6, "writes larger than the burst")
        XCTAssertGreaterThanOrEqual(counters.writes[.downstream] ?? 0, 6, "writes larger than the burst")
    }
}
