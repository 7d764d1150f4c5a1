// soak.svg: the soak's curves over time in three panels (open fds and threads; VmRSS and RssAnon;
// operations per second), the settling time shaded, the limits dashed in red from minute 2 on, and
// the machine in the footer. Plain SVG text, like Report/SVGChart.swift.

import Foundation

enum SoakChart {
    private static let width = 960.0
    private static let left = 70.0
    private static let right = 90.0
    private static let panelHeight = 190.0

    private struct Series {
        var name: String
        var color: String
        var values: [Double]
    }

    static func render(_ report: SoakReport) -> String {
        var body: [String] = []
        var y = 28.0
        body.append(
            text(
                left, y, "stream-bench soak: \(formatMinutes(report.duration)) min of mixed load, one process",
                size: 18, weight: "bold"))
        y += 20
        let verdict = report.verdict
        body.append(
            text(
                left, y,
                verdict.isEmpty
                    ? "Passed: open fds and VmRSS flat from \(report.settleLabel) to the end; no unexpected error."
                    : "FAILED: " + verdict.joined(separator: "; "),
                size: 12, fill: verdict.isEmpty ? "#2ca02c" : "#d62728"))

        let samples = report.samples
        let fds = report.fds
        let rss = report.resident
        y = panel(
            report, top: y + 30, title: "Open file descriptors and threads", unit: "", into: &body,
            series: [
                Series(name: "open fds", color: "#1f77b4", values: samples.map { Double($0.fds) }),
                Series(name: "threads", color: "#ff7f0e", values: samples.map { Double($0.threads) }),
            ],
            limit: (fds.atSettle + SoakReport.fdTolerance, "limit +\(Int(SoakReport.fdTolerance))"))
        let mebibyte = 1_048_576.0
        y = panel(
            report, top: y + 30, title: "Resident memory", unit: "MiB", into: &body,
            series: [
                Series(name: "VmRSS", color: "#1f77b4", values: samples.map { Double($0.residentBytes) / mebibyte }),
                Series(name: "RssAnon", color: "#2ca02c", values: samples.map { Double($0.anonymousBytes) / mebibyte }),
            ],
            limit: (rss.atSettle * (1 + SoakReport.rssTolerance) / mebibyte, "limit +\(Int(SoakReport.rssTolerance * 100))%"))
        var rates: [Double] = []
        for (index, sample) in samples.enumerated() {
            guard index > 0 else {
                rates.append(.nan)
                continue
            }
            let previous = samples[index - 1]
            let seconds = sample.seconds - previous.seconds
            rates.append(seconds > 0 ? Double(sample.operationTotal - previous.operationTotal) / seconds : .nan)
        }
        let unexpected = samples.map { Double($0.unexpectedTotal) }
        y = panel(
            report, top: y + 30, title: "Operations per second (every lane)", unit: "", into: &body,
            series: [
                Series(name: "operations/s", color: "#7f7f7f", values: rates),
                Series(name: "unexpected errors (total)", color: "#d62728", values: unexpected),
            ],
            limit: nil)

        y += 30
        let m = report.machine
        body.append(text(left, y, "Measured on: \(m.uname)", size: 11, fill: "#333"))
        y += 16
        body.append(
            text(
                left, y,
                "nproc \(m.nproc) · CPU: \(m.cpuModel) · a sample every \(formatNumber(report.interval, decimals: 1)) s "
                    + "· figures at \(report.settleLabel) and at the end are medians of \(formatNumber(report.windowSeconds, decimals: 0)) s "
                    + "· \(report.date)", size: 11, fill: "#333"))
        y += 20
        return SVGChart.document(width: width, height: y, body: body)
    }

    /// One panel: y from 0, x in minutes, the settling time shaded, an optional dashed limit from
    /// the settled start on. Returns the y below it.
    private static func panel(
        _ report: SoakReport, top: Double, title: String, unit: String, into body: inout [String],
        series: [Series], limit: (value: Double, label: String)?
    ) -> Double {
        let plotWidth = width - left - right
        let plotTop = top + 14
        let bottom = plotTop + panelHeight
        body.append(text(left, top, title + (unit.isEmpty ? "" : " (\(unit))"), size: 14, weight: "bold"))
        let highest = (series.flatMap(\.values).filter(\.isFinite) + [limit?.value ?? 0]).max() ?? 1
        let step = niceStep(max(highest, 1) * 1.1 / 5)
        let yMax = (max(highest, 1) * 1.1 / step).rounded(.up) * step
        let minutes = report.duration / 60
        func xFor(_ seconds: Double) -> Double { left + seconds / 60 / minutes * plotWidth }
        func yFor(_ value: Double) -> Double { bottom - value / yMax * panelHeight }

        body.append(
            "<rect x=\"\(f(left))\" y=\"\(f(plotTop))\" width=\"\(f(xFor(report.settleSeconds) - left))\" height=\"\(f(panelHeight))\" fill=\"#f2f2f2\"/>"
        )
        body.append(text(left + 4, plotTop + 12, "settling", size: 10, fill: "#777"))
        var tick = 0.0
        while tick <= yMax + 1e-9 {
            body.append(
                "<line x1=\"\(f(left))\" y1=\"\(f(yFor(tick)))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(yFor(tick)))\" stroke=\"#e5e5e5\"/>"
            )
            body.append(
                text(left - 8, yFor(tick) + 4, formatNumber(tick, decimals: step < 1 ? 1 : 0), size: 11, anchor: "end", fill: "#555"))
            tick += step
        }
        let xStep = niceStep(minutes / 8)
        var minute = 0.0
        while minute <= minutes + 1e-9 {
            let x = xFor(minute * 60)
            body.append("<line x1=\"\(f(x))\" y1=\"\(f(bottom))\" x2=\"\(f(x))\" y2=\"\(f(bottom + 4))\" stroke=\"#333\"/>")
            body.append(text(x, bottom + 16, formatNumber(minute, decimals: xStep < 1 ? 1 : 0), size: 11, anchor: "middle", fill: "#555"))
            minute += xStep
        }
        body.append(text(left + plotWidth / 2, bottom + 30, "minutes", size: 11, anchor: "middle", fill: "#555"))
        body.append("<line x1=\"\(f(left))\" y1=\"\(f(plotTop))\" x2=\"\(f(left))\" y2=\"\(f(bottom))\" stroke=\"#333\"/>")
        body.append("<line x1=\"\(f(left))\" y1=\"\(f(bottom))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(bottom))\" stroke=\"#333\"/>")

        if let limit, limit.value.isFinite {
            let y = yFor(limit.value)
            body.append(
                "<line x1=\"\(f(xFor(report.settleSeconds)))\" y1=\"\(f(y))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(y))\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>"
            )
            body.append(text(left + plotWidth + 6, y + 4, limit.label, size: 10, fill: "#d62728"))
        }
        for (index, line) in series.enumerated() {
            let points = zip(report.samples, line.values).filter { $0.1.isFinite }
                .map { "\(f(xFor($0.0.seconds))),\(f(yFor($0.1)))" }
            if !points.isEmpty {
                body.append(
                    "<polyline fill=\"none\" stroke=\"\(line.color)\" stroke-width=\"1.5\" points=\"\(points.joined(separator: " "))\"/>")
            }
            // The legend, on the title's line.
            let legendX = left + 360 + Double(series[..<index].reduce(0) { $0 + $1.name.count }) * 6.5 + Double(index) * 40
            body.append("<rect x=\"\(f(legendX))\" y=\"\(f(top - 5))\" width=\"14\" height=\"3\" fill=\"\(line.color)\"/>")
            body.append(text(legendX + 18, top, line.name, size: 11))
        }
        return bottom + 34
    }

    /// 1, 2 or 5 times a power of ten, at least `raw`.
    private static func niceStep(_ raw: Double) -> Double {
        guard raw > 0, raw.isFinite else { return 1 }
        let power = pow(10, floor(log10(raw)))
        for factor in [1.0, 2.0, 5.0, 10.0] where factor * power >= raw { return factor * power }
        return 10 * power
    }

    private static func text(
        _ x: Double, _ y: Double, _ content: String, size: Int, anchor: String = "start",
        weight: String = "normal", fill: String = "#111"
    ) -> String {
        SVGChart.text(x, y, content, size: size, anchor: anchor, weight: weight, fill: fill)
    }

    private static func f(_ value: Double) -> String { SVGChart.f(value) }
}
