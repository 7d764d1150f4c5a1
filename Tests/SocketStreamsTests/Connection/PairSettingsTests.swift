import Foundation
@testable import SocketStreams
import SocketStreamsTestSupport
import XCTest

/// `PairSettings.apply`'s rules as a table, without sockets: every kind of change at every moment of
/// a pair's life, on a host, a Unix-domain and a native-socket pair, with what it leaves the
/// connection to do and what it stores.
final class PairSettingsTests: XCTestCase {
    typealias Change = PairSettings.Change
    typealias Moment = PairSettings.Moment

    static let moments: [Moment] = [.idle, .connecting, .live(tlsStarted: false), .live(tlsStarted: true), .settled]
    static let targets: [Endpoint] = [.host("example.com", port: 443), .unix(path: "/tmp/s"), .native(fd: 3)]

    /// Each change, its name in the table, and whether it is stored (read back from the settings).
    static var changes: [(name: String, change: Change, stored: (PairSettings) -> Bool)] {
        [
            ("tls", .tls(TLSSettings(), asSet: ["k": NSString(string: "v")]), { $0.tls != nil && $0.tlsAsSet.count == 1 }),
            ("no tls", .tls(nil, asSet: [:]), { $0.tls == nil }),
            ("proxy", .proxy(.socks5(host: "127.0.0.1"), asSet: [:]), { $0.proxy != nil && $0.proxyTarget != nil }),
            ("bad proxy", .proxy(.socks5(host: ""), asSet: [:]), { $0.proxy == nil }),
            ("no proxy", .proxy(nil, asSet: [:]), { $0.proxy == nil && $0.proxyTarget == nil }),
            ("timeout", .connectTimeout(5), { $0.connectTimeout == 5 }),
            ("binding", .localBinding(LocalBinding(address: "127.0.0.2")), { $0.localBinding != nil }),
            ("class", .trafficClass(.standard, asSet: "default"), { $0.trafficClassAsSet == "default" }),
            ("fast open", .fastOpen(true), { $0.fastOpen }),
        ]
    }

    /// Change × moment → effect, for a host pair ("r" refused, "t" taken, "s" start TLS, "m" mark the socket).
    static let hostTable: [String: String] = [
        "tls": "t t s r r", "no tls": "t t t r r", "proxy": "t r r r r", "bad proxy": "r r r r r", "no proxy": "t r r r r",
        "timeout": "t r r r r", "binding": "t r r r r", "class": "m m m m m", "fast open": "t r r r r",
    ]

    static func letter(_ effect: PairSettings.Effect) -> String {
        switch effect {
        case .refused: return "r"
        case .taken: return "t"
        case .startTLS: return "s"
        case .markSocket: return "m"
        }
    }

    func testEveryChangeAtEveryMomentOnEveryKindOfPair() {
        for target in Self.targets {
            for (name, change, stored) in Self.changes {
                var row: [String] = []
                for moment in Self.moments {
                    var settings = PairSettings()
                    let effect = settings.apply(change, at: moment, target: target)
                    row.append(Self.letter(effect))
                    if effect == .refused {
                        XCTAssertNil(settings.tls, "\(name) at \(moment) on \(target) changed TLS though refused")
                        XCTAssertNil(settings.proxy, "\(name) at \(moment) on \(target) changed the proxy though refused")
                        XCTAssertNil(settings.connectTimeout, "\(name) at \(moment) on \(target)")
                        XCTAssertNil(settings.localBinding, "\(name) at \(moment) on \(target)")
                        XCTAssertNil(settings.trafficClassAsSet, "\(name) at \(moment) on \(target)")
                        XCTAssertFalse(settings.fastOpen, "\(name) at \(moment) on \(target)")
                    } else {
                        XCTAssertTrue(stored(settings), "\(name) at \(moment) on \(target) was taken but not stored")
                    }
                }
                let expected: String
                switch target {
                case .host: expected = Self.hostTable[name]!
                case .unix:
                    // No proxy, binding, fast open or traffic class on a Unix-domain pair; TLS and the timeout as on a host pair.
                    expected = ["tls", "no tls", "timeout"].contains(name) ? Self.hostTable[name]! : "r r r r r"
                case .native:
                    // A native socket is already connected: no proxy, binding or fast open; the rest as on a
                    // host pair.
                    let refused = ["proxy", "bad proxy", "no proxy", "binding", "fast open"]
                    expected = refused.contains(name) ? "r r r r r" : Self.hostTable[name]!
                }
                XCTAssertEqual(row.joined(separator: " "), expected, "\(name) on \(target)")
            }
        }
    }

    /// Turning TLS off on a live plain pair is taken and changes nothing (there is none to stop).
    func testNoTLSOnALivePlainPairKeepsWhatWasSet() {
        var settings = PairSettings()
        XCTAssertEqual(settings.apply(.tls(TLSSettings(), asSet: [:]), at: .idle, target: Self.targets[0]), .taken)
        XCTAssertEqual(settings.apply(.tls(nil, asSet: [:]), at: .live(tlsStarted: false), target: Self.targets[0]), .taken)
        XCTAssertNotNil(settings.tls)
    }

    /// A proxy cleared before open drops its target and the values it was set with.
    func testClearingTheProxyDropsWhatCameWithIt() {
        var settings = PairSettings()
        let asSet: [String: AnyObject] = ["SOCKSProxy": NSString(string: "x")]
        XCTAssertEqual(settings.apply(.proxy(.socks4(host: "127.0.0.1"), asSet: asSet), at: .idle, target: Self.targets[0]), .taken)
        XCTAssertEqual(settings.proxyAsSet.count, 1)
        XCTAssertEqual(settings.firstHop, .host("127.0.0.1", port: 1080))
        XCTAssertEqual(settings.apply(.proxy(nil, asSet: asSet), at: .idle, target: Self.targets[0]), .taken)
        XCTAssertNil(settings.proxyTarget)
        XCTAssertTrue(settings.proxyAsSet.isEmpty)
        XCTAssertNil(settings.firstHop)
    }

    /// Which changes only clear (a pair with no settings need not store them).
    func testWhichChangesClear() {
        XCTAssertEqual(
            Self.changes.map { "\($0.name):\($0.change.clears)" }.joined(separator: " "),
            "tls:false no tls:true proxy:false bad proxy:false no proxy:true timeout:false binding:false class:false fast open:false")
        XCTAssertTrue(Change.localBinding(nil).clears)
        XCTAssertTrue(Change.fastOpen(false).clears)
        XCTAssertTrue(Change.trafficClass(nil, asSet: nil).clears)
    }
}
