#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import Synchronization
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// A `QueuedSocketDelegate` that logs every call as a line ("connect", "read 2 HELLO\n", "partial 2 3",
/// "wrote 1", "secure", "timeout read 7 5.0 0", "disconnect nil" or "disconnect <error>") and lets the
/// test wait for lines. `onRead` and `onAccept` run in the callback, on the socket's queue.
final class QueuedRecorder: QueuedSocketDelegate, @unchecked Sendable {
    private let condition = NSCondition()
    private var lines: [String] = []
    private(set) var errors: [Error?] = []
    var onRead: ((QueuedSocket, [UInt8], Int) -> Void)?
    var onAccept: ((QueuedSocket) -> Void)?
    var onConnect: ((QueuedSocket) -> Void)?
    /// Answers to the timeout questions, in order (0 once they run out).
    var timeoutAnswers: [TimeInterval] = []
    /// Sockets handed to didAcceptNewSocket, kept alive.
    var accepted: [QueuedSocket] = []

    var log: [String] { condition.withLock { lines } }

    private func append(_ line: String) {
        condition.withLock {
            lines.append(line)
            condition.broadcast()
        }
    }

    /// Waits until `predicate` holds for the log; false after `timeout`.
    func wait(timeout: TimeInterval = 10, _ predicate: ([String]) -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate(lines) {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }

    func waitFor(_ line: String, timeout: TimeInterval = 10) -> Bool { wait(timeout: timeout) { $0.contains(line) } }

    var disconnectError: Error? { condition.withLock { errors.last ?? nil } }

    func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: Int) {
        append("connect")
        onConnect?(socket)
    }

    func socket(_ socket: QueuedSocket, didAcceptNewSocket newSocket: QueuedSocket) {
        condition.withLock { accepted.append(newSocket) }
        append("accept")
        onAccept?(newSocket)
    }

    func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
        append("read \(tag) \(String(decoding: data, as: UTF8.self))")
        onRead?(socket, data, tag)
    }

    func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) {
        append("partial \(tag) \(partialLength)")
    }

    func socket(_ socket: QueuedSocket, didWriteDataWithTag tag: Int) { append("wrote \(tag)") }

    func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval {
        append("timeout read \(tag) \(elapsed) \(length)")
        return condition.withLock { timeoutAnswers.isEmpty ? 0 : timeoutAnswers.removeFirst() }
    }

    func socket(_ socket: QueuedSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval {
        append("timeout write \(tag) \(elapsed) \(length)")
        return condition.withLock { timeoutAnswers.isEmpty ? 0 : timeoutAnswers.removeFirst() }
    }

    func socketDidSecure(_ socket: QueuedSocket) { append("secure") }

    func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
        condition.withLock { errors.append(error) }
        append("disconnect \(error.map { "\($0)" } ?? "nil")")
    }
}

/// `QueuedSocket` against real peers: reads and writes queued up front, completing in order.
final class QueuedSocketTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "QueuedSocketTests")

    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Operations queued before `connect` run once it is up, in order; the delegate hears of each.
    func testOperationsQueuedBeforeConnectRunAfterIt() throws {
        let server = try startRawServer { connection in
            guard (try? connection.readExactly(6)) == Data("hello\n".utf8) else { return }
            try? connection.write("HELLO\n")
            _ = try? connection.readToEOF()
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.write(bytes("hello\n"), tag: 1)
        socket.read(toData: bytes("\n"), tag: 2)
        XCTAssertTrue(socket.isDisconnected)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.waitFor("read 2 HELLO\n"), "\(recorder.log)")
        XCTAssertTrue(socket.isConnected)
        XCTAssertEqual(socket.connectedHost, "127.0.0.1")
        XCTAssertEqual(socket.connectedPort, server.port)
        socket.disconnect()
        XCTAssertTrue(recorder.waitFor("disconnect nil"), "\(recorder.log)")
        XCTAssertEqual(recorder.log, ["connect", "wrote 1", "read 2 HELLO\n", "disconnect nil"])
        XCTAssertThrowsError(try socket.connect(toHost: "127.0.0.1", onPort: server.port)) { error in
            XCTAssertEqual(error as? StreamOperationError, .closed)
        }
    }

    /// A message split at every byte boundary arrives whole, framed by a length prefix (read to a
    /// length twice: the header, then the body it announces) and by a delimiter. The server sends the
    /// first part, waits until the client has read it (the engine's count of bytes read), then the rest.
    func testReadsSplitAtEveryByteBoundaryArriveWhole() throws {
        let body = Array("hello, world".utf8)
        let lengthPrefixed = [0, 0, 0, UInt8(body.count)] + body
        let delimited = body + Array("\r\n".utf8)
        for (name, message) in [("length", lengthPrefixed), ("delimiter", delimited)] {
            let splits = Array(1..<message.count)
            let go = Signal()
            let server = try startRawServer { connection in
                for split in splits {
                    try? connection.write(Data(message[..<split]))
                    guard go.wait(timeout: 10) else { return }
                    try? connection.write(Data(message[split...]))
                }
                _ = try? connection.readToEOF()
            }
            let recorder = QueuedRecorder()
            recorder.onRead = { socket, data, tag in
                switch tag {
                case 10: socket.read(toLength: Int(data[3]), tag: 11)  // the header announces the body
                case 11: socket.read(toLength: 4, tag: 10)
                default: socket.read(toData: Array("\r\n".utf8), maxLength: 100, tag: 20)
                }
            }
            let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
            if name == "length" {
                socket.read(toLength: 4, tag: 10)
            } else {
                socket.read(toData: Array("\r\n".utf8), maxLength: 100, tag: 20)
            }
            try socket.connect(toHost: "127.0.0.1", onPort: server.port)
            let expected = name == "length" ? "read 11 hello, world" : "read 20 hello, world\r\n"
            for (index, split) in splits.enumerated() {
                let before = index * message.count
                XCTAssertTrue(waitUntil { socket.engine.totalRead == before + split }, "\(name) split \(split): \(socket.engine.totalRead)")
                XCTAssertEqual(recorder.log.filter { $0 == expected }.count, index, "\(name) split \(split) completed early")
                go.raise()
                XCTAssertTrue(recorder.wait { $0.filter { $0 == expected }.count == index + 1 }, "\(name) split \(split): \(recorder.log)")
            }
            XCTAssertFalse(recorder.log.contains { $0.hasPrefix("disconnect") }, "\(recorder.log)")
            socket.disconnect()
            XCTAssertTrue(recorder.waitFor("disconnect nil"))
        }
    }

    /// A read's timeout asks the delegate, which extends it once; the second time it lets it fail,
    /// and the socket disconnects with readTimedOut. On a manual clock: no waiting.
    func testReadTimeoutCanBeExtendedAndThenFires() throws {
        let server = try startRawServer { connection in _ = try? connection.readToEOF(timeout: 10) }
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        recorder.timeoutAnswers = [3]
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.engine.time = clock
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.waitFor("connect"))
        socket.read(toLength: 10, timeout: 5, tag: 7)
        XCTAssertTrue(clock.waitForTimers { $0 == [5] }, "\(clock.pending)")
        clock.advance(by: 4.9)
        XCTAssertEqual(recorder.log, ["connect"])
        clock.advance(by: 0.1)
        XCTAssertTrue(recorder.waitFor("timeout read 7 5.0 0"), "\(recorder.log)")
        XCTAssertTrue(clock.waitForTimers { $0 == [3] }, "\(clock.pending)")
        clock.advance(by: 3)
        XCTAssertTrue(recorder.waitFor("timeout read 7 8.0 0"), "\(recorder.log)")
        XCTAssertTrue(recorder.wait { $0.last?.hasPrefix("disconnect") == true }, "\(recorder.log)")
        XCTAssertEqual(recorder.disconnectError as? StreamOperationError, .readTimedOut(tag: 7))
        let error = try XCTUnwrap(recorder.disconnectError) as NSError
        XCTAssertEqual(error.domain, StreamOperationError.errorDomain)
        XCTAssertEqual(error.code, 1)
        XCTAssertEqual(error.localizedDescription, "the read with tag 7 timed out")
    }

    /// A write the peer does not take (it never reads) times out: the delegate is told how much went
    /// out, and the socket disconnects with writeTimedOut.
    func testWriteTimeoutReportsTheBytesDone() throws {
        let release = Signal()
        let server = try startRawServer { _ in _ = release.wait(timeout: 20) }
        addCleanup { release.raise() }
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.engine.time = clock
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.waitFor("connect"))
        socket.write([UInt8](repeating: 1, count: 64 << 20), timeout: 5, tag: 9)
        XCTAssertTrue(clock.waitForTimers { $0 == [5] }, "\(clock.pending)")
        clock.advance(by: 5)
        XCTAssertTrue(recorder.wait { $0.last?.hasPrefix("disconnect") == true }, "\(recorder.log.suffix(3))")
        let question = try XCTUnwrap(recorder.log.first { $0.hasPrefix("timeout write 9 5.0 ") })
        let done = Int(question.split(separator: " ").last ?? "") ?? -1
        XCTAssertGreaterThan(done, 0, question)
        XCTAssertLessThan(done, 64 << 20, question)
        XCTAssertEqual(recorder.disconnectError as? StreamOperationError, .writeTimedOut(tag: 9))
    }

    /// A completed read cancels its timer: nothing fires later.
    func testCompletedReadCancelsItsTimeout() throws {
        let server = try startRawServer { connection in
            try? connection.write("x")
            _ = try? connection.readToEOF(timeout: 10)
        }
        let clock = ManualTime()
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.engine.time = clock
        socket.read(toLength: 1, timeout: 5, tag: 1)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.waitFor("read 1 x"), "\(recorder.log)")
        XCTAssertTrue(clock.waitForTimers { $0.isEmpty }, "\(clock.pending)")
        clock.advance(by: 10)
        queue.sync {}
        XCTAssertEqual(recorder.log, ["connect", "read 1 x"])
    }

    /// STARTTLS in GCDAsyncSocket's style, every operation queued before the connect: the TLS handshake
    /// waits for the plain write and read queued before it, and what is queued after it goes over TLS.
    func testStartTLSWaitsForTheOperationsBeforeIt() throws {
        let pki = try self.pki
        let serverSettings = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let serverSaw = Locked<[String]>([])
        let host = ListenerHost(listener) { pair in
            pair.input.open()
            pair.output.open()
            func line() -> String? {
                var bytes: [UInt8] = []
                var byte: UInt8 = 0
                while pair.input.read(&byte, maxLength: 1) == 1 {
                    if byte == 10 { return String(decoding: bytes, as: UTF8.self) }
                    bytes.append(byte)
                }
                return nil
            }
            serverSaw.mutate { $0.append(line() ?? "-") }
            _ = writeAll(pair.output, Data("GO\n".utf8))
            _ = pair.input.setProperty(serverSettings, forKey: .tlsSettingsKey)
            serverSaw.mutate { $0.append(line() ?? "-") }
            _ = writeAll(pair.output, Data("echo: secret\n".utf8))
            pair.input.close()
            pair.output.close()
        }
        addCleanup { host.stop() }
        var client = TLSSettings()
        client.trustRoots = [.pemFile(pki.caCertificate)]
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.write(bytes("STARTTLS\n"), tag: 1)
        socket.read(toData: bytes("\n"), tag: 2)
        socket.startTLS(client)
        socket.write(bytes("secret\n"), tag: 3)
        socket.read(toData: bytes("\n"), tag: 4)
        try socket.connect(toHost: "localhost", onPort: listener.port)
        XCTAssertTrue(recorder.waitFor("read 4 echo: secret\n"), "\(recorder.log)")
        XCTAssertEqual(recorder.log, ["connect", "wrote 1", "read 2 GO\n", "secure", "wrote 3", "read 4 echo: secret\n"])
        XCTAssertEqual(serverSaw.value, ["STARTTLS", "secret"])
    }

    /// disconnectAfterWriting: everything queued is written first (8 MiB, more than the socket
    /// buffers hold), then the connection closes without an error.
    func testDisconnectAfterWritingFlushesEverythingFirst() throws {
        let received = Locked<(count: Int, eof: Bool)>((0, false))
        let server = try startRawServer { connection in
            let result = try? connection.readToEOF(timeout: 20)
            received.value = (result?.data.count ?? -1, result?.sawEOF ?? false)
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        let chunk = [UInt8](repeating: 0x5a, count: 2 << 20)
        for tag in 1...4 { socket.write(chunk, tag: tag) }
        socket.disconnectAfterWriting()
        XCTAssertTrue(recorder.waitFor("disconnect nil", timeout: 30), "\(recorder.log)")
        XCTAssertEqual(
            recorder.log.filter { !$0.hasPrefix("partial") }, ["connect", "wrote 1", "wrote 2", "wrote 3", "wrote 4", "disconnect nil"])
        XCTAssertTrue(server.waitForFinished(1, timeout: 20))
        XCTAssertEqual(received.value.count, 8 << 20)
        XCTAssertTrue(received.value.eof)
    }

    /// Writes of `Data` (held, not copied, since issue 25) and of arrays, mixed: a `Data` slice whose
    /// indices do not start at 0, one larger than the socket's buffers (written in many parts, each
    /// from where the last stopped) and an array between them arrive whole and in order.
    func testDataAndArrayWritesArriveWholeAndInOrder() throws {
        let received = Locked<Data>(Data())
        let server = try startRawServer { connection in
            received.value = (try? connection.readToEOF(timeout: 20))?.data ?? Data()
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        let large = Data((0..<(6 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 13) })
        let slice = large[1_000_003..<1_100_000]
        XCTAssertNotEqual(slice.startIndex, 0)
        let array = [UInt8](repeating: 0xa5, count: 300_001)
        socket.write(slice, tag: 1)
        socket.write(array, tag: 2)
        socket.write(large, tag: 3)
        socket.write(Data(), tag: 4)
        socket.disconnectAfterWriting()
        XCTAssertTrue(recorder.waitFor("disconnect nil", timeout: 30), "\(recorder.log)")
        XCTAssertEqual(
            recorder.log.filter { !$0.hasPrefix("partial") }, ["connect", "wrote 1", "wrote 2", "wrote 3", "wrote 4", "disconnect nil"])
        XCTAssertTrue(server.waitForFinished(1, timeout: 20))
        XCTAssertEqual(received.value, Data(slice) + Data(array) + large)
    }

    /// disconnectAfterReading closes once the queued reads are done, not before.
    func testDisconnectAfterReadingWaitsForTheReads() throws {
        let server = try startRawServer { connection in
            try? connection.write("one\ntwo\n")
            _ = try? connection.readToEOF(timeout: 10)
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.read(toData: bytes("\n"), tag: 1)
        socket.read(toData: bytes("\n"), tag: 2)
        socket.disconnectAfterReading()
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.waitFor("disconnect nil"), "\(recorder.log)")
        XCTAssertEqual(recorder.log, ["connect", "read 1 one\n", "read 2 two\n", "disconnect nil"])
    }

    /// After `disconnectAfterWriting()`, a write queued later is ignored, as GCDAsyncSocket's
    /// `kForbidReadsWrites` does: the peer gets only what came before, then the end (issue 21, finding
    /// 3: the later write was sent and completed).
    func testWriteAfterDisconnectAfterWritingIsIgnored() throws {
        let received = Locked<(data: Data, eof: Bool)>((Data(), false))
        let server = try startRawServer { connection in
            let result = try? connection.readToEOF(timeout: 10)
            received.value = (result?.data ?? Data(), result?.sawEOF ?? false)
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        socket.write(bytes("one\n"), tag: 1)
        socket.disconnectAfterWriting()
        socket.write(bytes("two\n"), tag: 2)
        socket.read(toData: bytes("\n"), tag: 3)
        XCTAssertTrue(recorder.waitFor("disconnect nil"), "\(recorder.log)")
        XCTAssertTrue(server.waitForFinished(1, timeout: 10))
        XCTAssertEqual(recorder.log, ["connect", "wrote 1", "disconnect nil"])
        XCTAssertEqual(String(decoding: received.value.data, as: UTF8.self), "one\n")
        XCTAssertTrue(received.value.eof)
    }

    /// After `disconnectAfterReading()`, a read queued later is ignored and does not keep the socket
    /// open (issue 21, finding 3: it kept the socket open indefinitely).
    func testReadAfterDisconnectAfterReadingIsIgnored() throws {
        let sawEOF = Signal()
        let server = try startRawServer { connection in
            try? connection.write("one\n")
            if (try? connection.readToEOF(timeout: 10))?.sawEOF == true { sawEOF.raise() }
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        socket.read(toData: bytes("\n"), tag: 1)
        socket.disconnectAfterReading()
        socket.read(toData: bytes("\n"), tag: 2)
        XCTAssertTrue(recorder.waitFor("disconnect nil"), "\(recorder.log)")
        XCTAssertEqual(recorder.log, ["connect", "read 1 one\n", "disconnect nil"])
        XCTAssertTrue(sawEOF.wait(timeout: 10), "the server never saw the end")
    }

    /// The peer closes before a read can complete: the socket disconnects with closedByPeer, which
    /// holds the bytes that did arrive.
    func testPeerCloseKeepsTheBytesThatArrived() throws {
        let server = try startRawServer { connection in try? connection.write("abc") }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.read(toLength: 10, tag: 1)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.wait { $0.last?.hasPrefix("disconnect") == true }, "\(recorder.log)")
        XCTAssertEqual(recorder.disconnectError as? StreamOperationError, .closedByPeer(unread: Array("abc".utf8)))
    }

    /// A delimiter not found within maxLength bytes disconnects with readMaxedOut.
    func testDelimiterReadStopsAtItsMaximumLength() throws {
        let server = try startRawServer { connection in
            try? connection.write(String(repeating: "x", count: 100))
            _ = try? connection.readToEOF(timeout: 10)
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.read(toData: bytes("\n"), maxLength: 50, tag: 3)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        XCTAssertTrue(recorder.wait { $0.last?.hasPrefix("disconnect") == true }, "\(recorder.log)")
        XCTAssertEqual(recorder.disconnectError as? StreamOperationError, .readMaxedOut(maxLength: 50, tag: 3))
    }

    /// A refused connection is socketDidDisconnect with the streams' own error (NSPOSIXErrorDomain).
    func testRefusedConnectionReportsThePOSIXError() throws {
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        socket.read(toLength: 1, tag: 1)
        try socket.connect(toHost: "127.0.0.1", onPort: try RawSocket.unusedPort())
        XCTAssertTrue(recorder.wait { $0.last?.hasPrefix("disconnect") == true }, "\(recorder.log)")
        let error = try XCTUnwrap(recorder.disconnectError) as NSError
        XCTAssertEqual(error.domain, NSPOSIXErrorDomain)
        XCTAssertEqual(error.code, Int(ECONNREFUSED))
        XCTAssertFalse(recorder.log.contains("connect"))
    }

    /// A listening socket hands out accepted sockets, which read and write like any other; here the
    /// server and the client run on the current thread's run loop.
    func testListenerHandsOutQueuedSockets() throws {
        let serverRecorder = QueuedRecorder()
        serverRecorder.onAccept = { accepted in accepted.read(toData: Array("\n".utf8), tag: 1) }
        serverRecorder.onRead = { socket, data, _ in
            socket.write(Array(String(decoding: data, as: UTF8.self).uppercased().utf8), tag: 2)
            socket.disconnectAfterWriting()
        }
        let server = QueuedSocket(delegate: serverRecorder, runLoop: .current)
        try server.accept(onInterface: "127.0.0.1", port: 0)
        XCTAssertGreaterThan(server.localPort, 0)
        let recorder = QueuedRecorder()
        let client = QueuedSocket(delegate: recorder, runLoop: .current)
        client.write(bytes("shout\n"), tag: 1)
        client.read(toData: bytes("\n"), tag: 2)
        try client.connect(toHost: "127.0.0.1", onPort: server.localPort)
        XCTAssertTrue(runUntil(timeout: 10) { recorder.log.contains("read 2 SHOUT\n") }, "\(recorder.log) \(serverRecorder.log)")
        XCTAssertTrue(runUntil(timeout: 10) { serverRecorder.log.contains("disconnect nil") }, "\(serverRecorder.log)")
        XCTAssertEqual(serverRecorder.log, ["accept", "read 1 shout\n", "wrote 2", "disconnect nil"])
        server.disconnect()
        client.disconnect()
        XCTAssertTrue(runUntil(timeout: 10) { recorder.log.last?.hasPrefix("disconnect") == true }, "\(recorder.log)")
    }

    /// Operations queued from another thread while the delegate runs on the queue still complete in
    /// order: 200 writes and reads against an echo server.
    func testOperationsFromAnotherThreadCompleteInOrder() throws {
        let server = try startStreamEchoServer()
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "other"))
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        DispatchQueue.concurrentPerform(iterations: 1) { _ in
            for index in 0..<200 {
                socket.write(Array("\(index)\n".utf8), tag: index)
                socket.read(toData: Array("\n".utf8), tag: index)
            }
        }
        XCTAssertTrue(recorder.wait { $0.filter { $0.hasPrefix("read") }.count == 200 }, "\(recorder.log.suffix(5))")
        XCTAssertEqual(recorder.log.filter { $0.hasPrefix("read") }, (0..<200).map { "read \($0) \($0)\n" })
        socket.disconnect()
    }

    /// The engine's operation queue keeps its order across the compactions of its storage, and
    /// releases what it removes.
    func testOperationQueueKeepsItsOrder() {
        var queue = FIFO<Int>()
        var expected: [Int] = []
        var next = 0
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            if Int.random(in: 0..<3, using: &generator) > 0 {
                queue.append(next)
                expected.append(next)
                next += 1
            } else if !expected.isEmpty {
                XCTAssertEqual(queue.first, expected.removeFirst())
                queue.removeFirst()
            }
            XCTAssertEqual(queue.count, expected.count)
        }
        while let first = queue.first {
            XCTAssertEqual(first, expected.removeFirst())
            queue.removeFirst()
        }
        XCTAssertTrue(queue.isEmpty && expected.isEmpty)
        weak var released: NSObject?
        var objects = FIFO<NSObject>()
        do {
            let object = NSObject()
            released = object
            objects.append(object)
            objects.append(NSObject())
        }
        objects.removeFirst()
        XCTAssertNil(released, "a removed element is still held")
    }

    /// The socket takes its pair's events itself (`PairReceiver`), not as the streams' delegate: they
    /// have none, and a delegate set on them (on the socket's queue) is never called and does not stop
    /// the socket, whose next exchange completes.
    func testTheSocketTakesItsPairsEventsNotAsTheirDelegate() throws {
        let server = try startRawServer { connection in
            while let line = try? connection.readExactly(5) { try? connection.write(line) }
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        socket.write(bytes("ping\n"), tag: 1)
        socket.read(toData: bytes("\n"), tag: 2)
        XCTAssertTrue(recorder.waitFor("read 2 ping\n"), "\(recorder.log)")
        let streams = try XCTUnwrap(socket.streams)
        let connection = try XCTUnwrap(streams.input as? SocketInputStream).connection
        XCTAssertTrue(connection.lock.withLock { connection.receiver != nil }, "the engine is the pair's receiver")
        let intruder = CallCounter()
        queue.sync {
            XCTAssertNil(streams.input.delegate)
            XCTAssertNil(streams.output.delegate)
            streams.input.delegate = intruder
            streams.output.delegate = intruder
        }
        socket.write(bytes("pong\n"), tag: 3)
        socket.read(toData: bytes("\n"), tag: 4)
        XCTAssertTrue(recorder.waitFor("read 4 pong\n"), "\(recorder.log)")
        XCTAssertEqual(intruder.calls, 0, "a delegate set on the socket's streams was called")
        socket.disconnect()
        XCTAssertTrue(recorder.waitFor("disconnect nil"), "\(recorder.log)")
        XCTAssertTrue(connection.lock.withLock { connection.receiver == nil }, "a disconnected socket is still the receiver")
    }

    /// A socket released while connected closes its engine, which lets go of the pair (as its deinit
    /// would): the connection, kept alive here, no longer names the engine. And the engine, which holds
    /// the socket unretained (not weakly: no side table, issue 25) and lives on here, no longer names the
    /// socket: the socket's deinit let go of it first thing.
    func testAReleasedSocketIsNoLongerItsPairsReceiverNorItsEnginesClient() throws {
        let server = try startRawServer { connection in _ = try? connection.readToEOF(timeout: 10) }
        var connection: Connection?
        var engine: StreamOperations?
        weak var released: QueuedSocket?
        do {
            let recorder = QueuedRecorder()
            let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
            released = socket
            try socket.connect(toHost: "127.0.0.1", onPort: server.port)
            XCTAssertTrue(recorder.waitFor("connect"))
            connection = (socket.streams?.input as? SocketInputStream)?.connection
            engine = socket.engine
            XCTAssertTrue(socket.engine.state.withLock { _ in socket.engine.takeClient() } === socket, "the socket is not the client")
        }
        let kept = try XCTUnwrap(connection)
        let keptEngine = try XCTUnwrap(engine)
        XCTAssertTrue(waitUntil { released == nil }, "the socket was not released")
        XCTAssertNil(keptEngine.state.withLock { _ in keptEngine.takeClient() }, "the engine still names a released socket")
        XCTAssertTrue(waitUntil { kept.lock.withLock { kept.receiver == nil } }, "the pair still names a released engine")
    }

    /// Releasing a connected socket closes its pair: the server sees the end, and no socket is left.
    func testReleasingTheSocketClosesTheConnection() throws {
        let sawEOF = Signal()
        let server = try startRawServer { connection in
            if (try? connection.readToEOF(timeout: 10))?.sawEOF == true { sawEOF.raise() }
        }
        let before = SocketHandle.openCount
        do {
            let recorder = QueuedRecorder()
            let socket = QueuedSocket(delegate: recorder, delegateQueue: queue)
            try socket.connect(toHost: "127.0.0.1", onPort: server.port)
            XCTAssertTrue(recorder.waitFor("connect"))
        }
        XCTAssertTrue(sawEOF.wait(timeout: 10), "the server never saw the end")
        XCTAssertTrue(waitUntil { SocketHandle.openCount == before }, "\(SocketHandle.openCount) sockets open, \(before) before")
    }
}

/// A `StreamDelegate` that counts its calls.
private final class CallCounter: NSObject, StreamDelegate, Sendable {
    private let count = Mutex(0)
    var calls: Int { count.withLock { $0 } }
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) { count.withLock { $0 += 1 } }
}

/// Checks `condition` until it holds or `timeout` passes, yielding the CPU between checks: for state
/// another thread changes (the engine's byte count, the open-socket count) with no event to wait on.
func waitUntil(timeout: TimeInterval = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while !condition() {
        if Date() >= deadline { return false }
        sched_yield()
    }
    return true
}
