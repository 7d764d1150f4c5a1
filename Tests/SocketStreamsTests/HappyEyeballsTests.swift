#if canImport(Glibc)
import Glibc
#endif
import Foundation
@testable import SocketStreams
import XCTest

/// RFC 8305 racing, with the resolver's answers injected (this machine's `localhost` has no ::1
/// entry, so no real name resolves to both families). The sockets and peers are real.
final class HappyEyeballsTests: SocketStreamsTestCase {

    /// A resolver answering AAAA and A with fixed loopback addresses on `port`.
    private func resolver(v6: [String], v4: [String], port: Int, v6Delay: TimeInterval = 0) -> ResolveFunction {
        { _, _, family in
            if family == AF_INET6 {
                if v6Delay > 0 { Thread.sleep(forTimeInterval: v6Delay) }  // a slow AAAA answer, not synchronisation
                return .success(v6.compactMap { SocketAddress(numericHost: $0, port: port) })
            }
            return .success(v4.compactMap { SocketAddress(numericHost: $0, port: port) })
        }
    }

    /// [::1]:P hangs (backlog-full listener), 127.0.0.1:P answers: the pair opens over IPv4 after
    /// the 250 ms connection-attempt delay, long before any timeout, with no error.
    func testFallsBackToIPv4WhenIPv6Hangs() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("v4 answered")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let unreachableV6 = try BacklogFullListener(family: .v6, port: v4Server.port)
        defer { withExtendedLifetime(unreachableV6) {} }

        let pair = makePair(host: "dual.test", port: v4Server.port)
        pair.input.connection.resolve = resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port)
        let started = Date()
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: 2) { recorder.snapshot.receivedString == "v4 answered" }, recorder.trace)
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(elapsed, 0.2, "IPv6 should have been tried first")
        XCTAssertEqual(recorder.snapshot.events(StreamRole.input).first, .openCompleted)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        let handle = try XCTUnwrap(pair.input.property(forKey: CFKey.nativeHandle) as? Data)
        let fd = handle.withUnsafeBytes { $0.load(as: Int32.self) }
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_DOMAIN), AF_INET)
    }

    /// IPv6 refused at once: the next address is tried immediately, not after 250 ms.
    func testRefusedIPv6FallsBackImmediately() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("v4 after refusal")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(host: "dual.test", port: v4Server.port)
        pair.input.connection.resolve = resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port)
        let started = Date()
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: 2) { recorder.snapshot.receivedString == "v4 after refusal" }, recorder.trace)
        XCTAssertLessThan(Date().timeIntervalSince(started), 0.2)
    }

    /// A slow AAAA answer: IPv4 starts after the 50 ms resolution delay without waiting for it,
    /// and the run loop delivering events never blocks in name resolution.
    func testSlowAAAADoesNotHoldUpIPv4OrTheRunLoop() throws {
        let v4Server = try startRawServer(.v4) { connection in
            try? connection.write("no wait for AAAA")
            _ = try? connection.readToEOF(timeout: 5)
        }
        let pair = makePair(host: "dual.test", port: v4Server.port)
        pair.input.connection.resolve = resolver(v6: ["::1"], v4: ["127.0.0.1"], port: v4Server.port, v6Delay: 1)
        let ticks = Locked(0)
        let timer = Timer(timeInterval: 0.01, repeats: true) { _ in ticks.mutate { $0 += 1 } }
        RunLoop.current.add(timer, forMode: .default)
        defer { timer.invalidate() }
        let started = Date()
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: 2) { recorder.snapshot.receivedString == "no wait for AAAA" }, recorder.trace)
        XCTAssertLessThan(Date().timeIntervalSince(started), 0.8, "IPv4 waited for the slow AAAA answer")
        XCTAssertGreaterThan(ticks.value, 0, "the run loop was blocked")
    }

    /// Every address refused: the error is the last connect error (POSIX ECONNREFUSED), on both streams.
    func testAllAddressesRefusedReportsTheConnectError() throws {
        let port = try RawSocket.unusedPort()
        let pair = makePair(host: "dual.test", port: port)
        pair.input.connection.resolve = resolver(v6: ["::1"], v4: ["127.0.0.1", "127.0.0.2"], port: port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: 2) { recorder.has(.errorOccurred, on: StreamRole.input) && recorder.has(.errorOccurred, on: StreamRole.output) })
        let error = try XCTUnwrap(pair.input.streamError as NSError?)
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
        XCTAssertEqual(error.code, Int(ECONNREFUSED))
        XCTAssertTrue(error.localizedDescription.contains("dual.test port \(port)"), error.localizedDescription)
    }

    /// Both lookups fail: kCFErrorDomainCFNetwork code 2 with the getaddrinfo code.
    func testBothLookupsFailingReportsTheResolutionError() throws {
        let pair = makePair(host: "dual.test", port: 80)
        pair.input.connection.resolve = { _, _, _ in .failure(ResolutionError(code: EAI_NONAME, systemErrno: 0)) }
        let recorder = startRecorder(pair)
        XCTAssertTrue(runUntil(timeout: 2) { recorder.has(.errorOccurred, on: StreamRole.input) })
        let error = try XCTUnwrap(pair.input.streamError as NSError?)
        XCTAssertEqual(error.domain, "kCFErrorDomainCFNetwork")
        XCTAssertEqual(error.code, 2)
        XCTAssertEqual(error.userInfo["kCFGetAddrInfoFailureKey"] as? Int, Int(EAI_NONAME))
    }
}
