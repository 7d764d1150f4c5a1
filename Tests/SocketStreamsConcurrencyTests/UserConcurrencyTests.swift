// Written the way a user writes Swift 6 concurrency code against the public API (`import
// SocketStreams`, no `@testable`), and compiled in the Swift 6 language mode with no `@unchecked
// Sendable`, `nonisolated(unsafe)` or `@preconcurrency` anywhere in this target: an actor that holds
// a connection, a `@MainActor` delegate, a server that hands accepted pairs to tasks. Its peers are
// the library's own listeners.

import Foundation
import SocketStreams
import Synchronization
import TestPeers
import XCTest

/// A line protocol client held by an actor: its callers never see the connection.
actor LineClient {
    private let connection: AsyncConnection

    init(port: Int) {
        connection = AsyncConnection(host: "127.0.0.1", port: port)
    }

    func open() async throws { try await connection.open() }

    /// Sends `line` and returns the reply line, without its newline.
    func ask(_ line: String) async throws -> String {
        try await connection.write(Array((line + "\n").utf8))
        let reply = try await connection.read(upTo: [10], maxLength: 4096)
        return String(decoding: reply.dropLast(), as: UTF8.self)
    }

    func close() { connection.close() }
}

/// A `@MainActor` controller as a `QueuedSocket` delegate. The conformance cannot be isolated
/// (`QueuedSocketDelegate` refines `SendableMetatype`): the delegate's entry points are `nonisolated`
/// and enter the main actor with `MainActor.assumeIsolated`, which checks at run time that the
/// socket called them on the main thread (its delegate queue is `.main`).
@MainActor
final class MainThreadController: QueuedSocketDelegate {
    private(set) var lines: [String] = []
    private(set) var offMain = 0
    private var socket: QueuedSocket?
    private var finished: CheckedContinuation<Void, Never>?

    func run(port: Int, lines count: Int) async throws {
        let socket = QueuedSocket(delegate: self, delegateQueue: .main)
        self.socket = socket
        try socket.connect(toHost: "127.0.0.1", onPort: port)
        for index in 0..<count {
            socket.write(Array("line \(index)\n".utf8), tag: index)
            socket.read(toData: [10], maxLength: 4096, tag: index)
        }
        socket.disconnectAfterReadingAndWriting()
        await withCheckedContinuation { finished = $0 }
    }

    /// The socket's callbacks arrive here: on the main thread, or the count says otherwise (and the
    /// work still runs, on the main actor, so a test that fails does not hang).
    private nonisolated func onMain(_ body: @escaping @MainActor @Sendable () -> Void) {
        guard Thread.isMainThread else {
            Task { @MainActor in
                offMain += 1
                body()
            }
            return
        }
        MainActor.assumeIsolated(body)
    }

    nonisolated func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
        let line = String(decoding: data, as: UTF8.self)
        onMain { self.lines.append(line) }
    }

    nonisolated func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
        onMain {
            self.finished?.resume()
            self.finished = nil
        }
    }
}

final class UserConcurrencyTests: XCTestCase {
    /// An echo server for lines: a listening `QueuedSocket` on its own queue.
    final class LineEcho: QueuedSocketDelegate, Sendable {
        let listener: QueuedSocket

        init() throws {
            let queue = DispatchQueue(label: "LineEcho")
            listener = QueuedSocket(delegate: nil, delegateQueue: queue)
            listener.delegate = self
            try listener.accept(onInterface: "127.0.0.1", port: 0)
        }

        var port: Int { listener.localPort }

        func socket(_ socket: QueuedSocket, didAcceptNewSocket newSocket: QueuedSocket) {
            newSocket.delegate = self
            keep(newSocket)
            newSocket.read(toData: [10], maxLength: 65_536, tag: 0)
        }

        func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
            socket.write(data, tag: 0)
            socket.read(toData: [10], maxLength: 65_536, tag: 0)
        }

        func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) { forget(socket) }

        private let accepted = Mutex<[ObjectIdentifier: QueuedSocket]>([:])
        private func keep(_ socket: QueuedSocket) { accepted.withLock { $0[ObjectIdentifier(socket)] = socket } }
        private func forget(_ socket: QueuedSocket) { _ = accepted.withLock { $0.removeValue(forKey: ObjectIdentifier(socket)) } }
    }

    /// Actors holding connections, asked from many tasks at once: every reply matches its question.
    func testActorsHoldingConnectionsAnswerEveryTask() async throws {
        let echo = try LineEcho()
        let clients = (0..<4).map { _ in LineClient(port: echo.port) }
        for client in clients { try await client.open() }
        let mismatches = try await withThrowingTaskGroup(of: Int.self) { group in
            for (number, client) in clients.enumerated() {
                group.addTask {
                    var bad = 0
                    for index in 0..<100 {
                        let question = "client \(number) question \(index)"
                        if try await client.ask(question) != question { bad += 1 }
                    }
                    return bad
                }
            }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(mismatches, 0)
        for client in clients { await client.close() }
    }

    /// What a server's tasks report, kept by an actor.
    actor ServerLog {
        private(set) var served = 0
        private(set) var versions: Set<String> = []
        func record(_ version: String?) {
            served += 1
            if let version { versions.insert(version) }
        }
    }

    /// A TLS line-echo server as Swift 6 code writes one: the listener's handler gives each accepted
    /// pair (`sending`) to a task that serves it with an `AsyncConnection`, and reports to an actor.
    /// Eight clients at once, each on its own task, get every line back over TLS.
    func testTLSServerHandsAcceptedPairsToTasks() async throws {
        let (identity, certificate) = try TLSIdentity.makeSelfSigned()
        let serverTLS = TLSSettings.server(identity: identity)
        let log = ServerLog()
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        listener.start(in: .socketStreams) { input, output in
            Task {
                _ = input.setProperty(serverTLS, forKey: .tlsSettingsKey)
                let connection = AsyncConnection(input: input, output: output)
                defer { connection.close() }
                do {
                    try await connection.open()
                    while true {
                        let line = try await connection.read(upTo: [10], maxLength: 4096)
                        try await connection.write(line)
                    }
                } catch {
                    await log.record(connection.tlsInfo?.protocolVersion)  // the client's end ends the loop
                }
            }
        }
        var settings = TLSSettings()
        settings.trustRoots = [.pem(certificate)]
        let clientTLS = settings
        let port = listener.port
        let echoed = try await withThrowingTaskGroup(of: Int.self) { group in
            for client in 0..<8 {
                group.addTask {
                    let pair = createStreamPair(host: "localhost", port: port)
                    _ = pair.input.setProperty(clientTLS, forKey: .tlsSettingsKey)
                    let connection = AsyncConnection(input: pair.input, output: pair.output)
                    try await connection.open()
                    var good = 0
                    for index in 0..<20 {
                        let line = Array("client \(client) line \(index)\n".utf8)
                        try await connection.write(line)
                        if try await connection.read(upTo: [10], maxLength: 4096) == line { good += 1 }
                    }
                    try await connection.shutdownOutput()
                    _ = try await connection.read()  // the server's end
                    connection.close()
                    return good
                }
            }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(echoed, 8 * 20)
        for _ in 0..<1000 where await log.served < 8 { await Task.yield() }
        let served = await log.served
        let versions = await log.versions
        XCTAssertEqual(served, 8)
        XCTAssertEqual(versions.count, 1, "\(versions)")
        XCTAssertTrue(versions.first?.hasPrefix("TLSv1.") == true, "\(versions)")
    }

    /// A `@MainActor` delegate is only ever called on the main thread.
    @MainActor
    func testMainActorDelegateRunsOnlyOnTheMainThread() async throws {
        let echo = try LineEcho()
        let controller = MainThreadController()
        try await controller.run(port: echo.port, lines: 200)
        XCTAssertEqual(controller.lines, (0..<200).map { "line \($0)\n" })
        XCTAssertEqual(controller.offMain, 0)
    }

    /// The promise this target makes: none of Swift's unsafe opt-outs in its sources.
    func testTargetUsesNoUnsafeOptOuts() throws {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "swift" }
        XCTAssertFalse(files.isEmpty)
        let optOuts = ["@unchecked", "nonisolated(unsafe)", "@preconcurrency", "@testable"].map { "\($0)" }
        for file in files {
            let code = try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
                .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
            for optOut in optOuts {
                // The list above names them in a string literal: skip that one line.
                let uses = code.filter { $0.contains(optOut) && !$0.contains("].map") }
                XCTAssertTrue(uses.isEmpty, "\(file.lastPathComponent) uses \(optOut): \(uses)")
            }
        }
    }

    /// The delegate a socket cannot honour is refused when it is compiled: an actor-isolated
    /// conformance (the socket would call it on its delegate queue, off the actor). The pattern
    /// above, `nonisolated` entry points on a `@MainActor` class, compiles.
    func testActorIsolatedDelegateConformanceDoesNotCompile() throws {
        let isolated = "import SocketStreams\n@MainActor final class C: @MainActor QueuedSocketDelegate {}\n"
        let refused = try Typecheck.run(isolated)
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.output.contains("SendableMetatype"), refused.output)
        let nonisolated = """
            import SocketStreams
            @MainActor final class C: QueuedSocketDelegate {
                var count = 0
                nonisolated func socketDidSecure(_ socket: QueuedSocket) { MainActor.assumeIsolated { count += 1 } }
            }

            """
        let accepted = try Typecheck.run(nonisolated)
        XCTAssertEqual(accepted.status, 0, accepted.output)
    }
}

/// A UDP server written as an actor: it counts each peer's datagrams and answers each with the count
/// so far. The actor's state is touched only inside it; the socket is a `let` of a Sendable type.
actor DatagramCounter {
    private let socket: AsyncDatagramSocket
    private var counts: [DatagramEndpoint: Int] = [:]

    init() throws {
        socket = try AsyncDatagramSocket(host: "127.0.0.1", port: 0)
    }

    nonisolated var port: Int { socket.localPort }

    /// Serves until the socket is closed.
    func serve() async throws {
        for try await datagram in socket.datagrams {
            let count = counts[datagram.sender, default: 0] + 1
            counts[datagram.sender] = count
            try await socket.send(Array("\(count)".utf8), to: datagram.sender)
        }
    }

    nonisolated func close() { socket.close() }

    var peers: Int { counts.count }
}

extension UserConcurrencyTests {
    /// Eight clients at once on a task group, each its own connected `AsyncDatagramSocket`, against the
    /// actor's server: every reply is the count of that client's datagrams, and the server saw eight peers.
    func testDatagramServerActorAnswersEachPeer() async throws {
        let server = try DatagramCounter()
        let serving = Task { try await server.serve() }
        let port = server.port
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    let client = try await AsyncDatagramSocket(connectingTo: "127.0.0.1", port: port)
                    defer { client.close() }
                    var replies = client.datagrams.makeAsyncIterator()
                    var wrong = 0
                    for index in 1...10 {
                        try await client.send(Array("hello".utf8))
                        let reply = try await replies.next()
                        if reply.map({ String(decoding: $0.bytes, as: UTF8.self) }) != "\(index)" { wrong += 1 }
                    }
                    return wrong
                }
            }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(wrong, 0)
        let peers = await server.peers
        XCTAssertEqual(peers, 8)
        server.close()
        try await serving.value
    }
}
