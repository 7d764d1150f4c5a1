import Foundation
import SocketStreamsTestSupport
import SocketStreams
import XCTest

/// Clients written the way Apple's Stream Programming Guide writes them: delegate on both
/// streams, scheduled on the current run loop, one read or write per event.
final class DelegateClientTests: SocketStreamsTestCase {

    /// The guide's HTTP example: on the first hasSpaceAvailable write the whole request in one
    /// write and close the output stream at once; read the reply 1024 bytes per hasBytesAvailable
    /// until endEncountered. Against python http.server (HTTP/1.0: it closes after the reply).
    func testAppleGuideHTTPGetReadsTheWholeBody() throws {
        let body = testPayload(100_000)
        let port = try startHTTPServer(.v4, files: ["file.bin": body])
        let pair = makePair(host: "127.0.0.1", port: port)

        let recorder = DelegateRecorder(sending: "GET /file.bin HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        recorder.writeChunk = 4096  // the whole request in one write, as the guide does
        recorder.closesOutputAfterWriting = true
        recorder.readChunk = 1024
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: 10) { recorder.has(.endEncountered, on: .input) },
            "no endEncountered; trace: \(recorder.trace)")

        let snapshot = recorder.snapshot
        let response = try XCTUnwrap(HTTPReply(snapshot.received), "unparseable reply: \(snapshot.receivedString.prefix(200))")
        XCTAssertEqual(response.statusLine, "HTTP/1.0 200 OK")
        XCTAssertEqual(response.headers["content-length"], String(body.count))
        XCTAssertEqual(response.body.count, body.count)
        XCTAssertTrue(response.body == body, "body bytes differ")

        // The request went out in one write, then the output stream was closed by the client.
        XCTAssertEqual(
            snapshot.entries.filter {
                if case .wrote = $0 { return true }
                return false
            },
            [.wrote(recorder.snapshot.bytesWritten)])
        XCTAssertTrue(snapshot.entries.contains(.closed(.output)))
        // One read per event: the reply needed ~100 reads, so hasBytesAvailable was re-posted
        // while data remained, and every event was answered by exactly one read.
        let reads = snapshot.entries.filter {
            if case .read = $0 { return true }
            return false
        }.count
        XCTAssertEqual(reads, snapshot.count(.hasBytesAvailable, on: .input))
        XCTAssertGreaterThanOrEqual(reads, body.count / 1024)
        XCTAssertTrue(snapshot.errors.isEmpty, "unexpected errors: \(snapshot.errors)")
        XCTAssertEqual(pair.input.streamStatus, .closed)
        XCTAssertEqual(pair.output.streamStatus, .closed)
    }

    /// The same GET over the name "localhost" (which resolves to 127.0.0.1 only on this machine).
    func testHTTPGetViaLocalhost() throws {
        let body = Data("hello from localhost\n".utf8)
        let port = try startHTTPServer(.v4, files: ["index.txt": body])
        let pair = makePair(host: "localhost", port: port)
        let recorder = DelegateRecorder(sending: "GET /index.txt HTTP/1.0\r\n\r\n")
        recorder.writeChunk = 4096
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: 10) { recorder.has(.endEncountered, on: .input) },
            "trace: \(recorder.trace)")
        let reply = try XCTUnwrap(HTTPReply(recorder.received))
        XCTAssertEqual(reply.statusLine, "HTTP/1.0 200 OK")
        XCTAssertEqual(reply.body, body)
    }

    /// A 404 is just bytes to a socket stream: the client still reads to endEncountered.
    func testHTTPGetOfMissingFileStillEndsNormally() throws {
        let port = try startHTTPServer(.v4, files: [:])
        let pair = makePair(port: port)
        let recorder = DelegateRecorder(sending: "GET /missing HTTP/1.0\r\n\r\n")
        recorder.writeChunk = 4096
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(
            runUntil(timeout: 10) { recorder.has(.endEncountered, on: .input) },
            "trace: \(recorder.trace)")
        XCTAssertEqual(try XCTUnwrap(HTTPReply(recorder.received)).statusLine.prefix(12), "HTTP/1.0 404")
    }

    /// Writing 1 MiB through hasSpaceAvailable events (one write per event, short writes
    /// honoured) to socat echo while reading the echo back: flow control in both directions.
    func testLargeUploadIsEchoedBackIntact() throws {
        let port = try startSocatEcho(.v4)
        let pair = makePair(port: port)
        let payload = testPayload(1 << 20, seed: 7)
        let recorder = DelegateRecorder(outgoing: payload)
        recorder.writeChunk = 32 * 1024
        recorder.readChunk = 16 * 1024
        _ = startRecorder(pair, recorder: recorder)

        XCTAssertTrue(
            runUntil(timeout: 20) { recorder.received.count >= payload.count },
            "received \(recorder.received.count) of \(payload.count)")
        let snapshot = recorder.snapshot
        XCTAssertEqual(snapshot.bytesWritten, payload.count)
        XCTAssertTrue(snapshot.received == payload, "echoed bytes differ")
        XCTAssertFalse(snapshot.entries.contains(.wrote(-1)))
        XCTAssertFalse(snapshot.entries.contains(.read(-1)))
        XCTAssertTrue(snapshot.errors.isEmpty, "unexpected errors: \(snapshot.errors)")
        pair.input.close()
        pair.output.close()
    }
}

/// A minimal HTTP/1.x reply splitter for checking what the streams delivered.
struct HTTPReply {
    let statusLine: String
    let headers: [String: String]  // lower-cased names
    let body: Data

    init?(_ data: Data) {
        let separator = Data("\r\n\r\n".utf8)
        guard let range = data.range(of: separator) else { return nil }
        let head = String(decoding: data[data.startIndex..<range.lowerBound], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        guard !lines.isEmpty else { return nil }
        statusLine = lines.removeFirst()
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        self.headers = headers
        body = Data(data[range.upperBound...])
    }
}
