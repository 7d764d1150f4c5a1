// The fault matrix: every face (pairs polled, on a run loop, on a queue; AsyncConnection;
// QueuedSocket; GCDAsyncSocket; NWConnection) × every fault × plain, SOCKS5 and TLS, through
// FaultRelay to a real peer (socat echo, danted in front of it, the package's own StreamListener
// echoing over TLS), each cell one row of `plainCells` / `socksCells` / `tlsCells` with the outcome it
// must have, resolved for each face by its profile (how the face reports an end of stream, a reset,
// a dead peer, a truncation). Tests/Faults/README.md prints the matrix with counts.
//
// Every cell checks: the bytes the peer sent before the fault all delivered, byte for byte; then
// exactly one end, the right one, within the timeouts the test set (connect 1 s where the open
// stalls, 10 s elsewhere; read 1 s where the face has read timeouts) and never a hang; the
// process's sockets back to their count before the cell once closed (after a warm-up cell; the
// library's shared reactors, epoll and eventfd descriptors made when a queue or thread is first
// used, are not counted).
#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreams
import SocketStreamsTestSupport
import TestPeers
import XCTest

final class FaultMatrixTests: SocketStreamsTestCase {
    /// What a cell delivers before its end.
    enum Delivered: Sendable {
        /// The whole echo of the payload.
        case all
        /// Exactly this many bytes of it.
        case exactly(Int)
        /// A prefix of it, at least this long (TLS: the fault counts the bytes of records, not of
        /// plaintext; every whole record before the fault delivered).
        case atLeast(Int)
        /// A prefix of it (the fault races the echo).
        case prefix
    }

    /// The kind of end a cell has, which each face reports its own way (``Profile``).
    enum Outcome: String, Sendable {
        /// No end: everything delivered, then the test closes.
        case delivered
        /// The peer sent a FIN.
        case peerClosed
        /// The peer reset the connection.
        case reset
        /// The peer went silent with the connection open: the face's read timeout ends it, or it waits.
        case deadPeer
        /// TLS: a FIN at a record boundary without close_notify (an error where close_notify is
        /// required, the end of the stream where it is not: the face's documented default).
        case truncatedAtRecord
        /// TLS: a FIN inside a record: always an error (bytes were lost).
        case truncatedMidRecord
        /// The TLS handshake never completes: the open's timeout ends it, or it waits.
        case handshakeStalls
        /// The TLS handshake is cut by a FIN.
        case handshakeCut
        /// The proxy closes (FIN) before its replies are complete.
        case proxyHungUp
        /// The proxy resets before its replies are complete.
        case proxyReset
        /// The proxy never answers: the open's timeout ends it.
        case proxyStalls
    }

    struct Cell: Sendable {
        let fault: FaultRelay.Fault
        let delivered: Delivered
        let outcome: Outcome
        /// The read timeout the cell sets on the faces that offer one (else the test's 1 s).
        var readTimeout: TimeInterval? = nil
        /// How long the cell must take, from the open to the last byte (a bandwidth limit's bounds).
        var takes: ClosedRange<TimeInterval>? = nil
        /// The bytes echoed (a bandwidth cell over TLS sends more, so that the transfer is many records long).
        var payloadSize = FaultMatrixTests.payloadSize
    }

    /// A bandwidth-limited link: `payload` bytes each way at `rate` through a bucket of `burst` bytes
    /// take at least (payload - burst) / rate (the echo's pace, the relay's bucket full at the start)
    /// and finish well within 3 s more; a read timeout shorter than the transfer but longer than the gap
    /// between the bucket's writes (TLS: between whole records) must not fire.
    static func bandwidthCell(rate: Int, burst: Int, readTimeout: TimeInterval, payload: Int = payloadSize) -> Cell {
        let least = Double(payload - burst) / Double(rate)
        precondition(readTimeout < least, "the read timeout must be shorter than the transfer")
        return Cell(
            fault: .bandwidth(bytesPerSecond: rate, burst: burst), delivered: .all, outcome: .delivered, readTimeout: readTimeout,
            takes: least...(least + 3), payloadSize: payload)
    }

    static let payloadSize = 40_000

    static let plainCells: [Cell] = [
        Cell(fault: .none, delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 1), delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 7), delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 1500, delay: 0.002), delivered: .all, outcome: .delivered),
        Cell(fault: .stall(after: 5000, direction: .downstream, duration: 0.3), delivered: .all, outcome: .delivered),
        Cell(fault: .stall(after: 5000, direction: .upstream, duration: 0.3), delivered: .all, outcome: .delivered),
        Cell(fault: .close(after: 5000, direction: .downstream), delivered: .exactly(5000), outcome: .peerClosed),
        Cell(fault: .close(after: 5000, direction: .upstream), delivered: .prefix, outcome: .peerClosed),
        Cell(fault: .reset(after: 5000, direction: .downstream), delivered: .exactly(5000), outcome: .reset),
        Cell(fault: .acceptAndNeverAnswer, delivered: .exactly(0), outcome: .deadPeer),
        Cell(fault: .deadPeer(after: 5000), delivered: .exactly(5000), outcome: .deadPeer),
        Cell(fault: .stopReading, delivered: .exactly(0), outcome: .deadPeer),
        // 36 000 B beyond the burst at 100 000 B/s: ≥ 0.36 s; a write every 40 ms; read timeout 0.25 s.
        bandwidthCell(rate: 100_000, burst: 4000, readTimeout: 0.25),
    ]

    /// SOCKS5 through danted, the relay between the client and the proxy: the faults count the bytes
    /// of the SOCKS exchange (the method reply is 2 bytes, the connect reply 10), then the echo's.
    static let socksReplies = 12
    static let socksCells: [Cell] = [
        Cell(fault: .none, delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 1), delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 3), delivered: .all, outcome: .delivered),
        Cell(fault: .stall(after: 1, direction: .downstream, duration: 0.3), delivered: .all, outcome: .delivered),
        Cell(fault: .stall(after: 3, direction: .upstream, duration: 0.3), delivered: .all, outcome: .delivered),
        Cell(fault: .close(after: 1, direction: .downstream), delivered: .exactly(0), outcome: .proxyHungUp),
        Cell(fault: .close(after: 5, direction: .downstream), delivered: .exactly(0), outcome: .proxyHungUp),
        Cell(fault: .reset(after: 5, direction: .downstream), delivered: .exactly(0), outcome: .proxyReset),
        Cell(fault: .acceptAndNeverAnswer, delivered: .exactly(0), outcome: .proxyStalls),
        Cell(fault: .close(after: socksReplies + 5000, direction: .downstream), delivered: .exactly(5000), outcome: .peerClosed),
        Cell(fault: .reset(after: socksReplies + 5000, direction: .downstream), delivered: .exactly(5000), outcome: .reset),
        Cell(fault: .deadPeer(after: socksReplies + 5000), delivered: .exactly(5000), outcome: .deadPeer),
    ]

    /// HTTP CONNECT through tinyproxy, the relay between the client and the proxy: the faults count the
    /// bytes of the exchange (tinyproxy 1.11's reply head, "HTTP/1.0 200 Connection established",
    /// "Proxy-agent: tinyproxy/1.11.1" and the empty line, is 70 bytes; the request 78 with the port's
    /// five digits), then the echo's.
    static let connectReply = 70
    static let connectCells: [Cell] = [
        Cell(fault: .none, delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 1), delivered: .all, outcome: .delivered),
        Cell(fault: .segment(maxSegment: 3), delivered: .all, outcome: .delivered),
        Cell(fault: .stall(after: 1, direction: .downstream, duration: 0.3), delivered: .all, outcome: .delivered),
        Cell(fault: .stall(after: 3, direction: .upstream, duration: 0.3), delivered: .all, outcome: .delivered),
        Cell(fault: .close(after: 1, direction: .downstream), delivered: .exactly(0), outcome: .proxyHungUp),
        Cell(fault: .close(after: 40, direction: .downstream), delivered: .exactly(0), outcome: .proxyHungUp),
        Cell(fault: .close(after: connectReply - 1, direction: .downstream), delivered: .exactly(0), outcome: .proxyHungUp),
        Cell(fault: .reset(after: 40, direction: .downstream), delivered: .exactly(0), outcome: .proxyReset),
        Cell(fault: .acceptAndNeverAnswer, delivered: .exactly(0), outcome: .proxyStalls),
        Cell(fault: .close(after: connectReply + 5000, direction: .downstream), delivered: .exactly(5000), outcome: .peerClosed),
        Cell(fault: .reset(after: connectReply + 5000, direction: .downstream), delivered: .exactly(5000), outcome: .reset),
        Cell(fault: .deadPeer(after: connectReply + 5000), delivered: .exactly(5000), outcome: .deadPeer),
    ]

    /// TLS: the faults count the bytes of records (the handshake's, then the echo's, in records of up
    /// to 16 KiB): a fault at 25 000 bytes falls after the first whole record of the echo, which must
    /// have been delivered, in order, before the end. Through a proxy every offset moves by `prefix`,
    /// the proxy's replies, and a proxy that hangs up before its reply is complete is a cell of its own.
    static func tlsCells(prefix: Int = 0) -> [Cell] {
        let proxied: [Cell] =
            prefix == 0 ? [] : [Cell(fault: .close(after: 1, direction: .downstream), delivered: .exactly(0), outcome: .proxyHungUp)]
        return proxied + [
            Cell(fault: .none, delivered: .all, outcome: .delivered),
            Cell(fault: .segment(maxSegment: 1), delivered: .all, outcome: .delivered),
            Cell(fault: .segment(maxSegment: 7), delivered: .all, outcome: .delivered),
            Cell(fault: .segment(maxSegment: 1500, delay: 0.002), delivered: .all, outcome: .delivered),
            Cell(fault: .stall(after: prefix + 100, direction: .downstream, duration: 0.3), delivered: .all, outcome: .delivered),
            Cell(fault: .stall(after: 100, direction: .upstream, duration: 0.3), delivered: .all, outcome: .delivered),
            Cell(fault: .close(after: prefix + 100, direction: .downstream), delivered: .exactly(0), outcome: .handshakeCut),
            Cell(fault: .close(after: prefix + 25_000, direction: .downstream), delivered: .atLeast(16_384), outcome: .truncatedMidRecord),
            Cell(
                fault: .truncateTLS(afterRecordBytes: 25_000, plainPrefix: prefix), delivered: .atLeast(16_384),
                outcome: .truncatedAtRecord),
            Cell(fault: .reset(after: prefix + 25_000, direction: .downstream), delivered: .atLeast(16_384), outcome: .reset),
            Cell(fault: .acceptAndNeverAnswer, delivered: .exactly(0), outcome: .handshakeStalls),
            Cell(fault: .deadPeer(after: prefix + 25_000), delivered: .atLeast(16_384), outcome: .deadPeer),
        ]
            // Without a proxy, 160 000 B (ten 16 KiB records) at 128 000 B/s through an 8000-byte
            // bucket: ≥ 1.19 s; a whole record every 0.13 s, and the first read waits for a whole record
            // up through the limit and its echo down (about 0.2 s): read timeout 0.8 s, 0.6 s beyond
            // either wait. (With 40 000 B, two and a half records, the transfer is at most 2.4 records'
            // time and the first read's wait two of them, so no timeout left room for a loaded machine.)
            + (prefix == 0 ? [bandwidthCell(rate: 128_000, burst: 8000, readTimeout: 0.8, payload: 160_000)] : [])
    }

    /// How a face reports each kind of end.
    struct Profile: Sendable {
        let name: String
        let make: @Sendable (FaceSettings) -> FaceDriver
        let endOfStream: End
        /// A reset: ECONNRESET, or EPIPE when a write met it first (the face reports the first error).
        let reset: [End]
        /// nil: the face has no read timeout and waits (as on Apple platforms); close ends it.
        let deadPeer: End?
        /// How it reports TLS ending without close_notify, as an error.
        let closedNoNotify: End
        /// nil: the face has no timeout for the handshake and waits; close ends it.
        let handshakeStalls: End?
        let handshakeCut: End
        /// Whether the face lets the user require close_notify (TLSSettings.requiresCloseNotify).
        let offersRequiresCloseNotify: Bool
        /// Whether the warm-up also runs a stalled open (NWConnection's first `.waiting` starts the
        /// process's network-change observer, whose descriptors then stay).
        var warmsUpAStall = false
    }

    static let posixReset = [
        End.error(domain: NSPOSIXErrorDomain, code: Int(ECONNRESET)), .error(domain: NSPOSIXErrorDomain, code: Int(EPIPE)),
    ]
    static let posixTimedOut = End.error(domain: NSPOSIXErrorDomain, code: Int(ETIMEDOUT))
    static let closedNoNotify = End.error(domain: NSOSStatusErrorDomain, code: -9816)
    static let closedAbort = End.error(domain: NSOSStatusErrorDomain, code: -9806)
    /// A proxy that hangs up before its replies are complete: ENOTCONN, as CFNetwork reports it.
    static let proxyHungUp = End.error(domain: NSPOSIXErrorDomain, code: Int(ENOTCONN))
    static let gcdClosed = End.error(domain: "GCDAsyncSocketErrorDomain", code: 7)

    static let pollingPair = Profile(
        name: "polling pair", make: { PollingPairDriver($0) }, endOfStream: .endOfStream, reset: posixReset, deadPeer: nil,
        closedNoNotify: closedNoNotify, handshakeStalls: posixTimedOut, handshakeCut: closedAbort, offersRequiresCloseNotify: true)
    static let runLoopPair = Profile(
        name: "run-loop pair", make: { DelegatePairDriver($0, owner: .runLoop(DelegatePairDriver.sharedThread)) },
        endOfStream: .endOfStream, reset: posixReset, deadPeer: nil, closedNoNotify: closedNoNotify,
        handshakeStalls: posixTimedOut, handshakeCut: closedAbort, offersRequiresCloseNotify: true)
    static let queuePair = Profile(
        name: "queue pair", make: { DelegatePairDriver($0, owner: .queue(DelegatePairDriver.sharedQueue)) },
        endOfStream: .endOfStream, reset: posixReset, deadPeer: nil, closedNoNotify: closedNoNotify,
        handshakeStalls: posixTimedOut, handshakeCut: closedAbort, offersRequiresCloseNotify: true)
    static let asyncConnection = Profile(
        name: "AsyncConnection", make: { AsyncConnectionDriver($0) }, endOfStream: .endOfStream, reset: posixReset,
        deadPeer: nil, closedNoNotify: closedNoNotify, handshakeStalls: posixTimedOut, handshakeCut: closedAbort,
        offersRequiresCloseNotify: true)
    static let queuedSocket = Profile(
        name: "QueuedSocket", make: { QueuedSocketDriver($0) },
        endOfStream: .error(domain: StreamOperationError.errorDomain, code: StreamOperationError.Code.closedByPeer.rawValue),
        reset: posixReset,
        deadPeer: .error(domain: StreamOperationError.errorDomain, code: StreamOperationError.Code.readTimedOut.rawValue),
        closedNoNotify: closedNoNotify, handshakeStalls: posixTimedOut, handshakeCut: closedAbort, offersRequiresCloseNotify: true)
    /// GCDAsyncSocket reports the peer's end as GCDAsyncSocketClosedError (7), a read timeout as
    /// GCDAsyncSocketReadTimeoutError (4), TLS failures in its `sslError:` domain, and has no handshake timeout.
    static let gcdAsyncSocket = Profile(
        name: "GCDAsyncSocket", make: { GCDAsyncSocketDriver($0) }, endOfStream: gcdClosed, reset: posixReset,
        deadPeer: .error(domain: "GCDAsyncSocketErrorDomain", code: 4),
        closedNoNotify: .error(domain: "kCFStreamErrorDomainSSL", code: -9816), handshakeStalls: nil,
        handshakeCut: .error(domain: "kCFStreamErrorDomainSSL", code: -9806), offersRequiresCloseNotify: false)
    /// NWConnection: the peer's end is `isComplete`; errors are NWErrors; connectionTimeout covers the
    /// TLS handshake; no read timeout (connectionDropTime is TCP_USER_TIMEOUT, which a live kernel's
    /// acknowledgements keep from firing).
    static let nwConnection = Profile(
        name: "NWConnection", make: { NWConnectionDriver($0) }, endOfStream: .endOfStream,
        reset: [.error(domain: "NWError.posix", code: Int(ECONNRESET)), .error(domain: "NWError.posix", code: Int(EPIPE))], deadPeer: nil,
        closedNoNotify: .error(domain: "NWError.tls", code: -9816), handshakeStalls: .error(domain: "NWError.posix", code: Int(ETIMEDOUT)),
        handshakeCut: .error(domain: "NWError.tls", code: -9806), offersRequiresCloseNotify: false, warmsUpAStall: true)

    // MARK: the cells

    func testPollingPairPlain() throws { try run(Self.pollingPair, .plain) }
    func testPollingPairSOCKS5() throws { try run(Self.pollingPair, .plain, through: .socks5) }
    func testAsyncConnectionSOCKS5() throws { try run(Self.asyncConnection, .plain, through: .socks5) }
    func testQueuedSocketSOCKS5() throws { try run(Self.queuedSocket, .plain, through: .socks5) }
    func testPollingPairTLS() throws { try run(Self.pollingPair, .tls) }
    func testPollingPairTLSDefault() throws { try run(Self.pollingPair, .tls, requiresCloseNotify: false) }
    func testRunLoopPairPlain() throws { try run(Self.runLoopPair, .plain) }
    func testRunLoopPairSOCKS5() throws { try run(Self.runLoopPair, .plain, through: .socks5) }
    func testRunLoopPairTLS() throws { try run(Self.runLoopPair, .tls) }
    func testRunLoopPairTLSDefault() throws { try run(Self.runLoopPair, .tls, requiresCloseNotify: false) }
    func testQueuePairPlain() throws { try run(Self.queuePair, .plain) }
    func testQueuePairSOCKS5() throws { try run(Self.queuePair, .plain, through: .socks5) }
    func testQueuePairTLS() throws { try run(Self.queuePair, .tls) }
    func testQueuePairTLSDefault() throws { try run(Self.queuePair, .tls, requiresCloseNotify: false) }
    func testAsyncConnectionPlain() throws { try run(Self.asyncConnection, .plain) }
    func testAsyncConnectionTLS() throws { try run(Self.asyncConnection, .tls) }
    func testAsyncConnectionTLSDefault() throws { try run(Self.asyncConnection, .tls, requiresCloseNotify: false) }
    func testQueuedSocketPlain() throws { try run(Self.queuedSocket, .plain) }
    func testQueuedSocketTLS() throws { try run(Self.queuedSocket, .tls) }
    func testQueuedSocketTLSDefault() throws { try run(Self.queuedSocket, .tls, requiresCloseNotify: false) }
    func testGCDAsyncSocketPlain() throws { try run(Self.gcdAsyncSocket, .plain) }
    func testGCDAsyncSocketTLS() throws { try run(Self.gcdAsyncSocket, .tls, requiresCloseNotify: false) }
    func testNWConnectionPlain() throws { try run(Self.nwConnection, .plain) }
    func testNWConnectionTLS() throws { try run(Self.nwConnection, .tls, requiresCloseNotify: false) }

    // HTTP CONNECT, and TLS through either proxy: the faces that offer proxies (GCDAsyncSocket and
    // NWConnection have no proxy option), TLS requiring close_notify.
    func testPollingPairCONNECT() throws { try run(Self.pollingPair, .plain, through: .httpConnect) }
    func testRunLoopPairCONNECT() throws { try run(Self.runLoopPair, .plain, through: .httpConnect) }
    func testQueuePairCONNECT() throws { try run(Self.queuePair, .plain, through: .httpConnect) }
    func testAsyncConnectionCONNECT() throws { try run(Self.asyncConnection, .plain, through: .httpConnect) }
    func testQueuedSocketCONNECT() throws { try run(Self.queuedSocket, .plain, through: .httpConnect) }
    func testPollingPairTLSThroughSOCKS5() throws { try run(Self.pollingPair, .tls, through: .socks5) }
    func testRunLoopPairTLSThroughSOCKS5() throws { try run(Self.runLoopPair, .tls, through: .socks5) }
    func testQueuePairTLSThroughSOCKS5() throws { try run(Self.queuePair, .tls, through: .socks5) }
    func testAsyncConnectionTLSThroughSOCKS5() throws { try run(Self.asyncConnection, .tls, through: .socks5) }
    func testQueuedSocketTLSThroughSOCKS5() throws { try run(Self.queuedSocket, .tls, through: .socks5) }
    func testPollingPairTLSThroughCONNECT() throws { try run(Self.pollingPair, .tls, through: .httpConnect) }
    func testRunLoopPairTLSThroughCONNECT() throws { try run(Self.runLoopPair, .tls, through: .httpConnect) }
    func testQueuePairTLSThroughCONNECT() throws { try run(Self.queuePair, .tls, through: .httpConnect) }
    func testAsyncConnectionTLSThroughCONNECT() throws { try run(Self.asyncConnection, .tls, through: .httpConnect) }
    func testQueuedSocketTLSThroughCONNECT() throws { try run(Self.queuedSocket, .tls, through: .httpConnect) }
    // Each face's default (close_notify not required) through a proxy: a truncation after the proxy's
    // replies is an end of stream, as without the proxy. One face per proxy: the setting lives in the
    // TLS layer the faces share, which the proxy's bytes come before.
    func testQueuedSocketTLSDefaultThroughSOCKS5() throws {
        try run(Self.queuedSocket, .tls, through: .socks5, requiresCloseNotify: false)
    }
    func testRunLoopPairTLSDefaultThroughCONNECT() throws {
        try run(Self.runLoopPair, .tls, through: .httpConnect, requiresCloseNotify: false)
    }

    // MARK: a peer that stops reading

    /// `.stopReading` with 16 MiB to send, more than the buffers on the way hold: only a write timeout
    /// ends the write (GCDAsyncSocket's WriteTimeoutError, QueuedSocket's `writeTimedOut`, at the 1 s
    /// the test set); the faces without one wait, as on Apple platforms, and close ends them cleanly.
    /// (The polling pair is left out: its driver writes synchronously.)
    func testAPeerThatStopsReadingIsEndedOnlyByAWriteTimeout() throws {
        let echo = try startSocatEcho()
        let writeTimedOut: [String: End] = [
            Self.gcdAsyncSocket.name: .error(domain: "GCDAsyncSocketErrorDomain", code: 5),
            Self.queuedSocket.name: .error(
                domain: StreamOperationError.errorDomain, code: StreamOperationError.Code.writeTimedOut.rawValue),
        ]
        let payload = Data(repeating: 0x5a, count: 16 << 20)
        for profile in [Self.runLoopPair, Self.queuePair, Self.asyncConnection, Self.queuedSocket, Self.gcdAsyncSocket, Self.nwConnection] {
            var settings = FaceSettings(transport: .plain, caCertificate: "")
            settings.connectTimeout = 10
            settings.readTimeout = -1
            settings.writeTimeout = 1
            // Warm-up, then the cell.
            for report in [false, true] {
                let descriptorsBefore = RawSocket.openSocketCount()
                let relay = try FaultRelay(upstreamPort: echo, fault: .stopReading)
                let driver = profile.make(settings)
                XCTAssertNil(driver.connect(port: relay.port), profile.name)
                guard report else {
                    // The warm-up only opens what the face shares between connections.
                    driver.close()
                    relay.stop()
                    continue
                }
                let started = FaultRelay.now
                driver.send(payload)
                let expected = writeTimedOut[profile.name] ?? .waiting
                let (received, end) = driver.receive(count: Int.max, within: expected == .waiting ? 1.5 : 20)
                let elapsed = FaultRelay.now - started
                XCTAssertEqual(received, Data(), profile.name)
                XCTAssertEqual(end, expected, "\(profile.name): the end")
                XCTAssertEqual(driver.endsReported, expected == .waiting ? 0 : 1, "\(profile.name): ends reported")
                XCTAssertNil(relay.snapshot.forwarded[.upstream], "\(profile.name): the relay read the client's bytes")
                if expected != .waiting { XCTAssertGreaterThanOrEqual(elapsed, 1, "\(profile.name): before the write timeout") }
                driver.close()
                relay.stop()
                let deadline = Date(timeIntervalSinceNow: 5)
                while RawSocket.openSocketCount() > descriptorsBefore && Date() < deadline { sched_yield() }
                XCTAssertLessThanOrEqual(RawSocket.openSocketCount(), descriptorsBefore, "\(profile.name): sockets left open")
                print(
                    "fault-matrix | \(profile.name) | plain | stopReading, 16 MiB, write timeout 1 s | \(end.map { "\($0)" } ?? "none") | \(String(format: "%.2f", elapsed)) s"
                )
            }
        }
    }

    // MARK: running a cell

    /// The port the relay forwards to: the echo (plain) or the TLS echo, or the proxy, with the echo as
    /// its target.
    private func upstream(_ settings: inout FaceSettings) throws -> Int {
        let target: Int
        switch settings.transport {
        case .plain: target = try startSocatEcho()
        case .tls:
            let pki = try self.pki
            let identity = TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey)
            target = try startStreamEchoServer(tls: .server(identity: identity)).port
        }
        guard let proxy = settings.proxy else { return target }
        settings.proxyTarget = target
        let (peer, port) =
            proxy == .socks5
            ? try Peer.dante(directory: try makeTemporaryDirectory()) : try Peer.tinyproxy(directory: try makeTemporaryDirectory())
        addCleanup { peer.stop() }
        return port
    }

    private func run(_ profile: Profile, _ transport: Transport, through proxy: ProxyKind? = nil, requiresCloseNotify: Bool = true)
        throws
    {
        var settings = FaceSettings(transport: transport, caCertificate: try pki.caCertificate)
        settings.requiresCloseNotify = requiresCloseNotify && profile.offersRequiresCloseNotify
        settings.proxy = proxy
        let port = try upstream(&settings)
        // Warm-up: the library's shared per-process descriptors (the stream thread's reactor, a
        // queue's, and the network-change observer's, which NWConnection's first `.waiting` starts)
        // are open before the first count.
        try runCell(Cell(fault: .none, delivered: .all, outcome: .delivered), profile, settings, port: port, report: false)
        if profile.warmsUpAStall {
            let stalls: Outcome = proxy != nil ? .proxyStalls : transport == .plain ? .deadPeer : .handshakeStalls
            try runCell(
                Cell(fault: .acceptAndNeverAnswer, delivered: .exactly(0), outcome: stalls), profile, settings, port: port, report: false)
        }
        let cells: [Cell]
        switch (transport, proxy) {
        case (.plain, nil): cells = Self.plainCells
        case (.plain, .socks5?): cells = Self.socksCells
        case (.plain, .httpConnect?): cells = Self.connectCells
        case (.tls, nil): cells = Self.tlsCells()
        case (.tls, .socks5?): cells = Self.tlsCells(prefix: Self.socksReplies)
        case (.tls, .httpConnect?): cells = Self.tlsCells(prefix: Self.connectReply)
        }
        for cell in cells {
            try runCell(cell, profile, settings, port: port, report: true)
        }
    }

    /// The ends a cell may have (nil: none, everything delivered).
    private func expectedEnds(_ outcome: Outcome, _ profile: Profile, _ settings: FaceSettings) -> [End]? {
        switch outcome {
        case .delivered: return nil
        case .peerClosed: return [profile.endOfStream]
        case .reset: return profile.reset
        case .deadPeer: return [profile.deadPeer ?? .waiting]
        case .truncatedAtRecord: return [settings.requiresCloseNotify ? profile.closedNoNotify : profile.endOfStream]
        case .truncatedMidRecord: return [profile.closedNoNotify]
        case .handshakeStalls: return [profile.handshakeStalls ?? .waiting]
        case .handshakeCut: return [profile.handshakeCut]
        case .proxyHungUp: return [Self.proxyHungUp]
        case .proxyReset: return profile.reset
        case .proxyStalls: return [Self.posixTimedOut]
        }
    }

    private func runCell(_ cell: Cell, _ profile: Profile, _ settings: FaceSettings, port: Int, report: Bool) throws {
        // The open's timeout is the one under test where the open stalls; elsewhere it is generous, so
        // that a machine under load (several test runs share it) does not turn a slow open into a failure.
        var settings = settings
        settings.connectTimeout = [.handshakeStalls, .proxyStalls].contains(cell.outcome) ? 1 : 10
        if let readTimeout = cell.readTimeout { settings.readTimeout = readTimeout }
        var transport =
            settings.transport != .tls ? settings.transport.rawValue : settings.requiresCloseNotify ? "tls" : "tls (default)"
        if let proxy = settings.proxy { transport = settings.transport == .plain ? proxy.rawValue : "\(transport) via \(proxy.rawValue)" }
        let name = "\(profile.name) \(transport) \(cell.fault)"
        let descriptorsBefore = RawSocket.openSocketCount()
        let relay = try FaultRelay(upstreamPort: port, fault: cell.fault)
        let driver = profile.make(settings)
        let payload = testPayload(cell.payloadSize)
        let expected = expectedEnds(cell.outcome, profile, settings)
        let started = FaultRelay.now
        var received = Data()
        var end = driver.connect(port: relay.port)
        if end == nil {
            driver.send(payload)
            // A cell that waits (a face without read timeouts) is watched for 0.6 s; the others get
            // until their bytes or their end, which comes at once unless the machine is loaded: 20 s is
            // the hang detector, not a delay.
            let window: TimeInterval = expected == [.waiting] ? 0.6 : 20
            (received, end) = driver.receive(count: payload.count, within: window)
            if end == nil, expected != nil {
                // Everything arrived; the end must follow.
                (received, end) = driver.receive(count: Int.max, within: 20)
            }
        }
        let elapsed = FaultRelay.now - started
        let endsBeforeClose = driver.endsReported
        driver.close()
        relay.stop()

        XCTAssertEqual(received, payload.prefix(received.count), "\(name): the bytes delivered are not the peer's, in order")
        switch cell.delivered {
        case .all: XCTAssertEqual(received.count, payload.count, "\(name): not everything delivered")
        case .exactly(let count): XCTAssertEqual(received.count, count, "\(name): bytes delivered before the fault")
        case .atLeast(let count): XCTAssertGreaterThanOrEqual(received.count, count, "\(name): bytes delivered before the fault")
        case .prefix: break
        }
        if let takes = cell.takes {
            XCTAssertTrue(takes.contains(elapsed), "\(name): took \(elapsed) s, not within \(takes)")
        }
        if let expected {
            XCTAssertTrue(end.map(expected.contains) ?? false, "\(name): the end \(end.map { "\($0)" } ?? "none"), not one of \(expected)")
        } else {
            XCTAssertNil(end, "\(name): an end where everything should have been delivered")
        }
        if let expected, expected != [.waiting] {
            XCTAssertEqual(endsBeforeClose, 1, "\(name): ends reported")
        } else {
            XCTAssertEqual(endsBeforeClose, 0, "\(name): ends reported")
        }
        if let nw = driver as? NWConnectionDriver {
            XCTAssertLessThanOrEqual(nw.failures, 1, "\(name): .failed reported more than once: \(nw.states.value)")
        }
        if let gcd = driver as? GCDAsyncSocketDriver {
            XCTAssertEqual(gcd.disconnects.value, 1, "\(name): socketDidDisconnect calls")
        }
        guard report else { return }  // a warm-up opens the shared descriptors: nothing to count
        // The faces close on their own threads: the count comes back within a deadline.
        let deadline = Date(timeIntervalSinceNow: 5)
        while RawSocket.openSocketCount() > descriptorsBefore && Date() < deadline { sched_yield() }
        do {
            XCTAssertLessThanOrEqual(RawSocket.openSocketCount(), descriptorsBefore, "\(name): sockets left open")
            print(
                "fault-matrix | \(profile.name) | \(transport) | \(cell.fault) | \(received.count) B | \(end.map { "\($0)" } ?? "none")"
                    + " | \(String(format: "%.2f", elapsed)) s")
        }
    }
}
