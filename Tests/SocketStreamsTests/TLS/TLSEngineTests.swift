#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// One direction of an in-memory connection: bytes written by one end, read by the other.
final class MemoryPipe: @unchecked Sendable {
    var bytes: [UInt8] = []
    /// How many bytes it holds before writes would block.
    var capacity = Int.max
    /// The writer ended (a FIN).
    var ended = false
}

/// A transport over two memory pipes, handing out at most `chunk` bytes per read and accepting at
/// most `chunk` per write: the TLS engine's state machine without sockets, split wherever asked.
final class MemoryTransport: Transport, @unchecked Sendable {
    let incoming: MemoryPipe
    let outgoing: MemoryPipe
    var chunk: Int
    var closed = false

    init(incoming: MemoryPipe, outgoing: MemoryPipe, chunk: Int = .max) {
        self.incoming = incoming
        self.outgoing = outgoing
        self.chunk = chunk
    }

    /// Two connected ends.
    static func pair(chunk: Int = .max) -> (MemoryTransport, MemoryTransport) {
        let toServer = MemoryPipe()
        let toClient = MemoryPipe()
        return (
            MemoryTransport(incoming: toClient, outgoing: toServer, chunk: chunk),
            MemoryTransport(incoming: toServer, outgoing: toClient, chunk: chunk)
        )
    }

    var fd: Int32 { -1 }

    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO {
        if incoming.bytes.isEmpty { return incoming.ended ? .end : .wouldBlock }
        let n = min(count, chunk, incoming.bytes.count)
        incoming.bytes.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: n) }
        incoming.bytes.removeFirst(n)
        return .processed(n)
    }

    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO {
        if outgoing.ended { return .failed(.posix(EPIPE, .write)) }
        let room = outgoing.capacity - outgoing.bytes.count
        guard room > 0 else { return .wouldBlock }
        let n = min(count, chunk, room)
        outgoing.bytes += UnsafeRawBufferPointer(start: buffer, count: n)
        return .processed(n)
    }

    var hasBufferedInput: Bool { false }

    /// The write side ends (as `shutdown(SHUT_WR)`): the peer reads an end, this side reads on.
    func shutdownOutput() -> TransportIO {
        outgoing.ended = true
        return .processed(0)
    }

    func close() {
        closed = true
        outgoing.ended = true
    }
}

/// The TLS engine (stage and transport) driven in memory, client against server, for the state
/// machine's edge cases: every byte boundary, tiny buffers, partial writes, ends with and without
/// close_notify, corruption, and what readiness means when only a session ticket arrives.
final class TLSEngineTests: XCTestCase {
    private var pki: TestPKI { get throws { try TestPKI.shared.get() } }

    private func settings() throws -> (client: TLSSettings, server: TLSSettings) {
        let pki = try self.pki
        var client = TLSSettings()
        client.trustRoots = [.pemFile(pki.caCertificate)]
        let server = TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        return (client, server)
    }

    /// Drives both handshakes until both are done; fails on a stage failure or no progress.
    private func handshake(
        _ client: TLSSettings, _ server: TLSSettings, chunk: Int = .max,
        file: StaticString = #filePath, line: UInt = #line
    ) throws -> (TLSTransport, TLSTransport, MemoryTransport, MemoryTransport) {
        let (clientWire, serverWire) = MemoryTransport.pair(chunk: chunk)
        let clientStage = TLSHandshake(settings: client, target: .host("localhost", port: 443))
        let serverStage = TLSHandshake(settings: server, target: .native(fd: -1))
        var clientDone: TLSTransport?
        var serverDone: TLSTransport?
        for _ in 0..<100_000 where clientDone == nil || serverDone == nil {
            if clientDone == nil {
                switch clientStage.advance(over: clientWire) {
                case .done(let transport): clientDone = transport as? TLSTransport
                case .failed(let failure): throw StageFailed(side: "client", failure: failure)
                case .wait: break
                }
            }
            if serverDone == nil {
                switch serverStage.advance(over: serverWire) {
                case .done(let transport): serverDone = transport as? TLSTransport
                case .failed(let failure): throw StageFailed(side: "server", failure: failure)
                case .wait: break
                }
            }
        }
        let client = try XCTUnwrap(clientDone, "client handshake never finished", file: file, line: line)
        let server = try XCTUnwrap(serverDone, "server handshake never finished", file: file, line: line)
        return (client, server, clientWire, serverWire)
    }

    struct StageFailed: Error {
        let side: String
        let failure: StreamFailure
        var status: Int? {
            if case .protocolError(let detail) = failure.reason { return detail.code }
            return nil
        }
    }

    /// Sends `data` from `writer` to `reader`, both pumped until everything arrived.
    private func transfer(_ data: [UInt8], from writer: TLSTransport, to reader: TLSTransport) throws -> [UInt8] {
        var sent = 0
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<1_000_000 where received.count < data.count {
            if sent < data.count {
                switch data.withUnsafeBytes({ writer.write($0.baseAddress! + sent, data.count - sent) }) {
                case .processed(let count): sent += count
                case .wouldBlock: break
                case .end, .failed:
                    XCTFail("write failed")
                    return received
                }
            } else if writer.hasPendingOutput {
                _ = writer.flush()  // what the connection does when the socket becomes writable
            }
            switch reader.read(&buffer, buffer.count) {
            case .processed(let count): received += buffer[..<count]
            case .wouldBlock: break
            case .end:
                XCTFail("unexpected end")
                return received
            case .failed(let failure):
                XCTFail("read failed: \(failure)")
                return received
            }
        }
        return received
    }

    func testHandshakeWithOneByteAtATime() throws {
        let (client, server) = try settings()
        let (clientTLS, serverTLS, _, _) = try handshake(client, server, chunk: 1)
        XCTAssertEqual(clientTLS.info?.protocolVersion, "TLSv1.3")
        XCTAssertEqual(try transfer(Array("ping".utf8), from: clientTLS, to: serverTLS), Array("ping".utf8))
    }

    /// Every split of the handshake's byte stream (up to 600 bytes in): each chunk size from 1 to
    /// 600 completes the handshake and carries data.
    func testHandshakeSplitAtEveryChunkSize() throws {
        let (client, server) = try settings()
        for chunk in stride(from: 1, through: 600, by: 37) {
            let (clientTLS, serverTLS, _, _) = try handshake(client, server, chunk: chunk)
            XCTAssertEqual(try transfer(Array("chunk \(chunk)".utf8), from: serverTLS, to: clientTLS), Array("chunk \(chunk)".utf8))
        }
    }

    /// Partial writes with a 1,000-byte pipe: a megabyte goes through in both directions intact.
    func testBulkWithPartialWritesBothWays() throws {
        let (client, server) = try settings()
        let (clientTLS, serverTLS, clientWire, serverWire) = try handshake(client, server)
        clientWire.outgoing.capacity = 1_000
        serverWire.outgoing.capacity = 1_000
        let payload = (0..<1_048_576).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        XCTAssertTrue(try transfer(payload, from: clientTLS, to: serverTLS) == payload)
        XCTAssertTrue(try transfer(payload, from: serverTLS, to: clientTLS) == payload)
    }

    /// close_notify is end of stream; a bare end without it is end of stream by default, and
    /// errSSLClosedNoNotify with `requiresCloseNotify`.
    func testEndsWithAndWithoutCloseNotify() throws {
        var (client, server) = try settings()
        var buffer = [UInt8](repeating: 0, count: 64)

        let (clientTLS, serverTLS, _, _) = try handshake(client, server)
        serverTLS.close()  // close_notify, then the FIN
        XCTAssertTrue(drain(clientTLS, &buffer).isEnd)

        let (lenient, _, _, serverWire) = try handshake(client, server)
        serverWire.outgoing.ended = true  // the FIN alone
        XCTAssertTrue(drain(lenient, &buffer).isEnd)

        client.requiresCloseNotify = true
        let (strict, _, _, strictServerWire) = try handshake(client, server)
        strictServerWire.outgoing.ended = true
        guard case .failed(let failure) = drain(strict, &buffer), case .protocolError(let detail) = failure.reason else {
            return XCTFail("a missing close_notify was not an error with requiresCloseNotify")
        }
        XCTAssertEqual(detail.code, -9816)
        _ = server
    }

    /// A flipped bit in a record is a failure (bad record MAC), never data.
    func testCorruptedRecordFails() throws {
        let (client, server) = try settings()
        let (clientTLS, serverTLS, _, serverWire) = try handshake(client, server)
        var buffer = [UInt8](repeating: 0, count: 64)
        _ = drain(clientTLS, &buffer)  // take the session tickets
        _ = Array("tamper".utf8).withUnsafeBytes { serverTLS.write($0.baseAddress!, $0.count) }
        serverWire.outgoing.bytes[serverWire.outgoing.bytes.count - 3] ^= 0x40
        guard case .failed(let failure) = drain(clientTLS, &buffer) else { return XCTFail("corruption went unnoticed") }
        XCTAssertEqual(failure.operation, .read)
    }

    /// After a TLS 1.3 handshake the server's session tickets arrive on their own: readiness then
    /// must not claim a read would return data (it would block a delegate's read).
    func testSessionTicketAloneIsNotReadable() throws {
        let (client, server) = try settings()
        let (clientTLS, serverTLS, clientWire, _) = try handshake(client, server)
        XCTAssertFalse(clientWire.incoming.bytes.isEmpty, "no session tickets were sent")
        XCTAssertEqual(clientTLS.ready(.readable), [], "a ticket-only record was reported readable")
        XCTAssertTrue(clientWire.incoming.bytes.isEmpty, "the tickets were not processed")
        _ = Array("data".utf8).withUnsafeBytes { serverTLS.write($0.baseAddress!, $0.count) }
        XCTAssertEqual(clientTLS.ready(.readable), .readable)
        XCTAssertTrue(clientTLS.hasBufferedInput, "peeked plaintext is buffered")
    }

    /// A server requiring client certificates refuses a client without one.
    func testMissingClientCertificateFailsTheServerStage() throws {
        var (client, server) = try settings()
        server.clientCertificates = .require
        server.trustRoots = [.pemFile(try pki.caCertificate)]
        XCTAssertThrowsError(try handshake(client, server)) { error in
            let failed = error as? StageFailed
            XCTAssertEqual(failed?.side, "server")
            XCTAssertEqual(failed?.status, -9863, "\(String(describing: failed?.failure))")
        }
        client.identity = TLSIdentity(certificateChainFile: try pki.clientCertificate, privateKeyFile: try pki.clientKey)
        XCTAssertNoThrow(try handshake(client, server))
    }

    /// Bad settings fail the stage with errSSLBadConfiguration and OpenSSL's reason, not a crash.
    func testUnusableIdentityIsAConfigurationError() throws {
        var (client, server) = try settings()
        server.identity = TLSIdentity(certificateChainPEM: Data("not a certificate".utf8), privateKeyPEM: Data())
        XCTAssertThrowsError(try handshake(client, server)) { error in
            XCTAssertEqual((error as? StageFailed)?.status, -9848)
        }
        server.identity = TLSIdentity(pkcs12: try pki.data("server.p12"), password: "wrong")
        XCTAssertThrowsError(try handshake(client, server)) { error in
            XCTAssertEqual((error as? StageFailed)?.status, -9848)
        }
        client.minimumVersion = .v1_3
        client.maximumVersion = .v1_2
        XCTAssertThrowsError(try handshake(client, try settings().server))
    }

    /// Reads until something other than data: the end, a failure, or would-block (returned as is).
    private func drain(_ transport: TLSTransport, _ buffer: inout [UInt8]) -> TransportIO {
        while true {
            let result = transport.read(&buffer, buffer.count)
            if case .processed = result { continue }
            return result
        }
    }
}

extension TransportIO {
    var isEnd: Bool {
        if case .end = self { return true }
        return false
    }
}
