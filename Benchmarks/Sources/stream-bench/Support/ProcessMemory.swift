// Resident memory (and the thread count) of the calling process, from /proc/self/status (with
// getrusage as a fallback for kernels, such as gVisor's, whose status file lacks a field).

import Foundation
import Glibc

/// Resident memory at one moment.
struct MemorySnapshot {
    /// VmRSS: everything resident, including shared-library code faulted in on first use.
    var residentBytes: Int
    /// RssAnon: anonymous resident memory (heap, stacks); VmRSS where the kernel does not report it.
    /// Per-connection memory shows up here; one-time code page-ins do not.
    var anonymousBytes: Int
}

enum ProcessMemory {
    static func snapshot() throws -> MemorySnapshot {
        let fields = try statusFields()
        guard let resident = fields["VmRSS"] else { throw BenchError("VmRSS not found in /proc/self/status") }
        return MemorySnapshot(residentBytes: resident, anonymousBytes: fields["RssAnon"] ?? resident)
    }

    /// VmHWM: peak resident set size of this process ("high water mark"), in bytes.
    static func peakResidentBytes() throws -> Int {
        if let peak = try statusFields()["VmHWM"] { return peak }
        var usage = rusage()
        guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage) == 0 else { throw BenchError.syscall("getrusage", errno: errno) }
        return usage.ru_maxrss * 1024
    }

    /// The threads of this process ("Threads:" in /proc/self/status); nil where the kernel does not
    /// report it.
    static func threadCount() throws -> Int? {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Threads:") }) else { return nil }
        return Int(line.dropFirst("Threads:".count).trimmingCharacters(in: .whitespaces))
    }

    /// "Name:   12345 kB" lines of /proc/self/status, in bytes.
    private static func statusFields() throws -> [String: Int] {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        var fields: [String: Int] = [:]
        for line in status.split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == ":" || $0 == " " || $0 == "\t" })
            if parts.count == 3, parts[2] == "kB", let kilobytes = Int(parts[1]) {
                fields[String(parts[0])] = kilobytes * 1024
            }
        }
        return fields
    }
}
