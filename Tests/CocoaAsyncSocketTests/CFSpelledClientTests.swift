import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A client spelled with CoreFoundation's and CFNetwork's names, as Darwin code calls them beside the
/// stream functions.
final class CFSpelledClientTests: XCTestCase {
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
        // The names have Darwin's spelling and values.
        XCTAssertEqual(kCFStreamNetworkServiceType as String, Stream.PropertyKey.networkServiceType.rawValue)
        XCTAssertEqual(kCFStreamNetworkServiceTypeVoIP as String, StreamNetworkServiceTypeValue.voIP.rawValue)
        CFReadStreamOpen(input)
        CFWriteStreamOpen(output)
        waitForOpen(input)
        XCTAssertEqual(CFReadStreamGetStatus(input), .open)
        var count: CFIndex = -1
        XCTAssertNil(CFReadStreamGetBuffer(input, 16, &count))
        XCTAssertEqual(count, 0)
    }

    /// The SSL settings as Darwin code writes them: `kCFNull` and `kCFBoolean…` in an
    /// `[NSObject: NSObject]` and a `[String: Any]`, handed over `as CFDictionary`, against
    /// openssl s_server with a self-signed certificate (so the chain check must be off).
    func testSSLSettingsDictionariesWithCFNullAndCFBooleans() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try Peer.opensslReverse(certificate: certificate.certificate, key: certificate.key)
        defer { peer.stop() }
        let objects: [NSObject: NSObject] = [
            kCFStreamSSLValidatesCertificateChain: kCFBooleanFalse,
            kCFStreamSSLPeerName: kCFNull,
            kCFStreamSSLIsServer: kCFBooleanFalse,
        ]
        let strings: [String: Any] = [
            kCFStreamSSLValidatesCertificateChain as String: kCFBooleanFalse!,
            kCFStreamSSLPeerName as String: kCFNull!,
        ]
        for (name, settings) in [("[NSObject: NSObject]", objects as CFDictionary), ("[String: Any]", strings as CFDictionary)] {
            var read: Unmanaged<CFReadStream>?
            var write: Unmanaged<CFWriteStream>?
            CFStreamCreatePairWithSocketToHost(kCFAllocatorDefault, "127.0.0.1" as CFString, UInt32(port), &read, &write)
            let input = try XCTUnwrap(read).takeRetainedValue()
            let output = try XCTUnwrap(write).takeRetainedValue()
            defer {
                CFReadStreamClose(input)
                CFWriteStreamClose(output)
            }
            XCTAssertTrue(CFReadStreamSetProperty(input, CFStreamPropertyKey(rawValue: kCFStreamPropertySSLSettings), settings), name)
            CFReadStreamOpen(input)
            CFWriteStreamOpen(output)
            waitForOpen(input)
            XCTAssertEqual(CFReadStreamGetStatus(input), .open, "\(name): \(String(describing: CFReadStreamCopyError(input)))")
            let line = Array("hello\n".utf8)
            XCTAssertEqual(CFWriteStreamWrite(output, line, line.count), line.count, name)
            var buffer = [UInt8](repeating: 0, count: 64)
            var received: [UInt8] = []
            while !received.contains(0x0A) {
                let count = CFReadStreamRead(input, &buffer, buffer.count)
                guard count > 0 else { break }
                received += buffer[..<count]
            }
            XCTAssertEqual(String(decoding: received, as: UTF8.self), "olleh\n", name)
            XCTAssertNotNil(input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo, name)
        }
    }

    /// CoreFoundation's string functions take the library's `CFString` where Darwin code passes one,
    /// and `coreFoundationString` reaches every other one.
    func testCoreFoundationFunctionsTakeTheLibrarysCFString() {
        let encoding = CFStringConvertIANACharSetNameToEncoding("utf-8" as CFString)
        XCTAssertEqual(encoding, CFStringBuiltInEncodings.UTF8.rawValue)
        XCTAssertEqual(CFStringConvertEncodingToNSStringEncoding(encoding), String.Encoding.utf8.rawValue)
        XCTAssertEqual(CFStringConvertIANACharSetNameToEncoding("no-such-charset" as CFString), kCFStringEncodingInvalidId)
        let host = "example.org" as CFString
        XCTAssertEqual(CFStringGetLength(host), 11)
        var buffer = [CChar](repeating: 0, count: 32)
        XCTAssertTrue(CFStringGetCString(host, &buffer, buffer.count, CFStringBuiltInEncodings.UTF8.rawValue))
        XCTAssertEqual(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), "example.org")
        XCTAssertFalse(CFStringGetCString(host, &buffer, 4, CFStringBuiltInEncodings.UTF8.rawValue))
        XCTAssertTrue(CFStringHasPrefix(host, "example" as CFString))
        XCTAssertTrue(CFStringHasSuffix(host, ".org" as CFString))
        XCTAssertEqual(CFStringCompare("ABC" as CFString, "abc" as CFString, .compareCaseInsensitive), .compareEqualTo)
        XCTAssertEqual(CFStringCompare("a" as CFString, "b" as CFString, []), .compareLessThan)
        XCTAssertEqual(CFStringGetIntValue("8080" as CFString), 8080)
        XCTAssertEqual(CFStringGetDoubleValue("0.5" as CFString), 0.5)
        let foreign: CoreFoundation.CFString = host.coreFoundationString
        XCTAssertEqual(CoreFoundation.CFStringGetLength(foreign), 11)
        XCTAssertEqual(CFStringGetCharacterAtIndex(foreign, 0), UniChar(UInt8(ascii: "e")))
        XCTAssertTrue(CFBooleanGetValue(kCFBooleanTrue))
        XCTAssertFalse(CFBooleanGetValue(kCFBooleanFalse))
        XCTAssertTrue(kCFNull === NSNull())
    }

    /// The socket's IP_TOS byte and SO_PRIORITY.
    private func marks(_ stream: CFReadStream) throws -> (tos: Int32, priority: Int32) {
        let handle = try XCTUnwrap(CFReadStreamCopyProperty(stream, kCFStreamPropertySocketNativeHandle) as? Data)
        let fd = handle.withUnsafeBytes { $0.load(as: Int32.self) }
        var tos: Int32 = -1
        var priority: Int32 = -1
        var length = socklen_t(MemoryLayout<Int32>.size)
        XCTAssertEqual(getsockopt(fd, Int32(IPPROTO_IP), IP_TOS, &tos, &length), 0)
        length = socklen_t(MemoryLayout<Int32>.size)
        XCTAssertEqual(getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &priority, &length), 0)
        return (tos, priority)
    }

    /// `kCFStreamNetworkServiceType` set before the open marks the socket when TCP is up (DSCP and
    /// priority), reads back as set, changes and clears on the open pair, and refuses what is not a
    /// service type and a Unix-domain pair.
    func testNetworkServiceTypeMarksTheSocket() throws {
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
        XCTAssertTrue(CFReadStreamSetProperty(input, kCFStreamNetworkServiceType, kCFStreamNetworkServiceTypeVoIP))
        XCTAssertEqual(CFWriteStreamCopyProperty(output, kCFStreamNetworkServiceType) as? String, kCFStreamNetworkServiceTypeVoIP as String)
        XCTAssertFalse(CFReadStreamSetProperty(input, kCFStreamNetworkServiceType, "kCFStreamNetworkServiceTypeNoSuch" as CFString))
        XCTAssertFalse(CFReadStreamSetProperty(input, kCFStreamNetworkServiceType, kCFBooleanTrue))
        CFReadStreamOpen(input)
        CFWriteStreamOpen(output)
        waitForOpen(input)
        XCTAssertEqual(CFReadStreamGetStatus(input), .open)
        var marks = try self.marks(input)
        XCTAssertEqual(marks.tos, 46 << 2, "EF")
        XCTAssertEqual(marks.priority, 6)

        // Foundation's spelling, on the open pair.
        XCTAssertTrue(output.setProperty(StreamNetworkServiceTypeValue.background, forKey: .networkServiceType))
        XCTAssertEqual(input.property(forKey: .networkServiceType) as? String, kCFStreamNetworkServiceTypeBackground as String)
        marks = try self.marks(input)
        XCTAssertEqual(marks.tos, 8 << 2, "CS1")
        XCTAssertEqual(marks.priority, 1)
        XCTAssertTrue(CFReadStreamSetProperty(input, kCFStreamNetworkServiceType, kCFStreamNetworkServiceTypeAVStreaming))
        XCTAssertEqual(try self.marks(input).tos, 26 << 2, "AF31")
        XCTAssertTrue(CFReadStreamSetProperty(input, kCFStreamNetworkServiceType, nil))
        XCTAssertNil(CFReadStreamCopyProperty(input, kCFStreamNetworkServiceType))
        marks = try self.marks(input)
        XCTAssertEqual(marks.tos, 0)
        XCTAssertEqual(marks.priority, 0)

        let unix = createStreamPair(unixSocketPath: "/nonexistent/socket")
        XCTAssertFalse(unix.input.setProperty(kCFStreamNetworkServiceTypeVoIP, forKey: .networkServiceType))
    }
}
