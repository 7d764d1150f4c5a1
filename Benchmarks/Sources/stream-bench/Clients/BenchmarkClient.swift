// The client families compared side by side, and what each one implements (the UDP ones:
// Clients/DatagramClient.swift; nwconnection is both).

import Dispatch

/// The clients compared side by side.
enum ClientKind: String, CaseIterable, Codable {
    case baseline
    case streamsDelegate = "streams-delegate"
    case streamsThread = "streams-thread"
    case streamsQueue = "streams-queue"
    case streamsPolling = "streams-polling"
    /// `AsyncConnection`: async/await over a pair.
    case streamsAsync = "streams-async"
    /// `QueuedSocket`: GCDAsyncSocket-style queued reads and writes, on the benchmark thread's run loop.
    case streamsQueued = "streams-queued"
    /// GCDAsyncSocket's own API (the CocoaAsyncSocket product), given no socket queue.
    case gcdAsyncSocket = "gcdasyncsocket"
    case nwConnection = "nwconnection"
    /// `NWConnection` with a length-prefixed `NWProtocolFramer`: ping-pong only, plain and TLS.
    case nwConnectionFramer = "nwconnection-framer"
    case filehandle
    /// UDP, raw sockets: `recvfrom`/`sendto`, one datagram a call.
    case baselineUdp = "baseline-udp"
    /// UDP, raw sockets: recvmmsg/sendmmsg, 64 datagrams a call (the UDP workloads' reference).
    case baselineUdpBatch = "baseline-udp-batch"
    /// GCDAsyncUdpSocket (the CocoaAsyncSocket product), given no socket queue.
    case gcdAsyncUdpSocket = "gcdasyncudpsocket"

    /// The figures of these clients are held to the targets.
    var isSocketStreams: Bool {
        switch self {
        case .streamsDelegate, .streamsThread, .streamsQueue, .streamsPolling, .streamsAsync, .streamsQueued, .gcdAsyncSocket,
            .nwConnection, .nwConnectionFramer, .gcdAsyncUdpSocket:
            return true
        case .baseline, .filehandle, .baselineUdp, .baselineUdpBatch: return false
        }
    }

    /// A UDP client: it runs the UDP workloads and nothing else.
    var isDatagram: Bool {
        self == .baselineUdp || self == .baselineUdpBatch || self == .gcdAsyncUdpSocket
    }

    func supports(_ workload: Workload) -> Bool {
        // nwconnection runs the UDP workloads too (`makeDatagramClient`): NWConnection is both.
        if workload.isDatagram { return isDatagram || self == .nwConnection }
        if isDatagram { return false }
        switch self {
        case .filehandle: return workload == .download || workload == .pingpong  // no TLS or SOCKS either
        case .streamsAsync, .streamsQueued:
            // One connection at a time: download, upload, ping-pong and connect, plain, TLS and SOCKS.
            return [.download, .upload, .pingpong, .connect].contains(workload.plainCounterpart)
        case .nwConnection:
            // One connection at a time, plain and TLS (no proxies in Network.framework's API here).
            return [.download, .upload, .pingpong, .connect].contains(workload.plainCounterpart) && !workload.isSOCKS
        case .nwConnectionFramer:
            // Messages through a framer, one connection: ping-pong, plain and TLS.
            return workload.plainCounterpart == .pingpong && !workload.isSOCKS
        case .gcdAsyncSocket:
            // One connection at a time, plain only.
            return [.download, .upload, .pingpong, .connect].contains(workload)
        default: return true
        }
    }

    func makeClient() -> any BenchmarkClient {
        switch self {
        case .baseline: return BaselineClient()
        case .streamsDelegate: return StreamsDelegateClient(scheduling: .currentRunLoop)
        case .streamsThread: return StreamsDelegateClient(scheduling: .streamThread)
        case .streamsQueue:
            // One serial queue per measurement (each measurement is its own process and makes one client).
            return StreamsDelegateClient(scheduling: .dispatchQueue(DispatchQueue(label: "stream-bench.streams-queue")))
        case .streamsPolling: return StreamsPollingClient()
        case .streamsAsync: return StreamsAsyncClient()
        case .streamsQueued: return StreamsQueuedClient()
        case .gcdAsyncSocket: return GCDAsyncSocketClient()
        case .nwConnection: return NWConnectionClient()
        case .nwConnectionFramer: return NWConnectionFramerClient()
        case .filehandle: return FileHandleClient()
        case .baselineUdp, .baselineUdpBatch, .gcdAsyncUdpSocket: return NoStreamClient(kind: self)
        }
    }

    /// The UDP client of this kind (nil for the stream clients).
    func makeDatagramClient() -> (any DatagramBenchmarkClient)? {
        switch self {
        case .baselineUdp: return BaselineDatagramClient(batched: false)
        case .baselineUdpBatch: return BaselineDatagramClient(batched: true)
        case .gcdAsyncUdpSocket: return GCDAsyncUdpSocketClient()
        case .nwConnection: return NWConnectionDatagramClient()
        default: return nil
        }
    }
}

/// A UDP client asked for a stream workload (`supports` keeps the harness from asking).
struct NoStreamClient: BenchmarkClient {
    let kind: ClientKind

    func warmUp(port: UInt16) throws { throw unsupported(kind, .connect) }
    func download(port: UInt16, totalBytes: Int) throws -> Double { throw unsupported(kind, .download) }
    func upload(port: UInt16, totalBytes: Int) throws -> Double { throw unsupported(kind, .upload) }
    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double { throw unsupported(kind, .pingpong) }
    func connect(port: UInt16, count: Int) throws -> Double { throw unsupported(kind, .connect) }
    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double { throw unsupported(kind, .many1k) }
    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) { throw unsupported(kind, .idle) }
}

/// What one client family implements. Every method verifies byte counts (and echo contents) and
/// throws on any mismatch or short read; the returned time covers the measured phase only.
protocol BenchmarkClient {
    /// One connect + 1-byte exchange before measuring, so one-time set-up (the library's stream
    /// thread, lazy symbol binding, first allocations) is not timed.
    func warmUp(port: UInt16) throws
    /// Receives `totalBytes` until end of stream; returns seconds from connecting to EOF.
    func download(port: UInt16, totalBytes: Int) throws -> Double
    /// Sends `totalBytes` and waits for the server's count; returns seconds from connecting to the reply.
    func upload(port: UInt16, totalBytes: Int) throws -> Double
    /// `roundTrips` sequential echoes on one connection; returns seconds from connecting to the last echo.
    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double
    /// `count` sequential connect → 1 byte → 1 byte back → close; returns total seconds.
    func connect(port: UInt16, count: Int) throws -> Double
    /// `connections` concurrent connections on one thread, `roundTrips` echoes each. All connections are
    /// established first (untimed); returns seconds from the first 'G' (go) to the last echo.
    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double
    /// Opens `pairs` idle connections; returns the process's memory before opening any and with all open.
    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot)
}

/// How many connections a client may have opened but not yet acknowledged by the server, so the
/// listen backlog (somaxconn, often 4096) never overflows while thousands of connections open.
let maxConnectsInFlight = 256

/// Raised by clients that do not implement a workload (the harness never asks them).
func unsupported(_ client: ClientKind, _ workload: Workload) -> BenchError {
    BenchError("\(client.rawValue) does not implement \(workload.rawValue)")
}
