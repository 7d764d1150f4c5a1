import Foundation
import SocketStreamsTestSupport
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
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { SocketHandle.openCount == before },
            "open sockets: \(SocketHandle.openCount), expected \(before)")
    }
}

/// Connections hold their registrations and connector strongly (no side table on the hot path), and
/// those hold the connection back: every such cycle must end once both streams are gone.
final class ConnectionLifetimeTests: SocketStreamsTestCase {
    /// Runs `scenario` on a fresh pair to `host`:`port`, drops the streams, and checks that the
    /// connection is freed.
    private func assertFreed(
        _ what: String, host: String = "127.0.0.1", port: Int,
        file: StaticString = #filePath, line: UInt = #line,
        _ scenario: (StreamPair) -> Void
    ) {
        weak var connection: Connection?
        do {
            let pair = createStreamPair(host: host, port: port)
            connection = pair.input.connection
            scenario(pair)
            pair.input.delegate = nil
            pair.output.delegate = nil
        }
        // Late events and posted work release their references on this run loop.
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { connection == nil }, "\(what): the connection was not freed",
            file: file, line: line)
    }

    private func scheduleAndOpen(_ pair: StreamPair) {
        for stream in [pair.input, pair.output] as [Stream] {
            stream.schedule(in: .current, forMode: .default)
            stream.open()
        }
    }

    func testConnectionsAreFreedWhateverStateTheirStreamsWereDroppedIn() throws {
        let port = try startSocatEcho(.v4)
        // Live and scheduled, after an exchange; then closed explicitly, or only dropped.
        for closeFirst in [true, false] {
            assertFreed("live, closeFirst \(closeFirst)", port: port) { pair in
                let recorder = DelegateRecorder(sending: "ping")
                recorder.start(pair, on: .current, mode: .default)
                XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "ping" }, recorder.trace)
                if closeFirst {
                    pair.input.close()
                    pair.output.close()
                }
            }
        }
        // Refused: the connector's failure ends the open.
        assertFreed("refused", port: try RawSocket.unusedPort()) { pair in
            scheduleAndOpen(pair)
            XCTAssertTrue(runUntil(timeout: shortTimeout) { pair.input.streamStatus == .error })
        }
        // Dropped while the connect is in flight (a name to resolve first, so the connector waits).
        assertFreed("connecting", host: "localhost", port: try RawSocket.unusedPort()) { pair in
            scheduleAndOpen(pair)
        }
    }
}
