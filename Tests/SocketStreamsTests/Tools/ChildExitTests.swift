#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import TestPeers
import XCTest

/// The tests' way to wait for a child process (`ChildExit`), which every command and tool the tests run
/// goes through: it must see a child's end even when Foundation cannot.
final class ChildExitTests: SocketStreamsTestCase {
    /// A child that closes every descriptor it inherited and lives on (as a daemon does) makes
    /// corelibs-foundation wait for it in a blocking `waitpid` on its one process-manager thread, and
    /// until it ends no other child's end is seen: `waitUntilExit()` on a second child that exits at once
    /// waits those 30 seconds (and, in a test that stops the first child only afterwards, forever).
    func testAnEndIsSeenWhileFoundationWaitsForAnotherChild() throws {
        let closer = Process()
        closer.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        closer.arguments = [
            "python3", "-c", "import os, sys, time; os.closerange(3, 1 << 16); print('closed', flush=True); time.sleep(30)",
        ]
        let said = Pipe()
        closer.standardOutput = said
        try closer.run()
        addCleanup {
            kill(closer.processIdentifier, SIGKILL)
            _ = ChildExit.wait(for: closer, timeout: 10)
        }
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let more = said.fileHandleForReading.availableData
            guard !more.isEmpty else { break }
            line += more
        }
        XCTAssertEqual(String(decoding: line, as: UTF8.self), "closed\n")

        let started = Date()
        let quick = Process()
        quick.executableURL = URL(fileURLWithPath: "/bin/sh")
        quick.arguments = ["-c", "exit 3"]
        try quick.run()
        XCTAssertEqual(ChildExit.wait(for: quick, timeout: 20), .exited(3))
        XCTAssertLessThan(Date().timeIntervalSince(started), 10, "the end was seen only once the other child ended")

        let signalled = Process()
        signalled.executableURL = URL(fileURLWithPath: "/bin/sh")
        signalled.arguments = ["-c", "kill -TERM $$"]
        try signalled.run()
        XCTAssertEqual(ChildExit.wait(for: signalled, timeout: 20), ChildExit(status: SIGTERM, signalled: true))
    }

    /// A child still running at the deadline: `wait` says so (nil), `waitOrEnd` ends it and says so too,
    /// and the child is gone afterwards.
    func testAChildStillRunningAtTheDeadlineIsEnded() throws {
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["60"]
        try sleeper.run()
        XCTAssertNil(ChildExit.wait(for: sleeper, timeout: 0.2))
        XCTAssertNil(ChildExit.waitOrEnd(sleeper, timeout: 0.2))
        XCTAssertEqual(kill(sleeper.processIdentifier, 0), -1, "the child is still there")
        XCTAssertEqual(errno, ESRCH)
    }
}
