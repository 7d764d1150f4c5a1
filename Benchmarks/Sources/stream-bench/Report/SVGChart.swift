// ratios.svg: grouped bars of each client's median ratio to the baseline (whiskers: min–max over
// runs), a dashed target line per workload, a panel for memory per open idle pair, and the machine
// it was measured on. Plain SVG text, no dependency.

import Foundation

enum SVGChart {
    private static let width = 960.0
    private static let left = 70.0
    private static let right = 80.0
    private static let plotHeight = 300.0

    private static let colors: [String: String] = [
        "baseline": "#7f7f7f",
        "streams-delegate": "#1f77b4",
        "streams-thread": "#ff7f0e",
        "streams-queue": "#17becf",
        "streams-polling": "#2ca02c",
        "streams-async": "#d62728",
        "streams-queued": "#8c564b",
        "filehandle": "#9467bd",
        "baseline-udp": "#bcbd22",
        "baseline-udp-batch": "#525252",
        "gcdasyncudpsocket": "#e377c2",
    ]

    private static func color(_ client: String) -> String { colors[client] ?? "#444444" }

    static func render(_ report: BenchmarkReport) -> String {
        var body: [String] = []
        var y = 0.0

        y += 28
        body.append(text(left, y, "SocketStreams vs raw sockets: ratio to baseline (higher is better)", size: 18, weight: "bold"))
        y += 20
        body.append(
            text(
                left, y,
                "Median of \(report.runsDescription); whiskers min–max; "
                    + "dashed red line: target. Ping-pong ratio = baseline µs ÷ ours.", size: 12, fill: "#555"))

        // One slot per non-baseline client that ran the workload; failed ones are drawn as failed.
        let hasBaseline = report.configuration.clients.contains("baseline")
        let ratioGroups = report.workloads.filter { $0.target.kind == "ratioAtLeast" }.compactMap {
            workload -> (WorkloadResult, [ClientResult])? in
            let bars = workload.results.filter { $0.client != "baseline" && ($0.ratioToBaseline != nil || $0.error != nil) }
            return bars.isEmpty || !hasBaseline ? nil : (workload, bars)
        }
        let plotTop = y + 30
        if ratioGroups.isEmpty {
            y = plotTop + 20
            body.append(text(left, y, "No ratios to plot: run the baseline together with at least one other client.", size: 13))
            y += 20
        } else {
            y = renderRatioPanel(ratioGroups, top: plotTop, into: &body)
        }

        let clients = report.configuration.clients
        y += 10
        var x = left
        for client in clients {
            body.append("<rect x=\"\(f(x))\" y=\"\(f(y - 10))\" width=\"12\" height=\"12\" fill=\"\(color(client))\"/>")
            body.append(text(x + 16, y, client, size: 12))
            x += 28 + Double(client.count) * 7
        }
        y += 20

        if let idle = report.workloads.first(where: { $0.workload == "idle" }) {
            y = renderMemoryPanel(idle, top: y + 20, into: &body)
        }

        y += 30
        let m = report.machine
        let c = report.configuration
        body.append(text(left, y, "Measured on: \(m.uname)", size: 11, fill: "#333"))
        y += 16
        body.append(
            text(
                left, y,
                "nproc \(m.nproc) · CPU: \(m.cpuModel) · CPUs: \(c.cpus) (client \(c.clientCPU), server \(c.serverCPU))"
                    + (c.quick ? " · --quick" : "") + " · \(report.date)", size: 11, fill: "#333"))
        y += 20

        return document(width: width, height: y, body: body)
    }

    /// Returns the y below the panel (after the group labels).
    private static func renderRatioPanel(_ groups: [(WorkloadResult, [ClientResult])], top: Double, into body: inout [String]) -> Double {
        let plotWidth = width - left - right
        let bottom = top + plotHeight
        let highest = groups.flatMap { $0.1.compactMap { $0.ratioToBaseline?.max } }.max() ?? 1
        let step = highest > 2.2 ? 0.5 : 0.2
        let yMax = (max(1.2, highest * 1.08) / step).rounded(.up) * step
        func yFor(_ ratio: Double) -> Double { bottom - ratio / yMax * plotHeight }

        var tick = 0.0
        while tick <= yMax + 1e-9 {
            let y = yFor(tick)
            body.append("<line x1=\"\(f(left))\" y1=\"\(f(y))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(y))\" stroke=\"#e5e5e5\"/>")
            body.append(text(left - 8, y + 4, formatNumber(tick, decimals: 1), size: 11, anchor: "end", fill: "#555"))
            tick += step
        }
        body.append(
            "<line x1=\"\(f(left))\" y1=\"\(f(yFor(1)))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(yFor(1)))\" stroke=\"#333\" stroke-width=\"1.5\"/>"
        )
        body.append(text(left + plotWidth + 6, yFor(1) + 4, "baseline", size: 11, fill: "#333"))
        body.append("<line x1=\"\(f(left))\" y1=\"\(f(top))\" x2=\"\(f(left))\" y2=\"\(f(bottom))\" stroke=\"#333\"/>")
        body.append("<line x1=\"\(f(left))\" y1=\"\(f(bottom))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(bottom))\" stroke=\"#333\"/>")
        body.append(
            text(
                18, top + plotHeight / 2, "ratio to baseline", size: 12, anchor: "middle",
                extra: " transform=\"rotate(-90 18 \(f(top + plotHeight / 2)))\""))

        let groupWidth = plotWidth / Double(groups.count)
        for (index, (workload, bars)) in groups.enumerated() {
            let groupLeft = left + Double(index) * groupWidth
            let barWidth = min(36, (groupWidth - 24) / Double(bars.count))
            let barsLeft = groupLeft + (groupWidth - barWidth * Double(bars.count)) / 2
            for (b, result) in bars.enumerated() {
                let x = barsLeft + Double(b) * barWidth
                let center = x + barWidth / 2
                guard let ratio = result.ratioToBaseline else {
                    body.append(
                        text(
                            center + 4, bottom - 6, "✗ failed", size: 11, anchor: "start", fill: "#d62728",
                            extra: " transform=\"rotate(-90 \(f(center + 4)) \(f(bottom - 6)))\""))
                    continue
                }
                let top = yFor(min(ratio.median, yMax))
                let opacity = result.error == nil ? "" : " fill-opacity=\"0.35\""
                body.append(
                    "<rect x=\"\(f(x + 2))\" y=\"\(f(top))\" width=\"\(f(barWidth - 4))\" height=\"\(f(bottom - top))\" fill=\"\(color(result.client))\"\(opacity)><title>\(escape(result.client)): \(formatNumber(ratio.median, decimals: 2)) (\(formatNumber(ratio.min, decimals: 2))–\(formatNumber(ratio.max, decimals: 2)))\(result.error == nil ? "" : "; a run failed")</title></rect>"
                )
                if ratio.max > ratio.min {
                    let y1 = yFor(min(ratio.min, yMax))
                    let y2 = yFor(min(ratio.max, yMax))
                    body.append("<line x1=\"\(f(center))\" y1=\"\(f(y1))\" x2=\"\(f(center))\" y2=\"\(f(y2))\" stroke=\"#222\"/>")
                    body.append("<line x1=\"\(f(center - 4))\" y1=\"\(f(y1))\" x2=\"\(f(center + 4))\" y2=\"\(f(y1))\" stroke=\"#222\"/>")
                    body.append("<line x1=\"\(f(center - 4))\" y1=\"\(f(y2))\" x2=\"\(f(center + 4))\" y2=\"\(f(y2))\" stroke=\"#222\"/>")
                }
                body.append(
                    text(
                        center, yFor(min(max(ratio.median, ratio.max), yMax)) - 5,
                        formatNumber(ratio.median, decimals: 2) + (result.error == nil ? "" : " ✗"),
                        size: 10, anchor: "middle", fill: result.error == nil ? "#111" : "#d62728"))
            }
            if workload.target.value <= yMax {
                let y = yFor(workload.target.value)
                body.append(
                    "<line x1=\"\(f(groupLeft + 6))\" y1=\"\(f(y))\" x2=\"\(f(groupLeft + groupWidth - 6))\" y2=\"\(f(y))\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>"
                )
            }
            body.append(text(groupLeft + groupWidth / 2, bottom + 18, workload.workload, size: 12, anchor: "middle", weight: "bold"))
            body.append(
                text(
                    groupLeft + groupWidth / 2, bottom + 33, "target \(workload.target.label)", size: 10,
                    anchor: "middle", fill: "#d62728"))
        }
        return bottom + 50
    }

    /// Horizontal bars of bytes per idle pair against the absolute target.
    private static func renderMemoryPanel(_ idle: WorkloadResult, top: Double, into body: inout [String]) -> Double {
        let rows = idle.results.filter { $0.summary != nil || $0.error != nil }
        body.append(
            text(
                left, top, "Memory per open idle pair (\(idle.title); target \(idle.target.label), lower is better)",
                size: 14, weight: "bold"))
        var y = top + 12
        guard !rows.isEmpty else {
            body.append(text(left, y + 14, "no figures", size: 12))
            return y + 24
        }
        let labelWidth = 130.0
        let barLeft = left + labelWidth
        let barSpace = width - right - barLeft - 90
        let highest = rows.filter { $0.error == nil }.compactMap { $0.summary?.max }.max() ?? 0
        let scaleMax = max(idle.target.value * 1.5, highest * 1.1)
        func xFor(_ bytes: Double) -> Double { barLeft + max(0, bytes) / scaleMax * barSpace }
        for result in rows {
            y += 22
            body.append(text(barLeft - 8, y + 4, result.client, size: 12, anchor: "end"))
            guard let s = result.summary, result.error == nil else {
                body.append(text(barLeft + 4, y + 4, "✗ failed", size: 11, fill: "#d62728"))
                continue
            }
            body.append(
                "<rect x=\"\(f(barLeft))\" y=\"\(f(y - 8))\" width=\"\(f(xFor(s.median) - barLeft))\" height=\"14\" fill=\"\(color(result.client))\"/>"
            )
            body.append(text(xFor(s.median) + 6, y + 4, "\(formatNumber(s.median, decimals: 0)) B", size: 11))
        }
        let targetX = xFor(idle.target.value)
        body.append(
            "<line x1=\"\(f(targetX))\" y1=\"\(f(top + 14))\" x2=\"\(f(targetX))\" y2=\"\(f(y + 12))\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>"
        )
        body.append(text(targetX + 4, y + 24, idle.target.label, size: 10, fill: "#d62728"))
        return y + 30
    }

    /// A whole SVG document of `width` × `height` on a white background (this chart's and the soak's).
    static func document(width: Double, height: Double, body: [String]) -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <svg xmlns="http://www.w3.org/2000/svg" width="\(f(width))" height="\(f(height))" viewBox="0 0 \(f(width)) \(f(height))" font-family="Helvetica, Arial, sans-serif">
        <rect width="100%" height="100%" fill="white"/>
        \(body.joined(separator: "\n"))
        </svg>

        """
    }

    /// An SVG `<text>` element (escaped content).
    static func text(
        _ x: Double, _ y: Double, _ content: String, size: Int, anchor: String = "start",
        weight: String = "normal", fill: String = "#111", extra: String = ""
    ) -> String {
        "<text x=\"\(f(x))\" y=\"\(f(y))\" font-size=\"\(size)\" text-anchor=\"\(anchor)\" font-weight=\"\(weight)\" fill=\"\(fill)\"\(extra)>\(escape(content))</text>"
    }

    /// A coordinate with one decimal.
    static func f(_ value: Double) -> String { String(format: "%.1f", value) }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
