import Foundation
import SocketStreams  // not @testable: the spellings below are the ones users have
import XCTest

/// `StreamOperationError` as a struct with a code: the spellings the enum it replaced allowed still
/// compile and match, codes and values can be read apart, and its `NSError` face is unchanged.
final class StreamOperationErrorTests: XCTestCase {
    /// One of each, with the NSError code each had as an enum case.
    static let all: [(error: StreamOperationError, code: StreamOperationError.Code, nsCode: Int, printed: String)] = [
        (.readTimedOut(tag: 3), .readTimedOut, 1, "readTimedOut(tag: 3)"),
        (.writeTimedOut(tag: 4), .writeTimedOut, 2, "writeTimedOut(tag: 4)"),
        (.readMaxedOut(maxLength: 50, tag: 5), .readMaxedOut, 3, "readMaxedOut(maxLength: 50, tag: 5)"),
        (.closedByPeer(unread: [104, 105]), .closedByPeer, 4, "closedByPeer(unread: [104, 105])"),
        (.bytesBeforeTLS(unread: [1]), .bytesBeforeTLS, 5, "bytesBeforeTLS(unread: [1])"),
        (.tlsSettingsRefused, .tlsSettingsRefused, 6, "tlsSettingsRefused"),
        (.closed, .closed, 7, "closed"),
        (.alreadyConnected, .alreadyConnected, 8, "alreadyConnected"),
        (.notOpen, .notOpen, 9, "notOpen"),
    ]

    func testCodesDomainAndDescriptionsAreTheEnumsOnes() {
        for (error, code, nsCode, printed) in Self.all {
            XCTAssertEqual(error.code, code)
            XCTAssertEqual(code.rawValue, nsCode)
            let bridged = error as NSError
            XCTAssertEqual(bridged.domain, "SocketStreams.StreamOperationError")
            XCTAssertEqual(bridged.code, nsCode, printed)
            XCTAssertEqual(bridged.localizedDescription, error.errorDescription)
            XCTAssertEqual("\(error)", printed)
            XCTAssertEqual("\(code)", String(printed.prefix { $0 != "(" }))
        }
        XCTAssertEqual(Set(Self.all.map(\.code)).count, 9)
        XCTAssertEqual(
            StreamOperationError.readMaxedOut(maxLength: 50, tag: 5).errorDescription,
            "the read with tag 5 reached its maximum length of 50 bytes without finding its delimiter")
        XCTAssertEqual(StreamOperationError.closedByPeer(unread: []).errorDescription, "the peer closed the connection")
        XCTAssertEqual(
            StreamOperationError.closedByPeer(unread: [1, 2]).errorDescription,
            "the peer closed the connection (2 bytes arrived for an unfinished read)")
    }

    /// Equality compares the values as the enum's did; the code alone ignores them.
    func testEqualityIncludesTheValues() {
        XCTAssertEqual(StreamOperationError.readTimedOut(tag: 3), .readTimedOut(tag: 3))
        XCTAssertNotEqual(StreamOperationError.readTimedOut(tag: 3), .readTimedOut(tag: 4))
        XCTAssertNotEqual(StreamOperationError.readTimedOut(tag: 3), .writeTimedOut(tag: 3))
        XCTAssertNotEqual(StreamOperationError.closedByPeer(unread: [1]), .closedByPeer(unread: []))
        XCTAssertNotEqual(StreamOperationError.closedByPeer(unread: [1]), .bytesBeforeTLS(unread: [1]))
        XCTAssertEqual(StreamOperationError.closedByPeer(unread: [1]).code, StreamOperationError.closedByPeer(unread: []).code)
        let error: Error = StreamOperationError.readTimedOut(tag: 3)
        XCTAssertEqual(error as? StreamOperationError, .readTimedOut(tag: 3))
        XCTAssertTrue(error as? StreamOperationError == .readTimedOut(tag: 3))
    }

    /// `tag`, `maxLength` and `unread` hold what the cases carried, and nothing for the others.
    func testTheCarriedValues() {
        let maxed = StreamOperationError.readMaxedOut(maxLength: 50, tag: 5)
        XCTAssertEqual(maxed.tag, 5)
        XCTAssertEqual(maxed.maxLength, 50)
        XCTAssertEqual(maxed.unread, [])
        XCTAssertEqual(StreamOperationError.writeTimedOut(tag: 9).tag, 9)
        XCTAssertNil(StreamOperationError.writeTimedOut(tag: 9).maxLength)
        XCTAssertEqual(StreamOperationError.closedByPeer(unread: [104, 105]).unread, [104, 105])
        XCTAssertNil(StreamOperationError.closedByPeer(unread: [104, 105]).tag)
        XCTAssertEqual(StreamOperationError.bytesBeforeTLS(unread: [7]).unread, [7])
        XCTAssertNil(StreamOperationError.closed.tag)
        XCTAssertNil(StreamOperationError.closed.maxLength)
        XCTAssertEqual(StreamOperationError.closed.unread, [])
    }

    /// `catch StreamOperationError.closed` matches the whole error, values included, and nothing else;
    /// a code is matched with `where error.code == …`.
    func testCatchPatterns() {
        func which(_ thrown: Error) -> String {
            do { throw thrown } catch StreamOperationError.closed {
                return "closed"
            } catch StreamOperationError.readTimedOut(tag: 3) {
                return "read 3 timed out"
            } catch let error as StreamOperationError where error.code == .readTimedOut {
                return "read \(error.tag ?? -1) timed out too"
            } catch let error as StreamOperationError where error.code == .closedByPeer {
                return "closed by peer with \(error.unread.count) unread"
            } catch {
                return "other"
            }
        }
        XCTAssertEqual(which(StreamOperationError.closed), "closed")
        XCTAssertEqual(which(StreamOperationError.readTimedOut(tag: 3)), "read 3 timed out")
        XCTAssertEqual(which(StreamOperationError.readTimedOut(tag: 4)), "read 4 timed out too")
        XCTAssertEqual(which(StreamOperationError.closedByPeer(unread: [1])), "closed by peer with 1 unread")
        XCTAssertEqual(which(StreamOperationError.alreadyConnected), "other")
        XCTAssertEqual(which(CancellationError()), "other")
        XCTAssertEqual(which(NSError(domain: NSPOSIXErrorDomain, code: 7)), "other")
    }

    /// A `switch` over the code (with a `default:`, since codes may be added) and over the error.
    func testSwitches() {
        func kind(_ error: StreamOperationError) -> String {
            switch error.code {
            case .readTimedOut, .writeTimedOut: return "timeout \(error.tag ?? -1)"
            case .closedByPeer: return "peer left \(error.unread.count)"
            case .closed: return "closed"
            default: return "other"
            }
        }
        XCTAssertEqual(kind(.readTimedOut(tag: 2)), "timeout 2")
        XCTAssertEqual(kind(.writeTimedOut(tag: 6)), "timeout 6")
        XCTAssertEqual(kind(.closedByPeer(unread: [1, 2, 3])), "peer left 3")
        XCTAssertEqual(kind(.closed), "closed")
        XCTAssertEqual(kind(.tlsSettingsRefused), "other")

        func whole(_ error: StreamOperationError) -> String {
            switch error {
            case .closed: return "closed"
            case .readTimedOut(tag: 1): return "read 1"
            default: return "other"
            }
        }
        XCTAssertEqual(whole(.closed), "closed")
        XCTAssertEqual(whole(.readTimedOut(tag: 1)), "read 1")
        XCTAssertEqual(whole(.readTimedOut(tag: 2)), "other")
    }

    /// Guides/AsyncAndQueuedOperations.md's example: a whole error, then codes with their values.
    func testTheGuidesMatch() {
        func describe(_ error: Error) -> String {
            switch error {
            case StreamOperationError.closed:
                return "closed before it could run"
            case let failure as StreamOperationError where failure.code == .closedByPeer:
                return "the peer left; \(failure.unread.count) bytes arrived for the read"
            case let failure as StreamOperationError where failure.code == .readTimedOut:
                return "the read with tag \(failure.tag ?? 0) timed out"
            default:
                return "\(error)"
            }
        }
        XCTAssertEqual(describe(StreamOperationError.closed), "closed before it could run")
        XCTAssertEqual(describe(StreamOperationError.closedByPeer(unread: [1, 2])), "the peer left; 2 bytes arrived for the read")
        XCTAssertEqual(describe(StreamOperationError.readTimedOut(tag: 7)), "the read with tag 7 timed out")
        XCTAssertEqual(describe(StreamOperationError.alreadyConnected), "alreadyConnected")
        XCTAssertEqual(describe(CancellationError()), "CancellationError()")
    }
}
