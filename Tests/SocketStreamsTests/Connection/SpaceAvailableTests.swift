#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// `hasSpaceAvailable` answers from what the library last learnt about the socket until the next
/// write (no poll per call); these fill a real TCP socket whose peer does not read, and check that
/// every answer still matches the kernel: true never leads to a write that blocks, and false turns
/// true again once the peer reads.
final class SpaceAvailableTests: SocketStreamsTestCase {
    private let chunk = [UInt8](repeating: 0x5A, count: 16 * 1024)
    /// More than any send buffer plus receive buffer loopback autotunes to here (a few MiB).
    private let writeLimit = 4_096

    /// Reads everything `fd` holds until `count` bytes have come, or fails.
    private func drain(_ fd: Int32, count: Int) throws {
        var total = 0
        while total < count {
            let data = try RawSocket.readExactly(fd, count: min(count - total, 1 << 20), timeout: shortTimeout)
            total += data.count
        }
    }

    func testUnscheduledWritesStopWhenTheSocketIsFullAndResumeWhenThePeerReads() throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        defer { close(server) }
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        XCTAssertTrue(pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket))
        let output = UncheckedBox(pair.output)
        pair.input.open()
        pair.output.open()

        // Each `true` must be followed by a write that does not block: a stale answer would keep
        // this loop writing until send blocks, and the deadline would catch it.
        let filled = callWithDeadline(20) { () -> (writes: Int, bytes: Int, stillAnswersTrue: Bool) in
            var writes = 0
            var bytes = 0
            while output.value.hasSpaceAvailable && writes < self.writeLimit {
                let written = self.chunk.withUnsafeBufferPointer { output.value.write($0.baseAddress!, maxLength: $0.count) }
                guard written > 0 else { break }
                writes += 1
                bytes += written
            }
            return (writes, bytes, output.value.hasSpaceAvailable)
        }
        let result = try XCTUnwrap(filled, "a write after hasSpaceAvailable == true blocked")
        XCTAssertLessThan(result.writes, writeLimit, "hasSpaceAvailable stayed true after \(result.bytes) bytes nobody read")
        XCTAssertGreaterThan(result.writes, 1)
        XCTAssertFalse(result.stillAnswersTrue, "asked twice, the second answer differed")

        try drain(server, count: result.bytes)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { pair.output.hasSpaceAvailable },
            "hasSpaceAvailable stayed false after the peer read everything")
        XCTAssertEqual(pair.output.streamStatus, .open)
    }

    func testScheduledWriterGetsNoSpaceEventOnceTheSocketIsFullAndOneWhenThePeerReads() throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        defer { close(server) }
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        XCTAssertTrue(pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket))

        let writer = ChunkWriter(sizes: [chunk.count], limit: writeLimit)
        pair.output.delegate = writer
        pair.output.schedule(in: .current, forMode: .default)
        pair.output.open()
        // Every hasSpaceAvailable gets a write; the run loop settles once the socket is full. A write
        // that blocked would stop this thread for good (the peer never reads): the watchdog then
        // reads on the peer's side, so the test ends, and the writer reports the blocked write.
        let settled = Signal()
        let watchdog = Thread {
            if !settled.wait(timeout: 20) { _ = try? RawSocket.readExactly(server, count: 64 << 20, timeout: 5) }
        }
        watchdog.start()
        settle()
        settled.raise()
        XCTAssertEqual(writer.slowestWrite < 5, true, "a write in a hasSpaceAvailable callout blocked for \(writer.slowestWrite) s")
        XCTAssertLessThan(writer.writes, writeLimit, "hasSpaceAvailable kept coming after \(writer.bytes) bytes nobody read")
        XCTAssertGreaterThan(writer.writes, 1)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertNil(writer.failure)

        let written = writer.bytes
        writer.limit = writer.writes  // no more writes: the next event is only recorded
        try drain(server, count: written)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { writer.events > writer.writes },
            "no hasSpaceAvailable after the peer read everything")
        // Not written: no second event, and the fd leaves epoll's write interest (the run loop
        // settles instead of spinning on a writable socket).
        settle()
        XCTAssertEqual(writer.events, writer.writes + 1)
        XCTAssertTrue(pair.output.hasSpaceAvailable)
        // A write now, with the socket writable, is followed by a hasSpaceAvailable again.
        let byte: [UInt8] = [1]
        XCTAssertEqual(pair.output.write(byte, maxLength: 1), 1)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { writer.events == writer.writes + 2 })
    }
}
