import Foundation
import SocketStreamsTestSupport
import LongLivedChannel
import XCTest

/// The long-lived-channel example's reconnect delays (Guides/LongLivedChannel.md): ceilings that grow
/// exponentially up to the cap, and delays drawn from the whole range below them (full jitter).
/// Seeded generators instead of clocks, so nothing depends on timing.
final class BackoffTests: SocketStreamsTestCase {
    func testCeilingsGrowExponentiallyUpToTheCap() {
        let backoff = Backoff(base: 0.1, cap: 5)
        let ceilings = (1...9).map(backoff.ceiling(beforeAttempt:))
        let expected = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5, 5, 5]
        for (ceiling, wanted) in zip(ceilings, expected) { XCTAssertEqual(ceiling, wanted, accuracy: 1e-12) }
        // Far attempts stay at the cap (no overflow to infinity or NaN); attempt 0 counts as the first.
        XCTAssertEqual(backoff.ceiling(beforeAttempt: 10_000), 5)
        XCTAssertEqual(backoff.ceiling(beforeAttempt: 0), 0.1)
        XCTAssertEqual(Backoff(base: 1, cap: 100, multiplier: 3).ceiling(beforeAttempt: 4), 27)
    }

    func testDelaysStayWithinTheCeilingAndUseAllOfIt() {
        let backoff = Backoff(base: 0.5, cap: 30)
        var random = SplitMix64(seed: 0x0BAC_C0FF)
        for attempt in 1...12 {
            let ceiling = backoff.ceiling(beforeAttempt: attempt)
            let delays = (0..<2000).map { _ in backoff.delay(beforeAttempt: attempt, using: &random) }
            XCTAssertTrue(delays.allSatisfy { (0...ceiling).contains($0) }, "attempt \(attempt)")
            // Full jitter: the draws spread over 0...ceiling, not around it.
            XCTAssertLessThan(delays.min()!, ceiling * 0.01, "attempt \(attempt)")
            XCTAssertGreaterThan(delays.max()!, ceiling * 0.99, "attempt \(attempt)")
            let mean = delays.reduce(0, +) / Double(delays.count)
            XCTAssertEqual(mean, ceiling / 2, accuracy: ceiling * 0.05, "attempt \(attempt)")
        }
    }

    func testTheSameSeedGivesTheSameDelays() {
        let backoff = Backoff(base: 0.1, cap: 10)
        var first = SplitMix64(seed: 7)
        var second = SplitMix64(seed: 7)
        var other = SplitMix64(seed: 8)
        let a = (1...10).map { backoff.delay(beforeAttempt: $0, using: &first) }
        let b = (1...10).map { backoff.delay(beforeAttempt: $0, using: &second) }
        let c = (1...10).map { backoff.delay(beforeAttempt: $0, using: &other) }
        XCTAssertEqual(a, b)
        XCTAssertNotEqual(a, c)
    }
}
