#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import Synchronization
import XCTest

/// Blocking reads of a TLS stream that is scheduled too (a CF client or a delegate for its open and
/// errors, the reads in blocking style on another thread, as Darwin code does).
final class TLSBlockingReadTests: SocketStreamsTestCase {
    /// The reactor peeks at each record as it arrives (`TLSTransport.ready`: only application data
    /// makes the stream readable), which takes the record off the socket into OpenSSL's buffer. A
    /// blocking read on another thread that found nothing a moment before and then waits for the
    /// socket must find the record there, not wait for bytes that already came: that wait had no end
    /// (the test hung in a round trip within the first few hundred; Thread Sanitizer's slower reader
    /// made it likely, and CI's run hung in `CFSpelledClientTests`, which reads this way).
    func testBlockingReadsSeeRecordsTheReactorTookOffTheSocket() throws {
        let pki = try self.pki
        let server = try startStreamEchoServer(
            tls: TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey)))
        var client = TLSSettings()
        client.trustRoots = [.pemFile(pki.caCertificate)]
        for scheduling in ["a dispatch queue", "the stream thread"] {
            let pair = makePair(host: "localhost", port: server.port)
            XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey))
            let delegate = OpenOnly()
            pair.input.delegate = delegate
            let input = UncheckedBox(pair.input)
            let output = UncheckedBox(pair.output)
            if scheduling == "a dispatch queue" {
                CFReadStreamSetDispatchQueue(pair.input, DispatchQueue(label: "tls.blocking-read"))
            } else {
                RunLoop.socketStreams.perform { input.value.schedule(in: .current, forMode: .default) }
            }
            pair.input.open()
            pair.output.open()

            let rounds = 1_000
            let done = Atomic<Int>(0)
            let finished = Signal()
            let failure = Locked<String?>(nil)
            Thread.detachNewThread {
                defer { finished.raise() }
                var buffer = [UInt8](repeating: 0, count: 256)
                for round in 0..<rounds {
                    let line = Array("round \(round)\n".utf8)
                    guard output.value.write(line, maxLength: line.count) == line.count else {
                        failure.value = "round \(round): the write failed: \(String(describing: output.value.streamError))"
                        return
                    }
                    var received: [UInt8] = []
                    while received.count < line.count {
                        let count = input.value.read(&buffer, maxLength: buffer.count)
                        guard count > 0 else {
                            failure.value = "round \(round): read \(count) after \(received.count) bytes"
                            return
                        }
                        received += buffer[..<count]
                    }
                    if received != line {
                        failure.value = "round \(round): \(String(decoding: received, as: UTF8.self))"
                        return
                    }
                    done.store(round + 1, ordering: .relaxed)
                }
            }
            let ended = finished.wait(timeout: 60)
            if !ended {
                XCTFail("\(scheduling): stuck in a blocking read after \(done.load(ordering: .relaxed)) of \(rounds) round trips")
                pair.input.close()  // ends the blocked read (-1)
                pair.output.close()
                _ = finished.wait(timeout: 10)
            }
            XCTAssertNil(failure.value, scheduling)
            XCTAssertEqual(done.load(ordering: .relaxed), rounds, scheduling)
            pair.input.close()
            pair.output.close()
        }
    }
}

/// A delegate for the stream's open and errors only, as a client that reads in blocking style has.
extension TLSBlockingReadTests {
    /// A TLS read blocked in `poll` while another thread closes both streams and lets go of its own
    /// references: the read returns -1, and the session is freed once the read has left, not leaked.
    /// The read calls the session through a view that holds no reference (`ActiveTransport`), which
    /// the teardown keeps valid by leaving the release to the last transfer out; a teardown during
    /// the TLS read itself is what the stress suite's `close-while-reading` runs, over TLS.
    func testClosingATLSPairWhileAReadBlocksFreesTheSessionOnlyAfterTheRead() throws {
        let pki = try self.pki
        let server = try startStreamEchoServer(
            tls: TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey)))
        var client = TLSSettings()
        client.trustRoots = [.pemFile(pki.caCertificate)]
        let sessionsBefore = TLSTransport.openCount
        var pair: (input: InputStream, output: OutputStream)? = makePair(host: "localhost", port: server.port)
        XCTAssertTrue(try XCTUnwrap(pair).input.setProperty(client, forKey: .tlsSettingsKey))
        let input = UncheckedBox(try XCTUnwrap(pair).input)
        let output = UncheckedBox(try XCTUnwrap(pair).output)
        input.value.open()
        output.value.open()
        // The echo server sends nothing unasked: past the handshake, the read waits in poll.
        let reader = BlockedCall { () -> Int in
            var byte: UInt8 = 0
            return input.value.read(&byte, maxLength: 1)
        }
        XCTAssertTrue(reader.waitUntilInPoll(timeout: shortTimeout), "the TLS read never blocked")
        // Ours and the echo server's (it runs on this library too).
        XCTAssertEqual(TLSTransport.openCount, sessionsBefore + 2, "not both sessions while the read waits")
        output.value.close()
        input.value.close()
        pair = nil
        XCTAssertEqual(reader.result(timeout: shortTimeout), -1, "close did not end the blocked TLS read")
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { TLSTransport.openCount == sessionsBefore },
            "the sessions were not freed after the read left (\(TLSTransport.openCount) open)")
    }
}

private final class OpenOnly: NSObject, StreamDelegate {
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {}
}
