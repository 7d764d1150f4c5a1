#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// What `AsyncConnection` and `QueuedSocket` expose besides reads and writes (issue 21, finding 7):
/// the negotiated TLS facts (`tlsInfo`), the streams underneath, and a TLS server written as a Swift 6
/// user writes one: the accepted pair handed to a `Task` (`AcceptHandler`'s parameters are `sending`),
/// with no `@unchecked`, `nonisolated(unsafe)` or `@preconcurrency` (this file imports the module
/// without `@testable`, as a user does).
final class ConnectionDetailsTests: SocketStreamsTestCase {
    private func serverSettings() throws -> TLSSettings {
        let pki = try self.pki
        var settings = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        settings.alpnProtocols = ["echo/1"]
        return settings
    }

    private func clientSettings() throws -> TLSSettings {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(try pki.caCertificate)]
        settings.alpnProtocols = ["echo/1"]
        return settings
    }

    private func assertNegotiated(_ info: TLSConnectionInfo?, peerHasCertificate: Bool, file: StaticString = #filePath, line: UInt = #line)
    {
        guard let info else { return XCTFail("no TLS info", file: file, line: line) }
        XCTAssertTrue(info.protocolVersion.hasPrefix("TLSv1."), info.protocolVersion, file: file, line: line)
        XCTAssertFalse(info.cipherSuite.isEmpty, file: file, line: line)
        XCTAssertEqual(info.alpnProtocol, "echo/1", file: file, line: line)
        XCTAssertEqual(info.peerCertificates.isEmpty, !peerHasCertificate, file: file, line: line)
        XCTAssertEqual(info.verifyResult, 0, info.verifyResultDescription, file: file, line: line)
        XCTAssertEqual(info.verifyResultDescription, "ok", file: file, line: line)
    }

    /// A TLS server whose accept handler hands each pair to a `Task` that serves it with an
    /// `AsyncConnection` and reports the TLS facts it negotiated; an `AsyncConnection` client reads its
    /// own. Both see the same version and cipher; the client sees the server's certificate.
    func testAcceptedPairGoesToATaskAndBothSidesSeeTheTLSFacts() async throws {
        let server = try serverSettings()
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        addCleanup { listener.close() }
        let (reports, continuation) = AsyncStream.makeStream(of: TLSConnectionInfo?.self)
        listener.start(in: .socketStreams) { input, output in
            Task {
                _ = input.setProperty(server, forKey: .tlsSettingsKey)
                let connection = AsyncConnection(input: input, output: output)
                do {
                    try await connection.open()
                    let line = try await connection.read(upTo: [10], maxLength: 100)
                    continuation.yield(connection.tlsInfo)
                    try await connection.write(line)
                } catch {
                    continuation.yield(nil)
                }
                connection.close()
            }
        }

        let pair = createStreamPair(host: "localhost", port: listener.port)
        XCTAssertTrue(pair.input.setProperty(try clientSettings(), forKey: .tlsSettingsKey))
        let client = AsyncConnection(input: pair.input, output: pair.output)
        XCTAssertNil(client.streams, "not opened: the pair is still the caller's")
        XCTAssertNil(client.tlsInfo)
        try await client.open()
        assertNegotiated(client.tlsInfo, peerHasCertificate: true)
        let streams = try XCTUnwrap(client.streams)
        XCTAssertTrue(streams.input === pair.input && streams.output === pair.output)
        XCTAssertNotNil(streams.input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketNativeHandle as String)))
        try await client.write(Array("hello\n".utf8))
        let echoed = try await client.read(upTo: [10], maxLength: 100)
        XCTAssertEqual(echoed, Array("hello\n".utf8))

        var iterator = reports.makeAsyncIterator()
        let report = await iterator.next()
        let serverInfo = try XCTUnwrap(report ?? nil, "the server task failed")
        assertNegotiated(serverInfo, peerHasCertificate: false)
        XCTAssertEqual(serverInfo.protocolVersion, client.tlsInfo?.protocolVersion)
        XCTAssertEqual(serverInfo.cipherSuite, client.tlsInfo?.cipherSuite)
        client.close()
    }

    /// A plain connection has no TLS facts.
    func testPlainAsyncConnectionHasNoTLSInfo() async throws {
        let echo = try startStreamEchoServer()
        let connection = AsyncConnection(host: "127.0.0.1", port: echo.port)
        XCTAssertNil(connection.streams)
        try await connection.open()
        XCTAssertNotNil(connection.streams)
        XCTAssertNil(connection.tlsInfo)
        connection.close()
    }

    /// QueuedSocket: TLS queued with `startTLS`, facts readable from `socketDidSecure` on; the streams
    /// are there once connected.
    func testQueuedSocketExposesTLSInfoAfterStartTLS() throws {
        let echo = try startStreamEchoServer(tls: try serverSettings())
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "details"))
        XCTAssertNil(socket.streams)
        var settings = try clientSettings()
        settings.peerName = .name("localhost")
        try socket.connect(toHost: "127.0.0.1", onPort: echo.port)
        socket.startTLS(settings)
        XCTAssertTrue(recorder.waitFor("secure"), "\(recorder.log)")
        assertNegotiated(socket.tlsInfo, peerHasCertificate: true)
        let streams = try XCTUnwrap(socket.streams)
        XCTAssertNotNil(streams.input.property(forKey: .tlsConnectionInfoKey))
        socket.write(Array("x\n".utf8), tag: 1)
        socket.read(toData: [10], tag: 2)
        XCTAssertTrue(recorder.waitFor("read 2 x\n"), "\(recorder.log)")
        socket.disconnect()
    }
}
