import CocoaAsyncSocket
import TestPeers
import XCTest

/// A delegate ported with the other protocol's Swift types (GCDAsyncSocket's `Data`, `UInt16` and
/// `UInt` on a `QueuedSocketDelegate`; QueuedSocket's `[UInt8]` and `Int` on a
/// `GCDAsyncSocketDelegate`) is called, whichever way the conformance is declared: on the class, in
/// an extension, on an NSObject subclass. Swift itself warns about such a method only in the
/// extension style (checked below); before, the class and subclass styles compiled silently and the
/// methods were never called.
final class NearMissDelegateTests: XCTestCase {
    /// What a ported delegate was told, in order, with waits.
    // @unchecked Sendable: every field is reached only under `condition`.
    final class Log: @unchecked Sendable {
        private let condition = NSCondition()
        private var lines: [String] = []
        /// Extensions left to give to timeout questions.
        private var extensions = 1

        func add(_ line: String) {
            condition.lock()
            lines.append(line)
            condition.broadcast()
            condition.unlock()
        }

        /// 0.2 s once, then 0.
        func nextExtension() -> TimeInterval {
            condition.lock()
            defer { condition.unlock() }
            extensions -= 1
            return extensions >= 0 ? 0.2 : 0
        }

        @discardableResult
        func wait(for prefix: String, file: StaticString = #filePath, line: UInt = #line) -> [String] {
            let deadline = Date(timeIntervalSinceNow: 10)
            condition.lock()
            defer { condition.unlock() }
            while !lines.contains(where: { $0.hasPrefix(prefix) }) {
                if !condition.wait(until: deadline) {
                    XCTFail("no \"\(prefix)\" within 10 s; got \(lines)", file: file, line: line)
                    break
                }
            }
            return lines
        }
    }

    // MARK: GCDAsyncSocketDelegate written with QueuedSocket's types

    final class GCDOnClass: GCDAsyncSocketDelegate {
        let log = Log()
        func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: Int) { log.add("connect \(port)") }
        func socket(_ sock: GCDAsyncSocket, didRead data: [UInt8], withTag tag: Int) {
            log.add("read \(tag) \(String(decoding: data, as: UTF8.self))")
        }
        func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) { log.add("partial \(tag)") }
        func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval
        {
            log.add("timeout \(tag)")
            return log.nextExtension()
        }
        func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) { log.add("disconnect \((err as NSError?)?.code ?? 0)") }
    }

    final class GCDInExtension {
        let log = Log()
    }

    final class GCDOnSubclass: NSObject, GCDAsyncSocketDelegate {
        let log = Log()
        func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: Int) { log.add("connect \(port)") }
        func socket(_ sock: GCDAsyncSocket, didRead data: [UInt8], withTag tag: Int) {
            log.add("read \(tag) \(String(decoding: data, as: UTF8.self))")
        }
        func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) { log.add("partial \(tag)") }
        func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval
        {
            log.add("timeout \(tag)")
            return log.nextExtension()
        }
        func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) { log.add("disconnect \((err as NSError?)?.code ?? 0)") }
    }

    /// Connects to socat's echo, reads a line back (to a length first, so that a partial read is
    /// reported), then lets a read time out after one extension.
    private func runGCD(_ delegate: GCDAsyncSocketDelegate, _ log: Log, file: StaticString = #filePath, line: UInt = #line) throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let socket = GCDAsyncSocket(delegate: delegate, delegateQueue: DispatchQueue(label: "near-miss"))
        try socket.connect(toHost: "127.0.0.1", onPort: port)
        socket.readData(toLength: 10, withTimeout: 10, tag: 1)
        socket.write(Data("ping\n".utf8), withTimeout: 10, tag: 0)
        log.wait(for: "partial 1", file: file, line: line)
        socket.write(Data("pong\n".utf8), withTimeout: 10, tag: 0)
        log.wait(for: "read 1", file: file, line: line)
        socket.readData(withTimeout: 0.2, tag: 2)
        let lines = log.wait(for: "disconnect", file: file, line: line)
        XCTAssertEqual(lines.first, "connect \(port)", file: file, line: line)
        XCTAssertTrue(lines.contains("read 1 ping\npong\n"), "\(lines)", file: file, line: line)
        XCTAssertEqual(lines.filter { $0 == "timeout 2" }.count, 2, "\(lines)", file: file, line: line)
        XCTAssertEqual(lines.last, "disconnect \(GCDAsyncSocketError.Code.readTimeoutError.rawValue)", file: file, line: line)
    }

    func testGCDAsyncSocketDelegateWithQueuedSocketTypesOnTheClassIsCalled() throws {
        let delegate = GCDOnClass()
        try runGCD(delegate, delegate.log)
    }

    func testGCDAsyncSocketDelegateWithQueuedSocketTypesInAnExtensionIsCalled() throws {
        let delegate = GCDInExtension()
        try runGCD(delegate, delegate.log)
    }

    func testGCDAsyncSocketDelegateWithQueuedSocketTypesOnAnNSObjectSubclassIsCalled() throws {
        let delegate = GCDOnSubclass()
        try runGCD(delegate, delegate.log)
    }

    // MARK: QueuedSocketDelegate written with GCDAsyncSocket's types

    final class QueuedOnClass: QueuedSocketDelegate {
        let log = Log()
        func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: UInt16) { log.add("connect \(port)") }
        func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int) {
            log.add("read \(tag) \(String(decoding: data, as: UTF8.self))")
        }
        func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) { log.add("partial \(tag)") }
        func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt)
            -> TimeInterval
        {
            log.add("timeout \(tag)")
            return log.nextExtension()
        }
        func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
            log.add("disconnect \(error.map { "\($0)" } ?? "nil")")
        }
    }

    final class QueuedInExtension {
        let log = Log()
    }

    final class QueuedOnSubclass: NSObject, QueuedSocketDelegate {
        let log = Log()
        func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: UInt16) { log.add("connect \(port)") }
        func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int) {
            log.add("read \(tag) \(String(decoding: data, as: UTF8.self))")
        }
        func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) { log.add("partial \(tag)") }
        func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt)
            -> TimeInterval
        {
            log.add("timeout \(tag)")
            return log.nextExtension()
        }
        func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
            log.add("disconnect \(error.map { "\($0)" } ?? "nil")")
        }
    }

    private func runQueued(_ delegate: QueuedSocketDelegate, _ log: Log, file: StaticString = #filePath, line: UInt = #line) throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let socket = QueuedSocket(delegate: delegate, delegateQueue: DispatchQueue(label: "near-miss"))
        try socket.connect(toHost: "127.0.0.1", onPort: Int(port))
        socket.read(toLength: 10, timeout: 10, tag: 1)
        socket.write(Array("ping\n".utf8), timeout: 10)
        log.wait(for: "partial 1", file: file, line: line)
        socket.write(Array("pong\n".utf8), timeout: 10)
        log.wait(for: "read 1", file: file, line: line)
        socket.readAvailable(timeout: 0.2, tag: 2)
        let lines = log.wait(for: "disconnect", file: file, line: line)
        XCTAssertEqual(lines.first, "connect \(port)", file: file, line: line)
        XCTAssertTrue(lines.contains("read 1 ping\npong\n"), "\(lines)", file: file, line: line)
        XCTAssertEqual(lines.filter { $0 == "timeout 2" }.count, 2, "\(lines)", file: file, line: line)
        XCTAssertEqual(lines.last, "disconnect \(StreamOperationError.readTimedOut(tag: 2))", file: file, line: line)
    }

    func testQueuedSocketDelegateWithGCDAsyncSocketTypesOnTheClassIsCalled() throws {
        let delegate = QueuedOnClass()
        try runQueued(delegate, delegate.log)
    }

    func testQueuedSocketDelegateWithGCDAsyncSocketTypesInAnExtensionIsCalled() throws {
        let delegate = QueuedInExtension()
        try runQueued(delegate, delegate.log)
    }

    func testQueuedSocketDelegateWithGCDAsyncSocketTypesOnAnNSObjectSubclassIsCalled() throws {
        let delegate = QueuedOnSubclass()
        try runQueued(delegate, delegate.log)
    }

    // MARK: what the compiler says

    /// Every signature of both spellings, in every conformance style, compiles without a warning
    /// (`-warnings-as-errors`): each is a requirement, so none is a near miss any more. A method that
    /// nearly matches neither (a `UInt32` port) still gets Swift's own "nearly matches" warning in
    /// the extension style, and none on the class: the limit of what Swift reports.
    func testPortedSignaturesCompileCleanInEveryConformanceStyle() throws {
        let gcd = """
            func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: Int) {}
            func socket(_ sock: GCDAsyncSocket, didRead data: [UInt8], withTag tag: Int) {}
            func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) {}
            func socket(_ sock: GCDAsyncSocket, didWritePartialDataOfLength partialLength: Int, tag: Int) {}
            func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval { 0 }
            func socket(_ sock: GCDAsyncSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval { 0 }
            """
        let queued = """
            func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: UInt16) {}
            func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int) {}
            func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) {}
            func socket(_ socket: QueuedSocket, didWritePartialDataOfLength partialLength: UInt, tag: Int) {}
            func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval { 0 }
            func socket(_ socket: QueuedSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval { 0 }
            """
        for (proto, body) in [("GCDAsyncSocketDelegate", gcd), ("QueuedSocketDelegate", queued)] {
            let source = """
                import CocoaAsyncSocket
                final class OnClass: \(proto) {
                \(body)
                }
                final class InExtension {}
                extension InExtension: \(proto) {
                \(body)
                }
                final class OnSubclass: NSObject, \(proto) {
                \(body)
                }

                """
            let result = try Typecheck.run(source, warningsAsErrors: true)
            XCTAssertEqual(result.status, 0, "\(proto): \(result.output)")
        }
        let other = """
            import CocoaAsyncSocket
            final class InExtension {}
            extension InExtension: GCDAsyncSocketDelegate {
                func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt32) {}
            }

            """
        let warned = try Typecheck.run(other, warningsAsErrors: false)
        XCTAssertEqual(warned.status, 0, warned.output)
        XCTAssertTrue(warned.output.contains("nearly matches defaulted requirement"), warned.output)
    }
}

extension NearMissDelegateTests.GCDInExtension: GCDAsyncSocketDelegate {
    func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: Int) { log.add("connect \(port)") }
    func socket(_ sock: GCDAsyncSocket, didRead data: [UInt8], withTag tag: Int) {
        log.add("read \(tag) \(String(decoding: data, as: UTF8.self))")
    }
    func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: Int, tag: Int) { log.add("partial \(tag)") }
    func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: Int) -> TimeInterval {
        log.add("timeout \(tag)")
        return log.nextExtension()
    }
    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) { log.add("disconnect \((err as NSError?)?.code ?? 0)") }
}

extension NearMissDelegateTests.QueuedInExtension: QueuedSocketDelegate {
    func socket(_ socket: QueuedSocket, didConnectToHost host: String, port: UInt16) { log.add("connect \(port)") }
    func socket(_ socket: QueuedSocket, didRead data: Data, withTag tag: Int) {
        log.add("read \(tag) \(String(decoding: data, as: UTF8.self))")
    }
    func socket(_ socket: QueuedSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) { log.add("partial \(tag)") }
    func socket(_ socket: QueuedSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval {
        log.add("timeout \(tag)")
        return log.nextExtension()
    }
    func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) { log.add("disconnect \(error.map { "\($0)" } ?? "nil")") }
}
