// The figures of one harness run, as written to latest.json and rendered into latest.md / ratios.svg.

import Foundation

/// One measurement as a `measure` child reports it (one JSON line on stdout).
struct Sample: Codable, Equatable {
    /// 1-based run (round) number; set by the harness.
    var run: Int = 0
    /// The workload's figure in its unit (GB/s, µs/RT, conn/s, RT/s, B/pair, dgram/s).
    var value: Double
    var elapsedSeconds: Double?
    /// VmHWM of the client process after the workload.
    var peakRSSBytes: Int?
    /// idle: VmRSS and RssAnon before opening any pair and with all pairs open. The idle figure is
    /// (anonOpenBytes - anonNoneBytes) / pairs.
    var rssNoneBytes: Int?
    var rssOpenBytes: Int?
    var anonNoneBytes: Int?
    var anonOpenBytes: Int?
    /// UDP: datagrams sent (udp-receive: by the blast; udp-fanin: by all its peers; udp-send: by the
    /// client) or round trips, those that arrived (at the client; at the sink), and of those the ones
    /// that came after a later one (of the same peer).
    var datagrams: Int?
    var datagramsReceived: Int?
    var datagramsOutOfOrder: Int?
    /// udp-receive, udp-fanin: the seconds the blast (the peers) took to send their datagrams.
    var senderSeconds: Double?
    /// udp-fanin: the peers the client saw datagrams from (all of them, or the run failed).
    var datagramSenders: Int?
    /// udp-receive, udp-fanin: how much the kernel's `RcvbufErrors` (/proc/net/snmp, the whole machine)
    /// grew during the workload: the datagrams lost, plus the end markers dropped, plus any other
    /// program's drops.
    var receiveBufferErrors: Int?

    /// udp-receive, udp-fanin: the rate the blast (the peers) offered, datagrams per second.
    var offeredRate: Double? {
        guard let datagrams, let senderSeconds, senderSeconds > 0 else { return nil }
        return Double(datagrams) / senderSeconds
    }

    /// The share of the datagrams sent that never arrived (nil for a stream workload).
    var lossFraction: Double? {
        guard let datagrams, let datagramsReceived, datagrams > 0 else { return nil }
        return Double(datagrams - datagramsReceived) / Double(datagrams)
    }
}

struct TargetDescription: Codable, Equatable {
    /// "ratioAtLeast" (median ratio to baseline), "valueAtMost" (median figure) or "none" (not judged).
    var kind: String
    var value: Double
    var label: String

    init(_ target: Target) {
        switch target {
        case .ratioAtLeast(let r):
            kind = "ratioAtLeast"
            value = r
        case .valueAtMost(let v):
            kind = "valueAtMost"
            value = v
        case .none:
            kind = "none"
            value = 0
        }
        label = target.label
    }
}

struct ClientResult: Codable, Equatable {
    var client: String
    /// Successful runs, in run order.
    var samples: [Sample]
    /// Median and range of `samples[].value`.
    var summary: Summary?
    /// Per-run ratios to the baseline (higher is better) and their median/range.
    var ratios: [Double]?
    var ratioToBaseline: Summary?
    /// Median and range of the client's peak RSS (many, idle).
    var peakRSSBytes: Summary?
    /// Only for SocketStreams clients: the goal the client is held to (`Workload.target(for:)`; absent
    /// in runs recorded before goals were per client: the workload's `target`).
    var target: TargetDescription?
    /// Only for SocketStreams clients: whether the median meets its target.
    var targetMet: Bool?
    /// Set when a run failed; later runs of this client and workload are skipped.
    var error: String?
}

struct WorkloadResult: Codable, Equatable {
    var workload: String
    var title: String
    var unit: String
    var higherIsBetter: Bool
    var parameters: WorkloadParameters
    var target: TargetDescription
    var results: [ClientResult]
    /// The client the ratios are to: absent (runs recorded before UDP) means "baseline".
    var reference: String?

    /// The client the ratios are to.
    var referenceClient: String { reference ?? ClientKind.baseline.rawValue }
}

struct RunConfiguration: Codable, Equatable {
    var quick: Bool
    /// Runs per client: the most any workload had.
    var runs: Int
    /// Runs per client of each workload (absent in runs recorded before workloads differed).
    var runsByWorkload: [String: Int]?
    var cpus: String
    var serverCPU: Int
    var clientCPU: Int
    var clients: [String]
    var workloads: [String]
    /// `--datagram-sizes`, when given (else each UDP workload's defaults).
    var datagramSizes: [Int]?
}

struct BenchmarkReport: Codable, Equatable {
    var tool = "stream-bench"
    /// ISO 8601, UTC.
    var date: String
    var machine: MachineInfo
    var configuration: RunConfiguration
    var workloads: [WorkloadResult]
    var failures: [String]

    var succeeded: Bool { failures.isEmpty }

    /// "9 runs per client (3 for many1k, many5k, idle)": the runs of the workloads in this report.
    var runsDescription: String {
        let c = configuration
        let others = workloads.compactMap { w in c.runsByWorkload?[w.workload].flatMap { $0 == c.runs ? nil : (w.workload, $0) } }
        var text = "\(c.runs) run(s) per client"
        for runs in Set(others.map(\.1)).sorted(by: >) {
            text += " (\(runs) for \(others.filter { $0.1 == runs }.map(\.0).joined(separator: ", ")))"
        }
        return text
    }
}

extension WorkloadResult {
    /// Summaries, ratios and target verdicts from the raw samples.
    init(
        workload: Workload, quick: Bool, datagramSize: Int? = nil, clients: [ClientKind], samples: [ClientKind: [Sample]],
        errors: [ClientKind: String]
    ) {
        self.workload = workload.rawValue
        title = workload.title(quick: quick, datagramSize: datagramSize)
        unit = workload.unit
        higherIsBetter = workload.higherIsBetter
        parameters = workload.parameters(quick: quick, datagramSize: datagramSize)
        // The chart's one line per workload: the goal of the faces on the engine's own threads and queues.
        target = TargetDescription(workload.target(for: .streamsThread))
        reference = workload.isDatagram ? workload.reference.rawValue : nil
        let reference = workload.reference
        let baseline = samples[reference] ?? []
        results = clients.filter { $0.supports(workload) }.map { client in
            let own = samples[client] ?? []
            var result = ClientResult(
                client: client.rawValue, samples: own, summary: Summary(own.map(\.value)),
                error: errors[client])
            result.peakRSSBytes = Summary(own.compactMap(\.peakRSSBytes).map(Double.init))
            if workload.hasRatio && client != reference && !baseline.isEmpty {
                let ratios = ratiosToBaseline(own, baseline: baseline, higherIsBetter: workload.higherIsBetter)
                result.ratios = ratios
                result.ratioToBaseline = Summary(ratios)
            }
            if client.isSocketStreams { result.target = TargetDescription(workload.target(for: client)) }
            if client.isSocketStreams && result.error == nil {
                switch workload.target(for: client) {
                case .ratioAtLeast(let minimum): result.targetMet = result.ratioToBaseline.map { $0.median >= minimum }
                case .valueAtMost(let maximum): result.targetMet = result.summary.map { $0.median <= maximum }
                case .none: break
                }
            }
            return result
        }
    }
}
