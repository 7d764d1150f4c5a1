#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest
import TestPeers

/// Faults on real loopback sockets, each with its defined outcome: a connect timeout against a
/// blackhole, resets during connect and in mid-transfer, a peer that stops reading, one-byte reads,
/// and a name lookup that takes its time. Nothing waits on a sleep: the tests wait for the peers'
/// signals, for kernel state (poll, FIONREAD) or for delegate events, each with a deadline.
final class FaultTests: SocketStreamsTestCase {

    // MARK: 1. connect timeout against a blackhole

    /// connectTimeoutKey with the real clock, on a pair scheduled on this run loop: the connect to a
    /// listener whose backlog is full hangs; the pair fails with ETIMEDOUT once the deadline has
    /// passed (never before it), and both streams end in `.error` with the same error.
    func testConnectTimeoutToABlackholeFailsBothStreamsAtTheDeadlineForADelegatePair() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        defer { withExtendedLifetime(blackhole) {} }
        let handlesBefore = SocketHandle.openCount
        let timeout = 0.5
        let pair = makePair(port: blackhole.port)
        XCTAssertTrue(pair.input.setProperty(timeout, forKey: .connectTimeoutKey))
        let recorder = DelegateRecorder()
        let failedAt = Locked<Double?>(nil)
        recorder.onEvent = { _, event in
            if event == .errorOccurred, failedAt.value == nil { failedAt.value = monotonicSeconds() }
        }
        let start = monotonicSeconds()
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: timeout + 5) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "no timeout error; trace: \(recorder.trace)")
        let elapsed = try XCTUnwrap(failedAt.value) - start
        XCTAssertGreaterThanOrEqual(elapsed, timeout, "the timeout fired before the deadline")
        XCTAssertLessThan(elapsed, timeout + 1.5, "the timeout fired long after the deadline")
        settle()
        let snapshot = recorder.snapshot
        XCTAssertEqual(snapshot.entries, [.event(.input, .errorOccurred), .event(.output, .errorOccurred)], recorder.trace)
        try assertSameTerminalError(pair, code: ETIMEDOUT)
        XCTAssertEqual(snapshot.errors[.input], snapshot.errors[.output])
        XCTAssertEqual(snapshot.errors[.input]?.code, Int(ETIMEDOUT))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "the attempt's socket outlived the timeout: \(SocketHandle.openCount - handlesBefore) left")
    }

    /// The same for a polling pair: nothing is scheduled, the client only asks for the statuses
    /// (which moves the open to the stream thread, where the deadline fires).
    func testConnectTimeoutToABlackholeFailsBothStreamsAtTheDeadlineForAPollingPair() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        defer { withExtendedLifetime(blackhole) {} }
        let handlesBefore = SocketHandle.openCount
        let timeout = 0.5
        let pair = makePair(port: blackhole.port)
        XCTAssertTrue(pair.output.setProperty(timeout, forKey: .connectTimeoutKey))
        let outcome = callWithDeadline(timeout + 5) { () -> Double in
            let start = monotonicSeconds()
            pair.input.open()
            pair.output.open()
            while pair.input.streamStatus == .opening || pair.output.streamStatus == .opening {
                sched_yield()
            }
            return monotonicSeconds() - start
        }
        let elapsed = try XCTUnwrap(outcome, "still opening \(timeout + 5) s after a \(timeout) s timeout")
        XCTAssertGreaterThanOrEqual(elapsed, timeout, "the timeout fired before the deadline")
        XCTAssertLessThan(elapsed, timeout + 1.5, "the timeout fired long after the deadline")
        try assertSameTerminalError(pair, code: ETIMEDOUT)
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), -1)
        XCTAssertEqual(pair.output.write(&byte, maxLength: 1), -1)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "the attempt's socket outlived the timeout: \(SocketHandle.openCount - handlesBefore) left")
    }

    // MARK: 2. resets

    /// The peer accepts and resets at once, while the connect's completion waits on this run loop
    /// (which the test does not run until the reset has been sent, so the connect attempt usually
    /// learns of it from SO_ERROR; if the completion got in first, a read meets it): both streams fail
    /// with ECONNRESET, neither ends, and nothing is read as end of stream.
    func testResetRightAfterAcceptFailsBothStreamsOfADelegatePair() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        let reset = Signal()
        let server = try startRawServer { connection in
            try? connection.resetOnClose()
            connection.close()
            reset.raise()
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)  // reads on hasBytesAvailable; nothing to write
        XCTAssertTrue(reset.wait(timeout: shortTimeout), "the peer never accepted")

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "no error after the reset; trace: \(recorder.trace)")
        settle()
        let snapshot = recorder.snapshot
        XCTAssertFalse(snapshot.has(.endEncountered, on: .input), "a reset is not an end: \(recorder.trace)")
        XCTAssertFalse(snapshot.entries.contains(.read(0)), "read returned 0 for a reset: \(recorder.trace)")
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .input), 1, recorder.trace)
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .output), 1, recorder.trace)
        try assertSameTerminalError(pair, code: ECONNRESET)
    }

    /// The same once both streams have opened: the reset arrives before the client's first read or
    /// write, and is reported on both streams as ECONNRESET.
    func testResetAfterOpenBeforeTheFirstTransferFailsBothStreams() throws {
        let resetNow = Signal()
        let reset = Signal()
        let server = try startRawServer { connection in
            guard resetNow.wait(timeout: 10) else { return }
            try? connection.resetOnClose()
            connection.close()
            reset.raise()
        }
        let pair = makePair(port: server.port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.openCompleted, on: .input) && recorder.has(.hasSpaceAvailable, on: .output)
            }, recorder.trace)
        settle()
        XCTAssertEqual(
            recorder.snapshot.entries,
            [
                .event(.input, .openCompleted), .event(.output, .openCompleted),
                .event(.output, .hasSpaceAvailable),
            ], recorder.trace)
        resetNow.raise()
        XCTAssertTrue(reset.wait(timeout: shortTimeout))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, "no error after the reset; trace: \(recorder.trace)")
        settle()
        let snapshot = recorder.snapshot
        XCTAssertFalse(snapshot.has(.endEncountered, on: .input), recorder.trace)
        XCTAssertFalse(snapshot.entries.contains(.read(0)), recorder.trace)
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .input), 1, recorder.trace)
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .output), 1, recorder.trace)
        try assertSameTerminalError(pair, code: ECONNRESET)
    }

    /// A polling pair whose peer resets right after accepting: the first read returns -1
    /// (ECONNRESET, not 0), or the first write returns -1 (ECONNRESET or EPIPE, without SIGPIPE), and
    /// both streams end in `.error`.
    func testResetRightAfterAcceptFailsThePollingClientsFirstReadOrWrite() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        for readFirst in [true, false] {
            let reset = Signal()
            let server = try startRawServer { connection in
                try? connection.resetOnClose()
                connection.close()
                reset.raise()
            }
            let pair = makePair(port: server.port)
            let outcome = callWithDeadline(10) { () -> (first: Int, other: Int)? in
                pair.input.open()
                pair.output.open()
                guard reset.wait(timeout: 5) else { return nil }
                var byte: UInt8 = 0x42
                if readFirst {
                    return (pair.input.read(&byte, maxLength: 1), pair.output.write(&byte, maxLength: 1))
                }
                return (pair.output.write(&byte, maxLength: 1), pair.input.read(&byte, maxLength: 1))
            }
            let results = try XCTUnwrap(try XCTUnwrap(outcome, "blocked after the reset"), "the peer never accepted")
            XCTAssertEqual(results.first, -1, "readFirst \(readFirst)")
            XCTAssertEqual(results.other, -1, "readFirst \(readFirst)")
            XCTAssertEqual(pair.input.streamStatus, .error)
            XCTAssertEqual(pair.output.streamStatus, .error)
            assertPOSIXError(pair.input.streamError, readFirst ? [ECONNRESET] : [ECONNRESET, EPIPE])
            XCTAssertEqual(pair.input.streamError as NSError?, pair.output.streamError as NSError?)
        }
    }

    /// Peer resets while we download: the peer streams until told to reset; by then bytes are waiting
    /// unread in our receive buffer. Every byte that reached us before the reset is still read, in
    /// order, and then the input fails with ECONNRESET (never end of stream); the output fails too.
    func testResetWhileDownloadingDeliversEveryByteReceivedThenECONNRESET() throws {
        let pattern = Pattern()
        let wake = try Wakeup()
        addCleanup { wake.close() }
        let serverResult = Locked<(sent: Int, unacked: Int)?>(nil)
        let serverDone = Signal()
        let server = try startRawServer { connection in
            var sent = 0
            while true {
                var fds = [
                    pollfd(fd: connection.fd, events: Int16(POLLOUT), revents: 0),
                    pollfd(fd: wake.fd, events: Int16(POLLIN), revents: 0),
                ]
                guard poll(&fds, 2, 10_000) > 0, fds[1].revents == 0 else { break }
                let chunk = pattern.chunk(at: sent)
                let count = send(connection.fd, chunk.baseAddress, chunk.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                if count > 0 { sent += count } else if errno != EAGAIN && errno != EINTR { break }
            }
            serverResult.value = (sent, unsentBytes(connection.fd))
            try? connection.resetOnClose()
            connection.close()
            serverDone.raise()
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder()
        recorder.readChunk = 64 * 1024
        _ = startRecorder(pair, recorder: recorder)

        // Downloading...
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.received.count >= 1 << 20 },
            "download stalled at \(recorder.received.count) bytes")
        // ...and while this run loop does not run, bytes pile up unread; then the peer resets.
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertTrue(waitForKernelBytes(fd, atLeast: 4096), "no unread bytes before the reset: \(Posix.bytesAvailable(fd))")
        wake.raise()
        XCTAssertTrue(serverDone.wait(timeout: shortTimeout), "the peer did not reset")
        XCTAssertTrue(waitUntilKernel { hasHungUp(fd) }, "the reset never reached our socket")
        let alreadyRead = recorder.received.count
        let unread = Posix.bytesAvailable(fd)
        let expected = alreadyRead + unread
        let (sent, unacked) = try XCTUnwrap(serverResult.value)
        XCTAssertGreaterThan(unread, 0, "nothing was left unread when the reset came")
        XCTAssertGreaterThanOrEqual(expected, sent - unacked, "bytes the peer saw acknowledged are missing")
        XCTAssertLessThanOrEqual(expected, sent)

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) },
            "no error after the reset; received \(recorder.received.count) of \(expected)")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .output) },
            "the error must reach the output stream too")
        settle()
        let snapshot = recorder.snapshot
        XCTAssertEqual(snapshot.received.count, expected, "bytes received before the reset were lost")
        XCTAssertTrue(snapshot.received.withUnsafeBytes { pattern.matches($0, at: 0) }, "bytes out of order or corrupted")
        XCTAssertFalse(snapshot.has(.endEncountered, on: .input), "a reset is not an end")
        XCTAssertFalse(snapshot.entries.contains(.read(0)), "read returned 0 for a reset")
        XCTAssertEqual(snapshot.count(.errorOccurred, on: .input), 1)
        let lastRead = snapshot.entries.last { if case .read = $0 { return true } else { return false } }
        XCTAssertEqual(lastRead, .read(-1), "the last read must be the one that met the reset")
        try assertSameTerminalError(pair, code: ECONNRESET)
    }

    /// Peer resets while we upload with a delegate that writes on every hasSpaceAvailable: the peer
    /// reads 1 MiB, stops reading until our send buffer is full (the output waits for space), then
    /// resets. The output fails with ECONNRESET or EPIPE (a write returns -1, or errorOccurred comes
    /// first), the input fails too, no SIGPIPE, and what the peer read is the upload's start, intact.
    func testResetWhileUploadingWithADelegateFailsTheWriteWithoutSIGPIPE() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        let pattern = Pattern()
        let (readEnough, resetNow, serverDone) = (Signal(), Signal(), Signal())
        let peerIntact = Locked(false)
        let server = try startRawServer { connection in
            let data = (try? connection.readExactly(1 << 20)) ?? Data()
            peerIntact.value = data.count == 1 << 20 && data.withUnsafeBytes { pattern.matches($0, at: 0) }
            readEnough.raise()
            guard resetNow.wait(timeout: 10) else { return }
            try? connection.resetOnClose()
            connection.close()
            serverDone.raise()
        }
        let pair = makePair(port: server.port)
        let writer = PatternWriter(pattern: pattern, total: 1 << 30)
        writer.start(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { readEnough.wait(timeout: 0) }, "the peer never read 1 MiB")
        let fd = try XCTUnwrap(nativeHandle(of: pair.output))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { !isWritable(fd) }, "our send buffer never filled")
        settle()
        resetNow.raise()
        XCTAssertTrue(serverDone.wait(timeout: shortTimeout))

        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                writer.count(.errorOccurred, on: .output) > 0 && writer.count(.errorOccurred, on: .input) > 0
            }, "no error after the reset: \(writer.summary)")
        settle()
        XCTAssertTrue(peerIntact.value, "the peer read something other than the upload's first MiB")
        XCTAssertTrue(writer.failedWrites.allSatisfy { $0 == -1 }, "a write returned 0: \(writer.summary)")
        XCTAssertLessThanOrEqual(writer.failedWrites.count, 1, writer.summary)
        XCTAssertEqual(writer.count(.errorOccurred, on: .output), 1, writer.summary)
        XCTAssertEqual(writer.count(.endEncountered, on: .input), 0, writer.summary)
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual(pair.input.streamStatus, .error)
        assertPOSIXError(pair.output.streamError, [ECONNRESET, EPIPE])
        XCTAssertEqual(pair.input.streamError as NSError?, pair.output.streamError as NSError?)
        var byte: UInt8 = 0
        XCTAssertEqual(pair.output.write(&byte, maxLength: 1), -1)
    }

    /// The same for a blocking writer: the write blocked on a full send buffer returns -1 when the
    /// reset arrives (ECONNRESET or EPIPE, no SIGPIPE), and both streams end in `.error`.
    func testResetWhileUploadingFailsABlockedWriteWithoutSIGPIPE() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        let pattern = Pattern()
        let (readEnough, resetNow) = (Signal(), Signal())
        let server = try startRawServer { connection in
            _ = try? connection.readExactly(1 << 20)
            readEnough.raise()
            guard resetNow.wait(timeout: 10) else { return }
            try? connection.resetOnClose()
        }
        let pair = makePair(port: server.port)
        let clientFD = Locked<Int32?>(nil)
        let writerDone = Signal()
        let writerResult = Locked<(last: Int, written: Int)?>(nil)
        let output = UncheckedBox(pair.output)
        let input = UncheckedBox(pair.input)
        let writerThread = Thread {
            input.value.open()
            output.value.open()
            var written = 0
            while true {
                let chunk = pattern.chunk(at: written)
                let count = output.value.write(chunk.baseAddress!.assumingMemoryBound(to: UInt8.self), maxLength: chunk.count)
                if count <= 0 {
                    writerResult.value = (count, written)
                    break
                }
                if clientFD.value == nil { clientFD.value = nativeHandle(of: output.value) }
                written += count
            }
            writerDone.raise()
        }
        writerThread.start()
        addCleanup {
            resetNow.raise()
            pair.output.close()
            if writerResult.value == nil { _ = writerDone.wait(timeout: 5) }
        }
        XCTAssertTrue(readEnough.wait(timeout: shortTimeout), "the peer never read 1 MiB")
        let fd = try XCTUnwrap(clientFD.value)
        XCTAssertTrue(waitUntilKernel { !isWritable(fd) }, "our send buffer never filled")
        XCTAssertFalse(writerDone.wait(timeout: 0), "the writer stopped before the reset: \(String(describing: writerResult.value))")
        resetNow.raise()
        XCTAssertTrue(writerDone.wait(timeout: shortTimeout), "the blocked write did not return after the reset")
        let (last, written) = try XCTUnwrap(writerResult.value)
        XCTAssertEqual(last, -1)
        XCTAssertGreaterThan(written, 1 << 20, "the writer wrote less than the peer read")
        XCTAssertEqual(pair.output.streamStatus, .error)
        XCTAssertEqual(pair.input.streamStatus, .error)
        assertPOSIXError(pair.output.streamError, [ECONNRESET, EPIPE])
        XCTAssertEqual(pair.input.streamError as NSError?, pair.output.streamError as NSError?)
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), -1)
    }

    // MARK: 3. a peer that does not read

    /// 100 MiB to a peer that does not read at first, by a delegate that writes on every
    /// hasSpaceAvailable: once the socket buffers are full the events stop (and the process idles),
    /// memory stays flat (the library buffers nothing), and when the peer reads, all 100 MiB arrive
    /// intact and in order.
    func testPeerThatStopsReadingStopsHasSpaceAvailableAndMemoryStaysFlat() throws {
        let total = 100 << 20
        let pattern = Pattern()
        let readBuffer = UncheckedBox(UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16))
        readBuffer.value.initializeMemory(as: UInt8.self, repeating: 0)
        addCleanup { readBuffer.value.deallocate() }
        let startReading = Signal()
        let peerResult = Locked<(count: Int, intact: Bool, eof: Bool)?>(nil)
        let peerFD = Locked<Int32?>(nil)
        let server = try startRawServer { connection in
            peerFD.value = connection.fd
            guard startReading.wait(timeout: 30) else { return }
            var count = 0
            var intact = true
            var eof = false
            let buffer = readBuffer.value
            while true {
                guard (try? RawSocket.waitReadable(connection.fd, timeout: 10)) == true else { break }
                let n = recv(connection.fd, buffer.baseAddress, buffer.count, 0)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 {
                    eof = n == 0
                    break
                }
                if intact { intact = pattern.matches(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), at: count) }
                count += n
            }
            peerResult.value = (count, intact, eof)
        }
        let runStart = monotonicSeconds()
        let pair = makePair(port: server.port)
        let writer = PatternWriter(pattern: pattern, total: total)
        writer.closesWhenDone = true
        let baseline = residentBytes()
        var peak = baseline
        writer.onSpace = { [unowned writer] in
            if writer.count(.hasSpaceAvailable, on: .output) % 32 == 0 { peak = max(peak, residentBytes()) }
        }
        writer.start(pair)

        // The peer does not read: the writes fill the socket buffers, then stop. Delayed ACKs may free a
        // little space just after the buffer first fills (the kernel's doing: each such event is a write
        // that moves bytes), so "stopped" is a quarter second without an event.
        XCTAssertTrue(runUntil(timeout: shortTimeout) { nativeHandle(of: pair.output) != nil }, "never connected")
        let fd = try XCTUnwrap(nativeHandle(of: pair.output))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { !isWritable(fd) }, "the send buffer never filled: \(writer.summary)")
        var quiet = false
        for _ in 0..<20 where !quiet {
            let before = writer.count(.hasSpaceAvailable, on: .output)
            runFor(0.25)
            quiet = writer.count(.hasSpaceAvailable, on: .output) == before
        }
        XCTAssertTrue(quiet, "hasSpaceAvailable kept coming for 5 s while the peer did not read: \(writer.summary)")
        let stalledAt = writer.written
        let (events, writes) = (writer.count(.hasSpaceAvailable, on: .output), writer.writeCalls)
        let cpuBefore = processCPUSeconds()
        runFor(0.5)
        let cpuIdle = processCPUSeconds() - cpuBefore
        settle()
        XCTAssertEqual(writer.count(.hasSpaceAvailable, on: .output), events, "hasSpaceAvailable kept coming: \(writer.summary)")
        XCTAssertEqual(writer.writeCalls, writes, "writes kept coming")
        XCTAssertEqual(writer.written, stalledAt)
        XCTAssertLessThan(cpuIdle, 0.2, "the process was busy while the peer did not read: \(cpuIdle) s of CPU in 0.5 s")
        // Every event was used by a write that moved bytes, and every byte written is in the kernel's
        // buffers (our send queue, the peer's receive queue): the library holds none.
        XCTAssertEqual(writes, events)
        XCTAssertTrue(writer.failedWrites.isEmpty, writer.summary)
        let peer = try XCTUnwrap(peerFD.value)
        let (queued, peerQueued) = (unsentBytes(fd), Posix.bytesAvailable(peer))
        XCTAssertLessThanOrEqual(stalledAt, queued + peerQueued, "bytes written but in neither socket buffer")
        XCTAssertLessThan(stalledAt, total / 4, "the library took far more than the socket buffers hold")
        let stalledRSS = residentBytes()
        peak = max(peak, stalledRSS)

        // The peer reads: everything arrives.
        startReading.raise()
        XCTAssertTrue(runUntil(timeout: 20) { peerResult.value != nil }, "the peer did not finish: \(writer.summary)")
        let runTime = monotonicSeconds() - runStart
        XCTAssertLessThan(runTime, 10, "100 MiB over loopback took \(runTime) s")
        peak = max(peak, residentBytes())
        let result = try XCTUnwrap(peerResult.value)
        XCTAssertEqual(writer.written, total, writer.summary)
        XCTAssertEqual(result.count, total, "the peer received \(result.count) of \(total)")
        XCTAssertTrue(result.intact, "the bytes arrived out of order or corrupted")
        XCTAssertTrue(result.eof, "the peer saw no end of stream after the output was closed")
        XCTAssertTrue(writer.failedWrites.isEmpty, writer.summary)
        XCTAssertEqual(writer.count(.errorOccurred, on: .output), 0, writer.summary)
        let growth = Double(peak - baseline) / Double(1 << 20)
        XCTAssertLessThan(growth, 8, "RSS grew by \(growth) MiB while writing 100 MiB")
    }

    // MARK: 4. one-byte reads

    /// A 256 KiB download (several socket buffers) read one byte per hasBytesAvailable: every byte arrives, in order, one read
    /// each, then end of stream: one read returns 0 and endEncountered comes exactly once.
    func testOneByteReadsOnEveryHasBytesAvailableDeliverEveryByteThenOneEnd() throws {
        let payload = testPayload(256 << 10, seed: 3)
        let server = try startRawServer { connection in
            try? connection.write(payload)
        }
        let pair = makePair(port: server.port)
        let reader = OneByteReader(capacity: payload.count)
        reader.start(pair)
        XCTAssertTrue(
            runUntil(timeout: 60) { reader.endEvents > 0 || reader.errorEvents > 0 },
            "no end after \(reader.bytes.count) bytes: \(reader.summary)")
        settle()
        XCTAssertEqual(reader.errorEvents, 0, reader.summary)
        XCTAssertEqual(reader.endEvents, 1, reader.summary)
        XCTAssertEqual(reader.bytes.count, payload.count, reader.summary)
        XCTAssertTrue(Data(reader.bytes) == payload, "bytes out of order or corrupted")
        XCTAssertEqual(reader.readsReturning1, payload.count, reader.summary)
        XCTAssertEqual(reader.readsReturning0, 1, "exactly one read reports the end: \(reader.summary)")
        XCTAssertEqual(reader.otherReads, 0, reader.summary)
        XCTAssertEqual(reader.eventsAfterEnd, 0, "events after endEncountered: \(reader.summary)")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), 0, "read at end returns 0 again")
        settle()
        XCTAssertEqual(reader.endEvents, 1, "a read at end signalled the end again: \(reader.summary)")
    }

    /// The same in a polling loop: hasBytesAvailable, then read(maxLength: 1), until read returns 0;
    /// the status is then `.atEnd` and stays so.
    func testOneByteReadsInAPollingLoopDeliverEveryByteThenOneEnd() throws {
        let payload = testPayload(256 << 10, seed: 4)
        let server = try startRawServer { connection in
            try? connection.write(payload)
        }
        let pair = makePair(port: server.port)
        let outcome = callWithDeadline(60) { () -> (bytes: [UInt8], last: Int) in
            pair.input.open()
            var bytes: [UInt8] = []
            bytes.reserveCapacity(payload.count + 1)
            var byte: UInt8 = 0
            while true {
                guard pair.input.hasBytesAvailable else {
                    let status = pair.input.streamStatus
                    if status != .open && status != .opening { return (bytes, -2) }
                    continue
                }
                let count = pair.input.read(&byte, maxLength: 1)
                if count != 1 { return (bytes, count) }
                bytes.append(byte)
            }
        }
        let (bytes, last) = try XCTUnwrap(outcome, "the polling loop did not finish in 60 s")
        XCTAssertEqual(last, 0, "the loop ended with read \(last) (status \(pair.input.streamStatus.name))")
        XCTAssertEqual(bytes.count, payload.count)
        XCTAssertTrue(Data(bytes) == payload, "bytes out of order or corrupted")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), 0)
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        XCTAssertNil(pair.input.streamError)
    }

    // MARK: 5. a slow resolver

    /// A name lookup that hangs: open returns at once, the run loop the pair is scheduled on keeps
    /// running (a timer fires on time), and closing both streams during the lookup cancels the open:
    /// no event after close, no connect when the answer finally comes, no socket left.
    func testSlowResolverLeavesTheRunLoopFreeAndCloseCancelsCleanly() throws {
        let answer = Gate()
        addCleanup { answer.open() }
        let lookups = Locked(0)
        let answered = Locked(0)
        let peerPorts = Locked<[Int]>([])
        let server = try startRawServer { connection in
            peerPorts.mutate { $0.append(RawSocket.peerPort(connection.fd)) }
        }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(host: "slow.test", port: server.port)
        let port = server.port
        pair.input.connection.someOptions.resolve = { _, _, family in
            lookups.mutate { $0 += 1 }
            answer.wait(timeout: 30)
            answered.mutate { $0 += 1 }
            return .success(family == AF_INET ? [SocketAddress(numericHost: "127.0.0.1", port: port)!] : [])
        }
        let recorder = DelegateRecorder()
        let openStart = monotonicSeconds()
        _ = startRecorder(pair, recorder: recorder)
        let openTime = monotonicSeconds() - openStart
        XCTAssertEqual(answered.value, 0, "open waited for the lookup")
        XCTAssertLessThan(openTime, 0.5, "open took \(openTime) s")
        weak var weakConnector: Connector?
        if case .connecting(let connector) = pair.input.connection.lock.withLock({ pair.input.connection.lifecycle.state }) {
            weakConnector = connector
        }
        XCTAssertNotNil(weakConnector, "not connecting after open")
        let fdsBefore = RawSocket.openDescriptorCount()  // the run loop's reactor is made; no socket yet

        // The run loop runs while the lookup hangs: a timer fires on time.
        let firedAt = Locked<Double?>(nil)
        let timerStart = monotonicSeconds()
        let timer = Timer(fire: Date(timeIntervalSinceNow: 0.05), interval: 0, repeats: false) { _ in
            firedAt.value = monotonicSeconds()
        }
        RunLoop.current.add(timer, forMode: .default)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { firedAt.value != nil }, "the timer never fired")
        let timerLatency = try XCTUnwrap(firedAt.value) - timerStart
        XCTAssertGreaterThanOrEqual(timerLatency, 0.05)
        XCTAssertLessThan(timerLatency, 0.5, "the timer was late")
        XCTAssertTrue(runUntil(timeout: shortTimeout) { lookups.value == 2 }, "lookups started: \(lookups.value)")
        XCTAssertEqual(answered.value, 0)
        XCTAssertEqual(recorder.snapshot.entries, [], recorder.trace)

        // Close during the lookup, then let the lookup answer (with the live server's address).
        recorder.close(pair.input)
        recorder.close(pair.output)
        answer.open()
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { answered.value == 2 && weakConnector == nil },
            "the lookups never finished (or the connector lives on)")
        settle()
        XCTAssertEqual(recorder.snapshot.entries, [.closed(.input), .closed(.output)], "events after close: \(recorder.trace)")
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
        XCTAssertEqual(SocketHandle.openCount, handlesBefore, "sockets left after the cancelled open")
        XCTAssertEqual(RawSocket.openDescriptorCount(), fdsBefore, "fds left after the cancelled open")
        try assertNothingConnected(to: server.port, accepted: peerPorts, "the cancelled open connected anyway")
    }

    /// A polling client during a hanging lookup: status and hasSpaceAvailable answer at once, a
    /// blocked read returns -1 when another thread closes the pair, and no socket is left.
    func testSlowResolverDoesNotBlockPollsAndCloseWakesABlockedRead() throws {
        let answer = Gate()
        addCleanup { answer.open() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(host: "slow.test", port: 9)
        pair.input.connection.someOptions.resolve = { _, _, _ in
            answer.wait(timeout: 30)
            return .failure(ResolutionError(code: EAI_AGAIN, systemErrno: 0))
        }
        pair.input.open()
        pair.output.open()
        let pollStart = monotonicSeconds()
        XCTAssertEqual(pair.input.streamStatus, .opening)
        XCTAssertEqual(pair.output.streamStatus, .opening)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertLessThan(monotonicSeconds() - pollStart, 0.5, "polls waited for the lookup")

        let readDone = Signal()
        let readResult = Locked<Int?>(nil)
        let input = UncheckedBox(pair.input)
        let reader = Thread {
            var byte: UInt8 = 0
            readResult.value = input.value.read(&byte, maxLength: 1)
            readDone.raise()
        }
        reader.start()
        XCTAssertFalse(readDone.wait(timeout: 0.2), "read returned during the lookup: \(String(describing: readResult.value))")
        pair.input.close()
        pair.output.close()
        XCTAssertTrue(readDone.wait(timeout: shortTimeout), "the blocked read did not return after close")
        XCTAssertEqual(readResult.value, -1)
        XCTAssertEqual(pair.input.streamStatus, .closed)
        answer.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore })
    }

    /// The pair is released (not closed) during a hanging lookup: the streams and the connection go,
    /// the late answer connects nowhere, and no socket is left.
    func testReleasingThePairDuringAHangingLookupFreesEverything() throws {
        let answer = Gate()
        addCleanup { answer.open() }
        let answered = Locked(0)
        let peerPorts = Locked<[Int]>([])
        let server = try startRawServer { connection in
            peerPorts.mutate { $0.append(RawSocket.peerPort(connection.fd)) }
        }
        let handlesBefore = SocketHandle.openCount
        let port = server.port
        weak var weakInput: SocketInputStream?
        weak var weakConnection: Connection?
        do {
            let pair = createStreamPair(host: "slow.test", port: port)
            pair.input.connection.someOptions.resolve = { _, _, family in
                answer.wait(timeout: 30)
                answered.mutate { $0 += 1 }
                return .success(family == AF_INET ? [SocketAddress(numericHost: "127.0.0.1", port: port)!] : [])
            }
            weakInput = pair.input
            weakConnection = pair.input.connection
            for stream in [pair.input as Stream, pair.output as Stream] {
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
        }
        XCTAssertNil(weakInput, "the run loop kept the stream alive")
        answer.open()
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { answered.value == 2 && weakConnection == nil },
            "lookups answered: \(answered.value); connection \(weakConnection == nil ? "freed" : "still alive")")
        settle()
        XCTAssertEqual(SocketHandle.openCount, handlesBefore, "sockets left after the released pair's lookup")
        try assertNothingConnected(to: server.port, accepted: peerPorts, "the released pair connected anyway")
    }

    /// Nothing connected to the server on `port` (whose handler records the peer ports it accepts):
    /// a connection of our own is the first it accepts.
    private func assertNothingConnected(
        to port: Int, accepted peerPorts: Locked<[Int]>, _ message: String,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let probe = try RawSocket.connectTo(family: .v4, port: port)
        defer { close(probe) }
        let probePort = RawSocket.boundPort(probe)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { peerPorts.value.contains(probePort) }, file: file, line: line)
        XCTAssertEqual(peerPorts.value, [probePort], message, file: file, line: line)
    }

    /// The connect timeout covers the lookup: a lookup that never answers fails the open with
    /// ETIMEDOUT at the deadline (real clock), on both streams.
    func testConnectTimeoutFiresDuringAHangingLookup() throws {
        let answer = Gate()
        addCleanup { answer.open() }
        let answered = Locked(0)
        let timeout = 0.4
        let pair = makePair(host: "slow.test", port: 9)
        pair.input.connection.someOptions.resolve = { _, _, _ in
            answer.wait(timeout: 30)
            answered.mutate { $0 += 1 }
            return .failure(ResolutionError(code: EAI_AGAIN, systemErrno: 0))
        }
        XCTAssertTrue(pair.input.setProperty(timeout, forKey: .connectTimeoutKey))
        let start = monotonicSeconds()
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: timeout + 5) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        let elapsed = monotonicSeconds() - start
        XCTAssertEqual(answered.value, 0, "the lookup answered before the timeout?")
        XCTAssertGreaterThanOrEqual(elapsed, timeout)
        XCTAssertLessThan(elapsed, timeout + 1.5)
        try assertSameTerminalError(pair, code: ETIMEDOUT)
        // The late answer changes nothing.
        answer.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { answered.value == 2 })
        settle()
        XCTAssertEqual(recorder.snapshot.entries, [.event(.input, .errorOccurred), .event(.output, .errorOccurred)], recorder.trace)
    }

    /// The timeout counts from open, lookup included: a lookup that takes 0.6 s of a 1 s budget, then
    /// connects that hang (to ::1, then 127.0.0.1 after the attempt delay), fails at 1 s, not 1 s after
    /// the answer, and both attempts' sockets are closed.
    func testConnectTimeoutCountsTheLookupTime() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let blackhole6 = try BacklogFullListener(family: .v6, port: blackhole.port)
        defer { withExtendedLifetime((blackhole, blackhole6)) {} }
        let handlesBefore = SocketHandle.openCount
        let slowDNS = Gate()  // never opened before the answers: the lookup takes `lookupTime`
        addCleanup { slowDNS.open() }
        let (timeout, lookupTime) = (1.0, 0.6)
        let answeredAt = Locked<Double?>(nil)
        let port = blackhole.port
        let pair = makePair(host: "slow.test", port: port)
        pair.input.connection.someOptions.resolve = { _, _, family in
            slowDNS.wait(timeout: lookupTime)
            if family == AF_INET { answeredAt.value = monotonicSeconds() }
            return .success([SocketAddress(numericHost: family == AF_INET ? "127.0.0.1" : "::1", port: port)!])
        }
        XCTAssertTrue(pair.input.setProperty(timeout, forKey: .connectTimeoutKey))
        let start = monotonicSeconds()
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: timeout + lookupTime + 5) {
                SocketHandle.openCount == handlesBefore + 2 || recorder.has(.errorOccurred, on: .input)
            })
        XCTAssertEqual(SocketHandle.openCount, handlesBefore + 2, "both attempts in flight before the deadline")
        XCTAssertTrue(
            runUntil(timeout: timeout + lookupTime + 5) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        let elapsed = monotonicSeconds() - start
        let answered = try XCTUnwrap(answeredAt.value) - start
        XCTAssertGreaterThanOrEqual(answered, lookupTime)
        XCTAssertGreaterThanOrEqual(elapsed, timeout)
        XCTAssertLessThan(elapsed, timeout + lookupTime * 0.75, "the deadline was counted from the answer, not from open")
        try assertSameTerminalError(pair, code: ETIMEDOUT)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "attempt sockets left after the timeout: \(SocketHandle.openCount - handlesBefore)")
    }

    // MARK: helpers

    /// Both streams are in `.error` with the same POSIX error `code`.
    private func assertSameTerminalError(
        _ pair: StreamPair, code: Int32,
        file: StaticString = #filePath, line: UInt = #line
    ) throws {
        XCTAssertEqual(pair.input.streamStatus, .error, file: file, line: line)
        XCTAssertEqual(pair.output.streamStatus, .error, file: file, line: line)
        let input = try XCTUnwrap(pair.input.streamError as NSError?, file: file, line: line)
        let output = try XCTUnwrap(pair.output.streamError as NSError?, file: file, line: line)
        assertPOSIXError(input, [code], file: file, line: line)
        XCTAssertEqual(input, output, "the streams report different errors", file: file, line: line)
        XCTAssertEqual(input.localizedDescription, output.localizedDescription, file: file, line: line)
    }
}

// MARK: - support

/// Seconds on the monotonic clock the library's timers use.
private func monotonicSeconds() -> Double {
    Double(Posix.monotonicNanoseconds()) / 1e9
}

/// CPU time this process has used (every thread), in seconds.
private func processCPUSeconds() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// Resident set size from /proc/self/statm, in bytes.
private func residentBytes() -> Int {
    let text = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? ""
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Whether the kernel would take bytes for `fd` now (poll for POLLOUT, zero timeout).
private func isWritable(_ fd: Int32) -> Bool {
    var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
    return poll(&pfd, 1, 0) > 0 && pfd.revents & Int16(POLLOUT) != 0
}

/// Whether the connection of `fd` is gone (the peer's reset arrived: POLLHUP or POLLERR).
private func hasHungUp(_ fd: Int32) -> Bool {
    var pfd = pollfd(fd: fd, events: 0, revents: 0)
    return poll(&pfd, 1, 0) > 0 && pfd.revents & Int16(POLLHUP | POLLERR) != 0
}

/// Bytes sent on `fd` and not yet acknowledged by the peer (SIOCOUTQ).
private func unsentBytes(_ fd: Int32) -> Int {
    var count: Int32 = 0
    return ioctl(fd, UInt(TIOCOUTQ), &count) == 0 ? Int(count) : 0
}

/// Spins (yielding, at most `timeout`) until the kernel state `condition` reads holds.
private func waitUntilKernel(timeout: TimeInterval = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while !condition() {
        if Date() >= deadline { return false }
        sched_yield()
    }
    return true
}

/// A gate threads wait at until it is opened (for good): a name server that answers when told.
private final class Gate: @unchecked Sendable {
    private let condition = NSCondition()
    private var isOpen = false

    func open() {
        condition.withLock {
            isOpen = true
            condition.broadcast()
        }
    }

    /// Waits until the gate opens or `timeout` passes.
    func wait(timeout: TimeInterval) {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.withLock {
            while !isOpen && condition.wait(until: deadline) {}
        }
    }
}

/// A socketpair a thread can poll on, to be woken by another.
private final class Wakeup: @unchecked Sendable {
    let fd: Int32
    private let other: Int32
    private let closed = Locked(false)

    init() throws { (fd, other) = try RawSocket.socketPair() }

    func raise() {
        var byte: UInt8 = 1
        _ = send(other, &byte, 1, Int32(MSG_NOSIGNAL))
    }

    func close() {
        let wasClosed = closed.mutate { (value: inout Bool) -> Bool in
            defer { value = true }
            return value
        }
        guard !wasClosed else { return }
        Glibc.close(fd)
        Glibc.close(other)
    }
}

/// An endless deterministic byte stream: byte `i` is `bytes[i % period]`, with a period that is
/// prime (so no power-of-two chunking lines up with it). Stored twice over, so a chunk of up to one
/// period starts at any offset without copying.
private final class Pattern: @unchecked Sendable {
    static let period = 65_521
    private let storage: UnsafeMutableBufferPointer<UInt8>

    init() {
        storage = .allocate(capacity: 2 * Self.period)
        for i in 0..<storage.count {
            let k = i % Self.period
            storage[i] = UInt8(truncatingIfNeeded: (k &* 131) ^ (k >> 7) ^ 0x5A)
        }
    }

    deinit { storage.deallocate() }

    /// Up to one period of the stream, starting at `offset`.
    func chunk(at offset: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: storage.baseAddress! + offset % Self.period, count: Self.period)
    }

    /// Whether `data` is the stream's bytes from `offset` on.
    func matches(_ data: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        var done = 0
        while done < data.count {
            let expected = chunk(at: offset + done)
            let length = min(expected.count, data.count - done)
            if memcmp(expected.baseAddress!, data.baseAddress! + done, length) != 0 { return false }
            done += length
        }
        return true
    }
}

/// A delegate uploading `total` bytes of a `Pattern`, one write per hasSpaceAvailable (of at most a
/// period), for a pair scheduled on the current run loop. It reads (and counts) on hasBytesAvailable.
/// Used on one thread only (the run loop's, which is the test's).
private final class PatternWriter: NSObject, StreamDelegate, @unchecked Sendable {
    let pattern: Pattern
    let total: Int
    /// Close both streams once everything is written (the socket closes only with both: no half-close).
    var closesWhenDone = false
    /// Run on every hasSpaceAvailable, before the write.
    var onSpace: (() -> Void)?
    private(set) var written = 0
    private(set) var writeCalls = 0
    /// Writes that returned 0 or -1.
    private(set) var failedWrites: [Int] = []
    private(set) var reads: [Int] = []
    private var counts: [String: Int] = [:]
    private var input: InputStream?
    private var output: OutputStream?

    init(pattern: Pattern, total: Int) {
        self.pattern = pattern
        self.total = total
    }

    func start(_ pair: StreamPair) {
        input = pair.input
        output = pair.output
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func count(_ event: Stream.Event, on role: StreamRole) -> Int { counts["\(role).\(event.name)", default: 0] }

    var summary: String {
        "written \(written), \(writeCalls) writes, failed \(failedWrites), reads \(reads.prefix(8)), events \(counts)"
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        let role: StreamRole = aStream === output ? .output : aStream === input ? .input : .unknown
        counts["\(role).\(eventCode.name)", default: 0] += 1
        switch eventCode {
        case .hasSpaceAvailable:
            guard let output = aStream as? OutputStream, written < total else { return }
            onSpace?()
            let chunk = pattern.chunk(at: written)
            let count = output.write(
                chunk.baseAddress!.assumingMemoryBound(to: UInt8.self),
                maxLength: min(chunk.count, total - written))
            writeCalls += 1
            if count > 0 { written += count } else { failedWrites.append(count) }
            if written == total && closesWhenDone {
                output.close()
                input?.close()
            }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            reads.append((aStream as? InputStream)?.read(&buffer, maxLength: buffer.count) ?? -2)
        default:
            break
        }
    }
}

/// A delegate reading one byte per hasBytesAvailable into a preallocated array, counting what each
/// read returned and every event (lean: a million callouts).
private final class OneByteReader: NSObject, StreamDelegate, @unchecked Sendable {
    private(set) var bytes: [UInt8] = []
    private(set) var readsReturning1 = 0
    private(set) var readsReturning0 = 0
    private(set) var otherReads = 0
    private(set) var hasBytesEvents = 0
    private(set) var endEvents = 0
    private(set) var errorEvents = 0
    private(set) var eventsAfterEnd = 0
    private var input: InputStream?

    init(capacity: Int) {
        bytes.reserveCapacity(capacity)
    }

    func start(_ pair: StreamPair) {
        input = pair.input
        pair.input.delegate = self
        pair.input.schedule(in: .current, forMode: .default)
        pair.input.open()
    }

    var summary: String {
        "\(bytes.count) bytes, \(hasBytesEvents) hasBytesAvailable, reads: \(readsReturning1) of 1 / "
            + "\(readsReturning0) of 0 / \(otherReads) other, \(endEvents) end, \(errorEvents) error, \(eventsAfterEnd) after end"
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        if endEvents > 0 { eventsAfterEnd += 1 }
        switch eventCode {
        case .hasBytesAvailable:
            hasBytesEvents += 1
            var byte: UInt8 = 0
            switch input?.read(&byte, maxLength: 1) {
            case 1?:
                readsReturning1 += 1
                bytes.append(byte)
            case 0?:
                readsReturning0 += 1
            default:
                otherReads += 1
            }
        case .endEncountered:
            endEvents += 1
        case .errorOccurred:
            errorEvents += 1
        default:
            break
        }
    }
}
