// What each workload does, how big it is (full and --quick), how its figure is expressed,
// and the target a SocketStreams client has to reach.

enum Workload: String, CaseIterable, Codable {
    case download
    case upload
    case pingpong
    case connect
    case many1k
    case many5k
    case idle
    /// TLS 1.3 against the same server's TLS port (OpenSSL on the server side).
    case tlsDownload = "tls-download"
    case tlsUpload = "tls-upload"
    case tlsPingpong = "tls-pingpong"
    /// connect + full TLS 1.3 handshake + 1 byte each way + close.
    case tlsHandshake = "tls-handshake"
    /// The same, each connection resuming the session of the one before it (a TLS 1.3 ticket).
    case tlsReconnect = "tls-reconnect"
    /// Through the same server's SOCKS5 port, which answers the handshake itself and then serves the
    /// plain protocol on that connection (a terminating proxy, not a relay).
    case socksConnect = "socks-connect"
    case socksDownload = "socks-download"
    /// UDP: the server's blast sends datagrams to the client as fast as it can; the figure is what arrived.
    case udpReceive = "udp-receive"
    /// UDP: the client sends datagrams to the server's sink as fast as it can, each with a completion.
    case udpSend = "udp-send"
    /// UDP: the same without per-datagram completions (GCDAsyncUdpSocket: no `didSendDataWithTag`).
    case udpSendQuiet = "udp-send-quiet"
    /// UDP: ping-pong with the server's echo peer.
    case udpPingpong = "udp-pingpong"
    /// UDP: 1,000 peer sockets of the server send datagrams, interleaved, to one socket of the client.
    case udpFanin = "udp-fanin"

    /// Command-line aliases that expand to several workloads.
    static let aliases: [String: [Workload]] = [
        "all": Workload.allCases,
        "many": [.many1k, .many5k, .idle],
        "ping-pong": [.pingpong],
        "tls": [.tlsDownload, .tlsUpload, .tlsPingpong, .tlsHandshake, .tlsReconnect],
        "socks": [.socksConnect, .socksDownload],
        "plain": [.download, .upload, .pingpong, .connect, .many1k, .many5k, .idle],
        "udp": [.udpReceive, .udpSend, .udpSendQuiet, .udpPingpong, .udpFanin],
    ]

    /// Runs per client when `--runs` is not given. A single-connection workload's measurement takes
    /// under two seconds, and its figure moves ±20 % from run to run on a shared VM (the raw client's
    /// download 1.84–2.75 GB/s in nine runs of one quiet minute), so it takes nine, whose median a
    /// stray run moves little; the many-connection and idle ones, each of which takes several
    /// seconds and varies far less, take three.
    var defaultRuns: Int {
        switch self {
        case .many1k, .many5k, .idle: return 3
        default: return 9
        }
    }

    /// Whether the workload runs over TLS.
    var isTLS: Bool {
        switch self {
        case .tlsDownload, .tlsUpload, .tlsPingpong, .tlsHandshake, .tlsReconnect: return true
        default: return false
        }
    }

    /// Whether the workload moves datagrams (UDP clients only, the control over the plain port).
    var isDatagram: Bool {
        switch self {
        case .udpReceive, .udpSend, .udpSendQuiet, .udpPingpong, .udpFanin: return true
        default: return false
        }
    }

    /// The client the others' ratios are computed against: the raw-socket baseline, for UDP the batch one.
    var reference: ClientKind { isDatagram ? .baselineUdpBatch : .baseline }

    /// The datagram sizes a run measures when `--datagram-sizes` is not given (nil: not a UDP workload).
    var defaultDatagramSizes: [Int]? {
        switch self {
        case .udpReceive, .udpSend, .udpSendQuiet: return [64, 1200]
        case .udpPingpong, .udpFanin: return [DatagramPayload.defaultSize]
        default: return nil
        }
    }

    /// Whether every connection of the workload goes through the SOCKS5 port.
    var isSOCKS: Bool {
        self == .socksConnect || self == .socksDownload
    }

    /// The plain workload a TLS or SOCKS one runs (the same client code, over TLS or through the proxy).
    var plainCounterpart: Workload {
        switch self {
        case .tlsDownload, .socksDownload: return .download
        case .tlsUpload: return .upload
        case .tlsPingpong: return .pingpong
        case .tlsHandshake, .tlsReconnect, .socksConnect: return .connect
        default: return self
        }
    }

    var unit: String {
        switch self {
        case .tlsDownload, .tlsUpload, .tlsPingpong, .socksConnect, .socksDownload: return plainCounterpart.unit
        case .tlsHandshake, .tlsReconnect: return "hs/s"
        case .download, .upload: return "GB/s"
        case .pingpong: return "µs/RT"
        case .connect: return "conn/s"
        case .many1k, .many5k: return "RT/s"
        case .idle: return "B/pair"
        case .udpReceive, .udpSend, .udpSendQuiet, .udpFanin: return "dgram/s"
        case .udpPingpong: return "RT/s"
        }
    }

    /// Whether a larger figure is better (ping-pong latency and idle memory are not).
    var higherIsBetter: Bool {
        switch self {
        case .pingpong, .idle, .tlsPingpong: return false
        default: return true
        }
    }

    /// Whether the figure is compared to the baseline as a ratio (idle memory is absolute).
    var hasRatio: Bool { self != .idle }

    /// The goal `client` is held to on this workload: the open issues' targets, the face's own where
    /// an issue set one, else the workload's (``target``). Plain TCP: the stream thread's, a queue's,
    /// the async and queued faces' and polling 0.97 / 0.95 / 0.85 / 0.80 (download, upload, ping-pong,
    /// connect); delegates on the main run loop 0.97 / 0.95 / 0.80 / 0.72; GCDAsyncSocket and
    /// NWConnection 0.95 / 0.95 / 0.85 / 0.80. TLS (issue 48), the faces on the engine's own threads
    /// and queues: full handshakes and resumed ones ≥ 1.0 of the C OpenSSL client, ping-pong ≥ 0.95,
    /// bulk ≥ 1.2. UDP (issue 46): receive and send ≥ 0.90 of the C batch client, ping-pong ≥ 0.85.
    func target(for client: ClientKind) -> Target {
        let engineFaces: [ClientKind] = [.streamsThread, .streamsQueue, .streamsAsync, .streamsQueued, .streamsPolling]
        switch self {
        case .download: return .ratioAtLeast(client == .gcdAsyncSocket || client == .nwConnection ? 0.95 : 0.97)
        case .upload: return .ratioAtLeast(0.95)
        case .pingpong: return .ratioAtLeast(client == .streamsDelegate ? 0.80 : 0.85)
        case .connect: return .ratioAtLeast(client == .streamsDelegate ? 0.72 : 0.80)
        case .tlsHandshake, .tlsReconnect: return engineFaces.contains(client) ? .ratioAtLeast(1.0) : target
        case .tlsPingpong: return engineFaces.contains(client) ? .ratioAtLeast(0.95) : target
        case .tlsDownload, .tlsUpload: return engineFaces.contains(client) ? .ratioAtLeast(1.2) : target
        case .udpReceive, .udpSend, .udpSendQuiet: return .ratioAtLeast(0.90)
        case .udpPingpong: return .ratioAtLeast(0.85)
        case .socksConnect, .socksDownload: return plainCounterpart.target(for: client)
        case .many1k, .many5k, .idle, .udpFanin: return target
        }
    }

    /// The workload's own target, for a client no issue set one for (and the chart's dashed line):
    /// the first targets, below the faces' goals (``target(for:)``).
    var target: Target {
        switch self {
        case .download, .upload: return .ratioAtLeast(0.95)
        case .pingpong: return .ratioAtLeast(0.75)
        case .connect: return .ratioAtLeast(0.60)
        case .many1k: return .ratioAtLeast(0.65)
        case .many5k: return .ratioAtLeast(0.55)
        case .idle: return .valueAtMost(2048)
        case .tlsDownload, .tlsUpload: return .ratioAtLeast(0.90)
        case .tlsPingpong: return .ratioAtLeast(0.75)
        case .tlsHandshake, .tlsReconnect: return .ratioAtLeast(0.85)
        case .socksConnect, .socksDownload: return plainCounterpart.target
        // No target yet: the figures are measured, not held to anything.
        case .udpReceive, .udpSend, .udpSendQuiet, .udpPingpong, .udpFanin: return .none
        }
    }

    /// The sizes of one measurement; `datagramSize` (a UDP workload's, default 64 B) is its message size.
    func parameters(quick: Bool, datagramSize: Int? = nil) -> WorkloadParameters {
        let size = datagramSize ?? DatagramPayload.defaultSize
        switch self {
        case .udpReceive:
            return WorkloadParameters(messageSize: size, datagrams: quick ? 2_000 : 200_000)
        case .udpSend, .udpSendQuiet:
            return WorkloadParameters(messageSize: size, datagrams: quick ? 2_000 : 100_000)
        case .udpPingpong:
            return WorkloadParameters(roundTrips: quick ? 200 : 20_000, messageSize: size)
        case .udpFanin:
            // As many datagrams as udp-receive's blast, spread over the peers.
            return WorkloadParameters(messageSize: size, datagrams: quick ? 2_000 : 200_000, peers: 1_000)
        case .download, .upload:
            return WorkloadParameters(bytes: quick ? 8 << 20 : 1 << 30)
        case .pingpong:
            return WorkloadParameters(roundTrips: quick ? 200 : 20_000, messageSize: Payload.messageSize)
        case .connect:
            return WorkloadParameters(connections: quick ? 50 : 2_000)
        case .many1k:
            return WorkloadParameters(
                connections: quick ? 50 : 1_000, roundTrips: quick ? 10 : 100,
                messageSize: Payload.messageSize)
        case .many5k:
            return WorkloadParameters(
                connections: quick ? 100 : 5_000, roundTrips: quick ? 10 : 100,
                messageSize: Payload.messageSize)
        case .idle:
            return WorkloadParameters(connections: quick ? 200 : 10_000)
        case .tlsDownload, .tlsUpload, .tlsPingpong, .socksConnect, .socksDownload:
            return plainCounterpart.parameters(quick: quick)
        case .tlsHandshake, .tlsReconnect:
            return WorkloadParameters(connections: quick ? 20 : 1_000)
        }
    }

    /// A one-line description with the actual sizes, for the report.
    func title(quick: Bool, datagramSize: Int? = nil) -> String {
        let p = parameters(quick: quick, datagramSize: datagramSize)
        let datagrams = "\(formatNumber(Double(p.datagrams ?? 0), decimals: 0)) × \(p.messageSize ?? 0) B"
        switch self {
        case .udpReceive: return "UDP receive \(datagrams) from the blast"
        case .udpSend: return "UDP send \(datagrams), a completion each"
        case .udpSendQuiet: return "UDP send \(datagrams), no completions"
        case .udpPingpong: return "UDP ping-pong \(p.roundTrips ?? 0) × \(p.messageSize ?? 0) B"
        case .udpFanin: return "UDP fan-in \(datagrams) from \(formatNumber(Double(p.peers ?? 0), decimals: 0)) peers"
        case .download: return "download \(formatBytes(p.bytes ?? 0)), 64 KiB chunks"
        case .upload: return "upload \(formatBytes(p.bytes ?? 0)), 64 KiB chunks"
        case .pingpong: return "ping-pong \(p.roundTrips ?? 0) × \(p.messageSize ?? 0) B"
        case .connect: return "connect \(p.connections ?? 0) × (1 B ⇄ 1 B)"
        case .many1k, .many5k:
            return "many \(p.connections ?? 0) conns × \(p.roundTrips ?? 0) RT"
        case .idle: return "idle \(p.connections ?? 0) open pairs"
        case .tlsDownload, .tlsUpload, .tlsPingpong: return "TLS 1.3 " + plainCounterpart.title(quick: quick)
        case .tlsHandshake: return "TLS 1.3 full handshake \(p.connections ?? 0) × (1 B ⇄ 1 B)"
        case .tlsReconnect: return "TLS 1.3 resumed handshake \(p.connections ?? 0) × (1 B ⇄ 1 B)"
        case .socksConnect, .socksDownload: return "SOCKS5 " + plainCounterpart.title(quick: quick)
        }
    }
}

struct WorkloadParameters: Codable, Equatable {
    var bytes: Int?
    var connections: Int?
    var roundTrips: Int?
    var messageSize: Int?
    /// UDP: datagrams sent (by the blast, by the fan-in's peers in all, or by the client to the sink).
    var datagrams: Int?
    /// udp-fanin: the server's sockets that send them, each `datagrams / peers`.
    var peers: Int?
}

enum Target: Codable, Equatable {
    /// The median ratio to the baseline must be at least this.
    case ratioAtLeast(Double)
    /// The median figure itself must be at most this.
    case valueAtMost(Double)
    /// None: the figure is reported, and not judged.
    case none

    var label: String {
        switch self {
        case .ratioAtLeast(let r): return "≥\(formatNumber(r, decimals: 2))×"
        case .valueAtMost(let v): return v == 2048 ? "≤2 KiB" : "≤\(formatNumber(v, decimals: 0)) B"
        case .none: return "—"
        }
    }
}
