// swift-tools-version:6.2
import PackageDescription

let package = Package(
    name: "SocketStreams",
    products: [
        .library(name: "SocketStreams", targets: ["SocketStreams"]),
        // GCDAsyncSocket's API over the same engine, for code written against CocoaAsyncSocket.
        .library(name: "CocoaAsyncSocket", targets: ["CocoaAsyncSocket"]),
        // Network.framework's API (NWEndpoint, NWParameters, the protocol options, NWError...) over the same engine.
        .library(name: "SocketStreamsNetwork", targets: ["SocketStreamsNetwork"]),
        .executable(name: "stream-get", targets: ["stream-get"]),
        .executable(name: "stream-bench", targets: ["stream-bench"]),
        .executable(name: "socketstreams-stress", targets: ["socketstreams-stress"]),
    ],
    targets: [
        // C declarations Swift cannot import directly (epoll, eventfd, timerfd, errno).
        .target(name: "CSocketStreamsShims"),
        // The system's OpenSSL 3 (Debian: libssl-dev), found with pkg-config, plus C functions for its macros.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // The system's zlib (Debian: zlib1g-dev), found with pkg-config: WebSocket's permessage-deflate.
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // The HTTP/1.1 response parser: the library's CONNECT proxy stage and `stream-get` both use it.
        .target(name: "HTTPParsing"),
        .target(
            name: "SocketStreams",
            dependencies: ["CSocketStreamsShims", "COpenSSL", "HTTPParsing"]
        ),
        // GCDAsyncSocket (CocoaAsyncSocket) with its Apple-platform Swift interface, over SocketStreams'
        // queued-operations engine; re-exports SocketStreams.
        .target(
            name: "CocoaAsyncSocket",
            dependencies: ["SocketStreams"]
        ),
        // Network.framework's Swift interface (`NWEndpoint`, `NWParameters`, `NWProtocolTCP.Options`, `NWError`...),
        // over SocketStreams; re-exports it. Never named `Network` (see Guides/Architecture.md).
        .target(
            name: "SocketStreamsNetwork",
            // COpenSSL: SHA-1 for WebSocket's handshake; CZlib: its permessage-deflate.
            dependencies: ["SocketStreams", "COpenSSL", "CZlib"]
        ),
        // URL parsing, the built-in page server and the fetch logic of `stream-get`.
        .target(
            name: "StreamGetCore",
            dependencies: ["SocketStreams", "HTTPParsing"]
        ),
        .executableTarget(
            name: "stream-get",
            dependencies: ["StreamGetCore"]
        ),
        .executableTarget(
            name: "stream-bench",
            dependencies: ["SocketStreams", "CocoaAsyncSocket", "SocketStreamsNetwork", "CSocketStreamsShims", "COpenSSL"],
            path: "Benchmarks/Sources/stream-bench"
        ),
        // The guides' example programs (Guides/Examples): compiled with the package, run by the tests.
        .executableTarget(
            name: "getting-started-delegate",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/GettingStartedDelegate"
        ),
        .executableTarget(
            name: "getting-started-polling",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/GettingStartedPolling"
        ),
        .executableTarget(
            name: "reading-and-writing",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/ReadingAndWriting"
        ),
        .executableTarget(
            name: "polling-or-run-loop",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/PollingOrRunLoop"
        ),
        .executableTarget(
            name: "accepting-connections",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/AcceptingConnections"
        ),
        .executableTarget(
            name: "setting-up-streams",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/SettingUpStreams"
        ),
        .executableTarget(
            name: "handling-errors",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/HandlingErrors"
        ),
        .executableTarget(
            name: "secure-streams",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/SecuringStreams"
        ),
        .executableTarget(
            name: "going-through-proxies",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/GoingThroughProxies"
        ),
        // Guides/LongLivedChannel.md: the reusable parts (framing, the channel, the example's server),
        // which the tests use directly, and the program that runs them.
        .target(
            name: "LongLivedChannel",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/LongLivedChannel/Channel"
        ),
        .executableTarget(
            name: "long-lived-channel",
            dependencies: ["LongLivedChannel"],
            path: "Guides/Examples/LongLivedChannel/Demo"
        ),
        .executableTarget(
            name: "queued-operations",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/QueuedOperations"
        ),
        .executableTarget(
            name: "async-await",
            dependencies: ["SocketStreams"],
            path: "Guides/Examples/AsyncAwait"
        ),
        .executableTarget(
            name: "datagrams",
            dependencies: ["CocoaAsyncSocket"],
            path: "Guides/Examples/Datagrams"
        ),
        .executableTarget(
            name: "network-framework",
            dependencies: ["SocketStreamsNetwork"],
            path: "Guides/Examples/NetworkFramework"
        ),
        // A libFuzzer target for the proxy reply codecs, the HTTP head parser and stream-get's URL and
        // proxy parsing (built with -sanitize=fuzzer -DFUZZING by Scripts/test; without them it replays inputs).
        .executableTarget(
            name: "proxy-fuzz",
            dependencies: ["SocketStreams", "HTTPParsing", "StreamGetCore"],
            path: "Tests/Fuzz"
        ),
        // The stress scenarios (close, cancel and release while data flows; QueuedSocket and GCDAsyncSocket
        // disconnects and releases) and their peers: run by `socketstreams-stress` (Scripts/stress, release build) and by StressTests.
        .target(
            name: "StressScenarios",
            dependencies: ["SocketStreams", "CocoaAsyncSocket", "SocketStreamsNetwork", "CSocketStreamsShims", "COpenSSL"],
            path: "Tests/Stress/Scenarios"
        ),
        .executableTarget(
            name: "socketstreams-stress",
            dependencies: ["StressScenarios", "SocketStreams"],
            path: "Tests/Stress/Runner"
        ),
        // What the test targets share: a third-party peer (socat, openssl s_server, python's http.server...)
        // as a child process, ready when its output says so; swiftc -typecheck of a snippet.
        .target(name: "TestPeers", path: "Tests/TestPeers"),
        // What SocketStreamsTests, StreamGetCoreTests and GuideTests share (`package` access): the
        // `SocketStreamsTestCase` base class and its cleanups, the peers they start, raw sockets and servers,
        // the delegate recorder, the test certificates, running a built executable.
        .target(
            name: "SocketStreamsTestSupport",
            dependencies: ["SocketStreams", "TestPeers"],
            path: "Tests/SocketStreamsTestSupport"
        ),
        // The library's own tests, in folders that match its layers.
        .testTarget(
            name: "SocketStreamsTests",
            // The executables are listed so that `swift test` builds the binaries the end-to-end tests run.
            dependencies: [
                "SocketStreams", "CSocketStreamsShims", "COpenSSL", "HTTPParsing", "StreamGetCore", "stream-get", "stream-bench",
                "StressScenarios",
                "TestPeers", "SocketStreamsTestSupport",
            ]
        ),
        // `stream-get` and StreamGetCore: URL and option parsing, the built-in page, transfers against real
        // servers and through proxies, TLS.
        .testTarget(
            name: "StreamGetCoreTests",
            dependencies: [
                "StreamGetCore", "SocketStreams", "HTTPParsing", "stream-get", "TestPeers", "SocketStreamsTestSupport",
            ]
        ),
        // The guides' example programs run as a reader runs them, the README's and the guides' Swift blocks
        // found word for word, and the long-lived channel's parts.
        .testTarget(
            name: "GuideTests",
            dependencies: [
                "SocketStreams", "getting-started-delegate", "getting-started-polling", "reading-and-writing",
                "handling-errors", "accepting-connections", "polling-or-run-loop", "setting-up-streams", "secure-streams",
                "going-through-proxies", "LongLivedChannel", "long-lived-channel", "queued-operations", "async-await", "datagrams",
                "network-framework",
                "TestPeers", "SocketStreamsTestSupport",
            ]
        ),
        // Swift 6 concurrency code written as a user writes it, against the public API only: no
        // @testable, and no @unchecked Sendable, nonisolated(unsafe) or @preconcurrency in the target
        // (UserConcurrencyTests checks its own sources for them).
        .testTarget(
            name: "SocketStreamsConcurrencyTests",
            dependencies: ["SocketStreams", "TestPeers"]
        ),
        // The HTTP/1.1 response parser on its own: it depends on nothing else.
        .testTarget(
            name: "HTTPParsingTests",
            dependencies: ["HTTPParsing"]
        ),
        // GCDAsyncSocket code as Apple-platform code writes it: `import CocoaAsyncSocket` only.
        .testTarget(
            name: "CocoaAsyncSocketTests",
            dependencies: ["CocoaAsyncSocket", "TestPeers"]
        ),
        // GCDAsyncUdpSocket code as Apple-platform code writes it (`import CocoaAsyncSocket` only), against
        // itself, socat and python on loopback; the IPv6 multicast test reruns itself in a network namespace of its own.
        .testTarget(
            name: "GCDAsyncUdpSocketTests",
            dependencies: ["CocoaAsyncSocket", "TestPeers"]
        ),
        // Network.framework code as Apple-platform code writes it: the `canImport(Network)` import switch only.
        .testTarget(
            name: "SocketStreamsNetworkTests",
            // CocoaAsyncSocket: a test imports both modules (one `SecTrust`); the support target: the test PKI and peers.
            dependencies: ["SocketStreamsNetwork", "CocoaAsyncSocket", "SocketStreamsTestSupport", "TestPeers"]
        ),
        // Faults survived, counted (Tests/Faults/README.md): the fault-injecting relay's own tests, and every
        // face (pairs, AsyncConnection, QueuedSocket, GCDAsyncSocket, NWConnection) against every fault.
        .testTarget(
            name: "FaultTests",
            dependencies: ["SocketStreams", "SocketStreamsNetwork", "CocoaAsyncSocket", "SocketStreamsTestSupport", "TestPeers"],
            path: "Tests/Faults",
            exclude: ["README.md"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
