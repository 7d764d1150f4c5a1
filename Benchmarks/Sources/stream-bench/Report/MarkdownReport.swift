// latest.md: one row per workload and client with median, range, ratio to baseline and target.

import Foundation

enum MarkdownReport {
    static func render(_ report: BenchmarkReport) -> String {
        let c = report.configuration
        var lines: [String] = []
        lines.append("# stream-bench results\(c.quick ? " (--quick)" : "")")
        lines.append("")
        lines.append("- Machine: `\(report.machine.uname)` · nproc \(report.machine.nproc) · \(report.machine.cpuModel)")
        let placement: String
        switch c.cpus {
        case "none": placement = "not pinned"
        default: placement = "client on CPU \(c.clientCPU), server on CPU \(c.serverCPU)"
        }
        let order = c.runsByWorkload == nil ? "" : "in a rotated order "
        lines.append("- Date: \(report.date) · \(report.runsDescription), alternating \(order)· CPUs: \(c.cpus) (\(placement))")
        lines.append(
            "- Figures are medians over runs (min–max). Ratio = ours ÷ baseline from the same run "
                + "(ping-pong: baseline µs ÷ ours), so higher is better everywhere; targets apply to the "
                + "SocketStreams clients.")
        let references = Set(report.workloads.map(\.referenceClient)).subtracting([ClientKind.baseline.rawValue])
        if !references.isEmpty {
            lines.append(
                "- The UDP rows' ratios are to \(references.sorted().joined(separator: ", ")) (recvmmsg/sendmmsg, 64 a call); "
                    + "loss is the share of the datagrams sent that never arrived (median, min–max).")
        }
        lines.append("")
        lines.append("| Workload | Client | Median | Min–max | Ratio to baseline (min–max) | Target | Met | Notes |")
        lines.append("|---|---|---:|---:|---:|---|---|---|")
        var met = 0
        var judged = 0
        for workload in report.workloads {
            for (index, result) in workload.results.enumerated() {
                let name = index == 0 ? workload.title : ""
                var cells = [name, result.client]
                if let s = result.summary {
                    cells.append(formatValue(s.median, unit: workload.unit))
                    cells.append("\(formatFigure(s.min, unit: workload.unit))–\(formatFigure(s.max, unit: workload.unit))")
                } else {
                    cells.append("FAILED")
                    cells.append("—")
                }
                if result.client == workload.referenceClient && workload.target.kind != "valueAtMost" {
                    cells.append("1.00")
                } else if let r = result.ratioToBaseline {
                    cells.append(
                        "\(formatNumber(r.median, decimals: 2)) (\(formatNumber(r.min, decimals: 2))–\(formatNumber(r.max, decimals: 2)))")
                } else {
                    cells.append("—")
                }
                let target = result.target ?? workload.target  // runs recorded before per-client goals
                let isOurs = (ClientKind(rawValue: result.client)?.isSocketStreams ?? false) && target.kind != "none"
                cells.append(isOurs ? target.label : "")
                if isOurs {
                    judged += 1
                    switch result.targetMet {
                    case true?:
                        cells.append("✅ met")
                        met += 1
                    case false?: cells.append("❌ unmet")
                    case nil: cells.append(result.error != nil ? "❌ failed" : "— (no baseline)")
                    }
                } else {
                    cells.append("")
                }
                cells.append(notes(workload, result))
                lines.append("| " + cells.map(escape).joined(separator: " | ") + " |")
            }
        }
        lines.append("")
        if judged > 0 { lines.append("Targets met: \(met) of \(judged).") }
        if !report.failures.isEmpty {
            lines.append("")
            lines.append("## Failures")
            lines.append("")
            for failure in report.failures { lines.append("- \(escape(failure))") }
        }
        lines.append("")
        return lines.joined(separator: "\n")
    }

    private static func notes(_ workload: WorkloadResult, _ result: ClientResult) -> String {
        var notes: [String] = []
        if let error = result.error { notes.append("FAILED: \(error)") }
        if let loss = Summary(result.samples.compactMap(\.lossFraction).map { $0 * 100 }) {
            let range = loss.max > loss.min ? " (\(formatNumber(loss.min, decimals: 1))–\(formatNumber(loss.max, decimals: 1)) %)" : ""
            notes.append("loss \(formatNumber(loss.median, decimals: 1)) %" + range)
            if let offered = Summary(result.samples.compactMap(\.offeredRate)) {
                let sender = workload.workload == Workload.udpFanin.rawValue ? "peers" : "blast"
                notes.append("\(sender) sent \(formatNumber(offered.median, decimals: 0))/s")
            }
            if let senders = Summary(result.samples.compactMap(\.datagramSenders).map(Double.init)) {
                notes.append("\(formatNumber(senders.min, decimals: 0)) senders")
            }
            if let drops = Summary(result.samples.compactMap(\.receiveBufferErrors).map(Double.init)) {
                notes.append("RcvbufErrors +\(formatNumber(drops.median, decimals: 0))")
            }
            let late = result.samples.compactMap(\.datagramsOutOfOrder).reduce(0, +)
            if late > 0 { notes.append("\(late) out of order") }
        }
        if workload.workload == "idle" {
            let none = result.samples.compactMap(\.anonNoneBytes)
            let open = result.samples.compactMap(\.anonOpenBytes)
            if let n = Summary(none.map(Double.init)), let o = Summary(open.map(Double.init)) {
                notes.append("anon RSS \(formatBytes(Int(n.median))) → \(formatBytes(Int(o.median)))")
            }
        } else if let peak = result.peakRSSBytes {
            notes.append("peak RSS \(formatBytes(Int(peak.median)))")
        }
        return notes.joined(separator: "; ")
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "|", with: "\\|").replacingOccurrences(of: "\n", with: " ")
    }
}
