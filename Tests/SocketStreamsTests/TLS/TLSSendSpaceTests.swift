#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// TLS without a poll per write or per read: the send-space bound (SendSpace.swift) charged with the
/// ciphertext TLS hands the socket, `hasSpaceAvailable` answered from it, and reads that stop after a
/// short record. A write right after `hasSpaceAvailable` never finds the socket full, nothing is
/// lost, and records left on the socket after a read are still reported.
final class TLSSendSpaceTests: SocketStreamsTestCase {
    func testChargesComeOffTheBoundAndLeaveMarksAlone() throws {
        var bound = SendSpace.exhausted
        XCTAssertFalse(bound.take(charge: 0), "nothing sent: an exhausted bound stays exhausted")
        var marked = SendSpace.pollOnly
        XCTAssertFalse(marked.take(charge: 0))
        XCTAssertEqual(marked, .pollOnly)
        let (client, server) = try RawSocket.connectedTCPPair()
        defer {
            close(client)
            close(server)
        }
        var space = try XCTUnwrap(SendSpace.measure(client)).space
        let before = space.kib
        XCTAssertTrue(space.take(charge: 0))
        XCTAssertEqual(space.kib, before, "a charge of 0 leaves the bound as it is")
        // Two 64-byte records' charges, as a TLS layer adds them: 2 × 4,288 = 8,576 bytes, 9 KiB.
        XCTAssertTrue(space.take(charge: 2 * SendSpace.charge(64)))
        XCTAssertEqual(Int(space.kib), Int(before) - 9)
        XCTAssertFalse(space.take(charge: Int(before) << 10), "a charge past the bound exhausts it")
        XCTAssertEqual(space, .exhausted)
    }

    /// A delegate writes on every `hasSpaceAvailable` (sizes from 1 byte to a full record) over TLS
    /// on an adopted TCP socket with a 4 KiB send buffer (8 KiB as the kernel doubles it: a full
    /// record leaves a tail), to our TLS server reading 1,000 bytes at a time: over a thousand writes
    /// land right after the event, none finds the socket full (`SendSpace.sendsRefused` counts every
    /// write that would have blocked, one behind a record's tail the socket has not taken included),
    /// none blocks, every byte arrives, and the re-signals came from the bound (the output half holds
    /// one; before, TLS polled and left it unchecked). (A 4 KiB receive buffer on the reader as well
    /// makes loopback TCP crawl through zero-window probes, ~55 KB/s, so the reader keeps its own.)
    func testWritesAfterHasSpaceAvailableNeverFindTheSocketFullOverTLS() throws {
        let (client, server) = try RawSocket.connectedTCPPair()
        try setOption(client, SO_SNDBUF, 4096)
        let total = 4 << 20
        let received = Locked(0)
        let foreign = Locked(0)
        let finished = Signal()
        let pki = try self.pki
        let serverSettings = TLSSettings.server(
            identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        let reader = Thread {
            let serverPair = Self.openServerPair(on: server, serverSettings)
            var buffer = [UInt8](repeating: 0, count: 1000)
            while received.value < total {
                let count = buffer.withUnsafeMutableBufferPointer { serverPair.input.read($0.baseAddress!, maxLength: $0.count) }
                guard count > 0 else { break }
                received.value += count
                foreign.value += buffer.prefix(count).filter { $0 != 0x44 }.count
            }
            serverPair.input.close()
            serverPair.output.close()
            finished.raise()
        }
        reader.start()

        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        settings.peerName = .name("localhost")
        let pair = createStreamPair(nativeSocket: client)
        closeAfterTest(pair)
        XCTAssertTrue(pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket))
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let refusedBefore = SendSpace.sendsRefused.load(ordering: .relaxed)
        let writer = ChunkWriter(sizes: [1, 64, 1000, 1448, 4096, 16 * 1024, 7, 300], total: total)
        pair.output.delegate = writer
        pair.output.schedule(in: .current, forMode: .default)
        pair.output.open()
        XCTAssertTrue(runUntil(timeout: 60) { writer.bytes >= total || writer.failure != nil }, "wrote \(writer.bytes) of \(total)")
        XCTAssertTrue(finished.wait(timeout: 30))
        XCTAssertNil(writer.failure)
        XCTAssertEqual(received.value, writer.bytes)
        XCTAssertEqual(foreign.value, 0, "bytes that were not written arrived")
        XCTAssertGreaterThan(writer.writes, 1000)
        XCTAssertEqual(
            SendSpace.sendsRefused.load(ordering: .relaxed) - refusedBefore, 0,
            "a write right after hasSpaceAvailable found the socket full (of \(writer.writes))")
        XCTAssertLessThan(writer.slowestWrite, 1, "a write in a hasSpaceAvailable callout blocked")
        let connection = pair.output.connection
        let space = connection.lock.withLock { connection.halves[.output].sendSpace }
        XCTAssertTrue(space.isBound, "TLS did not use the send-space bound: \(space)")
        print("\(writer.writes) TLS writes after hasSpaceAvailable, \(writer.bytes) bytes")
    }

    /// Space after the handshake comes from one measurement of the send-space bound, not from an
    /// EPOLLOUT registration and a wake-up round: at the first `hasSpaceAvailable`, before anything was
    /// written, the output half already holds a bound (before, it was still unchecked: TLS pairs took
    /// space from epoll and measured only after their first write), whether the output was open during
    /// the handshake or opened once the pair was live; and a write in that callout is taken whole.
    func testSpaceAfterTheHandshakeComesFromAMeasurement() throws {
        let pki = try self.pki
        let serverSettings = TLSSettings.server(
            identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        settings.peerName = .name("localhost")
        for outputOpensLate in [false, true] {
            let (client, server) = try RawSocket.connectedTCPPair()
            let received = Locked(Data())
            let finished = Signal()
            let reader = Thread {
                let serverPair = Self.openServerPair(on: server, serverSettings)
                var buffer = [UInt8](repeating: 0, count: 64)
                while true {
                    let count = serverPair.input.read(&buffer, maxLength: buffer.count)
                    guard count > 0 else { break }
                    received.value.append(contentsOf: buffer.prefix(count))
                }
                serverPair.input.close()
                serverPair.output.close()
                finished.raise()
            }
            reader.start()

            let pair = createStreamPair(nativeSocket: client)
            closeAfterTest(pair)
            XCTAssertTrue(pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket))
            XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
            let probe = FirstSpaceProbe(message: Array("space \(outputOpensLate)".utf8))
            pair.output.delegate = probe
            pair.input.schedule(in: .current, forMode: .default)
            pair.output.schedule(in: .current, forMode: .default)
            pair.input.open()
            let connection = pair.output.connection
            if outputOpensLate {
                XCTAssertTrue(
                    runUntil(timeout: 30) { connection.lock.withLock { !connection.isNegotiating } }, "the handshake did not end")
                XCTAssertEqual(pair.output.streamStatus, .notOpen)
            }
            pair.output.open()
            XCTAssertTrue(runUntil(timeout: 30) { probe.boundAtFirstSpace != nil }, "no hasSpaceAvailable (late: \(outputOpensLate))")
            let bound = try XCTUnwrap(probe.boundAtFirstSpace)
            XCTAssertTrue(bound.isBound, "late: \(outputOpensLate): space came without a measurement (\(bound))")
            XCTAssertGreaterThan(bound.kib, 0)
            XCTAssertEqual(probe.written, probe.message.count, "the callout's write was not taken whole")
            pair.input.close()
            pair.output.close()
            XCTAssertTrue(finished.wait(timeout: 30))
            XCTAssertEqual(received.value, Data(probe.message))
        }
    }

    /// Our TLS server's pair on `server` (closing it when closed), opened: its reads and writes block.
    private static func openServerPair(
        on server: Int32, _ settings: TLSSettings
    ) -> (input: SocketInputStream, output: SocketOutputStream) {
        let pair = createStreamPair(nativeSocket: server)
        _ = pair.input.setProperty(true as NSNumber, forKey: CFKey.shouldCloseNativeSocket)
        _ = pair.input.setProperty(settings, forKey: .tlsSettingsKey)
        pair.input.open()
        pair.output.open()
        return pair
    }

    /// Our TLS server writes three short records at once and closes; a delegate reading with a
    /// 64 KiB buffer stops after each short record (no recv that finds nothing), and the records
    /// left on the socket are still reported: every byte arrives, then the end.
    func testRecordsLeftOnTheSocketAfterAShortRecordStillArrive() throws {
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let pki = try self.pki
        let identity = TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey)
        let host = ListenerHost(listener) { pair in
            XCTAssertTrue(pair.input.setProperty(TLSSettings.server(identity: identity), forKey: .tlsSettingsKey))
            pair.input.open()
            pair.output.open()
            for part in ["first ", "second ", "third"] {
                let bytes = Array(part.utf8)
                _ = pair.output.write(bytes, maxLength: bytes.count)  // one record each
            }
            pair.output.close()
            pair.input.close()
        }
        addCleanup { host.stop() }
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(pki.caCertificate)]
        let pair = makePair(host: "localhost", port: listener.port)
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder())
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) {
                recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input)
            }, recorder.trace)
        XCTAssertEqual(recorder.snapshot.receivedString, "first second third")
        XCTAssertTrue(recorder.has(.endEncountered, on: .input), recorder.trace)
    }

    private func setOption(_ fd: Int32, _ name: Int32, _ value: Int32) throws {
        var value = value
        guard setsockopt(fd, SOL_SOCKET, name, &value, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno))
        }
    }
}

/// Records the output half's send-space bound at its first `hasSpaceAvailable`, then writes its message once.
private final class FirstSpaceProbe: NSObject, StreamDelegate {
    let message: [UInt8]
    private(set) var boundAtFirstSpace: SendSpace?
    private(set) var written = 0

    init(message: [UInt8]) { self.message = message }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        guard event == .hasSpaceAvailable, boundAtFirstSpace == nil, let output = stream as? SocketOutputStream else { return }
        let connection = output.connection
        boundAtFirstSpace = connection.lock.withLock { connection.halves[.output].sendSpace }
        written = message.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
    }
}
