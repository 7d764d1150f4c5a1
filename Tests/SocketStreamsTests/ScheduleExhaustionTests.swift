#if canImport(Glibc)
import Glibc
#endif
import Foundation
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
            XCTAssertEqual(error.localizedDescription,
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
        XCTAssertTrue(runUntil(timeout: shortTimeout) {
            recorder.has(.errorOccurred, on: .input) && recorder.has(.errorOccurred, on: .output)
        }, recorder.trace)
        assertPOSIXError(pair.input.streamError, [EMFILE])
        assertPOSIXError(pair.output.streamError, [EMFILE])
    }
}
