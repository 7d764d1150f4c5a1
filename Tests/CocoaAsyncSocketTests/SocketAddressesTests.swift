#if canImport(Glibc)
    import Glibc
#endif
@testable import CocoaAsyncSocket
import Foundation
import XCTest

/// `host(fromAddress:)` (GCDAsyncSocket's `hostFromAddress:`, and the host every
/// `socket:didConnectToHost:port:` is given) composes IPv4 text itself: it must match `inet_ntop`'s
/// byte for byte, for every octet value in every position, for IPv4-mapped IPv6 addresses too.
final class SocketAddressesTests: XCTestCase {
    func testIPv4TextMatchesInetNtop() {
        var generator = SystemRandomNumberGenerator()
        var addresses: [UInt32] = [0, 0xFFFF_FFFF, 0x7F00_0001, 0x0A00_00FF, 0x6400_0A09, 0x0102_0304]
        for value in 0...255 { addresses.append(UInt32(value) * 0x0101_0101) }  // every octet value, each position
        for _ in 0..<2_000 { addresses.append(UInt32.random(in: .min ... .max, using: &generator)) }
        for value in addresses {
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_addr.s_addr = value.bigEndian
            let address = withUnsafeBytes(of: &sin) { Data($0) }
            XCTAssertEqual(GCDAsyncSocket.host(fromAddress: address), Self.ntop(AF_INET, sin.sin_addr), "0x\(String(value, radix: 16))")

            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { bytes in
                bytes[10] = 0xFF
                bytes[11] = 0xFF
                withUnsafeBytes(of: value.bigEndian) { UnsafeMutableRawBufferPointer(rebasing: bytes[12..<16]).copyMemory(from: $0) }
            }
            let mapped = withUnsafeBytes(of: &sin6) { Data($0) }
            XCTAssertEqual(
                GCDAsyncSocket.host(fromAddress: mapped), Self.ntop(AF_INET, sin.sin_addr), "::ffff: 0x\(String(value, radix: 16))")
        }
    }

    func testIPv6AndMalformedAddresses() {
        var sin6 = sockaddr_in6()
        sin6.sin6_family = sa_family_t(AF_INET6)
        _ = inet_pton(AF_INET6, "2001:db8::8a2e:370:7334", &sin6.sin6_addr)
        let v6 = withUnsafeBytes(of: &sin6) { Data($0) }
        XCTAssertEqual(GCDAsyncSocket.host(fromAddress: v6), "2001:db8::8a2e:370:7334")
        XCTAssertNil(GCDAsyncSocket.host(fromAddress: Data(v6.prefix(20))), "a truncated sockaddr_in6")
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        let v4 = withUnsafeBytes(of: &sin) { Data($0) }
        XCTAssertEqual(GCDAsyncSocket.host(fromAddress: v4), "0.0.0.0")
        XCTAssertNil(GCDAsyncSocket.host(fromAddress: Data(v4.prefix(15))), "a truncated sockaddr_in")
        XCTAssertNil(GCDAsyncSocket.host(fromAddress: Data()))
        var unix = sockaddr_un()
        unix.sun_family = sa_family_t(AF_UNIX)
        XCTAssertNil(GCDAsyncSocket.host(fromAddress: withUnsafeBytes(of: &unix) { Data($0) }))
    }

    private static func ntop(_ family: Int32, _ address: in_addr) -> String? {
        var address = address
        var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(family, &address, &text, socklen_t(text.count)) != nil else { return nil }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
