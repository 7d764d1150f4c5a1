// `stream-bench measure --client C --workload W --port P [--cpu N] [--quick] [--tls-ca F]
// [--socks-port S] [--datagram-size B]`: one measurement in a fresh process (so VmHWM and idle RSS
// belong to this client alone, and a hung client can be killed). Prints one JSON `Sample` line on
// stdout; any failure exits non-zero with a message. A UDP workload's datagram size is
// `--datagram-size`, else `STREAM_BENCH_DATAGRAM_SIZE` (for Benchmarks/instructions and
// Benchmarks/syscalls, which do not pass it), else 64 bytes.

import Foundation
import Glibc

enum MeasureCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var client: ClientKind?
        var workload: Workload?
        var port: UInt16?
        var cpu = -1
        var quick = false
        var caFile: String?
        var socksPort: UInt16?
        var datagramSize = ProcessInfo.processInfo.environment["STREAM_BENCH_DATAGRAM_SIZE"].flatMap { Int($0) }
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--client": client = iterator.next().flatMap(ClientKind.init(rawValue:))
            case "--workload": workload = iterator.next().flatMap(Workload.init(rawValue:))
            case "--port": port = iterator.next().flatMap { UInt16($0) }
            case "--cpu": cpu = iterator.next().flatMap { Int($0) } ?? -1
            case "--quick": quick = true
            case "--tls-ca": caFile = iterator.next()
            case "--socks-port": socksPort = iterator.next().flatMap { UInt16($0) }
            case "--datagram-size": datagramSize = iterator.next().flatMap { Int($0) }
            default:
                Posix.printError("stream-bench measure: unknown argument \(argument)")
                return 2
            }
        }
        guard let client, let workload, let port else {
            Posix.printError("stream-bench measure: needs --client, --workload and --port")
            return 2
        }
        let size = datagramSize ?? DatagramPayload.defaultSize
        guard !workload.isDatagram || (DatagramPayload.minimumSize...DatagramPayload.maximumSize).contains(size) else {
            Posix.printError(
                "stream-bench measure: the datagram size must be \(DatagramPayload.minimumSize)–\(DatagramPayload.maximumSize) bytes")
            return 2
        }
        do {
            let sample =
                workload.isDatagram
                ? try measureDatagrams(client: client, workload: workload, port: port, cpu: cpu, quick: quick, size: size)
                : try measure(
                    client: client, workload: workload, port: port, cpu: cpu, quick: quick, caFile: caFile,
                    socksPort: socksPort)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let line = try encoder.encode(sample) + Data("\n".utf8)
            try FileHandle.standardOutput.write(contentsOf: line)
            return 0
        } catch {
            Posix.printError("stream-bench measure \(client.rawValue) \(workload.rawValue): \(error)")
            return 1
        }
    }

    static func measure(
        client kind: ClientKind, workload: Workload, port: UInt16, cpu: Int, quick: Bool,
        caFile: String?, socksPort: UInt16?
    ) throws -> Sample {
        let descriptorLimit = Posix.raiseFileDescriptorLimit()
        if cpu >= 0 { try Posix.pinToCPU(cpu) }
        let p = workload.parameters(quick: quick)
        if let connections = p.connections, descriptorLimit < connections + 64 {
            throw BenchError("RLIMIT_NOFILE is \(descriptorLimit), too low for \(connections) connections")
        }
        guard kind.supports(workload) else { throw unsupported(kind, workload) }
        let client: any BenchmarkClient
        if workload.isTLS {
            guard let caFile else { throw BenchError("a TLS workload needs --tls-ca") }
            let resumes = workload == .tlsReconnect
            if kind == .baseline {
                client = BaselineTLSClient(context: try BenchTLS.clientContext(caFile: caFile, resumes: resumes), resumes: resumes)
            } else {
                BenchTLS.clientSettings = BenchTLS.settings(caFile: caFile, resumes: resumes)
                if kind == .nwConnection || kind == .nwConnectionFramer { try NWConnectionClient.useTLS(caFile: caFile, resumes: resumes) }
                client = kind.makeClient()
            }
        } else if workload.isSOCKS {
            // The pairs are still made for 127.0.0.1:port (the target); the proxy is the SOCKS5 port.
            guard let socksPort else { throw BenchError("a SOCKS workload needs --socks-port") }
            if kind == .baseline {
                client = BaselineClient(socksPort: socksPort)
            } else {
                BenchSOCKS.clientProxy = .socks5(host: "127.0.0.1", port: Int(socksPort))
                client = kind.makeClient()
            }
        } else {
            client = kind.makeClient()
        }
        try client.warmUp(port: port)
        // The first read of /proc/self/status pages in parsing code; keep that out of the idle figures.
        _ = try ProcessMemory.snapshot()

        switch workload.plainCounterpart {
        case .download, .upload:
            let bytes = p.bytes!
            let seconds =
                workload.plainCounterpart == .download
                ? try client.download(port: port, totalBytes: bytes)
                : try client.upload(port: port, totalBytes: bytes)
            return Sample(value: Double(bytes) / seconds / 1e9, elapsedSeconds: seconds)
        case .pingpong:
            let seconds = try client.pingPong(port: port, roundTrips: p.roundTrips!, messageSize: p.messageSize!)
            return Sample(value: seconds / Double(p.roundTrips!) * 1e6, elapsedSeconds: seconds)
        case .connect:
            let seconds = try client.connect(port: port, count: p.connections!)
            return Sample(value: Double(p.connections!) / seconds, elapsedSeconds: seconds)
        case .many1k, .many5k:
            let seconds = try client.many(
                port: port, connections: p.connections!, roundTrips: p.roundTrips!,
                messageSize: p.messageSize!)
            return Sample(
                value: Double(p.connections! * p.roundTrips!) / seconds, elapsedSeconds: seconds,
                peakRSSBytes: try ProcessMemory.peakResidentBytes())
        case .idle:
            let (none, open) = try client.idle(port: port, pairs: p.connections!)
            return Sample(
                value: Double(open.anonymousBytes - none.anonymousBytes) / Double(p.connections!),
                peakRSSBytes: try ProcessMemory.peakResidentBytes(),
                rssNoneBytes: none.residentBytes, rssOpenBytes: open.residentBytes,
                anonNoneBytes: none.anonymousBytes, anonOpenBytes: open.anonymousBytes)
        case .tlsDownload, .tlsUpload, .tlsPingpong, .tlsHandshake, .tlsReconnect, .socksConnect, .socksDownload:
            throw BenchError("\(workload.rawValue) has no plain counterpart")  // plainCounterpart never returns these
        case .udpReceive, .udpSend, .udpSendQuiet, .udpPingpong, .udpFanin:
            throw BenchError("\(workload.rawValue) is a UDP workload")  // run by measureDatagrams
        }
    }

    /// A UDP workload: the client's socket and the server's peer on 127.0.0.1, the session started and
    /// ended over a connection to the plain `port`.
    static func measureDatagrams(client kind: ClientKind, workload: Workload, port: UInt16, cpu: Int, quick: Bool, size: Int)
        throws -> Sample
    {
        if cpu >= 0 { try Posix.pinToCPU(cpu) }
        guard kind.supports(workload), let client = kind.makeDatagramClient() else { throw unsupported(kind, workload) }
        let p = workload.parameters(quick: quick, datagramSize: size)
        try client.warmUp(port: port)
        _ = try ProcessMemory.snapshot()
        let outcome: DatagramOutcome
        // The kernel's drops at full receive buffers (the whole machine's), around a receiving workload.
        let dropsBefore = workload == .udpReceive || workload == .udpFanin ? Posix.udpReceiveBufferErrors() : nil
        switch workload {
        case .udpReceive:
            outcome = try client.receive(port: port, count: p.datagrams!, size: size)
        case .udpFanin:
            let peers = p.peers!
            outcome = try client.fanIn(port: port, peers: peers, count: p.datagrams! / peers, size: size)
        case .udpSend, .udpSendQuiet:
            outcome = try client.send(port: port, count: p.datagrams!, size: size, completions: workload == .udpSend)
        case .udpPingpong:
            let seconds = try client.pingPong(port: port, roundTrips: p.roundTrips!, size: size)
            outcome = DatagramOutcome(seconds: seconds, count: p.roundTrips!, received: p.roundTrips!, outOfOrder: 0)
        default:
            throw unsupported(kind, workload)
        }
        if outcome.received == 0 { throw BenchError("\(workload.rawValue): not one of \(outcome.count) datagrams arrived") }
        let counted = workload != .udpPingpong  // a ping-pong that lost one would have stalled
        let drops = dropsBefore.flatMap { before in Posix.udpReceiveBufferErrors().map { $0 - before } }
        return Sample(
            value: Double(outcome.received) / outcome.seconds, elapsedSeconds: outcome.seconds,
            peakRSSBytes: try ProcessMemory.peakResidentBytes(), datagrams: counted ? outcome.count : nil,
            datagramsReceived: counted ? outcome.received : nil, datagramsOutOfOrder: counted ? outcome.outOfOrder : nil,
            senderSeconds: outcome.senderSeconds, datagramSenders: outcome.senders, receiveBufferErrors: drops)
    }
}
