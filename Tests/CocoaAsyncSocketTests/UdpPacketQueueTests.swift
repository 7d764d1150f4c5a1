import Foundation
import XCTest

@testable import CocoaAsyncSocket

/// GCDAsyncUdpSocket's queue of sends and connects: first in, first out across its inline head, its
/// array and the array's compaction, whatever the interleaving of appends and removals.
final class UdpPacketQueueTests: XCTestCase {
    private func packet(_ id: UInt64) -> UdpPacket {
        UdpPacket(id: id, kind: .connect, target: .unspecified)
    }

    func testFirstInFirstOutAcrossCompactions() {
        var queue = UdpPacketQueue()
        XCTAssertTrue(queue.isEmpty)
        XCTAssertNil(queue.first)
        var expected: [UInt64] = []
        var nextID: UInt64 = 0
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            if expected.isEmpty || Int.random(in: 0..<3, using: &generator) > 0 {
                queue.append(packet(nextID))
                expected.append(nextID)
                nextID += 1
            } else {
                XCTAssertEqual(queue.first?.id, expected.first)
                queue.removeFirst()
                expected.removeFirst()
            }
            XCTAssertEqual(queue.first?.id, expected.first)
            XCTAssertEqual(queue.isEmpty, expected.isEmpty)
        }
        while let first = expected.first {
            XCTAssertEqual(queue.first?.id, first)
            queue.removeFirst()
            expected.removeFirst()
        }
        XCTAssertTrue(queue.isEmpty)
    }

    func testReplaceFirstAndRemoveAll() {
        var queue = UdpPacketQueue()
        for id in 0..<5 { queue.append(packet(UInt64(id))) }
        queue.replaceFirst(packet(99))
        XCTAssertEqual(queue.first?.id, 99)
        queue.removeFirst()
        XCTAssertEqual(queue.first?.id, 1)
        queue.removeAll()
        XCTAssertTrue(queue.isEmpty)
        queue.append(packet(7))
        XCTAssertEqual(queue.first?.id, 7)
    }
}
