@testable import SocketStreams
import XCTest

/// What every idle connection of `QueuedSocket`, `AsyncConnection` and GCDAsyncSocket holds for its
/// engine (issue 25: at most 2 KiB per idle connection): one `StreamOperations.State` in a guarded
/// allocation of 16 + 272 + 40 bytes (a 336-byte malloc chunk; 8 bytes more would take the next,
/// 352). A read operation keeps its request last so that the read queue's inline head ends in it.
final class StreamOperationsLayoutTests: XCTestCase {
    func testEngineStateStaysWithinItsMeasuredSize() {
        XCTAssertLessThanOrEqual(MemoryLayout<StreamOperations.ReadOperation>.size, 49)
        XCTAssertLessThanOrEqual(MemoryLayout<FIFO<StreamOperations.ReadItem>>.size, 64)
        XCTAssertLessThanOrEqual(MemoryLayout<StreamOperations.State>.size, 272)
    }
}
