import Foundation
import SocketStreams
import XCTest

@testable import SocketStreamsNetwork

/// What a framer wrote for one message, joined before it goes to the engine: small consecutive writes
/// as one (a header and its message, one system call), large ones alone, nothing across the point
/// where a TLS upgrade goes in, every byte once and in order.
final class FramerOutputJoinTests: XCTestCase {
    private func bytes(_ count: Int, _ seed: UInt8) -> Data { Data((0..<count).map { seed &+ UInt8(truncatingIfNeeded: $0) }) }

    /// `FramerDriver.joined`, its writes as `Data`.
    private func joined(_ writes: [Data], boundary: Int?) -> (writes: [Data], boundary: Int?) {
        let (joined, joinedBoundary) = FramerDriver.joined(writes, boundary: boundary)
        return (
            joined.map {
                switch $0 {
                case .array(let bytes): return Data(bytes)
                case .data(let box): return box.data
                }
            }, joinedBoundary
        )
    }

    func testAHeaderAndItsMessageBecomeOneWrite() {
        let (writes, boundary) = joined([bytes(4, 1), bytes(60, 9)], boundary: nil)
        XCTAssertEqual(writes, [bytes(4, 1) + bytes(60, 9)])
        XCTAssertNil(boundary)
    }

    func testWritesBeyondTheLimitStayApart() {
        let limit = FramerDriver.joinLimit
        let large = bytes(limit, 3)
        let (writes, _) = joined([bytes(4, 1), large, bytes(2, 5), bytes(2, 7)], boundary: nil)
        XCTAssertEqual(writes, [bytes(4, 1), large, bytes(2, 5) + bytes(2, 7)])
    }

    func testNothingIsJoinedAcrossTheTLSBoundaryAndTheBoundaryMoves() {
        let parts = (0..<6).map { bytes(10, UInt8($0 * 20)) }
        for boundary in 0...parts.count {
            let (writes, joinedBoundary) = joined(parts, boundary: boundary)
            XCTAssertEqual(writes.reduce(Data(), +), parts.reduce(Data(), +), "boundary \(boundary): every byte once, in order")
            guard let joinedBoundary else { return XCTFail("boundary \(boundary) lost") }
            XCTAssertEqual(
                writes.prefix(joinedBoundary).reduce(Data(), +), parts.prefix(boundary).reduce(Data(), +), "boundary \(boundary)")
            XCTAssertLessThanOrEqual(writes.count, 2, "boundary \(boundary): one write either side at most")
        }
    }

    func testEveryByteOnceInOrderForRandomSizes() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let parts = (0..<Int.random(in: 0...8, using: &generator)).map {
                bytes(Int.random(in: 0...(FramerDriver.joinLimit / 2), using: &generator), UInt8($0))
            }
            let boundary = Bool.random(using: &generator) ? Int.random(in: 0...parts.count, using: &generator) : nil
            let (writes, joinedBoundary) = joined(parts, boundary: boundary)
            XCTAssertEqual(writes.reduce(Data(), +), parts.reduce(Data(), +))
            XCTAssertTrue(writes.allSatisfy { $0.count <= FramerDriver.joinLimit || parts.contains($0) })
            if let boundary, let joinedBoundary {
                XCTAssertEqual(writes.prefix(joinedBoundary).reduce(Data(), +), parts.prefix(boundary).reduce(Data(), +))
            } else {
                XCTAssertEqual(boundary == nil, joinedBoundary == nil)
            }
        }
    }
}
