import XCTest
@testable import SocketStreams
final class PlaceholderTests: XCTestCase { func testBuilds() { XCTAssertEqual(1, 1) } }
