// Writes the three result files.

import Foundation

/// Writes latest.md, latest.json and ratios.svg into a directory; returns the Markdown.
enum ReportWriter {
    static func write(_ report: BenchmarkReport, to directory: String) throws -> String {
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let markdown = MarkdownReport.render(report)
        try Data(markdown.utf8).write(to: url.appendingPathComponent("latest.md"))
        try JSONReport.encode(report).write(to: url.appendingPathComponent("latest.json"))
        try Data(SVGChart.render(report).utf8).write(to: url.appendingPathComponent("ratios.svg"))
        return markdown
    }
}
