// Median with min–max over runs, and per-run ratios to the baseline.

/// The median of a set of figures with their range.
struct Summary: Codable, Equatable {
    var median: Double
    var min: Double
    var max: Double

    /// nil for an empty set. The median of an even count is the mean of the middle two.
    init?(_ values: [Double]) {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        median = sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
        min = sorted.first!
        max = sorted.last!
    }
}

/// Ratio of a client's figure to the baseline's from the same run (same round of the A B C … order),
/// oriented so that higher is better: ours ÷ baseline for throughput, baseline ÷ ours for latency.
func ratiosToBaseline(_ samples: [Sample], baseline: [Sample], higherIsBetter: Bool) -> [Double] {
    var baselineByRun: [Int: Double] = [:]
    for sample in baseline { baselineByRun[sample.run] = sample.value }
    return samples.compactMap { sample in
        guard let reference = baselineByRun[sample.run], reference > 0, sample.value > 0 else { return nil }
        return higherIsBetter ? sample.value / reference : reference / sample.value
    }
}
