import CocoaAsyncSocket
import TestPeers
import XCTest

/// Trust decided by the application on the library's own faces (``TLSSettings/trustEvaluation``):
/// a stream pair, a QueuedSocket and an AsyncConnection against openssl s_server with a self-signed
/// certificate: pinned and accepted, rejected with errSSLPeerBadCert, OpenSSL's verdict passed
/// through, and nothing sent or received before the answer.
final class TrustEvaluationTests: XCTestCase {
    /// A question held until the test answers it.
    // @unchecked Sendable: every field is reached only under `condition`.
    final class HeldQuestion: @unchecked Sendable {
        private let condition = NSCondition()
        private var trusts: [TLSPeerTrust] = []
        private var completion: (@Sendable (Bool) -> Void)?

        var evaluation: TLSTrustEvaluation {
            TLSTrustEvaluation { [self] trust, completion in
                condition.lock()
                trusts.append(trust)
                self.completion = completion
                condition.broadcast()
                condition.unlock()
            }
        }

        var asked: Int {
            condition.lock()
            defer { condition.unlock() }
            return trusts.count
        }

        /// Waits for the question and returns the trust it carries.
        func waitForQuestion(file: StaticString = #filePath, line: UInt = #line) -> TLSPeerTrust? {
            let deadline = Date(timeIntervalSinceNow: 10)
            condition.lock()
            defer { condition.unlock() }
            while trusts.isEmpty {
                if !condition.wait(until: deadline) {
                    XCTFail("the trust evaluation was not asked", file: file, line: line)
                    return nil
                }
            }
            return trusts.first
        }

        func answer(_ accepted: Bool) {
            condition.lock()
            let completion = self.completion
            condition.unlock()
            completion?(accepted)
            completion?(!accepted)  // only the first answer counts
        }
    }

    private func reversePeer(_ certificate: TestCertificate) throws -> (Peer, Int) {
        let (peer, port) = try Peer.opensslReverse(certificate: certificate.certificate, key: certificate.key)
        return (peer, Int(port))
    }

    private static func settings(_ evaluation: TLSTrustEvaluation) -> TLSSettings {
        var settings = TLSSettings()
        settings.peerName = .name("localhost")
        settings.trustEvaluation = evaluation
        return settings
    }

    // MARK: streams

    func testStreamPairWaitsForTheAnswerThenPinnedCertificateIsAccepted() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try reversePeer(certificate)
        defer { peer.stop() }
        let question = HeldQuestion()
        let pair = createStreamPair(host: "127.0.0.1", port: port)
        XCTAssertTrue(pair.input.setProperty(Self.settings(question.evaluation), forKey: .tlsSettingsKey))
        pair.input.open()
        pair.output.open()
        defer {
            pair.input.close()
            pair.output.close()
        }
        let trust = try XCTUnwrap(question.waitForQuestion())
        // OpenSSL's verdict on a self-signed certificate: X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT.
        XCTAssertEqual(trust.verifyResult, 18)
        XCTAssertFalse(trust.isVerified)
        XCTAssertEqual(trust.certificateChain.first, certificate.der)
        // Until the answer: the handshake is not over, so no application data either way.
        XCTAssertFalse(pair.output.hasSpaceAvailable)
        XCTAssertFalse(pair.input.hasBytesAvailable)
        XCTAssertNil(pair.input.property(forKey: .tlsConnectionInfoKey))
        question.answer(trust.certificateChain.first == certificate.der)
        let line = Array("hello\n".utf8)
        XCTAssertEqual(pair.output.write(line, maxLength: line.count), line.count)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        while !received.contains(0x0A) {
            let count = pair.input.read(&buffer, maxLength: buffer.count)
            guard count > 0 else { break }
            received += buffer[..<count]
        }
        XCTAssertEqual(String(decoding: received, as: UTF8.self), "olleh\n")
        let info = try XCTUnwrap(pair.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo)
        XCTAssertEqual(info.verifyResult, 18)
        XCTAssertEqual(question.asked, 1)
    }

    func testStreamPairRejectionFailsWithPeerBadCert() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try reversePeer(certificate)
        defer { peer.stop() }
        let pair = createStreamPair(host: "127.0.0.1", port: port)
        let evaluation = TLSTrustEvaluation { trust, completion in completion(trust.isVerified) }
        XCTAssertTrue(pair.input.setProperty(Self.settings(evaluation), forKey: .tlsSettingsKey))
        pair.input.open()
        pair.output.open()
        defer {
            pair.input.close()
            pair.output.close()
        }
        let line = Array("secret\n".utf8)
        XCTAssertEqual(pair.output.write(line, maxLength: line.count), -1)
        let error = try XCTUnwrap(pair.output.streamError as NSError?)
        XCTAssertEqual(error.domain, NSOSStatusErrorDomain)
        XCTAssertEqual(error.code, -9825)
        XCTAssertEqual(error.userInfo["OpenSSLVerifyResult"] as? Int, 18, "\(error.userInfo)")
        XCTAssertEqual(pair.input.streamStatus, .error)
        XCTAssertFalse(peer.printed.contains("terces"), "application data went out before the answer")
    }

    func testAServerCannotHaveATrustEvaluation() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        defer { close(fds[1]) }
        let pair = createStreamPair(nativeSocket: fds[0])
        var server = TLSSettings.server(identity: TLSIdentity(pkcs12: certificate.pkcs12, password: ""))
        server.trustEvaluation = TLSTrustEvaluation { _, completion in completion(true) }
        XCTAssertTrue(pair.input.setProperty(server, forKey: .tlsSettingsKey))
        pair.input.open()
        pair.output.open()
        defer {
            pair.input.close()
            pair.output.close()
        }
        var byte: UInt8 = 0
        XCTAssertEqual(pair.input.read(&byte, maxLength: 1), -1)
        let error = try XCTUnwrap(pair.input.streamError as NSError?)
        XCTAssertEqual(error.domain, NSOSStatusErrorDomain)
        XCTAssertEqual(error.code, -9848, "\(error)")
    }

    // MARK: QueuedSocket

    final class QueuedDelegate: QueuedSocketDelegate, Sendable {
        let log = NearMissDelegateTests.Log()
        func socketDidSecure(_ socket: QueuedSocket) { log.add("secure") }
        func socket(_ socket: QueuedSocket, didRead data: [UInt8], withTag tag: Int) {
            log.add("read \(String(decoding: data, as: UTF8.self))")
        }
        func socketDidDisconnect(_ socket: QueuedSocket, withError error: Error?) {
            let error = error as NSError?
            log.add("disconnect \(error.map { "\($0.domain) \($0.code)" } ?? "nil")")
        }
    }

    func testQueuedSocketStartTLSWithPinningAndWithRejection() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try reversePeer(certificate)
        defer { peer.stop() }

        let question = HeldQuestion()
        let delegate = QueuedDelegate()
        let socket = QueuedSocket(delegate: delegate, delegateQueue: DispatchQueue(label: "trust"))
        try socket.connect(toHost: "127.0.0.1", onPort: port)
        socket.startTLS(Self.settings(question.evaluation))
        socket.write(Array("queued\n".utf8))  // held behind the handshake and the answer
        socket.read(toData: Array("\n".utf8), timeout: 10)
        let trust = try XCTUnwrap(question.waitForQuestion())
        XCTAssertEqual(trust.certificateChain.first, certificate.der)
        XCTAssertFalse(peer.printed.contains("deueuq"), "a queued write went out before the answer")
        question.answer(true)
        let lines = delegate.log.wait(for: "read")
        XCTAssertEqual(lines, ["secure", "read deueuq\n"])
        socket.disconnect()

        let rejecting = QueuedDelegate()
        let rejected = QueuedSocket(delegate: rejecting, delegateQueue: DispatchQueue(label: "trust"))
        try rejected.connect(toHost: "127.0.0.1", onPort: port)
        rejected.startTLS(Self.settings(TLSTrustEvaluation { trust, completion in completion(trust.certificateChain.first == Data([1])) }))
        rejected.write(Array("secret\n".utf8))
        XCTAssertEqual(rejecting.log.wait(for: "disconnect"), ["disconnect \(NSOSStatusErrorDomain) -9825"])
        XCTAssertFalse(peer.printed.contains("terces"), "a queued write went out before the answer")
    }

    // MARK: AsyncConnection

    /// Synchronous itself (the peer is stopped outside Swift concurrency: corelibs'
    /// `Process.waitUntilExit` spins the calling thread's run loop); the connection code is async.
    func testAsyncConnectionDecidesWithAnAsyncFunction() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try reversePeer(certificate)
        defer { peer.stop() }
        let der = certificate.der
        let results = NearMissDelegateTests.Log()
        Task { await TrustEvaluationTests.asyncScenario(port: port, der: der, results: results) }
        let lines = results.wait(for: "done")
        XCTAssertEqual(lines, ["reply cnysa\n", "done \(NSOSStatusErrorDomain) -9825"])
    }

    /// Accepts a pinned peer through startTLS, then rejects one set before the open.
    private static func asyncScenario(port: Int, der: Data, results: NearMissDelegateTests.Log) async {
        do {
            let accepting = AsyncConnection(host: "127.0.0.1", port: port)
            try await accepting.open()
            try await accepting.startTLS(Self.settings(TLSTrustEvaluation { trust in trust.certificateChain.first == der }))
            try await accepting.write(Array("async\n".utf8))
            let reply = try await accepting.read(upTo: Array("\n".utf8), maxLength: 100)
            results.add("reply \(String(decoding: reply, as: UTF8.self))")
            accepting.close()
        } catch {
            results.add("reply error \(error)")
        }
        let pair = createStreamPair(host: "127.0.0.1", port: port)
        _ = pair.input.setProperty(Self.settings(TLSTrustEvaluation { _ in false }), forKey: .tlsSettingsKey)
        let rejected = AsyncConnection(input: pair.input, output: pair.output)
        do {
            try await rejected.open()
            results.add("done opened")
        } catch {
            results.add("done \((error as NSError).domain) \((error as NSError).code)")
        }
    }
}
