#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest
import TestPeers

/// Checks of the test harness itself (peers, raw sockets, run-loop helpers), independent of
/// the library: if one of these fails, the library tests' verdicts cannot be trusted.
final class TestSupportTests: SocketStreamsTestCase {

    func testHTTPServerPeerServesFilesAndStops() throws {
        let body = Data("served by python\n".utf8)
        let directory = try makeTemporaryDirectory()
        try body.write(to: directory.appendingPathComponent("f.txt"))
        let (peer, port) = try Peer.httpServer(family: .v4, directory: directory)
        addCleanup { peer.stop() }

        let fd = try RawSocket.connectTo(family: .v4, port: port)
        defer { close(fd) }
        try RawSocket.writeAll(fd, Data("GET /f.txt HTTP/1.0\r\n\r\n".utf8))
        let (reply, eof) = try RawSocket.readToEOF(fd, timeout: 5)
        XCTAssertTrue(eof)
        let parsed = try XCTUnwrap(HTTPReply(reply))
        XCTAssertEqual(parsed.statusLine, "HTTP/1.0 200 OK")
        XCTAssertEqual(parsed.body, body)

        peer.stop()
        XCTAssertThrowsError(try RawSocket.connectTo(family: .v4, port: port), "peer still listening after stop()")
    }

    func testSocatEchoPeersEchoOnBothFamilies() throws {
        for family in IPFamily.allCases {
            let port = try startSocatEcho(family)
            let fd = try RawSocket.connectTo(family: family, port: port)
            defer { close(fd) }
            try RawSocket.writeAll(fd, Data("echo \(family)".utf8))
            XCTAssertEqual(try RawSocket.readExactly(fd, count: 7, timeout: 5), Data("echo \(family)".utf8))
        }
    }

    func testSocatUnixEchoPeerIsReadyWhenStarted() throws {
        let path = try startSocatUnixEcho()
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        let fd = socket(AF_UNIX, RawSocket.streamType, 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        XCTAssertEqual(connected, 0, "connect: errno \(errno)")
        try RawSocket.writeAll(fd, Data("unix".utf8))
        XCTAssertEqual(try RawSocket.readExactly(fd, count: 4, timeout: 5), Data("unix".utf8))
    }

    func testPeerReportsAMissingToolLoudly() {
        XCTAssertThrowsError(try Peer.locate("definitely-not-a-tool-\(UUID().uuidString)", hint: "none"))
    }

    /// The backlog-full listener makes further connects hang (the basis of the timeout tests).
    func testBacklogFullListenerMakesConnectsHang() throws {
        for family in IPFamily.allCases {
            let blackhole = try BacklogFullListener(family: family)
            let fd = socket(family.domain, RawSocket.streamType, 0)
            defer { close(fd) }
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            let result = RawSocket.withSocketAddress(family: family, port: blackhole.port) { connect(fd, $0, $1) }
            XCTAssertEqual(result, -1)
            XCTAssertEqual(errno, EINPROGRESS)
            XCTAssertFalse(try RawSocket.waitWritable(fd, timeout: 0.5), "\(family): connect completed")
        }
    }

    /// The same port number can hold a hanging v6 listener and a working v4 one.
    func testSamePortInBothFamilies() throws {
        let server = try startRawServer(.v4) { connection in try? connection.write("v4") }
        let blackhole = try BacklogFullListener(family: .v6, port: server.port)
        XCTAssertEqual(blackhole.port, server.port)
        let fd = try RawSocket.connectTo(family: .v4, port: server.port)
        defer { close(fd) }
        XCTAssertEqual(try RawSocket.readExactly(fd, count: 2, timeout: 5), Data("v4".utf8))
    }

    func testRawServerHalfCloseAndCounters() throws {
        let server = try startRawServer { connection in
            try? connection.write("bye")
            connection.shutdownWrite()
            _ = try? connection.readToEOF(timeout: 5)
        }
        let fd = try RawSocket.connectTo(family: .v4, port: server.port)
        XCTAssertTrue(server.waitForAccepted(1, timeout: 5))
        let (data, eof) = try RawSocket.readToEOF(fd, timeout: 5)
        XCTAssertEqual(data, Data("bye".utf8))
        XCTAssertTrue(eof)
        close(fd)
        XCTAssertTrue(server.waitForFinished(1, timeout: 5))
    }

    func testDescriptorCountingAndIdentity() throws {
        let before = RawSocket.openDescriptorCount()
        let (a, b) = try RawSocket.socketPair()
        XCTAssertEqual(RawSocket.openDescriptorCount(), before + 2)
        let identity = try XCTUnwrap(RawSocket.identity(of: a))
        XCTAssertTrue(RawSocket.isOpen(a, sameAs: identity))
        close(a)
        close(b)
        XCTAssertFalse(RawSocket.isOpen(a, sameAs: identity))
        XCTAssertEqual(RawSocket.openDescriptorCount(), before)
        XCTAssertGreaterThanOrEqual(RawSocket.raiseOpenFileLimit(to: 4096), 4096)
    }

    func testRunUntilHonoursItsDeadline() {
        let started = Date()
        XCTAssertFalse(runUntil(timeout: 0.2) { false })
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(elapsed, 0.2)
        XCTAssertLessThan(elapsed, 1.0)
        XCTAssertTrue(runUntil(timeout: 0.2) { true })
    }

    func testRunUntilDeliversTimersInTheRequestedModeOnly() {
        let mode = RunLoop.Mode("TestSupportTests.Mode")
        let fired = Locked(false)
        let timer = Timer(timeInterval: 0.05, repeats: false) { _ in fired.value = true }
        RunLoop.current.add(timer, forMode: mode)
        runFor(0.2, mode: .default)
        XCTAssertFalse(fired.value)
        XCTAssertTrue(runUntil(timeout: 2, mode: mode) { fired.value })
    }

    func testRunLoopThreadRunsJobsOnItsThread() {
        let worker = RunLoopThread(name: "TestSupportTests.worker")
        defer { worker.stop() }
        let ranOn = worker.sync { Thread.current }
        XCTAssertTrue(ranOn === worker.thread)
        XCTAssertFalse(isMainThread(worker.thread))
        let fired = Signal()
        worker.sync {
            RunLoop.current.add(Timer(timeInterval: 0.01, repeats: false) { _ in fired.raise() }, forMode: .default)
        }
        XCTAssertTrue(fired.wait(timeout: 2), "the worker does not run its run loop")
    }

    func testCallWithDeadlineReturnsNilWhenTheBodyHangs() {
        let release = Signal()
        XCTAssertNil(callWithDeadline(0.2) { release.wait(timeout: 5) })
        release.raise()
        XCTAssertEqual(callWithDeadline(2) { 42 }, 42)
    }

    func testGetaddrinfoFailsForTheInvalidName() {
        guard requireLoopbackOnlyNetwork() else { return }
        XCTAssertNotEqual(RawSocket.getaddrinfoCode(host: "nonexistent.invalid"), 0)
        XCTAssertEqual(RawSocket.getaddrinfoCode(host: "localhost"), 0)
    }
}
