import XCTest

@testable import SocketStreamsNetwork

/// `ConnectionLifecycle` as plain values: every state against every event.
final class ConnectionLifecycleTests: XCTestCase {
    private let refused = NWError.posix(.ECONNREFUSED)
    private let badCertificate = NWError.tls(-9808)

    private func started() -> ConnectionLifecycle {
        var lifecycle = ConnectionLifecycle()
        XCTAssertEqual(lifecycle.handle(.start), [.report(.preparing), .beginAttempt])
        return lifecycle
    }

    func testAConnectGoesPreparingThenReady() {
        var lifecycle = started()
        XCTAssertEqual(lifecycle.handle(.connected), [.report(.ready)])
        XCTAssertTrue(lifecycle.isReady)
        XCTAssertEqual(lifecycle.handle(.start), [], "a second start is ignored")
    }

    func testARefusedConnectWaitsUntilRestarted() {
        var lifecycle = started()
        XCTAssertEqual(lifecycle.handle(.attemptClosed(refused)), [.report(.waiting(refused))])
        XCTAssertEqual(lifecycle.state, .waiting(refused))
        XCTAssertEqual(lifecycle.handle(.restart), [.report(.preparing), .beginAttempt])
        XCTAssertEqual(lifecycle.handle(.restart), [], "a restart while preparing is ignored")
        XCTAssertEqual(lifecycle.handle(.connected), [.report(.ready)])
    }

    func testEveryWaitableErrorWaitsAndTheRestFail() {
        for error: NWError in [.posix(.ECONNREFUSED), .posix(.ETIMEDOUT), .posix(.ENETUNREACH), .posix(.ENOENT), .dns(-65554)] {
            var lifecycle = started()
            XCTAssertEqual(lifecycle.handle(.attemptClosed(error)), [.report(.waiting(error))], "\(error)")
        }
        for error: NWError in [.tls(-9808), .tls(-9836), .posix(.EPROTONOSUPPORT), .posix(.EINVAL), .dns(-65544)] {
            var lifecycle = started()
            XCTAssertEqual(lifecycle.handle(.attemptClosed(error)), [.failOutstanding(error), .report(.failed(error))], "\(error)")
            XCTAssertEqual(lifecycle.handle(.restart), [], "a failed connection does not restart")
        }
    }

    func testAnAcceptedConnectionNeverWaits() {
        var lifecycle = ConnectionLifecycle(retries: false)
        _ = lifecycle.handle(.start)
        XCTAssertEqual(lifecycle.handle(.attemptClosed(refused)), [.failOutstanding(refused), .report(.failed(refused))])
    }

    func testAResetWhileReadyFails() {
        var lifecycle = started()
        _ = lifecycle.handle(.connected)
        let reset = NWError.posix(.ECONNRESET)
        XCTAssertEqual(lifecycle.handle(.attemptClosed(reset)), [.failOutstanding(reset), .report(.failed(reset))])
    }

    func testTLSFailureFails() {
        var lifecycle = started()
        XCTAssertEqual(
            lifecycle.handle(.attemptClosed(badCertificate)), [.failOutstanding(badCertificate), .report(.failed(badCertificate))])
    }

    func testCancelClosesTheLiveAttemptAndReportsCancelledLast() {
        for connected in [false, true] {
            var lifecycle = started()
            if connected { _ = lifecycle.handle(.connected) }
            XCTAssertEqual(lifecycle.handle(.cancel), [.closeAttempt])
            XCTAssertEqual(lifecycle.handle(.cancel), [], "a second cancel is ignored")
            XCTAssertEqual(
                lifecycle.handle(.connected), connected ? [] : [.closeAttempt], "a connect that lands after cancel is closed, not reported")
            XCTAssertFalse(lifecycle.isReady)
            XCTAssertEqual(lifecycle.handle(.attemptClosed(nil)), [.failOutstanding(.posix(.ECANCELED)), .report(.cancelled)])
            for event: ConnectionLifecycle.Event in [.start, .connected, .restart, .cancel, .attemptClosed(refused)] {
                XCTAssertEqual(lifecycle.handle(event), [], "nothing after cancelled: \(event)")
            }
        }
    }

    func testCancelWhileWaitingOrFailedReportsCancelledAtOnce() {
        var waiting = started()
        _ = waiting.handle(.attemptClosed(refused))
        XCTAssertEqual(waiting.handle(.cancel), [.failOutstanding(.posix(.ECANCELED)), .report(.cancelled)])
        var failed = started()
        _ = failed.handle(.attemptClosed(badCertificate))
        XCTAssertEqual(failed.handle(.cancel), [.failOutstanding(.posix(.ECANCELED)), .report(.cancelled)])
    }

    func testCancelBeforeStartReportsNothing() {
        var lifecycle = ConnectionLifecycle()
        XCTAssertEqual(lifecycle.handle(.cancel), [])
        XCTAssertEqual(lifecycle.state, .cancelled)
        XCTAssertEqual(lifecycle.handle(.start), [])
    }

    func testEventsWithoutALiveAttemptAreIgnored() {
        var lifecycle = ConnectionLifecycle()
        XCTAssertEqual(lifecycle.handle(.connected), [])
        XCTAssertEqual(lifecycle.handle(.attemptClosed(refused)), [])
        XCTAssertEqual(lifecycle.handle(.restart), [])
        XCTAssertEqual(lifecycle.state, .setup)
    }
}
