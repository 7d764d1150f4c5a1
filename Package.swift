// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "SocketStreams",
    products: [
        .library(name: "SocketStreams", targets: ["SocketStreams"]),
        .executable(name: "stream-get", targets: ["stream-get"]),
        .executable(name: "stream-bench", targets: ["stream-bench"]),
    ],
    targets: [
        // C declarations Swift cannot import directly (epoll, eventfd, timerfd, errno).
        .target(name: "CSocketStreamsShims"),
        .target(
            name: "SocketStreams",
            dependencies: ["CSocketStreamsShims"]
        ),
        .executableTarget(
            name: "stream-get",
            dependencies: ["SocketStreams"]
        ),
        .executableTarget(
            name: "stream-bench",
            dependencies: ["SocketStreams", "CSocketStreamsShims"],
            path: "Benchmarks/Sources/stream-bench"
        ),
        .testTarget(
            name: "SocketStreamsTests",
            // stream-bench: BenchmarkHarnessTests runs the built binary, so `swift test` must build it.
            dependencies: ["SocketStreams", "CSocketStreamsShims", "stream-bench"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
