#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// A pair scheduled on one thread's run loop and read and written from another thread (the pattern of
/// WebSocket clients, and the normal case with dispatch queues): `hasBytesAvailable` and
/// `hasSpaceAvailable` must be exact, never a stale true that makes the next call block.
final class CrossThreadTests: SocketStreamsTestCase {
    /// 2,000 rounds of a 16-byte message to an echo server, written and read on a worker thread with
    /// `while input.hasBytesAvailable { read }`, while the main run loop (where the pair is scheduled,
    /// with a delegate that only observes) keeps taking readiness events. Every true from
    /// `hasBytesAvailable` must have bytes behind it.
    func testHasBytesAvailableIsExactWhenAnotherThreadReads() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        let recorder = DelegateRecorder()
        recorder.readsOnHasBytes = false
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.openCompleted, on: .input) && pair.output.hasSpaceAvailable })
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))

        let rounds = 2_000
        let size = 16
        let input = UncheckedBox(pair.input)
        let output = UncheckedBox(pair.output)
        let done = Locked(false)
        let result = Locked<(stale: Int, received: Int)>((0, 0))
        let worker = Thread {
            var stale = 0
            var sent = 0
            var received = 0
            var buffer = [UInt8](repeating: 0, count: 4096)
            let message = [UInt8](repeating: 0x61, count: size)
            while received < rounds * size {
                if sent == received, sent < rounds * size {
                    guard output.value.write(message, maxLength: size) == size else { break }
                    sent += size
                }
                while input.value.hasBytesAvailable {
                    if Posix.bytesAvailable(fd) == 0 {
                        // A stale true: the read below would block. Send the next message so it returns.
                        stale += 1
                        guard sent < rounds * size, output.value.write(message, maxLength: size) == size else {
                            received = rounds * size  // nothing more will come: stop
                            break
                        }
                        sent += size
                    }
                    let n = input.value.read(&buffer, maxLength: buffer.count)
                    guard n > 0 else { break }
                    received += n
                }
                sched_yield()
            }
            result.value = (stale, received)
            done.value = true
        }
        worker.start()
        XCTAssertTrue(runUntil(timeout: 60) { done.value }, "the worker did not finish")
        XCTAssertEqual(result.value.stale, 0, "hasBytesAvailable said true with nothing to read")
        XCTAssertEqual(result.value.received, rounds * size)
    }

    /// The write side: a worker writes 64 MiB to a peer that reads in small pieces, calling `write`
    /// only when `hasSpaceAvailable` says so, while the main run loop keeps raising hasSpaceAvailable
    /// events as the peer drains. Only this worker writes, so a true after which the write finds the
    /// socket full (EAGAIN, counted by the debug build's `SendSpace.sendsRefused`; the write then
    /// waits in poll) is stale. "Space" is what a send takes: the send-space bound lets a writer fill
    /// the buffer past where POLLOUT turns off, as a blocking send does, so POLLOUT is not the test.
    /// A flag trusted without asking the socket, the bug this guards against, gave 241-1,339 stale
    /// answers in 2,000 on the read side; a handful is allowed for the kernel's own accounting (TCP's
    /// send queue can grow without a write when the stack splits a queued segment to transmit it).
    func testHasSpaceAvailableIsExactWhenAnotherThreadWrites() throws {
        let total = 64 << 20
        let server = try startRawServer { connection in
            var received = 0
            while received < total, let data = try? RawSocket.readSome(connection.fd, max: 4096, timeout: 30), !data.isEmpty {
                received += data.count
            }
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder()
        recorder.readsOnHasBytes = false
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.hasSpaceAvailable, on: .output) }, recorder.trace)

        let output = UncheckedBox(pair.output)
        let done = Locked(false)
        let checks = Locked(0)
        let refusedBefore = SendSpace.sendsRefused.load(ordering: .relaxed)
        let worker = Thread {
            let chunk = [UInt8](repeating: 0x62, count: 16 * 1024)
            var written = 0
            while written < total {
                guard output.value.hasSpaceAvailable else {
                    sched_yield()
                    continue
                }
                checks.mutate { $0 += 1 }
                let n = output.value.write(chunk, maxLength: min(chunk.count, total - written))
                guard n > 0 else { break }
                written += n
            }
            done.value = true
        }
        worker.start()
        XCTAssertTrue(runUntil(timeout: 60) { done.value }, "the worker did not finish")
        let stale = SendSpace.sendsRefused.load(ordering: .relaxed) - refusedBefore
        XCTAssertLessThanOrEqual(stale, 8, "hasSpaceAvailable said true with the socket full (\(checks.value) checks)")
        XCTAssertGreaterThan(checks.value, 1000)
    }
}
