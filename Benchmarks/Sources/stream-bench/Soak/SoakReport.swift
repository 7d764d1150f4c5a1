// The soak's results: the judgement (fds and RSS flat from minute 2 to the end, no unexpected error,
// every lane busy) and the three files, soak.csv (every sample), soak.md (the summary) and soak.svg
// (the curves, SoakChart.swift).

import Foundation

struct SoakReport {
    var date: String
    var machine: MachineInfo
    var duration: Double
    var interval: Double
    var lanes: [SoakLane]
    var samples: [SoakSample]
    /// Before any lane started, and after the load stopped and everything in flight ended.
    var beforeLoad: SoakSample
    var afterDrain: SoakSample
    var drainSeconds: Double
    var drained: Bool
    var firstErrors: [SoakCounters.FirstError]
    /// Unexpected errors per lane by kind, at the end.
    var unexpected: [[String: Int]]

    /// Growth allowed from the settled start to the end: open fds (a count), VmRSS (a fraction).
    static let fdTolerance = 16.0
    static let rssTolerance = 0.10

    /// One figure over the run: the medians of its start window (from minute 2) and of its end
    /// window (the last minute), its maximum from minute 2 on, and its least-squares slope from there.
    struct Trend {
        var atSettle: Double
        var atEnd: Double
        var max: Double
        var slopePerMinute: Double

        var growth: Double { atEnd - atSettle }
    }

    /// When the process counts as settled: minute 2, or half of a run shorter than 4 minutes.
    var settleSeconds: Double { min(120, duration / 2) }

    /// The span whose median stands for "at minute 2" and for "at the end": a minute (shorter in a
    /// short run), never less than one sample interval. Medians, because a sample catches however
    /// many connections happen to be open at that instant.
    var windowSeconds: Double { max(interval, min(60, (duration - settleSeconds) / 3)) }

    private var settled: [SoakSample] { samples.filter { $0.seconds >= settleSeconds - interval / 2 } }

    func trend(_ value: (SoakSample) -> Double) -> Trend {
        let window = windowSeconds
        let settled = self.settled
        let startWindow = settled.filter { $0.seconds <= settleSeconds + window + interval / 2 }.map(value)
        let endWindow = settled.filter { $0.seconds >= duration - window - interval / 2 }.map(value)
        let points = settled.map { ($0.seconds / 60, value($0)) }
        return Trend(
            atSettle: Summary(startWindow)?.median ?? .nan, atEnd: Summary(endWindow)?.median ?? .nan,
            max: points.map(\.1).max() ?? .nan, slopePerMinute: Self.slope(points))
    }

    var fds: Trend { trend { Double($0.fds) } }
    var resident: Trend { trend { Double($0.residentBytes) } }
    var anonymous: Trend { trend { Double($0.anonymousBytes) } }
    var threads: Trend { trend { Double($0.threads) } }

    /// Why the soak failed; empty when it passed.
    var verdict: [String] {
        var reasons: [String] = []
        let fds = self.fds
        if !(fds.growth <= Self.fdTolerance) {
            reasons.append(
                "open fds grew from \(formatNumber(fds.atSettle, decimals: 0)) at \(settleLabel) to "
                    + "\(formatNumber(fds.atEnd, decimals: 0)) at the end (limit +\(Int(Self.fdTolerance)))")
        }
        let rss = resident
        if !(rss.atEnd <= rss.atSettle * (1 + Self.rssTolerance)) {
            reasons.append(
                "VmRSS grew from \(formatBytes(Int(rss.atSettle))) at \(settleLabel) to \(formatBytes(Int(rss.atEnd))) "
                    + "at the end (limit +\(Int(Self.rssTolerance * 100))%)")
        }
        // The listener's side has nothing to serve when --kinds leaves out every lane that uses it.
        for (lane, count) in zip(lanes, afterDrain.operations) where count == 0 && lane.kind != .served {
            reasons.append("\(lane.name) completed no operation")
        }
        let unexpected = afterDrain.unexpectedTotal
        if unexpected > 0 { reasons.append("\(unexpected) unexpected error(s)") }
        if !drained { reasons.append("operations were still in flight \(Int(drainSeconds)) s after the load stopped") }
        return reasons
    }

    var settleLabel: String { settleSeconds == 120 ? "minute 2" : formatMinutes(settleSeconds) }

    /// Least-squares slope of y over x; 0 for fewer than two distinct x.
    static func slope(_ points: [(Double, Double)]) -> Double {
        guard points.count > 1 else { return 0 }
        let n = Double(points.count)
        let meanX = points.map(\.0).reduce(0, +) / n
        let meanY = points.map(\.1).reduce(0, +) / n
        let sxx = points.reduce(0) { $0 + ($1.0 - meanX) * ($1.0 - meanX) }
        let sxy = points.reduce(0) { $0 + ($1.0 - meanX) * ($1.1 - meanY) }
        return sxx > 0 ? sxy / sxx : 0
    }

    /// Lanes in the order of their kinds, then as registered; with their indices into the samples.
    var orderedLanes: [(index: Int, lane: SoakLane)] {
        lanes.enumerated().map { (index: $0.offset, lane: $0.element) }.sorted {
            let a = SoakLane.Kind.allCases.firstIndex(of: $0.lane.kind)!
            let b = SoakLane.Kind.allCases.firstIndex(of: $1.lane.kind)!
            return a != b ? a < b : $0.index < $1.index
        }
    }

    // MARK: Files

    /// Writes soak.csv, soak.md and soak.svg into `directory`; returns the Markdown.
    func write(to directory: String) throws -> String {
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let markdown = self.markdown()
        try Data(csv().utf8).write(to: url.appendingPathComponent("soak.csv"))
        try Data(markdown.utf8).write(to: url.appendingPathComponent("soak.md"))
        try Data(SoakChart.render(self).utf8).write(to: url.appendingPathComponent("soak.svg"))
        return markdown
    }

    /// One row per sample; the operations per lane are cumulative.
    func csv() -> String {
        var header = ["seconds", "fds", "threads", "vmrss_kib", "rssanon_kib", "operations", "unexpected_errors"]
        header += orderedLanes.map { "ops \($0.lane.name)" }
        var lines = [header.joined(separator: ",")]
        for sample in samples {
            var cells = [
                String(format: "%.1f", sample.seconds), "\(sample.fds)", "\(sample.threads)",
                "\(sample.residentBytes / 1024)", "\(sample.anonymousBytes / 1024)",
                "\(sample.operationTotal)", "\(sample.unexpectedTotal)",
            ]
            cells += orderedLanes.map { "\(sample.operations[$0.index])" }
            lines.append(cells.joined(separator: ","))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    func markdown() -> String {
        let fds = self.fds
        let rss = resident
        let anon = anonymous
        let threads = self.threads
        let verdict = self.verdict
        let window = "median of \(formatNumber(windowSeconds, decimals: 0)) s"
        var lines: [String] = []
        lines.append("# stream-bench soak")
        lines.append("")
        lines.append("- Machine: `\(machine.uname)` · nproc \(machine.nproc) · \(machine.cpuModel)")
        lines.append(
            "- Date: \(date) · \(formatMinutes(duration)) min of mixed load in one process, a sample every "
                + "\(formatNumber(interval, decimals: 1)) s (\(samples.count) samples)")
        lines.append(
            "- Result: "
                + (verdict.isEmpty
                    ? "**passed**: fds and VmRSS flat from \(settleLabel) to the end (limits +\(Int(Self.fdTolerance)) fds, "
                        + "+\(Int(Self.rssTolerance * 100))% VmRSS), no unexpected error"
                    : "**FAILED**: " + verdict.joined(separator: "; ")))
        lines.append("")
        lines.append("![fds, RSS, threads and operations over time](soak.svg)")
        lines.append("")
        lines.append(
            "| | Before the load | At \(settleLabel) (\(window)) | At the end (\(window)) | Growth | Max from \(settleLabel) "
                + "| Slope from \(settleLabel) | After the drain |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        func count(_ value: Double) -> String { formatNumber(value, decimals: value == value.rounded() ? 0 : 1) }
        func signed(_ text: String, _ value: Double) -> String { (value >= 0 ? "+" : "") + text }
        lines.append(
            "| Open fds | \(beforeLoad.fds) | \(count(fds.atSettle)) | \(count(fds.atEnd)) | "
                + signed(count(fds.growth), fds.growth) + " | \(count(fds.max)) | "
                + signed(formatNumber(fds.slopePerMinute, decimals: 3), fds.slopePerMinute) + " /min | \(afterDrain.fds) |")
        for (name, trend, before, after) in [
            ("VmRSS", rss, beforeLoad.residentBytes, afterDrain.residentBytes),
            ("RssAnon", anon, beforeLoad.anonymousBytes, afterDrain.anonymousBytes),
        ] {
            let percent = trend.atSettle > 0 ? trend.growth / trend.atSettle * 100 : 0
            lines.append(
                "| \(name) | \(mebibytes(Double(before))) | \(mebibytes(trend.atSettle)) | \(mebibytes(trend.atEnd)) | "
                    + signed("\(formatNumber(percent, decimals: 1))%", percent) + " | \(mebibytes(trend.max)) | "
                    + signed(formatNumber(trend.slopePerMinute / 1024, decimals: 1), trend.slopePerMinute) + " KiB/min | "
                    + "\(mebibytes(Double(after))) |")
        }
        lines.append(
            "| Threads | \(beforeLoad.threads) | \(count(threads.atSettle)) | \(count(threads.atEnd)) | "
                + signed(count(threads.growth), threads.growth) + " | \(count(threads.max)) | "
                + signed(formatNumber(threads.slopePerMinute, decimals: 3), threads.slopePerMinute) + " /min | \(afterDrain.threads) |")
        lines.append("")
        lines.append(
            "Before the load: the epoll server, the listeners and the soak's threads are up, no lane has started. "
                + "After the drain: the lanes stopped opening connections, the ones in flight ended "
                + "(\(drained ? "after \(formatNumber(drainSeconds, decimals: 1)) s" : "NOT within \(Int(drainSeconds)) s")), "
                + "and a second passed.")
        lines.append("")
        let kindSamples = [
            ("Before the load", beforeLoad.fdKinds), ("Last sample", samples.last?.fdKinds), ("After the drain", afterDrain.fdKinds),
        ]
        let fdKinds = Set(kindSamples.flatMap { $0.1?.keys.map { $0 } ?? [] }).sorted()
        if !fdKinds.isEmpty {
            lines.append("| Open fds by kind | " + fdKinds.map { "`\($0)`" }.joined(separator: " | ") + " |")
            lines.append("|---|" + fdKinds.map { _ in "---:|" }.joined())
            for (name, kinds) in kindSamples {
                guard let kinds else { continue }
                lines.append("| \(name) | " + fdKinds.map { "\(kinds[$0] ?? 0)" }.joined(separator: " | ") + " |")
            }
            lines.append("")
        }

        lines.append("## Operations")
        lines.append("")
        let total = afterDrain.operationTotal
        lines.append(
            "\(formatNumber(Double(total), decimals: 0)) operations, \(formatNumber(Double(total) / duration, decimals: 0)) per second. "
                + "An operation of a refused or reset lane is complete when it ended with that lane's expected error; "
                + "any other error is unexpected and fails the soak.")
        lines.append("")
        lines.append("| Kind | Operations | Expected errors | Unexpected errors |")
        lines.append("|---|---:|---:|---:|")
        for kind in SoakLane.Kind.allCases {
            let members = orderedLanes.filter { $0.lane.kind == kind }
            guard !members.isEmpty else { continue }
            let operations = members.reduce(0) { $0 + afterDrain.operations[$1.index] }
            let expected = members.filter { $0.lane.expectedError != nil }.reduce(0) { $0 + afterDrain.operations[$1.index] }
            let errorName = members.compactMap(\.lane.expectedError).first
            let unexpected = errorCounts(members.map(\.index))
            lines.append(
                "| \(kind.rawValue) | \(formatNumber(Double(operations), decimals: 0)) | "
                    + (errorName.map { "\(formatNumber(Double(expected), decimals: 0)) \($0)" } ?? "—") + " | \(unexpected) |")
        }
        lines.append("")
        lines.append("| Lane (kind/style/peer) | Operations | Per second | Expected error | Unexpected errors |")
        lines.append("|---|---:|---:|---|---:|")
        for (index, lane) in orderedLanes {
            let operations = afterDrain.operations[index]
            lines.append(
                "| \(lane.name) | \(formatNumber(Double(operations), decimals: 0)) | "
                    + "\(formatNumber(Double(operations) / duration, decimals: 1)) | \(lane.expectedError ?? "—") | \(errorCounts([index])) |"
            )
        }
        lines.append("")
        lines.append(
            "Styles: delegate = Apple's guide on the soak's own run loop thread; thread = `RunLoop.socketStreams`; "
                + "queue = `CFReadStreamSetDispatchQueue`; polling = blocking calls on unscheduled pairs; listener = the "
                + "pairs a `StreamListener` accepted (served by the library, the server side of the listener lanes). "
                + "Peers: server = the epoll server process (raw sockets, OpenSSL for TLS); listener = the soak's "
                + "`StreamListener`s on 127.0.0.1, ::1 and 127.0.0.1 with TLS.")
        if !firstErrors.isEmpty {
            lines.append("")
            lines.append("## Unexpected errors (the first of each kind per lane)")
            lines.append("")
            for error in firstErrors.prefix(40) {
                lines.append("- \(formatMinutes(error.seconds)) \(error.lane), \(error.kind): \(error.message)")
            }
        }
        lines.append("")
        return lines.joined(separator: "\n")
    }

    /// "0", or "3 (2 ECONNRESET, 1 short read)" for the lanes at `indices`.
    private func errorCounts(_ indices: [Int]) -> String {
        var merged: [String: Int] = [:]
        for index in indices { merged.merge(unexpected[index], uniquingKeysWith: +) }
        let total = merged.values.reduce(0, +)
        guard total > 0 else { return "0" }
        return "\(total) (" + merged.sorted { $0.value > $1.value }.map { "\($0.value) \($0.key)" }.joined(separator: ", ") + ")"
    }

    private func mebibytes(_ bytes: Double) -> String {
        bytes.isFinite ? "\(formatNumber(bytes / 1_048_576, decimals: 1)) MiB" : "—"
    }
}
