#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// Stream properties: CF keys by raw name, the package's own keys, rejection of unknown keys.
final class PropertyTests: SocketStreamsTestCase {

    func testNativeHandleRemoteHostNameAndRemotePort() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(host: "127.0.0.1", port: port)
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.openCompleted, on: .input) && recorder.has(.openCompleted, on: .output)
            }, "trace: \(recorder.trace)")

        let raw = try XCTUnwrap(
            pair.input.property(forKey: CFKey.nativeHandle) as? Data,
            "kCFStreamPropertySocketNativeHandle must be Data")
        XCTAssertEqual(raw.count, MemoryLayout<Int32>.size)
        let fd = try XCTUnwrap(nativeHandle(of: pair.input))
        XCTAssertEqual(nativeHandle(of: pair.output), fd, "one socket per pair")
        XCTAssertEqual(RawSocket.intOption(fd, level: SOL_SOCKET, name: SO_TYPE), RawSocket.streamType)
        XCTAssertEqual(RawSocket.peerPort(fd), port, "the handle is the connected socket")

        for stream in [pair.input as Stream, pair.output as Stream] {
            XCTAssertEqual(stream.property(forKey: CFKey.remoteHostName) as? String, "127.0.0.1")
            XCTAssertEqual((stream.property(forKey: CFKey.remotePortNumber) as? NSNumber)?.intValue, port)
        }
    }

    func testUnknownKeysAreRejected() throws {
        let pair = makePair(port: try RawSocket.unusedPort())
        let unknown = Stream.PropertyKey(rawValue: "SocketStreamsTests.NoSuchProperty")
        XCTAssertFalse(pair.input.setProperty(NSString(string: "value"), forKey: unknown))
        XCTAssertFalse(pair.output.setProperty(NSNumber(value: 1), forKey: unknown))
        XCTAssertNil(pair.input.property(forKey: unknown))
    }

    /// Apple code passes plain Swift values (`Any?`): a Double for connectTimeoutKey is
    /// accepted and honoured (a hanging connect fails with ETIMEDOUT once 0.5 s have passed).
    func testConnectTimeoutAcceptsASwiftDouble() throws {
        let blackhole = try BacklogFullListener(family: .v4)
        let pair = makePair(port: blackhole.port)
        let clock = ManualTime()
        pair.input.connection.someOptions.time = clock
        let timeout: Double = 0.5
        XCTAssertTrue(
            setAnyValueProperty(pair.output, timeout, forKey: .connectTimeoutKey),
            "setProperty(Double, forKey: .connectTimeoutKey) must return true")
        let recorder = startRecorder(pair)
        XCTAssertEqual(clock.pending, [0.5])
        clock.advance(by: 0.5)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.errorOccurred, on: .input) },
            "trace: \(recorder.trace)")
        assertPOSIXError(pair.input.streamError, [ETIMEDOUT])
        withExtendedLifetime(blackhole) {}
    }

    /// The connect timeout also takes an Int and an NSNumber.
    func testConnectTimeoutAcceptsIntAndNSNumber() throws {
        let pair = makePair(port: try RawSocket.unusedPort())
        XCTAssertTrue(setAnyValueProperty(pair.input, 3, forKey: .connectTimeoutKey), "Int")
        XCTAssertTrue(pair.output.setProperty(NSNumber(value: 2.5), forKey: .connectTimeoutKey), "NSNumber")
    }

    /// tcpNoDelayKey (Bool) reaches the socket as TCP_NODELAY.
    func testTCPNoDelayIsAppliedToTheSocket() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        XCTAssertTrue(pair.output.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey))
        let recorder = startRecorder(pair)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.openCompleted, on: .output) },
            "trace: \(recorder.trace)")
        let fd = try XCTUnwrap(nativeHandle(of: pair.output))
        XCTAssertEqual(RawSocket.intOption(fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY), 1)
    }

    // MARK: wrong-typed values

    /// Values that are not Booleans: strings (even "true"), numbers that are not Bool NSNumbers
    /// (a CFNumber is not a CFBoolean), other objects.
    private let notBooleans: [Any] = [
        "banana", "true", "yes", "1", "false", NSString(string: "no"), 1, 0, NSNumber(value: 1), NSNumber(value: 0),
        2.5, NSNumber(value: 2.5), Int8(1), Data([1]), [true], NSNull(),
    ]

    /// Values that are not numbers: Booleans in every boxing (every NSNumber casts to Bool on Linux
    /// and back), numeric strings, other objects.
    private let notNumbers: [Any] = [
        true, false, NSNumber(value: true), kCFBooleanTrue!, kCFBooleanFalse!, "5", NSString(string: "0.5"),
        Data([5]), [5], ["seconds": 5], NSNull(),
    ]

    /// Sets each value on one stream and expects `false`, with the property still reading back as
    /// before (`unchanged`, checked on the other stream of the pair).
    private func assertRefused(
        _ values: [Any], forKey key: Stream.PropertyKey, on pair: StreamPair,
        unchanged: () -> Bool, file: StaticString = #filePath, line: UInt = #line
    ) {
        for value in values {
            let label = "\(key.rawValue) = \(value) (\(type(of: value)))"
            XCTAssertFalse(pair.input.setProperty(value, forKey: key), "accepted: \(label)", file: file, line: line)
            XCTAssertTrue(unchanged(), "changed by \(label)", file: file, line: line)
        }
    }

    /// A Bool as property(forKey:) returns it: an NSNumber whose objCType is "c".
    private func boolean(_ value: Any?) -> Bool? {
        guard let number = value as? NSNumber, String(cString: number.objCType) == "c" else { return nil }
        return number.boolValue
    }

    /// tcpNoDelayKey takes Booleans only (any boxing); everything else is false and changes nothing.
    func testTCPNoDelayRefusesWhatIsNotABoolean() {
        let pair = makePair(host: "example.com", port: 443)
        for value in [true, NSNumber(value: true), kCFBooleanTrue!] as [Any] {
            XCTAssertTrue(pair.input.setProperty(value, forKey: .tcpNoDelayKey), "\(value)")
        }
        XCTAssertTrue(pair.input.setProperty(kCFBooleanFalse, forKey: .tcpNoDelayKey))
        XCTAssertTrue(pair.input.setProperty(NSNumber(value: true), forKey: .tcpNoDelayKey))
        assertRefused(notBooleans, forKey: .tcpNoDelayKey, on: pair) { boolean(pair.output.property(forKey: .tcpNoDelayKey)) == true }
    }

    /// kCFStreamPropertyShouldCloseNativeSocket takes Booleans only.
    func testShouldCloseNativeSocketRefusesWhatIsNotABoolean() {
        let pair = makePair(host: "example.com", port: 443)
        let key = CFKey.shouldCloseNativeSocket
        XCTAssertTrue(pair.input.setProperty(true, forKey: key))
        XCTAssertTrue(pair.input.setProperty(kCFBooleanFalse, forKey: key))
        assertRefused(notBooleans, forKey: key, on: pair) { boolean(pair.output.property(forKey: key)) == false }
    }

    /// connectTimeoutKey takes numbers only: not a Bool (`true` is not 1 s), not a numeric string.
    func testConnectTimeoutRefusesWhatIsNotANumber() {
        let pair = makePair(host: "example.com", port: 443)
        for value in [3, 2.5, Float(1.5), NSNumber(value: 4), NSNumber(value: UInt8(7))] as [Any] {
            XCTAssertTrue(pair.input.setProperty(value, forKey: .connectTimeoutKey), "\(value) (\(type(of: value)))")
        }
        XCTAssertTrue(pair.input.setProperty(2.5, forKey: .connectTimeoutKey))
        assertRefused(notNumbers + [-1, Double.nan], forKey: .connectTimeoutKey, on: pair) {
            let read = pair.output.property(forKey: .connectTimeoutKey) as? NSNumber
            return read?.doubleValue == 2.5 && boolean(read) == nil
        }
    }

    /// kCFStreamPropertySocketSecurityLevel takes a level string (or StreamSocketSecurityLevel) only.
    func testSecurityLevelRefusesWhatIsNotALevel() {
        let pair = makePair(host: "example.com", port: 443)
        let key = Stream.PropertyKey.socketSecurityLevelKey
        XCTAssertTrue(pair.input.setProperty(kCFStreamSocketSecurityLevelTLSv1, forKey: key))
        let values: [Any] = [
            NSNumber(value: 3), 1, true, kCFBooleanTrue!, Data("kCFStreamSocketSecurityLevelNone".utf8),
            [kCFStreamSocketSecurityLevelNone as String], "kCFStreamSocketSecurityLevelBogus",
        ]
        assertRefused(values, forKey: key, on: pair) {
            pair.output.property(forKey: key) as? String == kCFStreamSocketSecurityLevelTLSv1 as String
        }
    }

    /// kCFStreamPropertySSLSettings: a Boolean key holding anything but a Boolean, a name, level or
    /// identity of the wrong type, or no dictionary at all, refuses the whole dictionary.
    func testSSLSettingsRefuseWrongTypedEntries() {
        let pair = makePair(host: "example.com", port: 443)
        let key = Stream.PropertyKey(kCFStreamPropertySSLSettings as String)
        let validates = kCFStreamSSLValidatesCertificateChain as String
        XCTAssertTrue(pair.input.setProperty([validates: false, kCFStreamSSLIsServer as String: kCFBooleanFalse!], forKey: key))
        let before = pair.output.property(forKey: .tlsSettingsKey) as? TLSSettings
        XCTAssertEqual(before?.validatesCertificateChain, false)
        let booleanKeys: [CFString] = [
            kCFStreamSSLValidatesCertificateChain, kCFStreamSSLAllowsExpiredCertificates,
            kCFStreamSSLAllowsExpiredRoots, kCFStreamSSLAllowsAnyRoot, kCFStreamSSLIsServer,
        ]
        var values: [Any] = booleanKeys.flatMap { booleanKey -> [Any] in notBooleans.map { [booleanKey as String: $0] } }
        values +=
            [
                [kCFStreamSSLPeerName as String: 42], [kCFStreamSSLPeerName as String: true],
                [kCFStreamSSLLevel as String: 5], [kCFStreamSSLLevel as String: true],
                [kCFStreamSSLCertificates as String: "identity"], [kCFStreamSSLCertificates as String: true],
                "not a dictionary", 5, true, [1],
            ] as [Any]
        assertRefused(values, forKey: key, on: pair) {
            pair.output.property(forKey: .tlsSettingsKey) as? TLSSettings == before
                && (pair.output.property(forKey: key) as? [String: Any])?[validates] as? Bool == false
        }
    }

    /// tlsSettingsKey takes a TLSSettings only.
    func testTLSSettingsRefuseWhatIsNotTLSSettings() {
        let pair = makePair(host: "example.com", port: 443)
        var settings = TLSSettings()
        settings.allowsExpiredCertificates = true
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let values: [Any] = ["TLS", 5, true, [kCFStreamSSLAllowsAnyRoot as String: true], ProxyConfiguration.socks5(host: "h")]
        assertRefused(values, forKey: .tlsSettingsKey, on: pair) {
            pair.output.property(forKey: .tlsSettingsKey) as? TLSSettings == settings
        }
    }

    /// The proxy dictionaries: strings where numbers are wanted, Booleans where numbers are wanted,
    /// numbers where strings are wanted; SystemConfiguration's flags (`SOCKSEnable`,
    /// `ExcludeSimpleHostnames`, CFNumbers there) take a number or a Boolean, never a string.
    func testProxyDictionariesRefuseWrongTypedEntries() {
        let pair = makePair(host: "example.com", port: 443)
        let good = ProxyConfiguration.socks5(host: "good", port: 1)
        XCTAssertTrue(pair.input.setProperty(good, forKey: .proxyConfigurationKey))
        let unchanged = { pair.output.property(forKey: .proxyConfigurationKey) as? ProxyConfiguration == good }
        let socks: [String: Any] = ["SOCKSProxy": "h"]
        func with(_ entries: [String: Any]) -> [String: Any] { socks.merging(entries) { $1 } }
        for flag in ["SOCKSEnable", "ExcludeSimpleHostnames"] {
            XCTAssertTrue(pair.input.setProperty(with([flag: 0]), forKey: .socksProxyConfigurationKey), flag)
            XCTAssertTrue(pair.input.setProperty(with([flag: false]), forKey: .socksProxyConfigurationKey), flag)
            XCTAssertTrue(pair.input.setProperty(good, forKey: .proxyConfigurationKey))
        }
        var values: [Any] = ["SOCKSEnable", "ExcludeSimpleHostnames"].flatMap { flag -> [Any] in
            ["yes", "banana", "1", NSString(string: "0"), 2.5, Data([1]), [1], NSNull()].map { with([flag: $0]) }
        }
        values +=
            [
                ["SOCKSProxy": 12], ["SOCKSProxy": true], with(["SOCKSPort": true]), with(["SOCKSPort": NSNumber(value: true)]),
                with(["SOCKSPort": "1080"]), with(["SOCKSPort": 1080.5]), with([kCFStreamPropertySOCKSVersion as String: 5]),
                with([kCFStreamPropertySOCKSVersion as String: true]), with([kCFStreamPropertySOCKSUser as String: 7]),
                with([kCFStreamPropertySOCKSPassword as String: true]), with(["ExceptionsList": "x"]), with(["ExceptionsList": [1]]),
            ] as [Any]
        assertRefused(values, forKey: .socksProxyConfigurationKey, on: pair, unchanged: unchanged)

        let connectKey = Stream.PropertyKey(kCFStreamPropertyCONNECTProxy as String)
        let host = kCFStreamPropertyCONNECTProxyHost as String
        let port = kCFStreamPropertyCONNECTProxyPort as String
        let headers = kCFStreamPropertyCONNECTAdditionalHeaders as String
        let connect: [Any] = [
            [host: 5, port: 3128], [host: true, port: 3128], [host: "h", port: true], [host: "h", port: kCFBooleanTrue!],
            [host: "h", port: "3128"], [host: "h", port: 3128.5], [host: "h", port: 3128, headers: "X-A: 1"],
            [host: "h", port: 3128, headers: ["X-A": 1]], [host: "h", port: 3128, headers: ["X-A": true]], "h:3128", 3128,
        ]
        assertRefused(connect, forKey: connectKey, on: pair, unchanged: unchanged)
        assertRefused(["socks5://h:1080", 1080, true, socks], forKey: .proxyConfigurationKey, on: pair, unchanged: unchanged)
    }

    /// Read-only keys refuse every value and keep reading back what they read before.
    func testReadOnlyKeysRefuseEveryValue() {
        let pair = makePair(host: "example.com", port: 443)
        let keys = [
            CFKey.nativeHandle, CFKey.remoteHostName, CFKey.remotePortNumber,
            Stream.PropertyKey(kCFStreamPropertySSLPeerCertificates as String), .tlsConnectionInfoKey,
            Stream.PropertyKey(kCFStreamPropertySSLPeerTrust as String), Stream.PropertyKey(kCFStreamPropertySSLContext as String),
        ]
        for key in keys {
            let before = pair.output.property(forKey: key) as? NSObject
            assertRefused(["other.example", 80, true, Data([1, 2, 3, 4]), NSNull()], forKey: key, on: pair) {
                pair.output.property(forKey: key) as? NSObject == before
            }
        }
    }

    /// Keys the package does not implement (Guides/PortingFromApplePlatforms.md, "Not supported"):
    /// `setProperty` returns false and the key reads as nil, so code can tell.
    func testUnsupportedKeysAreRefused() {
        let pair = makePair(host: "example.com", port: 443)
        for key in [Stream.PropertyKey("kCFStreamPropertyNoSuchKey")] {
            XCTAssertFalse(pair.input.setProperty(StreamNetworkServiceTypeValue.background, forKey: key), key.rawValue)
            XCTAssertFalse(pair.output.setProperty("x", forKey: key), key.rawValue)
            XCTAssertNil(pair.input.property(forKey: key), key.rawValue)
        }
    }

    /// The package's own key names are distinct strings.
    func testPackageKeysAreDistinct() {
        XCTAssertNotEqual(Stream.PropertyKey.connectTimeoutKey, .tcpNoDelayKey)
        XCTAssertFalse(Stream.PropertyKey.connectTimeoutKey.rawValue.isEmpty)
    }
}

// MARK: - the `Any?` overload of setProperty

/// The contract says `stream.setProperty(x, forKey:)` also accepts `Any?` (a Swift Double or
/// struct), as Apple code expects. Swift-corelibs only has `AnyObject?`, and the STUB this
/// suite was written against does not have the overload yet, so a direct call
/// `stream.setProperty(0.5, forKey:)` would not compile here. Calling through this protocol
/// compiles either way: once the library's overload exists it is the witness (a type's own or
/// inherited member beats a protocol-extension default); until then the default below fails
/// the test, visibly.
protocol AnyValuePropertySetting: AnyObject {
    func setProperty(_ property: Any?, forKey key: Stream.PropertyKey) -> Bool
}

extension AnyValuePropertySetting {
    func setProperty(_ property: Any?, forKey key: Stream.PropertyKey) -> Bool {
        XCTFail("SocketStreams has no setProperty(_: Any?, forKey:) overload (contract: it accepts Any?)")
        return false
    }
}

extension SocketInputStream: AnyValuePropertySetting {}
extension SocketOutputStream: AnyValuePropertySetting {}

/// Calls the `Any?` overload with a plain Swift value.
func setAnyValueProperty<S: AnyValuePropertySetting>(_ stream: S, _ value: Any?, forKey key: Stream.PropertyKey) -> Bool {
    stream.setProperty(value, forKey: key)
}
