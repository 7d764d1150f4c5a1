#if canImport(Glibc)
    import Glibc
#endif
@testable import CocoaAsyncSocket
import Foundation
import XCTest

/// What every idle GCDAsyncSocket holds (issue 25: at most 2 KiB per idle connection): its `State`,
/// with the `Link` of its connection inside, in one guarded allocation of 16 + 96 + 40 bytes (a
/// 160-byte malloc chunk; 8 bytes more would take the next, 176). An IPv4 connection's two addresses
/// are kept in 12 bytes and must come back byte for byte as `getpeername`/`getsockname` gave them.
final class GCDAsyncSocketLayoutTests: XCTestCase {
    func testStateAndLinkStayWithinTheirMeasuredSizes() {
        XCTAssertLessThanOrEqual(MemoryLayout<GCDAsyncSocket.Link>.size, 24)
        XCTAssertLessThanOrEqual(MemoryLayout<GCDAsyncSocket.State>.size, 96)
    }

    func testIPv4AddressesComeBackByteForByte() throws {
        let peer = Self.sockaddrIn(address: "203.0.113.7", port: 6379)
        let local = Self.sockaddrIn(address: "127.0.0.1", port: 54_321)
        let pair = try XCTUnwrap(GCDAsyncSocket.IPv4Pair(peer: peer, local: local))
        XCTAssertEqual(GCDAsyncSocket.IPv4Pair.sockaddr(pair.peerAddress, pair.peerPort), peer)
        XCTAssertEqual(GCDAsyncSocket.IPv4Pair.sockaddr(pair.localAddress, pair.localPort), local)
        XCTAssertEqual(GCDAsyncSocket.host(fromAddress: GCDAsyncSocket.IPv4Pair.sockaddr(pair.peerAddress, pair.peerPort)), "203.0.113.7")
        XCTAssertEqual(GCDAsyncSocket.port(fromAddress: GCDAsyncSocket.IPv4Pair.sockaddr(pair.localAddress, pair.localPort)), 54_321)
    }

    func testOtherAddressesAreNotCompacted() {
        let local = Self.sockaddrIn(address: "127.0.0.1", port: 80)
        var padded = Self.sockaddrIn(address: "127.0.0.1", port: 81)
        padded[12] = 1  // sin_zero not zero: could not be rebuilt as it was
        var sin6 = sockaddr_in6()
        sin6.sin6_family = sa_family_t(AF_INET6)
        sin6.sin6_port = UInt16(443).bigEndian
        let ipv6 = withUnsafeBytes(of: &sin6) { Data($0) }
        XCTAssertNil(GCDAsyncSocket.IPv4Pair(peer: padded, local: local))
        XCTAssertNil(GCDAsyncSocket.IPv4Pair(peer: ipv6, local: local))
        XCTAssertNil(GCDAsyncSocket.IPv4Pair(peer: local, local: nil))
        XCTAssertNil(GCDAsyncSocket.IPv4Pair(peer: Data(local.prefix(15)), local: local))
    }

    private static func sockaddrIn(address: String, port: UInt16) -> Data {
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = port.bigEndian
        _ = inet_pton(AF_INET, address, &sin.sin_addr)
        return withUnsafeBytes(of: &sin) { Data($0) }
    }
}
