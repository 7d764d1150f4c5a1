// NOTE for implementer: these tests assume two hooks of GCDAsyncUdpSocketDelegate, mirroring what the TCP
// module does for QueuedSocket's spellings (Tests/CocoaAsyncSocketTests/NearMissDelegateTests.swift):
// 1. `udpSocket(_:didReceiveData:fromAddress:withFilterContext:)` (the Objective-C selector's words, as
//    code ported by hand spells it) is a requirement of the protocol with a default, called for every
//    datagram right after `udpSocket(_:didReceive:fromAddress:withFilterContext:)`, so it is called in every
//    conformance style and compiles without a warning (`-warnings-as-errors`) in each.
// 2. When that near-miss method turns out to be the delegate's own (its default did not run), a warning
//    naming it, `udpSocket(_:didReceiveData:fromAddress:withFilterContext:)`, is written to standard error
//    (fd 2) once per delegate type, however many datagrams follow. The tests capture fd 2 while they run.

import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// A delegate that spells the receive method with the Objective-C selector's words
/// (`didReceiveData:` for Swift's `didReceive`) is called, whichever way the conformance is
/// declared, and told once on standard error that the method has another name. Swift itself warns
/// about such a method only in the extension style; declared on the class, as most delegates are, it
/// would otherwise compile silently and never be called.
final class NearMissDelegateTests: XCTestCase {
    /// The near-miss method, as the warning names it.
    static let nearMiss = "udpSocket(_:didReceiveData:fromAddress:withFilterContext:)"

    /// What a ported delegate was told, with waits.
    // @unchecked Sendable: every field is reached only under `condition`.
    final class Log: @unchecked Sendable {
        private let condition = NSCondition()
        private var lines: [String] = []

        func add(_ line: String) {
            condition.lock()
            lines.append(line)
            condition.broadcast()
            condition.unlock()
        }

        @discardableResult
        func wait(for line: String, file: StaticString = #filePath, lineNumber: UInt = #line) -> [String] {
            let deadline = Date(timeIntervalSinceNow: 10)
            condition.lock()
            defer { condition.unlock() }
            while !lines.contains(line) {
                if !condition.wait(until: deadline) {
                    XCTFail("no \"\(line)\" within 10 s; got \(lines)", file: file, line: lineNumber)
                    break
                }
            }
            return lines
        }
    }

    final class OnClass: GCDAsyncUdpSocketDelegate {
        let log = Log()
        func udpSocket(
            _ sock: GCDAsyncUdpSocket, didReceiveData data: Data, fromAddress address: Data, withFilterContext filterContext: Any?
        ) {
            log.add("receive \(String(decoding: data, as: UTF8.self))")
        }
        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) { log.add("close") }
    }

    final class InExtension {
        let log = Log()
    }

    final class OnSubclass: NSObject, GCDAsyncUdpSocketDelegate {
        let log = Log()
        func udpSocket(
            _ sock: GCDAsyncUdpSocket, didReceiveData data: Data, fromAddress address: Data, withFilterContext filterContext: Any?
        ) {
            log.add("receive \(String(decoding: data, as: UTF8.self))")
        }
        func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) { log.add("close") }
    }

    /// Sends the delegate's socket two datagrams from another GCDAsyncUdpSocket (no child process runs
    /// meanwhile: it would inherit the captured fd 2), then checks both arrived through the near-miss
    /// method and that the warning came once.
    private func run(_ delegate: GCDAsyncUdpSocketDelegate, _ log: Log, file: StaticString = #filePath, line: UInt = #line) throws {
        let capture = try StandardErrorCapture()
        defer { _ = capture.finish() }  // on an early exit
        let socket = GCDAsyncUdpSocket(delegate: delegate, delegateQueue: DispatchQueue(label: "near-miss"))
        try socket.bind(toPort: 0, interface: "127.0.0.1")
        try socket.beginReceiving()
        let recorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "sender"))
        sender.send(Data("one".utf8), toHost: "127.0.0.1", port: socket.localPort(), withTimeout: 5, tag: 1)
        log.wait(for: "receive one", file: file, lineNumber: line)
        sender.send(Data("two".utf8), toHost: "127.0.0.1", port: socket.localPort(), withTimeout: 5, tag: 2)
        log.wait(for: "receive two", file: file, lineNumber: line)
        socket.close()
        let lines = log.wait(for: "close", file: file, lineNumber: line)
        closeAndWait(sender, recorder, file: file, line: line)
        let warnings = capture.finish()
        XCTAssertEqual(lines, ["receive one", "receive two", "close"], file: file, line: line)
        XCTAssertEqual(
            warnings.components(separatedBy: Self.nearMiss).count - 1, 1, "standard error while the test ran:\n\(warnings)", file: file,
            line: line)
    }

    func testReceiveMethodWithTheSelectorsWordsOnTheClassIsCalledAndWarnedAbout() throws {
        let delegate = OnClass()
        try run(delegate, delegate.log)
    }

    func testReceiveMethodWithTheSelectorsWordsInAnExtensionIsCalledAndWarnedAbout() throws {
        let delegate = InExtension()
        try run(delegate, delegate.log)
    }

    func testReceiveMethodWithTheSelectorsWordsOnAnNSObjectSubclassIsCalledAndWarnedAbout() throws {
        let delegate = OnSubclass()
        try run(delegate, delegate.log)
    }

    // MARK: what the compiler says

    /// The near-miss spelling, in every conformance style, compiles without a warning
    /// (`-warnings-as-errors`): it is a requirement, so no near miss for Swift. A method that nearly
    /// matches nothing (an `Int32` tag) still gets Swift's own "nearly matches" warning in the
    /// extension style: the limit of what Swift reports.
    func testTheSelectorsSpellingCompilesCleanInEveryConformanceStyle() throws {
        let body = """
            func udpSocket(
                _ sock: GCDAsyncUdpSocket, didReceiveData data: Data, fromAddress address: Data, withFilterContext filterContext: Any?
            ) {}
            """
        let source = """
            import CocoaAsyncSocket
            final class OnClass: GCDAsyncUdpSocketDelegate {
            \(body)
            }
            final class InExtension {}
            extension InExtension: GCDAsyncUdpSocketDelegate {
            \(body)
            }
            final class OnSubclass: NSObject, GCDAsyncUdpSocketDelegate {
            \(body)
            }

            """
        let result = try Typecheck.run(source, warningsAsErrors: true)
        XCTAssertEqual(result.status, 0, result.output)
        let other = """
            import CocoaAsyncSocket
            final class InExtension {}
            extension InExtension: GCDAsyncUdpSocketDelegate {
                func udpSocket(_ sock: GCDAsyncUdpSocket, didSendDataWithTag tag: Int32) {}
            }

            """
        let warned = try Typecheck.run(other, warningsAsErrors: false)
        XCTAssertEqual(warned.status, 0, warned.output)
        XCTAssertTrue(warned.output.contains("nearly matches defaulted requirement"), warned.output)
    }
}

extension NearMissDelegateTests.InExtension: GCDAsyncUdpSocketDelegate {
    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceiveData data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
        log.add("receive \(String(decoding: data, as: UTF8.self))")
    }
    func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) { log.add("close") }
}

/// This process's standard error (fd 2), sent into a pipe from `init` until `finish()`, which puts
/// the old fd 2 back and returns what was written meanwhile.
// @unchecked Sendable: `text` and `ended` are reached only under `condition`; the descriptors are constants.
final class StandardErrorCapture: @unchecked Sendable {
    private let saved: Int32
    private let readEnd: Int32
    private let condition = NSCondition()
    private var text = Data()
    private var ended = false
    private var finished = false

    init() throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
        fflush(nil)  // every stream, stderr among them
        saved = dup(2)
        readEnd = ends[0]
        guard saved >= 0, dup2(ends[1], 2) == 2 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
        Glibc.close(ends[1])
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                condition.lock()
                if count > 0 { text.append(contentsOf: buffer[..<count]) } else { ended = true }
                condition.broadcast()
                condition.unlock()
                if count <= 0 { break }
            }
            Glibc.close(readEnd)
        }
    }

    /// Restores fd 2 and returns what was written to it since `init` (once; later calls return "").
    func finish() -> String {
        condition.lock()
        if finished {
            condition.unlock()
            return ""
        }
        finished = true
        condition.unlock()
        fflush(nil)  // every stream, stderr among them
        dup2(saved, 2)
        Glibc.close(saved)
        // The pipe's last write end was fd 2: its reader sees the end now.
        let deadline = Date(timeIntervalSinceNow: 10)
        condition.lock()
        while !ended, condition.wait(until: deadline) {}
        let result = String(decoding: text, as: UTF8.self)
        condition.unlock()
        return result
    }
}
