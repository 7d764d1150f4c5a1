#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Read-ahead (Connection+IO.swift): a read of a plain TCP socket that leaves bytes in the kernel is
/// followed at once by another `hasBytesAvailable`, known from the read's own `TCP_INQ` count instead of
/// an `epoll_wait`, at most `Reactor.readAheadsPerRound` times a round; and only on sockets the pair
/// closes itself.
final class ReadAheadTests: SocketStreamsTestCase {
    private let readSize = 1024
    private let total = 48 * 1024

    /// Every event of the test in order: a read's callout (`true`) or a marker posted to the reactor
    /// from that callout (`false`). Touched only on the test thread, whose run loop delivers both.
    // `@unchecked Sendable`: only for the marker closure `Reactor.post` takes; every field is owned by
    // the test thread, whose run loop runs both the callouts and the markers (the input is scheduled there).
    private final class Reader: NSObject, StreamDelegate, @unchecked Sendable {
        var log: [Bool] = []
        var bytes = 0
        var ended = false
        var failed: Error?
        let size: Int
        /// Called in the first `hasBytesAvailable`, before it reads: waits until every byte has come.
        var beforeFirstRead: (() -> Void)?

        init(size: Int) { self.size = size }

        func stream(_ stream: Stream, handle event: Stream.Event) {
            guard let input = stream as? SocketInputStream else { return }
            switch event {
            case .hasBytesAvailable:
                beforeFirstRead?()
                beforeFirstRead = nil
                var buffer = [UInt8](repeating: 0, count: size)
                let count = input.read(&buffer, maxLength: size)
                guard count > 0 else { return }
                bytes += count
                log.append(true)
                // A marker through the reactor's own queue: it runs before the reactor's next epoll
                // round, after whatever this round still delivers.
                let connection = input.connection
                let reactor = connection.lock.withLock { connection.halves[.input].reactors.first }
                reactor?.post { [self] in log.append(false) }
            case .endEncountered:
                ended = true
            case .errorOccurred:
                failed = stream.streamError
            default:
                break
            }
        }
    }

    /// A `.host` pair connected to a raw server that has sent `total` bytes, all of them in the client's
    /// kernel buffer before the first read.
    private func readEverything(size: Int) throws -> (reader: Reader, counts: Int32?) {
        let listener = try RawSocket.listener(family: .v4)
        defer { close(listener) }
        let pair = createStreamPair(host: "127.0.0.1", port: RawSocket.boundPort(listener))
        closeAfterTest(pair)
        let reader = Reader(size: size)
        pair.input.delegate = reader
        pair.input.schedule(in: .current, forMode: .default)
        pair.input.open()
        pair.output.open()
        let server = try XCTUnwrap(try RawSocket.accept(listener, timeout: shortTimeout), "no connection came")
        defer { close(server) }
        try RawSocket.writeAll(server, Data(repeating: 0x42, count: total))
        reader.beforeFirstRead = {
            // Acknowledged, so in the client's receive queue: nothing the server holds any more.
            var queued: Int32 = 1
            let deadline = Date().addingTimeInterval(self.shortTimeout)
            while Date() < deadline, ioctl(server, UInt(TIOCOUTQ), &queued) == 0, queued > 0 { sched_yield() }
            XCTAssertEqual(queued, 0, "the server's bytes did not reach the client")
        }
        XCTAssertTrue(runUntil(timeout: shortTimeout) { reader.bytes == self.total }, "read \(reader.bytes) of \(total)")
        // Asked while the pair is open: at its end of stream the pair lets go of the socket.
        let counts = RawSocket.intOption(try XCTUnwrap(nativeHandle(of: pair.input)), level: Int32(IPPROTO_TCP), name: TCP_INQ)
        shutdown(server, Int32(SHUT_WR))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { reader.ended }, "no end of stream after the last byte")
        XCTAssertNil(reader.failed)
        XCTAssertEqual(reader.bytes, total)
        return (reader, counts)
    }

    func testAReadThatLeavesBytesInTheKernelIsFollowedAtOnceByAnother() throws {
        let (reader, counts) = try readEverything(size: readSize)
        // The first read filled its buffer: the socket counts its input from then on.
        XCTAssertEqual(counts, 1)
        // Runs of reads with no marker between them: the reads after the first came straight after the
        // one before (no epoll round, which would have run its marker first), but never more than a
        // round's read-aheads in a row.
        var runs: [Int] = []
        var run = 0
        for entry in reader.log {
            if entry {
                run += 1
            } else if run > 0 {
                runs.append(run)
                run = 0
            }
        }
        if run > 0 { runs.append(run) }
        XCTAssertEqual(runs.first, 1, "the first read, which turns the count on, knows nothing of what is left: \(runs)")
        XCTAssertGreaterThan(runs.max() ?? 0, 1, "every read waited for an epoll round: \(runs)")
        XCTAssertLessThanOrEqual(runs.max() ?? 0, Reactor.readAheadsPerRound + 1, "a round read ahead past its budget: \(runs)")
        XCTAssertEqual(reader.log.filter { $0 }.count, total / readSize)
    }

    func testReadsThatNeverFillTheirBufferLeaveTheSocketAlone() throws {
        // A read larger than everything sent: never full, so no `setsockopt`.
        let (reader, counts) = try readEverything(size: total * 2)
        XCTAssertEqual(reader.log.filter { $0 }.count, 1)
        XCTAssertEqual(counts, 0)
    }

    func testSmallReadsOfExactSizeLeaveTheSocketAlone() throws {
        // Every read fills its buffer, but a buffer under 1 KiB is a message's exact size (a connect's
        // byte, a ping-pong's 64), not a stream's: no `setsockopt`, and every read a plain `recv`.
        let (reader, counts) = try readEverything(size: 64)
        XCTAssertEqual(counts, 0)
        XCTAssertEqual(reader.log.filter { $0 }.count, total / 64)
    }

    func testAPollingReaderLeavesTheSocketAloneUntilItsInputIsScheduled() throws {
        let listener = try RawSocket.listener(family: .v4)
        defer { close(listener) }
        let pair = createStreamPair(host: "127.0.0.1", port: RawSocket.boundPort(listener))
        closeAfterTest(pair)
        pair.input.open()
        pair.output.open()
        let server = try XCTUnwrap(try RawSocket.accept(listener, timeout: shortTimeout), "no connection came")
        defer { close(server) }
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        // Unscheduled: blocking reads that fill 1 KiB buffers, and no `setsockopt`. Read-ahead signals
        // events, which nobody would get: the count would only make every read a `recvmsg`.
        try RawSocket.writeAll(server, Data(repeating: 0x42, count: 4 * readSize))
        var buffer = [UInt8](repeating: 0, count: readSize)
        for _ in 0..<4 { XCTAssertEqual(pair.input.read(&buffer, maxLength: readSize), readSize) }
        XCTAssertEqual(RawSocket.intOption(fd, level: Int32(IPPROTO_TCP), name: TCP_INQ), 0)
        // Still undecided: once scheduled, the first full read turns it on.
        let reader = Reader(size: readSize)
        pair.input.delegate = reader
        pair.input.schedule(in: .current, forMode: .default)
        try RawSocket.writeAll(server, Data(repeating: 0x42, count: 4 * readSize))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { reader.bytes == 4 * self.readSize }, "read \(reader.bytes)")
        XCTAssertEqual(RawSocket.intOption(fd, level: Int32(IPPROTO_TCP), name: TCP_INQ), 1)
    }

    func testTheInputCountSharesItsByteWithoutDisturbingTheFlags() {
        var half = HalfState()
        XCTAssertEqual(half.inputCount, .undecided)
        for count in [HalfState.InputCount.on, .off, .undecided, .on] {
            half.gone = true
            half.spaceConfirmed = true
            half.inputCount = count
            XCTAssertEqual(half.inputCount, count)
            XCTAssertTrue(half.gone)
            XCTAssertTrue(half.spaceConfirmed)
            XCTAssertFalse(half.suppressed)
            XCTAssertFalse(half.watchingSpace)
            half.gone = false
            half.spaceConfirmed = false
            XCTAssertEqual(half.inputCount, count)
        }
        XCTAssertLessThanOrEqual(MemoryLayout<HalfState>.size, 32)
    }

    func testALentSocketIsNeverToldToCount() throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        defer {
            close(server)
            close(client)
        }
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        let reader = Reader(size: readSize)
        pair.input.delegate = reader
        pair.input.schedule(in: .current, forMode: .default)
        pair.input.open()
        try RawSocket.writeAll(server, Data(repeating: 0x42, count: 4 * readSize))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { reader.bytes == 4 * self.readSize }, "read \(reader.bytes)")
        // The client's fd, which it keeps after the pair: its own recvmsg must not start getting
        // control messages it never asked for.
        XCTAssertEqual(RawSocket.intOption(client, level: Int32(IPPROTO_TCP), name: TCP_INQ), 0)
    }
}
