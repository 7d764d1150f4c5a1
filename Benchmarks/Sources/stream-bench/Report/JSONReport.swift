// latest.json: every raw sample plus the derived summaries (see Results.swift for the schema).

import Foundation

enum JSONReport {
    static func encode(_ report: BenchmarkReport) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(report) + Data("\n".utf8)
    }
}
