#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import SocketStreams
import XCTest

/// Client code that uses the streams the wrong way: calls in a state that does not allow them,
/// delegates replaced or freed inside their own callbacks, a stream scheduled on two threads' run
/// loops at once, calls from a thread other than the delegate's. Each case has one defined outcome
/// (CFNetwork's where it has one, else the documented choice named on the test), and none may crash,
/// hang, leak a socket (`SocketHandle.openCount`) or raise SIGPIPE.
final class MisuseTests: SocketStreamsTestCase {

    // MARK: - 3. one stream scheduled on two threads' run loops

    /// Both streams scheduled on this thread's run loop and on a worker's at once. CFNetwork delivers
    /// on whichever scheduled run loop runs; so does this library, but one pair never has two
    /// callouts at once, not even for the same stream on two threads (Guides/Architecture.md,
    /// "Threads"). A delegate that reads and writes in small pieces (many events, on both threads)
    /// echoes 512 KiB through socat: no callout may start while another one of the pair runs, and
    /// every byte arrives in order.
    func testStreamsScheduledOnTwoThreadsRunLoopsNeverOverlapAndLoseNothing() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        let port = try startSocatEcho()
        let worker = RunLoopThread(name: "test.second-run-loop")
        addCleanup { worker.stop() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: port)
        let payload = testPayload(512 * 1024, seed: 21)
        let delegate = SerialEchoDelegate(input: pair.input, output: pair.output, outgoing: payload)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = delegate
            stream.schedule(in: .current, forMode: .default)
            stream.schedule(in: worker.runLoop, forMode: worker.mode)
        }
        pair.input.open()
        pair.output.open()

        XCTAssertTrue(runUntil(timeout: 60) { delegate.state.value.received.count >= payload.count || delegate.state.value.failed },
                      "received \(delegate.state.value.received.count) of \(payload.count)")
        let state = delegate.state.value
        XCTAssertEqual(state.overlaps, 0, "callouts of one pair ran at once on two threads")
        XCTAssertFalse(state.failed, "a read or write failed")
        XCTAssertEqual(state.received.count, payload.count)
        XCTAssertTrue(state.received == payload, "bytes lost or reordered")
        XCTAssertTrue(state.threads.isSubset(of: [ObjectIdentifier(Thread.current), ObjectIdentifier(worker.thread)]),
                      "a callout ran on a thread running neither scheduled run loop")
        pair.input.close()
        pair.output.close()
        _ = worker.sync {}  // no callout in progress any more
        XCTAssertTrue(runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
                      "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
    }
}

// MARK: - helpers

/// Echoes `outgoing` through the pair in small pieces (many events), from whichever thread calls it,
/// and counts callouts that start while another one of the pair is still running.
private final class SerialEchoDelegate: NSObject, StreamDelegate, @unchecked Sendable {
    struct State {
        var received = Data()
        var written = 0
        var overlaps = 0
        var failed = false
        var threads: Set<ObjectIdentifier> = []
    }

    let state = Locked(State())
    private let active = Locked(0)
    private let input: InputStream
    private let output: OutputStream
    private let outgoing: Data

    init(input: InputStream, output: OutputStream, outgoing: Data) {
        self.input = input
        self.output = output
        self.outgoing = outgoing
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        let overlapping = active.mutate { count -> Bool in
            count += 1
            return count > 1
        }
        state.mutate { state in
            if overlapping { state.overlaps += 1 }
            state.threads.insert(ObjectIdentifier(Thread.current))
        }
        if eventCode == .hasBytesAvailable {
            var buffer = [UInt8](repeating: 0, count: 700)
            let n = input.read(&buffer, maxLength: buffer.count)
            state.mutate { state in
                if n > 0 { state.received.append(contentsOf: buffer[0..<n]) } else { state.failed = true }
            }
        } else if eventCode == .hasSpaceAvailable {
            let start = state.value.written
            let end = min(outgoing.count, start + 3000)
            if start < end {
                let n = outgoing[start..<end].withUnsafeBytes { output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: end - start) }
                state.mutate { state in
                    if n > 0 { state.written += n } else { state.failed = true }
                }
            }
        } else if eventCode == .errorOccurred || eventCode == .endEncountered {
            state.mutate { $0.failed = true }
        }
        // Give the other run loop's thread a turn while this callout is still running.
        for _ in 0..<20 { sched_yield() }
        active.mutate { $0 -= 1 }
    }
}
