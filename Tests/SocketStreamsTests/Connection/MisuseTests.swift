#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Client code that uses the streams the wrong way: calls in a state that does not allow them,
/// delegates replaced or freed inside their own callbacks, a stream scheduled on two threads' run
/// loops at once, calls from a thread other than the delegate's. Each case has one defined outcome
/// (CFNetwork's where it has one, else the choice named on the test and listed in Guides/Architecture.md,
/// "Calls in the wrong state"), and none may crash, hang, leak a socket (`SocketHandle.openCount`) or
/// raise SIGPIPE.
final class MisuseTests: SocketStreamsTestCase {

    // MARK: - 1. calls in the wrong state

    /// Every call on a pair that was never opened: properties read and set, scheduling and unscheduling
    /// (also from a run loop it was never scheduled on), `close()` (a no-op on a not-open stream, as in
    /// CFNetwork: the stream stays `.notOpen`), none of which touches the network. A pair "closed" before
    /// `open()` therefore still opens and works afterwards.
    func testEveryCallBeforeOpenThenTheStreamsStillOpen() throws {
        let port = try startSocatEcho()
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: port)
        var buffer = [UInt8](repeating: 0, count: 8)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.remove(from: .current, forMode: .default)  // never scheduled: nothing to remove
            stream.schedule(in: .current, forMode: .default)
            stream.schedule(in: .current, forMode: .default)  // twice: one schedule
            stream.remove(from: .current, forMode: .default)
            stream.schedule(in: .current, forMode: .default)
            XCTAssertEqual(stream.property(forKey: CFKey.remoteHostName) as? String, "127.0.0.1")
            XCTAssertNil(stream.property(forKey: CFKey.nativeHandle), "no socket before open")
            XCTAssertTrue(stream.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey))
            XCTAssertNil(stream.streamError)
            stream.close()
            stream.close()
            XCTAssertEqual(stream.streamStatus, .notOpen, "close() on a not-open stream does nothing")
        }
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), -1)
        XCTAssertEqual(pair.output.write(&buffer, maxLength: 8), -1)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertEqual(SocketHandle.openCount, handlesBefore, "a socket was made before open()")
        XCTAssertEqual(
            pair.input.connection.lock.withLock { [Half.input, .output].map { pair.input.connection.halves[$0].reactors.count } }, [1, 1],
            "scheduling twice and removing once must leave each stream scheduled once")

        let recorder = DelegateRecorder(sending: "after an early close")
        recorder.attach(pair)
        for stream in [pair.input as Stream, pair.output as Stream] { stream.delegate = recorder }
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "after an early close" },
            "trace: \(recorder.trace)")
        XCTAssertEqual(recorder.count(.openCompleted, on: .input), 1, recorder.trace)
        XCTAssertEqual(recorder.count(.openCompleted, on: .output), 1, recorder.trace)
        let fd = try XCTUnwrap(nativeHandle(of: pair.output))
        XCTAssertEqual(RawSocket.intOption(fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY), 1, "set before open, applied at connect")
        recorder.close(pair.input)
        recorder.close(pair.output)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
    }

    /// Every call after `close()` on a live pair, on both streams: `close()` again and `open()` are
    /// no-ops (status stays `.closed`, no new socket), read and write return -1, has-bytes/has-space
    /// are false, scheduling (again, on this or another thread's run loop) and unscheduling are
    /// harmless and deliver nothing. Documented choice: a closed stream still answers and accepts
    /// properties (Apple's NSStream reference: a closed stream "can still accept and report
    /// properties"), shared with its pair as before; the native handle reads nil once both streams are
    /// closed, because the socket is gone.
    func testEveryCallAfterCloseIsANoOpOrFails() throws {
        let port = try startSocatEcho()
        let worker = RunLoopThread(name: "test.after-close")
        addCleanup { worker.stop() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "before close"))
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "before close" },
            "trace: \(recorder.trace)")
        recorder.close(pair.input)
        XCTAssertNotNil(nativeHandle(of: pair.input), "the output still holds the socket: the handle is still there")
        recorder.close(pair.output)
        let closedAt = recorder.snapshot.entries.count

        var buffer = [UInt8](repeating: 0, count: 8)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.close()
            stream.open()
            XCTAssertEqual(stream.streamStatus, .closed)
            XCTAssertNil(stream.streamError)
            stream.schedule(in: .current, forMode: .default)
            stream.schedule(in: worker.runLoop, forMode: worker.mode)
            stream.remove(from: .current, forMode: .default)
            stream.schedule(in: .current, forMode: .default)
            XCTAssertEqual(stream.property(forKey: CFKey.remoteHostName) as? String, "127.0.0.1")
            XCTAssertEqual((stream.property(forKey: CFKey.remotePortNumber) as? NSNumber)?.intValue, port)
            XCTAssertNil(stream.property(forKey: CFKey.nativeHandle), "the socket is closed")
            XCTAssertTrue(stream.setProperty(NSNumber(value: false), forKey: .tcpNoDelayKey))
            XCTAssertEqual(stream.property(forKey: .tcpNoDelayKey) as? NSNumber, NSNumber(value: false))
            XCTAssertFalse(stream.setProperty(NSNumber(value: 3), forKey: .connectTimeoutKey), "only before open")
        }
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), -1)
        XCTAssertEqual(pair.output.write(&buffer, maxLength: 8), -1)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertEqual(
            pair.input.connection.lock.withLock { [Half.input, .output].map { pair.input.connection.halves[$0].reactors.count } }, [0, 0],
            "a closed stream was scheduled")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
        settle()
        _ = worker.sync { settle() }
        XCTAssertEqual(Array(recorder.snapshot.entries[closedAt...]), [], "events after close: \(recorder.trace)")
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
    }

    /// At end of stream: `read` keeps returning 0 (CFNetwork's `.atEnd` read) with no second
    /// `endEncountered`, `hasBytesAvailable` is false, `open()` changes nothing, and the output stream
    /// is not affected. After `close()` the read is -1 and the status `.closed`.
    func testReadAtEndKeepsReturningZeroWithoutMoreEvents() throws {
        let server = try startRawServer { connection in
            try? connection.write("last")
            connection.shutdownWrite()
            _ = try? connection.readToEOF(timeout: 10)
        }
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder()
        recorder.closesOnEnd = false
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, "trace: \(recorder.trace)")
        var buffer = [UInt8](repeating: 0, count: 8)
        for _ in 0..<3 {
            XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), 0)
            XCTAssertFalse(pair.input.hasBytesAvailable)
        }
        pair.input.open()
        settle()
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        XCTAssertNil(pair.input.streamError)
        XCTAssertEqual(recorder.count(.endEncountered, on: .input), 1, recorder.trace)
        XCTAssertEqual(
            recorder.count(.hasBytesAvailable, on: .input),
            recorder.snapshot.entries.filter {
                if case .read = $0 { return true }
                return false
            }.count, "one read per hasBytesAvailable, and none after the end: \(recorder.trace)")
        XCTAssertEqual(pair.output.streamStatus, .open)
        pair.input.close()
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), -1)
        XCTAssertEqual(pair.input.streamStatus, .closed)
    }

    /// After an error (a refused connection) on the input, the only stream opened: the output, not
    /// opened, knows nothing of it (status `.notOpen`, no error, no event), as CFNetwork tells only the
    /// opened halves; opening it then fails it at once with the same error and an `errorOccurred`.
    /// Afterwards, on both: read/write -1, has-bytes/has-space false, `open()` and `close()` (twice)
    /// keep `.error` and `streamError`, scheduling is harmless, no further events, properties still
    /// answer, no socket left.
    func testEveryCallAfterAnError() throws {
        let port = try RawSocket.unusedPort()
        let worker = RunLoopThread(name: "test.after-error")
        addCleanup { worker.stop() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: port)
        let recorder = DelegateRecorder()
        recorder.schedule(pair)
        pair.input.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) }, "trace: \(recorder.trace)")
        settle()
        XCTAssertEqual(pair.output.streamStatus, .notOpen)
        XCTAssertNil(pair.output.streamError)
        XCTAssertEqual(recorder.snapshot.events(.output), [], recorder.trace)

        pair.output.open()
        XCTAssertEqual(pair.output.streamStatus, .error)
        assertPOSIXError(pair.output.streamError, [ECONNREFUSED])
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .output) }, "trace: \(recorder.trace)")

        var buffer = [UInt8](repeating: 0, count: 8)
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.open()
            XCTAssertEqual(stream.streamStatus, .error)
            stream.close()
            stream.close()
            XCTAssertEqual(stream.streamStatus, .error, "close() keeps the error status")
            assertPOSIXError(stream.streamError, [ECONNREFUSED], "the error is kept after close")
            stream.open()
            XCTAssertEqual(stream.streamStatus, .error)
            stream.schedule(in: .current, forMode: .default)
            stream.schedule(in: worker.runLoop, forMode: worker.mode)
            stream.remove(from: .current, forMode: .default)
            XCTAssertEqual(stream.property(forKey: CFKey.remoteHostName) as? String, "127.0.0.1")
            XCTAssertNil(stream.property(forKey: CFKey.nativeHandle))
        }
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 8), -1)
        XCTAssertEqual(pair.output.write(&buffer, maxLength: 8), -1)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        settle()
        _ = worker.sync { settle() }
        XCTAssertEqual(recorder.snapshot.events(.input), [.errorOccurred], recorder.trace)
        XCTAssertEqual(recorder.snapshot.events(.output), [.errorOccurred], recorder.trace)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
    }

    /// An error raised while the streams are scheduled nowhere is not an event anybody gets: scheduling
    /// them afterwards does not replay it (CFNetwork does not record events of an unscheduled stream);
    /// the status and `streamError` tell.
    func testAnErrorRaisedWhileUnscheduledIsNotReplayedOnSchedule() throws {
        let pair = makePair(port: try RawSocket.unusedPort())
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { pair.input.streamStatus == .error && pair.output.streamStatus == .error })
        let recorder = DelegateRecorder()
        recorder.schedule(pair)
        settle()
        XCTAssertEqual(recorder.snapshot.entries, [], "replayed: \(recorder.trace)")
        assertPOSIXError(pair.input.streamError, [ECONNREFUSED])
        assertPOSIXError(pair.output.streamError, [ECONNREFUSED])
    }

    // MARK: - 2. delegates changed or released inside their callbacks

    /// A delegate that hands both streams to another delegate inside its `openCompleted` callout:
    /// every later event goes to the new one, including the output's `hasSpaceAvailable` already
    /// pending behind `openCompleted` in the same delivery round (the delegate is read for each event).
    func testDelegateReplacedInsideACallbackGetsTheNextEvents() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        let successor = DelegateRecorder(sending: "handed over")
        successor.attach(pair)
        var first: [Stream.Event] = []
        let handing = ClosureDelegate { stream, event in
            first.append(event)
            if event == .openCompleted { stream.delegate = successor }
        }
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = handing
            stream.schedule(in: .current, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { successor.snapshot.receivedString == "handed over" },
            "trace: \(successor.trace)")
        XCTAssertEqual(first, [.openCompleted, .openCompleted], "events after the hand-over reached the old delegate")
        XCTAssertFalse(successor.has(.openCompleted, on: .input), successor.trace)
        XCTAssertFalse(successor.has(.openCompleted, on: .output), successor.trace)
        XCTAssertEqual(successor.snapshot.events(.output).first, .hasSpaceAvailable, successor.trace)
        XCTAssertTrue(pair.input.delegate === successor && pair.output.delegate === successor)
        withExtendedLifetime(handing) {}
    }

    /// A delegate that sets both streams' delegates to nil inside its `openCompleted` callout gets
    /// nothing more; the streams go on working (read and written directly here), their events go to
    /// nobody (as to Darwin's default delegate, the stream itself), and a delegate set later gets the
    /// events raised from then on.
    func testDelegateSetToNilInsideACallbackStopsDeliveryNotTheStreams() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        var seen: [Stream.Event] = []
        let leaving = ClosureDelegate { stream, event in
            seen.append(event)
            stream.delegate = nil
        }
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = leaving
            stream.schedule(in: .current, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { seen.count == 2 && pair.output.hasSpaceAvailable })
        XCTAssertTrue(writeAll(pair.output, Data("nobody".utf8)))
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertTrue(waitForKernelBytes(fd, atLeast: 6), "socat did not echo")
        settle()
        XCTAssertEqual(seen, [.openCompleted, .openCompleted], "events reached a delegate that was set to nil")
        XCTAssertEqual(readUpTo(pair.input, count: 6).data, Data("nobody".utf8))

        let recorder = DelegateRecorder()
        recorder.attach(pair)
        pair.input.delegate = recorder
        pair.output.delegate = recorder
        XCTAssertTrue(writeAll(pair.output, Data("again".utf8)))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "again" }, "trace: \(recorder.trace)")
        XCTAssertEqual(seen.count, 2)
        withExtendedLifetime(leaving) {}
    }

    /// The stream holds its delegate weakly (Foundation's `Stream.delegate`). A delegate whose only
    /// owner lets go of it inside its own callout lives until that callout returns, then goes; later
    /// events find no delegate and go to nobody, and the streams keep working.
    func testDelegateReleasedDuringItsOwnCallback() throws {
        let port = try startSocatEcho()
        let pair = makePair(port: port)
        let owner = UncheckedBox<ClosureDelegate?>(nil)
        let seen = UncheckedBox<[Stream.Event]>([])
        let aliveAtEnd = UncheckedBox<Bool?>(nil)
        owner.value = ClosureDelegate { stream, event in
            seen.value.append(event)
            owner.value = nil  // the last strong reference
            // Still here: the stream's callout holds the delegate until it returns.
            aliveAtEnd.value = stream.delegate != nil
        }
        weak let released = owner.value
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = owner.value
            stream.schedule(in: .current, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: shortTimeout) { released == nil }, "the delegate was never released")
        XCTAssertEqual(aliveAtEnd.value, true, "the delegate went while its callout ran")
        XCTAssertEqual(seen.value.count, 1, "events reached a released delegate: \(seen.value.map(\.name))")
        XCTAssertTrue(runUntil(timeout: shortTimeout) { pair.output.hasSpaceAvailable })
        settle()
        XCTAssertNil(pair.input.delegate)
        XCTAssertNil(pair.output.delegate)
        XCTAssertTrue(writeAll(pair.output, Data("still works".utf8)))
        XCTAssertEqual(readUpTo(pair.input, count: 11).data, Data("still works".utf8))
    }

    /// Inside a callout the delegate closes both streams (or not) and drops the last reference to the
    /// pair: at `openCompleted` (the other stream's events still pending), at `hasBytesAvailable`, at
    /// `errorOccurred`. The streams are freed once the callout returns, no event reaches the delegate
    /// after it, the socket is closed (the peer sees the end) and no handle is left.
    func testPairClosedAndReleasedInsideACallback() throws {
        let peerSawTheEnd = Locked(0)
        let server = try startRawServer { connection in
            if let data = try? connection.readExactly(4, timeout: 5), !data.isEmpty { try? connection.write(data) }
            // A FIN, or a reset where the client closed with the echo unread (Linux's close(2) then
            // sends RST): either way the socket is gone; only the deadline means it is not.
            do {
                if try connection.readToEOF(timeout: 10).sawEOF { peerSawTheEnd.mutate { $0 += 1 } }
            } catch {
                peerSawTheEnd.mutate { $0 += 1 }
            }
        }
        let refused = try RawSocket.unusedPort()
        struct Scenario {
            let port: Int
            let closes: Bool
            let at: (StreamRole, Stream.Event)
        }
        let scenarios = [
            Scenario(port: server.port, closes: true, at: (.input, .openCompleted)),
            Scenario(port: server.port, closes: false, at: (.input, .openCompleted)),
            Scenario(port: server.port, closes: true, at: (.input, .hasBytesAvailable)),
            Scenario(port: server.port, closes: false, at: (.input, .hasBytesAvailable)),
            Scenario(port: refused, closes: true, at: (.output, .errorOccurred)),
            Scenario(port: refused, closes: false, at: (.input, .errorOccurred)),
        ]
        for (index, scenario) in scenarios.enumerated() {
            let label = "scenario \(index): \(scenario.closes ? "close and release" : "release") at \(scenario.at.0).\(scenario.at.1.name)"
            let handlesBefore = SocketHandle.openCount
            let owner = PairOwner(trigger: scenario.at, closes: scenario.closes)
            weak var input: SocketInputStream?
            weak var output: SocketOutputStream?
            do {
                let pair = createStreamPair(host: "127.0.0.1", port: scenario.port)
                (input, output) = pair
                owner.own(pair)
            }
            XCTAssertTrue(runUntil(timeout: shortTimeout) { input == nil && output == nil }, "\(label): \(owner.trace)")
            settle()
            XCTAssertEqual(
                owner.events.last.map { "\($0.0).\($0.1.name)" }, "\(scenario.at.0).\(scenario.at.1.name)",
                "\(label): events after the pair was released: \(owner.trace)")
            XCTAssertTrue(
                runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
                "\(label): open sockets \(SocketHandle.openCount), expected \(handlesBefore)")
        }
        XCTAssertTrue(server.waitForFinished(4, timeout: shortTimeout))
        XCTAssertEqual(peerSawTheEnd.value, 4, "the peer did not see every connection end")
    }

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

        XCTAssertTrue(
            runUntil(timeout: 60) { delegate.state.value.received.count >= payload.count || delegate.state.value.failed },
            "received \(delegate.state.value.received.count) of \(payload.count)")
        let state = delegate.state.value
        XCTAssertEqual(state.overlaps, 0, "callouts of one pair ran at once on two threads")
        XCTAssertFalse(state.failed, "a read or write failed")
        XCTAssertEqual(state.received.count, payload.count)
        XCTAssertTrue(state.received == payload, "bytes lost or reordered")
        XCTAssertTrue(
            state.threads.isSubset(of: [ObjectIdentifier(Thread.current), ObjectIdentifier(worker.thread)]),
            "a callout ran on a thread running neither scheduled run loop")
        pair.input.close()
        pair.output.close()
        _ = worker.sync {}  // no callout in progress any more
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
    }

    // MARK: - 4. calls from the wrong thread

    /// The pair is scheduled on a worker's run loop with a delegate that only watches, while this
    /// thread reads and writes it in blocking style: 256 KiB echo in order, every callout runs on the
    /// worker, and `endEncountered`, raised by this thread's read that returned 0, is delivered there
    /// too (events raised off the delivering thread are posted to it). Closing from here leaves no
    /// socket behind.
    func testBlockingReadsAndWritesOffTheScheduledThread() throws {
        let total = 256 * 1024
        let server = try startRawServer { connection in
            var echoed = 0
            while echoed < total, let data = try? RawSocket.readSome(connection.fd, timeout: 10), !data.isEmpty {
                guard (try? connection.write(data)) != nil else { return }
                echoed += data.count
            }
            connection.shutdownWrite()
            _ = try? connection.readToEOF(timeout: 10)
        }
        let worker = RunLoopThread(name: "test.delegate-thread")
        addCleanup { worker.stop() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder()
        recorder.readsOnHasBytes = false
        recorder.closesOnEnd = false
        XCTAssertNotNil(worker.sync { recorder.start(pair, on: .current, mode: .default) })

        let payload = testPayload(total, seed: 4)
        let outcome = callWithDeadline(30) { () -> (received: Data, last: Int) in
            var received = Data()
            var offset = 0
            while offset < total {
                let chunk = Data(payload[offset..<min(total, offset + 16 * 1024)])
                guard writeAll(pair.output, chunk) else { break }
                offset += chunk.count
                let (data, _) = readUpTo(pair.input, count: chunk.count)
                received.append(data)
                if data.count < chunk.count { break }
            }
            var byte: UInt8 = 0
            return (received, pair.input.read(&byte, maxLength: 1))
        }
        let (received, last) = try XCTUnwrap(outcome, "a blocking call did not return")
        XCTAssertEqual(received.count, total)
        XCTAssertTrue(received == payload, "bytes lost or reordered")
        XCTAssertEqual(last, 0)
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        XCTAssertTrue(recorder.wait(timeout: shortTimeout) { $0.has(.endEncountered, on: .input) }, "trace: \(recorder.trace)")
        let snapshot = recorder.snapshot
        XCTAssertTrue(snapshot.eventThreads.allSatisfy { $0 === worker.thread }, "a callout ran off the scheduled thread")
        XCTAssertEqual(snapshot.count(.endEncountered, on: .input), 1)
        XCTAssertFalse(snapshot.has(.errorOccurred, on: .input) || snapshot.has(.errorOccurred, on: .output), recorder.trace)
        pair.input.close()
        pair.output.close()
        XCTAssertNotNil(worker.sync { settle() })
        XCTAssertEqual(recorder.snapshot.entries.count, snapshot.entries.count, "callouts after close: \(recorder.trace)")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
    }

    /// Both streams closed from this thread while their delegate reads and writes on a worker's run
    /// loop (a peer that sends without end and never reads). Documented choice: a callout already
    /// running when `close()` returns finishes (its read or write then returns -1), and no callout
    /// starts afterwards. Nothing blocks, the socket goes, and the peer's sends fail (a reset: the
    /// client closed with bytes unread), with no SIGPIPE anywhere.
    func testCloseFromAnotherThreadWhileEventsFlow() throws {
        let previous = signal(SIGPIPE, SIG_DFL)
        defer { signal(SIGPIPE, previous) }
        let server = try startRawServer { connection in
            let chunk = testPayload(64 * 1024, seed: 8)
            while (try? connection.write(chunk)) != nil {}
        }
        let worker = RunLoopThread(name: "test.delegate-thread")
        addCleanup { worker.stop() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: server.port)
        let recorder = DelegateRecorder(outgoing: testPayload(4 << 20, seed: 2))
        recorder.readChunk = 4096
        recorder.writeChunk = 4096
        XCTAssertNotNil(worker.sync { recorder.start(pair, on: .current, mode: .default) })
        XCTAssertTrue(
            recorder.wait(timeout: shortTimeout) { $0.received.count >= 256 * 1024 && $0.bytesWritten >= 64 * 1024 },
            "received \(recorder.received.count), wrote \(recorder.snapshot.bytesWritten)")

        pair.input.close()
        pair.output.close()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
        XCTAssertNotNil(worker.sync {}, "the worker's run loop is stuck")  // no callout in progress from here on
        let entries = recorder.snapshot.entries.count
        XCTAssertTrue(server.waitForFinished(1, timeout: shortTimeout), "the peer's sends did not fail")
        XCTAssertNotNil(worker.sync { settle() })
        XCTAssertEqual(recorder.snapshot.entries.count, entries, "a callout started after close() returned")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
    }

    /// `close()` on both streams from this thread while the delegate sits inside a `hasBytesAvailable`
    /// callout on a worker's run loop: close does not wait for the callout; the callout's own read and
    /// write, made after the close, return -1 and see `.closed`; no further callout comes.
    func testCloseFromAnotherThreadDuringACallout() throws {
        let port = try startSocatEcho()
        let worker = RunLoopThread(name: "test.delegate-thread")
        addCleanup { worker.stop() }
        let handlesBefore = SocketHandle.openCount
        let pair = makePair(port: port)
        let (input, output) = pair
        let inCallout = Signal()
        let closed = Signal()
        let seen = Locked<[Stream.Event]>([])
        let wrote = Locked(false)
        let outcome = Locked<(read: Int, write: Int, status: Stream.Status)?>(nil)
        let delegate = ClosureDelegate { stream, event in
            seen.mutate { $0.append(event) }
            if event == .hasSpaceAvailable, !wrote.value {
                wrote.value = true
                _ = output.write(Array("x".utf8), maxLength: 1)
            }
            guard event == .hasBytesAvailable, outcome.value == nil else { return }
            inCallout.raise()
            guard closed.wait(timeout: 10) else { return }
            var byte: UInt8 = 0
            let read = input.read(&byte, maxLength: 1)
            let written = output.write(&byte, maxLength: 1)
            outcome.value = (read, written, input.streamStatus)
        }
        XCTAssertNotNil(
            worker.sync { () -> Void in
                for stream in [input as Stream, output as Stream] {
                    stream.delegate = delegate
                    stream.schedule(in: .current, forMode: .default)
                }
                input.open()
                output.open()
            })
        XCTAssertTrue(inCallout.wait(timeout: shortTimeout), "no hasBytesAvailable: \(seen.value.map(\.name))")
        input.close()
        output.close()
        closed.raise()
        XCTAssertNotNil(worker.sync {})
        let result = try XCTUnwrap(outcome.value, "the callout did not finish")
        XCTAssertEqual(result.read, -1)
        XCTAssertEqual(result.write, -1)
        XCTAssertEqual(result.status, .closed)
        let count = seen.value.count
        XCTAssertNotNil(worker.sync { settle() })
        XCTAssertEqual(seen.value.count, count, "callouts after close: \(seen.value.map(\.name))")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == handlesBefore },
            "open sockets: \(SocketHandle.openCount), expected \(handlesBefore)")
        withExtendedLifetime(delegate) {}
    }
}

// MARK: - helpers

/// A delegate that runs a closure (on the delegate's thread).
private final class ClosureDelegate: NSObject, StreamDelegate {
    let body: (Stream, Stream.Event) -> Void
    init(_ body: @escaping (Stream, Stream.Event) -> Void) { self.body = body }
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) { body(aStream, eventCode) }
}

/// The only owner of a pair (the Apple-guide client that keeps its streams in properties), its
/// delegate on this run loop; at `trigger` it closes both streams (if `closes`) and lets go of them,
/// inside the callout. On `hasSpaceAvailable` it writes "ping" once.
private final class PairOwner: NSObject, StreamDelegate {
    private var input: InputStream?
    private var output: OutputStream?
    private let trigger: (StreamRole, Stream.Event)
    private let closes: Bool
    private var wrote = false
    private(set) var events: [(StreamRole, Stream.Event)] = []

    init(trigger: (StreamRole, Stream.Event), closes: Bool) {
        self.trigger = trigger
        self.closes = closes
    }

    var trace: String { events.map { "\($0.0).\($0.1.name)" }.joined(separator: ", ") }

    func own(_ pair: StreamPair) {
        input = pair.input
        output = pair.output
        for stream in [pair.input as Stream, pair.output as Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        let role: StreamRole = aStream === input ? .input : aStream === output ? .output : .unknown
        events.append((role, eventCode))
        if role == trigger.0 && eventCode == trigger.1 {
            if closes {
                input?.close()
                output?.close()
            }
            input = nil
            output = nil
            return
        }
        if eventCode == .hasSpaceAvailable, !wrote, let output {
            wrote = true
            XCTAssertEqual(output.write(Array("ping".utf8), maxLength: 4), 4)
        }
    }
}

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
                let n = outgoing[start..<end].withUnsafeBytes {
                    output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: end - start)
                }
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
