#if canImport(Glibc)
    import Glibc
#endif
import CSocketStreamsShims
import SocketStreamsTestSupport
import CoreFoundation
import Foundation
@testable import SocketStreams
import XCTest

/// The run-loop event source itself, with real socketpairs.
final class ReactorTests: SocketStreamsTestCase {

    /// Counts readiness and reads the byte, so a socket is reported once.
    private final class Reader: ReactorHandler, @unchecked Sendable {
        let fd: Int32
        let count: Locked<Int>
        init(fd: Int32, count: Locked<Int>) {
            self.fd = fd
            self.count = count
        }
        func reactor(_ reactor: Reactor, fired events: UInt32) {
            var byte: UInt8 = 0
            if recv(fd, &byte, 1, 0) == 1 { count.mutate { $0 += 1 } }
        }
    }

    /// More ready sockets than one `perform` takes, plus work posted before the run loop ran:
    /// the reactor must come back for the rest by itself (regression: it returned with events
    /// left behind and a wake-up whose edge it had already consumed, and the run loop slept forever).
    func testReadinessBeyondOnePerformIsAllDelivered() throws {
        let sockets = 3_000
        XCTAssertGreaterThanOrEqual(RawSocket.raiseOpenFileLimit(to: UInt64(2 * sockets + 1_000)), UInt64(2 * sockets + 100))
        let reactor = try ReactorRegistry.shared.acquire(cfRunLoop: CFRunLoopGetCurrent(), mode: RunLoop.Mode.default.rawValue)
        // Eight rounds of 256 events a perform: 3,000 sockets need several performs.
        reactor.maxRounds = 8
        defer {
            reactor.maxRounds = 64
            ReactorRegistry.shared.release(reactor)
        }
        let count = Locked(0)
        var pairs: [(Int32, Int32, UInt64)] = []
        defer {
            for (a, b, token) in pairs {
                reactor.remove(fd: a, token: token)
                close(a)
                close(b)
            }
        }
        for _ in 0..<sockets {
            let (a, b) = try RawSocket.socketPair()
            let token = try reactor.add(fd: a, events: cssh_epollin(), handler: Reader(fd: a, count: count))
            pairs.append((a, b, token))
        }
        var byte: UInt8 = 1
        for (_, b, _) in pairs { XCTAssertEqual(send(b, &byte, 1, 0), 1) }
        // Posted work's wake-up now sits in the epoll set behind all that readiness.
        let posted = Locked(false)
        reactor.post { posted.value = true }
        XCTAssertTrue(
            runUntil(timeout: 10) { count.value == sockets && posted.value },
            "delivered \(count.value) of \(sockets), posted work ran: \(posted.value)")
    }

    /// Reports readiness without reading: its socket stays ready for as long as it is registered.
    private final class Ignorer: ReactorHandler, @unchecked Sendable {
        let reports = Locked(0)
        func reactor(_ reactor: Reactor, fired events: UInt32) { reports.mutate { $0 += 1 } }
    }

    /// A socket that stays ready does not keep the run loop to itself: each perform ends after its
    /// budget of rounds or time, and a timer on the same run loop still fires.
    func testASocketThatStaysReadyDoesNotStarveTheRunLoop() throws {
        let reactor = try ReactorRegistry.shared.acquire(cfRunLoop: CFRunLoopGetCurrent(), mode: RunLoop.Mode.default.rawValue)
        defer { ReactorRegistry.shared.release(reactor) }
        let (a, b) = try RawSocket.socketPair()
        defer {
            close(a)
            close(b)
        }
        let ignorer = Ignorer()
        let token = try reactor.add(fd: a, events: cssh_epollin(), handler: ignorer)
        defer { reactor.remove(fd: a, token: token) }
        var byte: UInt8 = 1
        XCTAssertEqual(send(b, &byte, 1, 0), 1)
        let fired = Locked(0)
        let timer = Timer(timeInterval: 0.001, repeats: true) { _ in fired.mutate { $0 += 1 } }
        RunLoop.current.add(timer, forMode: .default)
        defer { timer.invalidate() }
        XCTAssertTrue(
            runUntil(timeout: 10) { fired.value >= 3 },
            "the timer fired \(fired.value) times while the socket was reported \(ignorer.reports.value) times")
        XCTAssertGreaterThan(ignorer.reports.value, 64, "the socket was not reported again after a perform's budget")
    }
}
