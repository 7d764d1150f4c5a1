#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import TestPeers
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// A listener in a process that has run out of file descriptors.
final class ListenerExhaustionTests: SocketStreamsTestCase {

    /// Connections queue while accept(2) fails with EMFILE: the run loop must not spin on the
    /// still-readable listening socket, and once fds are free again the queued connections arrive.
    func testOutOfDescriptorsPausesAcceptingInsteadOfSpinning() throws {
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        addCleanup { listener.close() }
        let acceptedPairs = UncheckedBox<[(SocketInputStream, SocketOutputStream)]>([])
        listener.start(in: .current) { acceptedPairs.value.append(($0, $1)) }
        addCleanup {
            for (input, output) in acceptedPairs.value {
                input.close()
                output.close()
            }
        }
        var accepted: [(SocketInputStream, SocketOutputStream)] { acceptedPairs.value }

        // The client is another process, so only this process runs out of descriptors. It connects
        // when told to (a line on stdin), says so, and holds its connections until stdin closes.
        let client = Process()
        client.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        client.arguments = [
            "python3", "-u", "-c",
            """
            import socket, sys
            sys.stdin.readline()
            held = [socket.create_connection(("127.0.0.1", \(listener.port))) for _ in range(3)]
            print("connected", flush=True)
            sys.stdin.read()
            """,
        ]
        let toClient = Pipe()
        let fromClient = Pipe()
        client.standardInput = toClient
        client.standardOutput = fromClient
        try client.run()
        addCleanup {
            try? toClient.fileHandleForWriting.close()
            _ = ChildExit.waitOrEnd(client, timeout: 30)
        }

        // Run the loop once first: libdispatch creates the main queue's wake-up fd on the first run,
        // and traps if it cannot.
        _ = RunLoop.current.run(mode: .default, before: Date())

        // No new fd fits below the soft limit from here on.
        let restore = tightenDescriptorLimit()
        XCTAssertEqual(open("/dev/null", O_RDONLY), -1, "a descriptor was still free")

        toClient.fileHandleForWriting.write(Data("go\n".utf8))
        var said = Data()
        while !said.contains(UInt8(ascii: "\n")) {
            let chunk = fromClient.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            said.append(chunk)
        }
        guard String(decoding: said, as: UTF8.self).hasPrefix("connected") else {
            restore()
            return XCTFail("client did not connect: \(String(decoding: said, as: UTF8.self))")
        }

        // Half a second of run loop with three connections queued and no descriptor to take them.
        let cpuBefore = processCPUSeconds()
        _ = runUntil(timeout: 0.5) { false }
        let cpuUsed = processCPUSeconds() - cpuBefore
        restore()
        XCTAssertEqual(accepted.count, 0, "accepted without a free descriptor?")
        XCTAssertLessThan(cpuUsed, 0.25, "the run loop spun on the listening socket for \(cpuUsed) s of CPU")

        XCTAssertTrue(runUntil(timeout: shortTimeout) { accepted.count == 3 }, "accepted \(accepted.count) of 3 after fds were freed")
    }

    private func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }
}
