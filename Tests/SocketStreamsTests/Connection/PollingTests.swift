import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Unscheduled streams used in polling / blocking style (Stream Programming Guide,
/// "Polling Versus Run-Loop Scheduling"): no run loop is ever run by the client.
final class PollingTests: SocketStreamsTestCase {

    /// Spin on hasSpaceAvailable (which never blocks and becomes true by itself once the
    /// connection is up), write, then read the echo with blocking reads.
    func testPollingClientEchoesThroughSocat() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        let message = Data("polling client says hello\n".utf8)

        let outcome = callWithDeadline(10) { () -> (spun: Bool, wrote: Bool, echo: Data) in
            pair.input.open()
            pair.output.open()
            let deadline = Date(timeIntervalSinceNow: 5)
            var ready = false
            while Date() < deadline {
                if pair.output.hasSpaceAvailable {
                    ready = true
                    break
                }
                Thread.sleep(forTimeInterval: 0.001)  // polling interval, bounded by the deadline
            }
            guard ready else { return (false, false, Data()) }
            let wrote = writeAll(pair.output, message)
            return (true, wrote, readUpTo(pair.input, count: message.count).data)
        }
        let result = try XCTUnwrap(outcome, "polling client blocked for more than 10 s")
        XCTAssertTrue(result.spun, "hasSpaceAvailable never became true (status \(pair.output.streamStatus.name))")
        XCTAssertTrue(result.wrote, "write returned <= 0: \(String(describing: pair.output.streamError))")
        XCTAssertEqual(result.echo, message)
        XCTAssertEqual(pair.input.streamStatus, .open)
        XCTAssertEqual(pair.output.streamStatus, .open)
        pair.input.close()
        pair.output.close()
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
    }

    /// read() straight after open() waits for the connection and then for the first byte:
    /// it neither fails while opening nor returns before the peer has sent anything.
    func testReadStraightAfterOpenBlocksUntilConnectedAndDataArrives() throws {
        let go = Signal()
        let server = try startRawServer { connection in
            guard go.wait(timeout: 10) else { return }
            try? connection.write("HELLO")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(port: server.port)
        pair.input.open()
        pair.output.open()
        let statusAfterOpen = pair.input.streamStatus
        XCTAssertTrue([.opening, .open].contains(statusAfterOpen), "status after open: \(statusAfterOpen.name)")

        let done = Signal()
        let result = Locked<(Int, Data)?>(nil)
        let input = UncheckedBox(pair.input)
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = input.value.read(&buffer, maxLength: 64)
            result.value = (n, Data(buffer[0..<max(n, 0)]))
            done.raise()
        }
        reader.start()

        XCTAssertTrue(server.waitForAccepted(1, timeout: shortTimeout), "never connected")
        XCTAssertFalse(done.wait(timeout: 0.3), "read returned before any data was sent: \(String(describing: result.value))")
        go.raise()
        XCTAssertTrue(done.wait(timeout: shortTimeout), "read did not return after data arrived")
        let (count, data) = try XCTUnwrap(result.value)
        XCTAssertEqual(count, 5)
        XCTAssertEqual(String(decoding: data, as: UTF8.self), "HELLO")
        XCTAssertEqual(pair.input.streamStatus, .open)
    }

    /// write() straight after open() waits for the connection, then moves at least one byte.
    func testWriteStraightAfterOpenBlocksUntilConnected() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        let message = Data("written while opening".utf8)
        let outcome = callWithDeadline(10) { () -> (Int, Data) in
            pair.output.open()
            pair.input.open()
            let written = message.withUnsafeBytes {
                pair.output.write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: message.count)
            }
            guard written > 0 else { return (written, Data()) }
            let rest = message.subdata(in: written..<message.count)
            guard writeAll(pair.output, rest) else { return (-1, Data()) }
            return (written, readUpTo(pair.input, count: message.count).data)
        }
        let (written, echo) = try XCTUnwrap(outcome, "blocked for more than 10 s")
        XCTAssertGreaterThanOrEqual(written, 1, "write failed: \(String(describing: pair.output.streamError))")
        XCTAssertEqual(echo, message)
    }

    /// hasBytesAvailable never blocks: false while the peer is silent, true (by itself,
    /// without a run loop) once it has sent something.
    func testHasBytesAvailablePollsWithoutBlocking() throws {
        let go = Signal()
        let server = try startRawServer { connection in
            guard go.wait(timeout: 10) else { return }
            try? connection.write("data")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(port: server.port)
        pair.input.open()
        pair.output.open()
        XCTAssertTrue(server.waitForAccepted(1, timeout: shortTimeout))

        let early = callWithDeadline(shortTimeout) { pair.input.hasBytesAvailable }
        XCTAssertNotNil(early, "hasBytesAvailable blocked")
        XCTAssertEqual(early, false, "bytes reported before the peer sent any")

        go.raise()
        let deadline = Date(timeIntervalSinceNow: shortTimeout)
        var available = false
        while Date() < deadline {
            if pair.input.hasBytesAvailable {
                available = true
                break
            }
            Thread.sleep(forTimeInterval: 0.001)
        }
        XCTAssertTrue(available, "hasBytesAvailable never became true")
        var buffer = [UInt8](repeating: 0, count: 16)
        XCTAssertEqual(pair.input.read(&buffer, maxLength: 16), 4)
    }

    /// Blocking reads deliver everything, then 0 at the peer's FIN (status .atEnd), and 0 again.
    func testBlockingReadsReturnZeroAtEndOfStream() throws {
        let payload = testPayload(200_000, seed: 3)
        let server = try startRawServer { connection in
            try? connection.write(payload)
            connection.shutdownWrite()
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(port: server.port)
        let outcome = callWithDeadline(10) { () -> (Data, Int, Int) in
            pair.input.open()
            pair.output.open()
            let (data, last) = readToEnd(pair.input)
            var buffer = [UInt8](repeating: 0, count: 8)
            let again = pair.input.read(&buffer, maxLength: 8)
            return (data, last, again)
        }
        let (data, last, again) = try XCTUnwrap(outcome, "blocked for more than 10 s")
        XCTAssertEqual(data.count, payload.count)
        XCTAssertTrue(data == payload)
        XCTAssertEqual(last, 0)
        XCTAssertEqual(again, 0, "read at end must keep returning 0")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
        XCTAssertEqual(pair.output.streamStatus, .open, "the output stream is not told about the FIN")
    }

    /// streamStatus of an unscheduled stream moves on by itself (no run loop runs).
    func testStatusOfUnscheduledStreamBecomesOpen() throws {
        let server = try startRawServer { connection in
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(port: server.port)
        pair.input.open()
        pair.output.open()
        let deadline = Date(timeIntervalSinceNow: shortTimeout)
        while Date() < deadline && (pair.input.streamStatus != .open || pair.output.streamStatus != .open) {
            Thread.sleep(forTimeInterval: 0.001)
        }
        XCTAssertEqual(pair.input.streamStatus, .open)
        XCTAssertEqual(pair.output.streamStatus, .open)
    }
}
