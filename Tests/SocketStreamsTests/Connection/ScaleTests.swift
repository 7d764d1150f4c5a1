import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Many pairs at once, and no file-descriptor leak over many pairs of every kind.
final class ScaleTests: SocketStreamsTestCase {

    override func setUp() {
        super.setUp()
        // Each in-process connection costs two fds (client and accepted side).
        RawSocket.raiseOpenFileLimit(to: 16_384)
    }

    /// Opens `count` pairs to `port`, each sending its own message, all scheduled on the
    /// main run loop at once; waits for every echo. Returns the pairs and their recorders.
    private func exchangeConcurrently(
        count: Int, port: Int, timeout: TimeInterval, tag: String,
        file: StaticString = #filePath, line: UInt = #line
    )
        -> [(pair: StreamPair, recorder: DelegateRecorder, message: Data)]
    {
        var clients: [(pair: StreamPair, recorder: DelegateRecorder, message: Data)] = []
        for index in 0..<count {
            let message = Data("\(tag) #\(index) says hello\n".utf8)
            let pair = createStreamPair(host: "127.0.0.1", port: port)
            closeAfterTest(pair)
            let recorder = startRecorder(pair, recorder: DelegateRecorder(outgoing: message))
            clients.append((pair, recorder, message))
        }
        let allEchoed = runUntil(timeout: timeout) {
            clients.allSatisfy { $0.recorder.received.count >= $0.message.count }
        }
        let missing = clients.filter { $0.recorder.received != $0.message }
        XCTAssertTrue(
            allEchoed,
            "\(missing.count) of \(count) pairs got no (complete) echo; first: " + (missing.first.map { $0.recorder.trace } ?? "-"),
            file: file, line: line)
        XCTAssertEqual(missing.count, 0, file: file, line: line)
        let errored = clients.filter { !$0.recorder.snapshot.errors.isEmpty }
        XCTAssertEqual(
            errored.count, 0, "errors: \(errored.first.map { "\($0.recorder.snapshot.errors)" } ?? "-")",
            file: file, line: line)
        return clients
    }

    /// 1,000 concurrent pairs against our own StreamListener, all exchanging a message.
    func testThousandConcurrentPairsAgainstStreamListener() throws {
        let limit = RawSocket.raiseOpenFileLimit(to: 16_384)
        XCTAssertGreaterThanOrEqual(limit, 4_096, "RLIMIT_NOFILE too low for 2,000 fds")
        let server = try startStreamEchoServer(host: "127.0.0.1", backlog: 1024)

        let clients = exchangeConcurrently(count: 1_000, port: server.port, timeout: 30, tag: "concurrent")
        XCTAssertEqual(server.acceptedCount, 1_000)
        XCTAssertEqual(server.openConnections, 1_000, "every pair must still be connected")
        for client in clients {
            XCTAssertEqual(client.recorder.snapshot.events(.input).first, .openCompleted)
        }

        for client in clients {
            client.pair.input.close()
            client.pair.output.close()
        }
        XCTAssertTrue(
            runUntil(timeout: 10) { server.openConnections == 0 },
            "\(server.openConnections) server connections saw no EOF after the clients closed")
    }

    /// 2,000 pairs of every kind — normal exchanges, refused ports, unresolvable names, pairs
    /// released without close() (while opening and once open) — leave no fd behind.
    /// The baseline is taken after a warm-up of each kind, so fds the library keeps for good
    /// (its stream thread, per-run-loop wake-up fds) are already counted.
    func testNoFileDescriptorLeakOverTwoThousandPairs() throws {
        guard requireLoopbackOnlyNetwork() else { return }
        let server = try startStreamEchoServer(host: "127.0.0.1", backlog: 1024)
        let refusedPort = try RawSocket.unusedPort()

        // Warm-up: one of each kind, then let everything settle.
        _ = RunLoop.socketStreams
        _ = exchangeConcurrently(count: 2, port: server.port, timeout: 10, tag: "warm-up")
        failConcurrently(count: 1, host: "127.0.0.1", port: refusedPort)
        failConcurrently(count: 1, host: "nonexistent.invalid", port: 80)
        releaseWithoutClose(count: 2, port: server.port, waitForOpen: true)
        closeAllAndSettle(server: server)
        let baseline = RawSocket.openDescriptorCount()
        XCTAssertGreaterThan(baseline, 0)

        var pairsUsed = 0
        // 1,000 normal exchanges, 100 at a time, each closed by the client.
        for batch in 0..<10 {
            let clients = exchangeConcurrently(count: 100, port: server.port, timeout: 15, tag: "batch \(batch)")
            for client in clients {
                client.pair.input.close()
                client.pair.output.close()
            }
            pairsUsed += clients.count
        }
        // 580 refused connections.
        for size in [100, 100, 100, 100, 100, 80] {
            pairsUsed += failConcurrently(count: size, host: "127.0.0.1", port: refusedPort)
        }
        // 20 unresolvable names (kept small: each one is a real lookup through the system resolver).
        pairsUsed += failConcurrently(count: 20, host: "nonexistent.invalid", port: 80)
        // 400 released without close: 200 while still opening, 200 once open.
        pairsUsed += releaseWithoutClose(count: 200, port: server.port, waitForOpen: false)
        pairsUsed += releaseWithoutClose(count: 200, port: server.port, waitForOpen: true)
        XCTAssertEqual(pairsUsed, 2_000)

        closeAllAndSettle(server: server)
        var after = RawSocket.openDescriptorCount()
        // Closing is allowed to finish asynchronously on the library's thread.
        _ = runUntil(timeout: 10) {
            after = RawSocket.openDescriptorCount()
            return after <= baseline
        }
        XCTAssertLessThanOrEqual(
            after - baseline, 2,
            "fd count grew from \(baseline) to \(after) over 2,000 pairs")
    }

    // MARK: helpers

    /// Opens `count` pairs that must fail (refused / unresolvable), waits for errorOccurred on
    /// both streams of each, closes them. Returns `count`.
    @discardableResult
    private func failConcurrently(
        count: Int, host: String, port: Int,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Int {
        var clients: [(StreamPair, DelegateRecorder)] = []
        for _ in 0..<count {
            let pair = createStreamPair(host: host, port: port)
            closeAfterTest(pair)
            clients.append((pair, startRecorder(pair)))
        }
        let allFailed = runUntil(timeout: 15) {
            clients.allSatisfy { $0.1.has(.errorOccurred, on: .input) && $0.1.has(.errorOccurred, on: .output) }
        }
        XCTAssertTrue(allFailed, "not every pair to \(host):\(port) failed", file: file, line: line)
        for (pair, _) in clients {
            pair.input.close()
            pair.output.close()
        }
        return count
    }

    /// Opens `count` unscheduled pairs to `port` and drops them without close(), either at
    /// once (still connecting) or once both report .open. Returns `count`.
    @discardableResult
    private func releaseWithoutClose(
        count: Int, port: Int, waitForOpen: Bool,
        file: StaticString = #filePath, line: UInt = #line
    ) -> Int {
        var pairs: [StreamPair] = []
        for _ in 0..<count {
            let pair = createStreamPair(host: "127.0.0.1", port: port)
            pair.input.open()
            pair.output.open()
            pairs.append(pair)
        }
        if waitForOpen {
            let allOpen = runUntil(timeout: 15) {
                pairs.allSatisfy { $0.input.streamStatus == .open && $0.output.streamStatus == .open }
            }
            XCTAssertTrue(allOpen, "not every pair opened", file: file, line: line)
        }
        pairs.removeAll()
        return count
    }

    /// Waits until the echo server has no connection left (every client socket was closed,
    /// so every server side saw EOF and closed too).
    private func closeAllAndSettle(server: StreamEchoServer, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(
            runUntil(timeout: 15) { server.openConnections == 0 },
            "\(server.openConnections) server connections left open", file: file, line: line)
    }
}
