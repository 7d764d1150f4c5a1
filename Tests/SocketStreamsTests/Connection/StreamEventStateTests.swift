import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// CFNetwork's status machine and event filter (`_CFStreamSignalEvent`), as a table: every status
/// against every event, then the delivery order, merging, and what read/write/close do.
final class StreamEventStateTests: XCTestCase {
    private static let events: [Stream.Event] = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .errorOccurred, .endEncountered]

    /// A state in `status`, reached through the public operations only.
    private func state(_ status: Stream.Status) -> StreamEventState {
        var state = StreamEventState()
        switch status {
        case .notOpen: break
        case .opening: _ = state.open()
        case .open:
            _ = state.open()
            state.signal(.openCompleted, scheduled: false)
        case .atEnd:
            _ = state.open()
            state.signal(.openCompleted, scheduled: false)
            state.signal(.endEncountered, scheduled: false)
        case .closed:
            _ = state.open()
            state.signal(.openCompleted, scheduled: false)
            _ = state.close()
        case .error:
            _ = state.open()
            state.signal(.errorOccurred, scheduled: false)
        default: XCTFail("no path to \(status)")
        }
        XCTAssertEqual(state.status, status)
        return state
    }

    /// status × event → status afterwards, nil where the event is dropped.
    private let table: [Stream.Status: [Stream.Status?]] = [
        //                 openCompleted  hasBytes  hasSpace  errorOccurred  endEncountered
        .notOpen: [nil, nil, nil, nil, nil],
        .opening: [.open, .opening, .opening, .error, .atEnd],
        .open: [nil, .open, .open, .error, .atEnd],
        .atEnd: [nil, nil, nil, .error, nil],
        .closed: [nil, nil, nil, nil, nil],
        .error: [nil, nil, nil, nil, nil],
    ]

    func testEveryStatusAgainstEveryEvent() {
        for (status, row) in table {
            for (event, expected) in zip(Self.events, row) {
                for scheduled in [true, false] {
                    var state = state(status)
                    let accepted = state.signal(event, scheduled: scheduled)
                    let label = "\(status.name) + \(event.name), scheduled \(scheduled)"
                    XCTAssertEqual(accepted, expected != nil, label)
                    XCTAssertEqual(state.status, expected ?? status, label)
                    // Recorded for delivery only when accepted and scheduled somewhere.
                    XCTAssertEqual(UInt(state.pending), accepted && scheduled ? event.rawValue : 0, label)
                }
            }
        }
    }

    func testPendingEventsAreDeliveredLowestBitFirstAndMerged() {
        var state = state(.opening)
        state.signal(.hasSpaceAvailable, scheduled: true)
        state.signal(.openCompleted, scheduled: true)
        state.signal(.hasSpaceAvailable, scheduled: true)  // merges with the pending one
        state.signal(.errorOccurred, scheduled: true)
        var delivered: [Stream.Event] = []
        while let event = state.next() { delivered.append(event) }
        XCTAssertEqual(delivered, [.openCompleted, .hasSpaceAvailable, .errorOccurred])
        XCTAssertFalse(state.hasPending)
        XCTAssertNil(state.next())
    }

    func testHasEventsWaitForTheClientAndATransferConsumesThem() {
        var state = state(.open)
        XCTAssertFalse(state.awaitingClient)
        state.signal(.hasBytesAvailable, scheduled: true)
        XCTAssertTrue(state.awaitingClient)
        state.clientTransferred(.hasBytesAvailable)
        XCTAssertFalse(state.awaitingClient)
        XCTAssertEqual(state.pending, 0, "a read drops the pending hasBytesAvailable, as CFReadStreamRead does")
        state.signal(.hasSpaceAvailable, scheduled: true)
        state.signal(.endEncountered, scheduled: true)
        state.clientTransferred(.hasSpaceAvailable)
        XCTAssertEqual(UInt(state.pending), Stream.Event.endEncountered.rawValue, "only the consumed event goes")
    }

    func testCloseKeepsAnErrorAndDropsPendingEvents() {
        var failed = state(.open)
        failed.signal(.errorOccurred, scheduled: true)
        XCTAssertTrue(failed.close())
        XCTAssertEqual(failed.status, .error, "error is terminal")
        XCTAssertEqual(failed.pending, 0)

        var open = state(.open)
        open.signal(.hasBytesAvailable, scheduled: true)
        XCTAssertTrue(open.close())
        XCTAssertEqual(open.status, .closed)
        XCTAssertEqual(open.pending, 0)
        XCTAssertFalse(open.close(), "closing twice does nothing")

        var fresh = StreamEventState()
        XCTAssertFalse(fresh.close(), "closing a stream never opened does nothing")
        XCTAssertEqual(fresh.status, .notOpen)
    }

    func testOpenOnlyFromNotOpen() {
        for status in [Stream.Status.opening, .open, .atEnd, .closed, .error] {
            var state = state(status)
            XCTAssertFalse(state.open(), status.name)
            XCTAssertEqual(state.status, status)
        }
        var fresh = StreamEventState()
        XCTAssertTrue(fresh.open())
        XCTAssertEqual(fresh.status, .opening)
    }

    func testWithdrawHoldsBackAPendingHasEvent() {
        var state = state(.open)
        state.signal(.hasSpaceAvailable, scheduled: true)
        state.signal(.errorOccurred, scheduled: true)
        state.withdraw(.hasSpaceAvailable)
        XCTAssertFalse(state.awaitingClient)
        XCTAssertEqual(state.next(), .errorOccurred)
    }

    /// The raw values the state machine switches on are Foundation's.
    func testRawValuesMatchFoundation() {
        XCTAssertEqual(StreamEventState.openCompleted, Stream.Event.openCompleted.rawValue)
        XCTAssertEqual(StreamEventState.hasBytesAvailable, Stream.Event.hasBytesAvailable.rawValue)
        XCTAssertEqual(StreamEventState.hasSpaceAvailable, Stream.Event.hasSpaceAvailable.rawValue)
        XCTAssertEqual(StreamEventState.errorOccurred, Stream.Event.errorOccurred.rawValue)
        XCTAssertEqual(StreamEventState.endEncountered, Stream.Event.endEncountered.rawValue)
    }
}
