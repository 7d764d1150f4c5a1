#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// RFC 8305 racing, with the resolver's answers injected (this machine's `localhost` has no ::1
/// entry, so no real name resolves to both families) and time advanced by hand. The sockets and
/// peers are real.
final class HappyEyeballsTests: SocketStreamsTestCase {

    /// A resolver answering AAAA and A with fixed loopback addresses on `port`. With `holdAAAA`, the
    /// AAAA answer waits until that signal is raised (a slow DNS server, played by the test).
    private func resolver(v6: [String], v4: [String], port: Int, holdAAAA: Signal? = nil) -> ResolveFunction {
        { _, _, family in
            if family == AF_INET6 {
                _ = holdAAAA?.wait(timeout: 30)
                return .success(v6.compactMap { SocketAddress(numericHost: $0, port: port) })
            }
            return .success(v4.compactMap { SocketAddress(numericHost: $0, port: port) })
        }
    }

    /// A pair for "dual.test" with the given resolver and a hand-driven clock.
    private func dualStackPair(port: Int, resolve: @escaping ResolveFunction) -> (StreamPair, ManualTime) {
        let pair = makePair(host: "dual.test", port: port)
        let clock = ManualTime()
        pair.input.connection.someOptions.resolve = resolve
        pair.input.connection.someOptions.time = clock
        return (pair, clock)
    }

    /// [::1]:P hangs (backlog-full listener), 127.0.0.1:P answers: IPv6 is tried first, IPv4 only
    /// once the 250 ms Connection Attempt Delay has passed (not a nanosecond earlier), and the pair
    /// then opens over IPv4 with no error.
    func testFallsBackToIPv4WhenIPv6HangsAfterTheAttemptDelay() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("v4 answered")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let unreachableV6 = try BacklogFullListener(family: .v6, port: v4Server.port)
        defer { withExtendedLifetime(unreachableV6) {} }
        let (pair, clock) = dualStackPair(port: v4Server.port, resolve: resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port))
        let recorder = startRecorder(pair)

        // Both answers in, the IPv6 attempt in flight: the only timer is the next attempt's.
        XCTAssertTrue(clock.waitForTimers { $0 == [0.25] }, "timers: \(clock.pending)")
        clock.advance(by: 0.249)
        settle()
        XCTAssertEqual(clock.pending, [0.001], "the next attempt started early")
        XCTAssertEqual(recorder.snapshot.entries, [], recorder.trace)
        XCTAssertEqual(pair.input.streamStatus, .opening)

        clock.advance(by: 0.001)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "v4 answered" }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.events(StreamRole.input).first, .openCompleted)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_DOMAIN), AF_INET)
        XCTAssertEqual(clock.pending, [], "the losing attempt's timers are gone")
    }

    /// IPv6 refused at once: the next address is tried immediately; the clock never moves.
    func testRefusedIPv6FallsBackImmediately() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("v4 after refusal")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let (pair, _) = dualStackPair(port: v4Server.port, resolve: resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port))
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "v4 after refusal" }, recorder.trace)
    }

    /// A slow AAAA answer: IPv4 starts once the 50 ms Resolution Delay has passed, without waiting for
    /// AAAA, and the run loop delivering events never blocks in name resolution (it delivers the
    /// whole exchange while the AAAA lookup is still held).
    func testSlowAAAADoesNotHoldUpIPv4OrTheRunLoop() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("no wait for AAAA")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let aaaa = Signal()
        defer { aaaa.raise() }
        let (pair, clock) = dualStackPair(
            port: v4Server.port,
            resolve: resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port, holdAAAA: aaaa))
        let recorder = startRecorder(pair)
        XCTAssertTrue(clock.waitForTimers { $0 == [0.05] }, "timers: \(clock.pending)")
        clock.advance(by: 0.049)
        settle()
        XCTAssertEqual(clock.pending, [0.001], "IPv4 was tried before the resolution delay")
        XCTAssertEqual(recorder.snapshot.entries, [], recorder.trace)

        clock.advance(by: 0.001)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.receivedString == "no wait for AAAA" }, recorder.trace)
        XCTAssertTrue(recorder.snapshot.eventThreads.allSatisfy(isMainThread))
    }

    /// Every address refused: the error is the last connect error (POSIX ECONNREFUSED), on both streams.
    func testAllAddressesRefusedReportsTheConnectError() throws {
        let port = try RawSocket.unusedPort()
        let (pair, _) = dualStackPair(port: port, resolve: resolver(v6: ["::1"], v4: ["127.0.0.1", "127.0.0.2"], port: port))
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.errorOccurred, on: StreamRole.input) && recorder.has(.errorOccurred, on: StreamRole.output)
            })
        let error = try XCTUnwrap(pair.input.streamError as NSError?)
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
        XCTAssertEqual(error.code, Int(ECONNREFUSED))
        XCTAssertTrue(error.localizedDescription.contains("dual.test port \(port)"), error.localizedDescription)
    }

    /// Both lookups fail: kCFErrorDomainCFNetwork code 2 with the getaddrinfo code.
    func testBothLookupsFailingReportsTheResolutionError() throws {
        let (pair, _) = dualStackPair(port: 80) { _, _, _ in .failure(ResolutionError(code: EAI_NONAME, systemErrno: 0)) }
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: StreamRole.input) })
        let error = try XCTUnwrap(pair.input.streamError as NSError?)
        XCTAssertEqual(error.domain, "kCFErrorDomainCFNetwork")
        XCTAssertEqual(error.code, 2)
        XCTAssertEqual(error.userInfo["kCFGetAddrInfoFailureKey"] as? Int, Int(EAI_NONAME))
    }

    /// The connect timeout covers name resolution too: a lookup that never answers fails the open
    /// with ETIMEDOUT when the deadline passes.
    func testConnectTimeoutCoversResolution() throws {
        let never = Signal()
        defer { never.raise() }
        let (pair, clock) = dualStackPair(port: 80) { _, _, _ in
            _ = never.wait(timeout: 30)
            return .failure(ResolutionError(code: EAI_AGAIN, systemErrno: 0))
        }
        XCTAssertTrue(pair.input.setProperty(3, forKey: .connectTimeoutKey))
        let recorder = startRecorder(pair)
        XCTAssertEqual(clock.pending, [3.0])
        clock.advance(by: 3)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: StreamRole.output) }, recorder.trace)
        assertPOSIXError(pair.output.streamError, [ETIMEDOUT])
    }

    /// The same race where each attempt's outcome is seen by a poll right after connect(2) (an
    /// unscheduled pair: its events need no reactor): IPv6 is refused, IPv4 is tried at once and
    /// answers, all without the stream thread, which is kept busy (an attempt waiting in its epoll
    /// set there could not finish).
    func testRefusedIPv6FallsBackWithinTheConnectWhenNoReactorIsNeeded() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("v4")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let hold = try StreamThreadHold()
        defer { hold.release() }
        XCTAssertTrue(hold.isHolding(timeout: shortTimeout), "the stream thread never ran the task")
        let (pair, clock) = dualStackPair(port: v4Server.port, resolve: resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port))
        pair.input.open()
        let connection = pair.input.connection
        XCTAssertTrue(runUntil(timeout: shortTimeout) { connection.lock.withLock { connection.lifecycle.isLive } })
        XCTAssertEqual(clock.pending, [], "no attempt timer, no resolution delay left")
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_DOMAIN), AF_INET)
        hold.release()
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), 1)
    }
}
