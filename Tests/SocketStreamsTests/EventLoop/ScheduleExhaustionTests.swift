#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Scheduling on a run loop the library has no event source on yet needs three fds (epoll,
/// eventfd, timerfd). With none free, the stream gets EMFILE as its error instead of a trap.
final class ScheduleExhaustionTests: SocketStreamsTestCase {

    /// Runs `body` with no fd free, then restores the limit.
    private func withNoFreeDescriptors(_ body: () -> Void) {
        let restore = tightenDescriptorLimit()
        XCTAssertEqual(open("/dev/null", O_RDONLY), -1, "a descriptor was still free")
        body()
        restore()
    }

    /// A fresh thread with a running run loop, so CoreFoundation's own fds for it exist already.
    private func freshRunLoop() -> RunLoopThread {
        let worker = RunLoopThread(name: "ScheduleExhaustionTests.worker")
        addCleanup { worker.stop() }
        return worker
    }

    /// Starting the stream thread when no fd is free fails cleanly: a status poll on an opening pair
    /// (which moves its open to the stream thread) leaves the open where it was, and a new unscheduled
    /// pair fails with EMFILE, never a trap inside CoreFoundation (which cannot report failing to make
    /// its run loop's fds: a start holds the fds it will need until the new thread takes them). The
    /// stream thread is process-wide, so this runs in a child process where nothing has started it.
    func testStreamThreadStartFailsCleanlyWhenDescriptorsRunOut() throws {
        let scenario = "stream-thread-out-of-fds"
        if Self.childScenario == scenario {
            return try streamThreadOutOfDescriptorsScenario()
        }
        try runInChild(
            "SocketStreamsTests.ScheduleExhaustionTests/testStreamThreadStartFailsCleanlyWhenDescriptorsRunOut", scenario: scenario)
    }

    /// The reproduction: under `ulimit -n 256`, 1,000 delegate pairs opened on this thread's
    /// run loop (most fail with EMFILE), then a status poll on one still opening, which moves its
    /// open to the stream thread; and a new unscheduled pair opened while no fd is free.
    private func streamThreadOutOfDescriptorsScenario() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        var limit = rlimit()
        XCTAssertEqual(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit), 0)
        limit.rlim_cur = 256
        XCTAssertEqual(setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit), 0)
        var pairs: [StreamPair] = []
        for _ in 0..<1_000 {
            let pair = makePair(port: blackhole.port)
            _ = startRecorder(pair)
            pairs.append(pair)
        }
        let opening = try XCTUnwrap(pairs.first { $0.output.streamStatus == .opening }, "no pair still opening")
        XCTAssertTrue(pairs.contains { $0.input.streamStatus == .error }, "the limit was never reached")
        var spare: [Int32] = []
        while case let fd = open("/dev/null", O_RDONLY), fd >= 0 { spare.append(fd) }
        XCTAssertEqual(opening.input.streamStatus, .opening, "a status poll moves the open to the stream thread")
        let late = makePair(port: blackhole.port)
        late.input.open()
        let lateStatus = late.input.streamStatus
        spare.forEach { close($0) }
        XCTAssertEqual(lateStatus, .error)
        assertPOSIXError(late.input.streamError, [EMFILE])
        for pair in pairs {
            pair.input.close()
            pair.output.close()
        }
        // With fds free again, the stream thread starts and serves a new unscheduled pair.
        let again = makePair(port: blackhole.port)
        again.input.open()
        XCTAssertEqual(again.input.streamStatus, .opening)
        again.input.close()
        withExtendedLifetime(blackhole) {}
    }

    func testSchedulingAnUnopenedPairWithoutFreeDescriptorsFailsItsOpenWithEMFILE() throws {
        let server = try startRawServer { connection in _ = try? connection.readToEOF(timeout: 10) }
        let worker = freshRunLoop()
        let pair = makePair(port: server.port)
        withNoFreeDescriptors {
            pair.input.schedule(in: worker.runLoop, forMode: .default)
        }
        pair.input.open()
        pair.output.open()
        for stream in [pair.input as Stream, pair.output as Stream] {
            XCTAssertEqual(stream.streamStatus, .error)
            let error = try XCTUnwrap(stream.streamError as NSError?)
            XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
            XCTAssertEqual(error.code, Int(EMFILE))
            XCTAssertEqual(
                error.localizedDescription,
                "Could not watch 127.0.0.1 port \(server.port) on a run loop: Too many open files")
        }
    }

    func testSchedulingALivePairWithoutFreeDescriptorsFailsBothStreamsWithEMFILE() throws {
        let port = try startSocatEcho(.v4)
        let worker = freshRunLoop()
        let pair = makePair(port: port)
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "before"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "before" }, recorder.trace)
        withNoFreeDescriptors {
            pair.output.schedule(in: worker.runLoop, forMode: .default)
        }
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
            }, recorder.trace)
        assertPOSIXError(pair.input.streamError, [EMFILE])
        assertPOSIXError(pair.output.streamError, [EMFILE])
    }
}
