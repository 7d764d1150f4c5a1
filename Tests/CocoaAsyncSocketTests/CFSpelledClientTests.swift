import CocoaAsyncSocket
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A client spelled with CoreFoundation's and CFNetwork's names, as Darwin code calls them beside the
/// stream functions.
final class CFSpelledClientTests: XCTestCase {
    /// Waits (polling, as a CF client without a run loop does) until the stream leaves `.opening`.
    private func waitForOpen(_ stream: CFReadStream) {
        let deadline = Date(timeIntervalSinceNow: 10)
        while CFReadStreamGetStatus(stream) == .opening, Date() < deadline { usleep(1000) }
    }

    func testResolutionFailureReadsWithCFNetworkNames() throws {
        var read: Unmanaged<CFReadStream>?
        var write: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(nil, "no-such-host.invalid" as CFString, 80, &read, &write)
        let input = try XCTUnwrap(read).takeRetainedValue()
        let output = try XCTUnwrap(write).takeRetainedValue()
        defer {
            CFReadStreamClose(input)
            CFWriteStreamClose(output)
        }
        CFReadStreamOpen(input)
        waitForOpen(input)
        XCTAssertEqual(CFReadStreamGetStatus(input), .error)
        let error = try XCTUnwrap(CFReadStreamCopyError(input))
        XCTAssertEqual(CFErrorGetDomain(error) as String, kCFErrorDomainCFNetwork as String)
        XCTAssertEqual(CFErrorGetCode(error), CFIndex(CFNetworkErrors.cfHostErrorUnknown.rawValue))
        let userInfo = CFErrorCopyUserInfo(error) as? [String: Any]
        let gai = try XCTUnwrap(userInfo?[kCFGetAddrInfoFailureKey as String] as? Int)
        XCTAssertTrue([EAI_NONAME, EAI_AGAIN, EAI_FAIL].map(Int.init).contains(gai), "getaddrinfo code \(gai)")
        let streamError = CFReadStreamGetError(input)
        XCTAssertEqual(Int32(streamError.domain), kCFStreamErrorDomainNetDB)
        XCTAssertEqual(Int(streamError.error), gai)
        XCTAssertEqual(CFNetworkErrors(rawValue: Int32(CFErrorGetCode(error))), .cfHostErrorUnknown)
    }

    func testNetworkServiceTypeNamesAndGetBuffer() throws {
        let listener = try CountingListener()
        var read: Unmanaged<CFReadStream>?
        var write: Unmanaged<CFWriteStream>?
        CFStreamCreatePairWithSocketToHost(nil, "127.0.0.1" as CFString, UInt32(listener.port), &read, &write)
        let input = try XCTUnwrap(read).takeRetainedValue()
        let output = try XCTUnwrap(write).takeRetainedValue()
        defer {
            CFReadStreamClose(input)
            CFWriteStreamClose(output)
        }
        // The names compile with Darwin's spelling and values; the property is refused, so code can tell.
        XCTAssertEqual(kCFStreamNetworkServiceType as String, Stream.PropertyKey.networkServiceType.rawValue)
        XCTAssertEqual(kCFStreamNetworkServiceTypeVoIP as String, StreamNetworkServiceTypeValue.voIP.rawValue)
        XCTAssertFalse(CFReadStreamSetProperty(input, kCFStreamNetworkServiceType, kCFStreamNetworkServiceTypeBackground))
        CFReadStreamOpen(input)
        CFWriteStreamOpen(output)
        waitForOpen(input)
        XCTAssertEqual(CFReadStreamGetStatus(input), .open)
        var count: CFIndex = -1
        XCTAssertNil(CFReadStreamGetBuffer(input, 16, &count))
        XCTAssertEqual(count, 0)
    }
}
