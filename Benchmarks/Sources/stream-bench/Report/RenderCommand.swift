// `stream-bench render FILE.json [--out DIR]`: regenerates latest.md, latest.json and ratios.svg
// from a saved latest.json (e.g. after changing the chart), without measuring anything.

import Foundation

enum RenderCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var input: String?
        var output: String?
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            if argument == "--out" {
                output = iterator.next()
            } else if input == nil {
                input = argument
            } else {
                Posix.printError("stream-bench render: unexpected argument \(argument)")
                return 2
            }
        }
        guard let input else {
            Posix.printError("usage: stream-bench render FILE.json [--out DIR]")
            return 2
        }
        do {
            let report = try JSONDecoder().decode(BenchmarkReport.self, from: Data(contentsOf: URL(fileURLWithPath: input)))
            let directory = output ?? URL(fileURLWithPath: input).deletingLastPathComponent().path
            print(try ReportWriter.write(report, to: directory))
            return 0
        } catch {
            Posix.printError("stream-bench render: \(error)")
            return 1
        }
    }
}
