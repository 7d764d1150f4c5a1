#if canImport(Glibc)
    import Glibc
#endif
@testable import SocketStreams
import XCTest

/// `SocketAddress` holds IPv4 and IPv6 addresses inline and longer ones (Unix paths) by index: every
/// kind comes back byte for byte, compares by what it names, and stays plain data.
final class SocketAddressTests: XCTestCase {
    /// The address as `withSockAddr` gives it.
    private func bytes(_ address: SocketAddress) -> [UInt8] {
        address.withSockAddr { pointer, length in Array(UnsafeRawBufferPointer(start: pointer, count: Int(length))) }
    }

    func testItIsPlainDataOfThirtySixBytes() {
        XCTAssertTrue(_isPOD(SocketAddress.self))
        XCTAssertEqual(MemoryLayout<SocketAddress>.size, 36)
    }

    func testInternetAddressesComeBackAsTheirFamilysStructure() throws {
        let v4 = try XCTUnwrap(SocketAddress(numericHost: "192.0.2.7", port: 5353))
        XCTAssertEqual(bytes(v4).count, MemoryLayout<sockaddr_in>.size)
        XCTAssertEqual(v4.host, "192.0.2.7")
        XCTAssertEqual(v4.port, 5353)
        XCTAssertEqual(v4.withPort(80).port, 80)
        XCTAssertEqual(v4.withPort(80).host, "192.0.2.7")
        let v6 = try XCTUnwrap(SocketAddress(numericHost: "2001:db8::1", port: 443))
        XCTAssertEqual(bytes(v6).count, MemoryLayout<sockaddr_in6>.size)
        XCTAssertEqual(v6.description, "[2001:db8::1]:443")
        XCTAssertEqual(bytes(v6).withUnsafeBytes { SocketAddress(sockaddrBytes: $0) }, v6)
        XCTAssertNotEqual(v4, v4.withPort(80))
        XCTAssertNotEqual(v6, SocketAddress(numericHost: "2001:db8::2", port: 443))
    }

    /// Addresses key dictionaries (a UDP listener's flows, by sender): equal ones hash alike, whatever
    /// the padding, and each family's port, address and scope tell them apart.
    func testEqualAddressesHashAlikeAndDistinctOnesKeySeparateEntries() throws {
        let v4 = try XCTUnwrap(SocketAddress(numericHost: "127.0.0.1", port: 40_000))
        let v6 = try XCTUnwrap(SocketAddress(numericHost: "::1", port: 40_000))
        let mapped = try XCTUnwrap(SocketAddress(numericHost: "::ffff:127.0.0.1", port: 40_000))
        let linkLocal = try XCTUnwrap(SocketAddress(numericHost: "fe80::1", port: 40_000))
        var scopedBytes = bytes(linkLocal)
        scopedBytes.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt32(1), toByteOffset: MemoryLayout<sockaddr_in6>.offset(of: \.sin6_scope_id)!, as: UInt32.self)
        }
        let scoped = try XCTUnwrap(scopedBytes.withUnsafeBytes { SocketAddress(sockaddrBytes: $0) })
        var padded = bytes(v4)
        padded.withUnsafeMutableBytes { raw in
            // sin_zero: not part of the address
            for offset in 8..<MemoryLayout<sockaddr_in>.size { raw[offset] = 0xA5 }
        }
        let v4Again = try XCTUnwrap(padded.withUnsafeBytes { SocketAddress(sockaddrBytes: $0) })
        XCTAssertEqual(v4Again, v4)
        XCTAssertEqual(v4Again.hashValue, v4.hashValue)
        XCTAssertEqual(try XCTUnwrap(bytes(v6).withUnsafeBytes { SocketAddress(sockaddrBytes: $0) }).hashValue, v6.hashValue)
        let all = [
            v4, v4.withPort(40_001), try XCTUnwrap(SocketAddress(numericHost: "127.0.0.2", port: 40_000)), v6, mapped, linkLocal, scoped,
        ]
        var flows: [SocketAddress: Int] = [:]
        for (index, address) in all.enumerated() { flows[address] = index }
        XCTAssertEqual(flows.count, all.count)
        for (index, address) in all.enumerated() { XCTAssertEqual(flows[address], index, "\(address)") }
        XCTAssertEqual(flows[v4Again], 0)
    }

    /// Paths of every length a `sun_path` takes, short (inline) and long (by index), each twice: the
    /// same path gives equal addresses with the same bytes, and a different path a different address.
    func testUnixPathsOfEveryLengthComeBackWhole() throws {
        let capacity = MemoryLayout.size(ofValue: sockaddr_un().sun_path)
        for length in 1..<capacity {
            let path = "/" + String(repeating: "p", count: length - 1)
            let first = try XCTUnwrap(SocketAddress(unixPath: path))
            let second = try XCTUnwrap(SocketAddress(unixPath: path))
            XCTAssertEqual(first.family, AF_UNIX)
            XCTAssertEqual(first.host, path)
            XCTAssertEqual(first, second)
            XCTAssertEqual(bytes(first), bytes(second))
            XCTAssertEqual(bytes(first).count, MemoryLayout<sa_family_t>.size + length + 1)
            let other = try XCTUnwrap(SocketAddress(unixPath: String(path.dropLast()) + "q"))
            XCTAssertNotEqual(first, other, "paths of \(length) bytes")
        }
        XCTAssertNil(SocketAddress(unixPath: "/" + String(repeating: "p", count: capacity)))
    }

    /// An address read back from the kernel (`getsockname` on a socket bound to a long path) is the
    /// one bound.
    func testALongPathReadBackFromTheKernelIsTheOneBound() throws {
        let path = NSTemporaryDirectory() + "/socketstreams-\(getpid())-" + String(repeating: "l", count: 40)
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        defer {
            close(fd)
            unlink(path)
        }
        let bound = try XCTUnwrap(SocketAddress(unixPath: path))
        try Posix.bind(fd, to: bound)
        let read = try Posix.localAddress(fd)
        XCTAssertEqual(read, bound)
        XCTAssertEqual(read.host, path)
    }
}
