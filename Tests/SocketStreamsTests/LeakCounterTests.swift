import Foundation
@testable import SocketStreams
import XCTest

/// The library's own fd accounting (`SocketHandle.openCount`): every socket it opened is given back.
final class LeakCounterTests: SocketStreamsTestCase {

    /// Closing both streams while the connect still hangs closes the attempt's socket too, whether
    /// the connect waits on this run loop or (after a status poll) on the stream thread.
    func testClosingWhileConnectingReleasesTheAttempt() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let before = SocketHandle.openCount
        for pollFirst in [false, true] {
            let pair = createStreamPair(host: "127.0.0.1", port: blackhole.port)
            let recorder = startRecorder(pair)
            if pollFirst { XCTAssertEqual(pair.output.streamStatus, .opening) }  // moves it to the stream thread
            // A numeric address is connected to inside open(): the attempt's socket exists now.
            XCTAssertGreaterThan(SocketHandle.openCount, before, "no attempt socket while connecting?")
            pair.input.close()
            pair.output.close()
            XCTAssertFalse(recorder.has(.openCompleted, on: .input))
        }
        // The stream thread cancels asynchronously at most; wait for the count, with a deadline.
        XCTAssertTrue(runUntil(timeout: shortTimeout) { SocketHandle.openCount == before },
                      "open sockets: \(SocketHandle.openCount), expected \(before)")
    }
}
