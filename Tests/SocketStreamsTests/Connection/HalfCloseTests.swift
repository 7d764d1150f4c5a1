#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// `shutdownOutputKey`, the write-side half-close (issue 21, finding 7): the peer sees the end of our
/// bytes (FIN; over TLS close_notify first), answers, and we read the answer; later writes fail with
/// EPIPE on the output stream alone.
final class HalfCloseTests: SocketStreamsTestCase {
    /// Reads until the end of the stream (blocking); the bytes, and whether it ended cleanly (0, not -1).
    private func readToEnd(_ input: InputStream) -> (bytes: [UInt8], clean: Bool) {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = input.read(&buffer, maxLength: buffer.count)
            if count <= 0 { return (bytes, count == 0) }
            bytes += buffer[0..<count]
        }
    }

    private func writeAll(_ output: OutputStream, _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
            guard written > 0 else { return XCTFail("write failed: \(String(describing: output.streamError))", file: file, line: line) }
            bytes = bytes.dropFirst(written)
        }
    }

    /// After the half-close: the output refuses writes with EPIPE, the input is not failed.
    private func assertWritesRefused(_ pair: StreamPair, file: StaticString = #filePath, line: UInt = #line) {
        let byte: [UInt8] = [1]
        XCTAssertEqual(pair.output.write(byte, maxLength: 1), -1, file: file, line: line)
        let error = pair.output.streamError as NSError?
        XCTAssertEqual(error?.domain, NSPOSIXErrorDomain, "\(String(describing: error))", file: file, line: line)
        XCTAssertEqual(error?.code, Int(EPIPE), "\(String(describing: error))", file: file, line: line)
        XCTAssertEqual(pair.output.streamStatus, .error, file: file, line: line)
        XCTAssertNil(pair.input.streamError, file: file, line: line)
        XCTAssertFalse(pair.output.setProperty(true, forKey: .shutdownOutputKey), "shut twice", file: file, line: line)
    }

    func testPlainHalfCloseSendsFINAndKeepsReading() throws {
        let listener = try RawSocket.listener(family: .v4)
        defer { close(listener) }
        let pair = makePair(port: RawSocket.boundPort(listener))
        XCTAssertFalse(pair.output.setProperty(true, forKey: .shutdownOutputKey), "not open yet")
        pair.input.open()
        pair.output.open()
        writeAll(pair.output, "request")
        let server = try XCTUnwrap(try RawSocket.accept(listener, timeout: shortTimeout))
        defer { close(server) }
        XCTAssertEqual(try RawSocket.readExactly(server, count: 7, timeout: shortTimeout), Data("request".utf8))
        XCTAssertEqual(pair.output.property(forKey: .shutdownOutputKey) as? NSNumber, NSNumber(value: false))
        XCTAssertFalse(pair.output.setProperty(false, forKey: .shutdownOutputKey), "only true shuts")

        XCTAssertTrue(pair.output.setProperty(true, forKey: .shutdownOutputKey))
        XCTAssertEqual(pair.output.property(forKey: .shutdownOutputKey) as? NSNumber, NSNumber(value: true))
        XCTAssertEqual(try RawSocket.readSome(server, timeout: shortTimeout), Data(), "the server sees the end (FIN)")
        assertWritesRefused(pair)
        try RawSocket.writeAll(server, Data("reply".utf8))
        shutdown(server, Int32(SHUT_WR))
        let (reply, clean) = readToEnd(pair.input)
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), "reply")
        XCTAssertTrue(clean, "\(String(describing: pair.input.streamError))")
        XCTAssertEqual(pair.input.streamStatus, .atEnd)
    }

    /// A delegate-driven pair on a run loop: after the half-close the input still gets
    /// `hasBytesAvailable` with the reply, then `endEncountered`; the output gets no error until it writes.
    func testScheduledPairReadsTheReplyAfterHalfClose() throws {
        let listener = try RawSocket.listener(family: .v4)
        defer { close(listener) }
        let pair = makePair(port: RawSocket.boundPort(listener))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "ping"))
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.snapshot.bytesWritten == 4 }, recorder.trace)
        let server = try XCTUnwrap(try RawSocket.accept(listener, timeout: shortTimeout))
        defer { close(server) }
        XCTAssertEqual(try RawSocket.readExactly(server, count: 4, timeout: shortTimeout), Data("ping".utf8))
        XCTAssertTrue(pair.output.setProperty(true, forKey: .shutdownOutputKey))
        XCTAssertEqual(try RawSocket.readSome(server, timeout: shortTimeout), Data())
        try RawSocket.writeAll(server, Data("pong".utf8))
        close(server)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.receivedString, "pong")
        XCTAssertFalse(recorder.has(.errorOccurred, on: .input), recorder.trace)
        XCTAssertFalse(recorder.has(.errorOccurred, on: .output), recorder.trace)
    }

    /// Our own TLS server requiring close_notify (a bare FIN would be an error to it): it reads a
    /// request to a clean end, records it, then answers "answer to <request>" through the same session.
    /// Returns its port, what it saw, and client settings that trust it and require close_notify too.
    private func startAnsweringTLSServer() throws -> (port: Int, seen: Guarded<(request: String, clean: Bool)?>, client: TLSSettings) {
        let pki = try self.pki
        var server = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        server.requiresCloseNotify = true
        let seen = Guarded<(request: String, clean: Bool)?>(nil)
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let host = ListenerHost(listener) { [self] accepted in
            _ = accepted.input.setProperty(server, forKey: .tlsSettingsKey)
            accepted.input.open()
            accepted.output.open()
            let (request, clean) = readToEnd(accepted.input)
            seen.withLock { $0 = (String(decoding: request, as: UTF8.self), clean) }
            writeAll(accepted.output, "answer to " + String(decoding: request, as: UTF8.self))
            accepted.output.close()
            accepted.input.close()
        }
        addCleanup { host.stop() }
        var client = TLSSettings()
        client.trustRoots = [.pemFile(pki.caCertificate)]
        client.requiresCloseNotify = true
        return (listener.port, seen, client)
    }

    /// Over TLS, against our own TLS server requiring close_notify (a bare FIN would be an error to it):
    /// it reads our request to a clean end, then answers through the same session.
    func testTLSHalfCloseSendsCloseNotifyAndTheServerStillAnswers() throws {
        let (port, seen, client) = try startAnsweringTLSServer()
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey))
        pair.input.open()
        pair.output.open()
        writeAll(pair.output, "the question")
        XCTAssertTrue(pair.output.setProperty(true, forKey: .shutdownOutputKey))
        assertWritesRefused(pair)
        let (reply, clean) = readToEnd(pair.input)
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), "answer to the question")
        XCTAssertTrue(clean, "the server's close_notify ends our input: \(String(describing: pair.input.streamError))")
        let request = try XCTUnwrap(seen.withLock { $0 })
        XCTAssertEqual(request.request, "the question")
        XCTAssertTrue(request.clean, "the server saw close_notify, not a bare FIN")
    }

    /// `AsyncConnection.shutdownOutput()` over TLS: the writes before it arrive, then close_notify and
    /// the FIN; the server (which requires close_notify) answers, and the client reads the answer to
    /// the end. A write after it throws EPIPE.
    func testAsyncConnectionHalfCloseOverTLS() async throws {
        let (port, seen, client) = try startAnsweringTLSServer()
        let pair = createStreamPair(host: "localhost", port: port)
        XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey))
        let connection = AsyncConnection(input: pair.input, output: pair.output)
        try await connection.open()
        try await connection.write(Array("the ".utf8))
        try await connection.write(Array("question".utf8))
        try await connection.shutdownOutput()
        do {
            try await connection.write([1])
            XCTFail("a write after the half-close succeeded")
        } catch {
            XCTAssertEqual((error as NSError).domain, NSPOSIXErrorDomain)
            XCTAssertEqual((error as NSError).code, Int(EPIPE))
        }
        var reply: [UInt8] = []
        while let chunk = try await connection.read() { reply += chunk }
        XCTAssertEqual(String(decoding: reply, as: UTF8.self), "answer to the question")
        let request = try XCTUnwrap(seen.withLock { $0 })
        XCTAssertEqual(request.request, "the question")
        XCTAssertTrue(request.clean, "the server saw close_notify, not a bare FIN")
        connection.close()
    }

    /// `QueuedSocket.shutdownOutputAfterWriting()`: the peer reads the queued writes to their end
    /// (the FIN), then answers; the queued read gets the answer; a later write is ignored.
    func testQueuedSocketHalfCloseAfterWriting() throws {
        let received = Guarded<Data?>(nil)
        let server = try startRawServer { connection in
            guard let (data, eof) = try? connection.readToEOF(timeout: 10), eof else { return }
            received.withLock { $0 = data }
            try? connection.write("answer\n")
        }
        let recorder = QueuedRecorder()
        let socket = QueuedSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "half-close"))
        try socket.connect(toHost: "127.0.0.1", onPort: server.port)
        socket.write(Array("one\n".utf8), tag: 1)
        socket.write(Array("two\n".utf8), tag: 2)
        socket.shutdownOutputAfterWriting()
        socket.write(Array("three\n".utf8), tag: 3)
        socket.read(toData: Array("\n".utf8), tag: 4)
        XCTAssertTrue(recorder.waitFor("read 4 answer\n"), "\(recorder.log)")
        XCTAssertEqual(recorder.log, ["connect", "wrote 1", "wrote 2", "read 4 answer\n"])
        XCTAssertEqual(received.withLock { $0 }.map { String(decoding: $0, as: UTF8.self) }, "one\ntwo\n")
        socket.disconnect()
    }
}
