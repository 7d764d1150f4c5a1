// Number formatting shared by the progress lines, the Markdown table and the SVG chart.

import Foundation

/// `value` with `decimals` decimals and thousands separators ("12,345.6").
func formatNumber(_ value: Double, decimals: Int) -> String {
    guard value.isFinite else { return "—" }
    let text = String(format: "%.\(decimals)f", abs(value))
    let parts = text.split(separator: ".", omittingEmptySubsequences: false)
    var integer = String(parts[0])
    var grouped = ""
    while integer.count > 3 {
        grouped = "," + integer.suffix(3) + grouped
        integer.removeLast(3)
    }
    grouped = integer + grouped
    if parts.count > 1 { grouped += "." + parts[1] }
    return (value < 0 && text.contains(where: { $0 != "0" && $0 != "." }) ? "-" : "") + grouped
}

/// A workload figure without its unit, with precision suited to the unit.
func formatFigure(_ value: Double, unit: String) -> String {
    switch unit {
    case "GB/s": return formatNumber(value, decimals: 2)
    case "µs/RT": return formatNumber(value, decimals: 2)
    default: return formatNumber(value, decimals: 0)
    }
}

func formatValue(_ value: Double, unit: String) -> String {
    "\(formatFigure(value, unit: unit)) \(unit)"
}

/// 1 GiB, 8 MiB, 64 KiB, 12 B (exact binary multiples), otherwise one decimal.
func formatBytes(_ bytes: Int) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var index = 0
    while abs(value) >= 1024 && index < units.count - 1 {
        value /= 1024
        index += 1
    }
    let decimals = value == value.rounded() ? 0 : 1
    return "\(formatNumber(value, decimals: decimals)) \(units[index])"
}
