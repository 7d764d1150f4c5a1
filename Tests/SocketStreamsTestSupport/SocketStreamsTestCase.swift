#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreams
import XCTest
import TestPeers

/// Base class: peers and resources registered here are torn down after every test, in
/// reverse order, whether the test passed, failed or threw.
open class SocketStreamsTestCase: XCTestCase {
    private var cleanups: [() -> Void] = []

    /// Default deadline for things that should happen "at once" on loopback.
    package let shortTimeout: TimeInterval = 5

    package func addCleanup(_ body: @escaping () -> Void) {
        cleanups.append(body)
    }

    open override func tearDown() {
        for cleanup in cleanups.reversed() { cleanup() }
        cleanups.removeAll()
        super.tearDown()
    }

    // MARK: peers

    /// A fresh directory, removed after the test.
    /// Runs this test binary's `test` ("Target.Class/testName") in a child process with
    /// `SOCKETSTREAMS_TEST_SCENARIO` set to `scenario` (``childScenario`` there), for what must happen in
    /// a process where nothing has run yet (the process-wide stream thread, a low fd limit), with
    /// `environment` added to this process's; checks that the child exited normally, within 60 s, with
    /// its one test passed.
    package func runInChild(
        _ test: String, scenario: String, environment: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line
    ) throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        child.arguments = [test]
        child.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            .merging(["SOCKETSTREAMS_TEST_SCENARIO": scenario]) { $1 }
        let logURL = try makeTemporaryDirectory().appendingPathComponent("child.log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let log = try FileHandle(forWritingTo: logURL)
        child.standardOutput = log
        child.standardError = log
        try child.run()
        let exit = ChildExit.waitOrEnd(child, timeout: 60)
        try log.close()
        let output = (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
        XCTAssertNotNil(exit, "the child hung:\n\(output)", file: file, line: line)
        XCTAssertEqual(exit?.signalled, false, "the child crashed:\n\(output)", file: file, line: line)
        XCTAssertEqual(exit?.status, 0, output, file: file, line: line)
        XCTAssertTrue(output.contains("Executed 1 test, with 0 failures"), output, file: file, line: line)
    }

    /// The scenario a child process started by ``runInChild(_:scenario:file:line:)`` runs, or nil in the
    /// parent.
    package static var childScenario: String? { ProcessInfo.processInfo.environment["SOCKETSTREAMS_TEST_SCENARIO"] }

    package func makeTemporaryDirectory() throws -> URL {
        let url = URL(fileURLWithPath: "/tmp/ssT-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        addCleanup { try? FileManager.default.removeItem(at: url) }
        return url
    }

    /// A socat echo server on the family's loopback address; returns its port.
    package func startSocatEcho(_ family: IPFamily = .v4) throws -> Int {
        let (peer, port) = try Peer.socatEcho(family: family)
        addCleanup { peer.stop() }
        return port
    }

    /// socat echoing on a Unix-domain socket; returns the socket path.
    package func startSocatUnixEcho() throws -> String {
        let directory = try makeTemporaryDirectory()
        let path = directory.appendingPathComponent("echo.sock").path
        let peer = try Peer.socatUnixEcho(path: path)
        addCleanup { peer.stop() }
        return path
    }

    /// python http.server serving `files` (name -> contents); returns its port.
    package func startHTTPServer(_ family: IPFamily = .v4, files: [String: Data]) throws -> Int {
        let directory = try makeTemporaryDirectory()
        for (name, contents) in files {
            try contents.write(to: directory.appendingPathComponent(name))
        }
        let (peer, port) = try Peer.httpServer(family: family, directory: directory)
        addCleanup { peer.stop() }
        return port
    }

    /// A raw-socket server whose connections run `handler` on their own threads.
    package func startRawServer(
        _ family: IPFamily = .v4,
        handler: @escaping @Sendable (RawConnection) -> Void
    ) throws -> RawTCPServer {
        let server = try RawTCPServer(family: family, handler: handler)
        addCleanup { server.stop() }
        return server
    }

    /// `openssl s_server` on loopback with `arguments`; returns its port and the peer (for its output).
    package func startOpenSSLServer(_ arguments: [String], family: IPFamily = .v4) throws -> (port: Int, peer: Peer) {
        let (peer, port) = try Peer.opensslServer(arguments, family: family)
        addCleanup { peer.stop() }
        return (port, peer)
    }

    /// The certificates made for this test run.
    package var pki: TestPKI {
        get throws { try TestPKI.shared.get() }
    }

    /// The library's own listener, echoing.
    package func startStreamEchoServer(
        host: String? = "127.0.0.1", backlog: Int32 = 128, tls: TLSSettings? = nil
    ) throws -> StreamEchoServer {
        let server = try StreamEchoServer(host: host, backlog: backlog, tls: tls)
        addCleanup { server.stop() }
        return server
    }

    // MARK: pairs

    /// createStreamPair(host:port:), closed after the test if the test did not (not retained).
    package func makePair(host: String = "127.0.0.1", port: Int) -> StreamPair {
        let pair = createStreamPair(host: host, port: port)
        closeAfterTest(pair)
        return pair
    }

    package func closeAfterTest(_ pair: StreamPair) {
        let input = pair.input
        let output = pair.output
        addCleanup { [weak input, weak output] in
            input?.close()
            output?.close()
        }
    }

    /// A recorder started on the current (main) run loop in `mode`, Apple-guide style.
    package func startRecorder(
        _ pair: StreamPair, recorder: DelegateRecorder = DelegateRecorder(),
        mode: RunLoop.Mode = .default
    ) -> DelegateRecorder {
        recorder.start(pair, on: .current, mode: mode)
        return recorder
    }

    // MARK: assertions

    /// Asserts that `error` is NSPOSIXErrorDomain with one of `codes`.
    package func assertPOSIXError(
        _ error: Error?, _ codes: [Int32], _ message: String = "",
        file: StaticString = #filePath, line: UInt = #line
    ) {
        guard let error = error as NSError? else {
            XCTFail("expected a POSIX error \(codes), got none. \(message)", file: file, line: line)
            return
        }
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain, "\(error) \(message)", file: file, line: line)
        XCTAssertTrue(
            codes.map(Int.init).contains(error.code),
            "code \(error.code) not in \(codes): \(error) \(message)", file: file, line: line)
    }

    /// An Int from an NSNumber/Int userInfo value.
    package func intValue(_ value: Any?) -> Int? {
        if let number = value as? NSNumber { return number.intValue }
        return value as? Int
    }
}

// MARK: - blocking-style helpers (call inside callWithDeadline)

/// Writes all of `data` with blocking writes; false if a write returned -1 or 0.
package func writeAll(_ output: OutputStream, _ data: Data) -> Bool {
    var offset = 0
    while offset < data.count {
        let written = data.withUnsafeBytes { raw in
            output.write(raw.bindMemory(to: UInt8.self).baseAddress! + offset, maxLength: data.count - offset)
        }
        if written <= 0 { return false }
        offset += written
    }
    return true
}

/// Reads with blocking reads until `count` bytes arrived or read returned 0 / -1.
/// `last` is the return value of the last read.
package func readUpTo(_ input: InputStream, count: Int, chunk: Int = 4096) -> (data: Data, last: Int) {
    var result = Data()
    var buffer = [UInt8](repeating: 0, count: chunk)
    var last = 0
    while result.count < count {
        last = input.read(&buffer, maxLength: min(chunk, count - result.count))
        if last <= 0 { break }
        result.append(contentsOf: buffer[0..<last])
    }
    return (result, last)
}

/// Reads with blocking reads until read returns 0 or -1; returns the data and that last value.
package func readToEnd(_ input: InputStream, chunk: Int = 4096) -> (data: Data, last: Int) {
    var result = Data()
    var buffer = [UInt8](repeating: 0, count: chunk)
    while true {
        let count = input.read(&buffer, maxLength: chunk)
        if count <= 0 { return (result, count) }
        result.append(contentsOf: buffer[0..<count])
    }
}

/// Deterministic test payload of `count` bytes (not all the same byte, so reordering shows).
package func testPayload(_ count: Int, seed: UInt8 = 0) -> Data {
    Data((0..<count).map { UInt8(truncatingIfNeeded: ($0 &* 31) &+ ($0 >> 8) &+ Int(seed)) })
}

/// The native fd of a pair's socket, read the CF way.
package func nativeHandle(of stream: Stream) -> Int32? {
    let key = Stream.PropertyKey(rawValue: "kCFStreamPropertySocketNativeHandle")
    guard let data = stream.property(forKey: key) as? Data, data.count == MemoryLayout<Int32>.size else {
        return nil
    }
    return data.withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
}

/// Property keys by their CF names (raw strings are the contract on Linux).
package enum CFKey {
    package static let nativeHandle = Stream.PropertyKey(rawValue: "kCFStreamPropertySocketNativeHandle")
    package static let remoteHostName = Stream.PropertyKey(rawValue: "kCFStreamPropertySocketRemoteHostName")
    package static let remotePortNumber = Stream.PropertyKey(rawValue: "kCFStreamPropertySocketRemotePortNumber")
    package static let shouldCloseNativeSocket = Stream.PropertyKey(rawValue: "kCFStreamPropertyShouldCloseNativeSocket")
}

/// Fails the test unless it runs in a network namespace that has nothing but loopback, as
/// `Scripts/test` arranges. Tests that look up unresolvable names call it first: elsewhere the
/// system resolver would send their queries to a DNS server off this machine.
package func requireLoopbackOnlyNetwork(file: StaticString = #filePath, line: UInt = #line) -> Bool {
    // /proc/net/dev lists the interfaces of this process's own network namespace (sysfs would show
    // those of whoever mounted it).
    let table = (try? String(contentsOfFile: "/proc/net/dev", encoding: .utf8)) ?? ""
    let interfaces = table.split(separator: "\n").dropFirst(2).compactMap {
        $0.split(separator: ":").first?.trimmingCharacters(in: .whitespaces)
    }
    let others = interfaces.filter { $0 != "lo" }
    if others.isEmpty { return true }
    XCTFail(
        "this test resolves names and must run in a loopback-only network namespace: use Scripts/test "
            + "(found interfaces \(others))", file: file, line: line)
    return false
}
