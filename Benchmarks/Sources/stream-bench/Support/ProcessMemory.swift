// Resident memory of the calling process, from /proc/self/status.

import Foundation

enum ProcessMemory {
    /// VmRSS: resident set size now, in bytes.
    static func residentBytes() throws -> Int {
        try statusField("VmRSS")
    }

    /// VmHWM: peak resident set size ("high water mark") of this process, in bytes.
    static func peakResidentBytes() throws -> Int {
        try statusField("VmHWM")
    }

    private static func statusField(_ name: String) throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        for line in status.split(separator: "\n") where line.hasPrefix(name + ":") {
            // "VmRSS:	   12345 kB"
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if fields.count >= 2, let kilobytes = Int(fields[1]) {
                return kilobytes * 1024
            }
        }
        throw BenchError("\(name) not found in /proc/self/status")
    }
}
