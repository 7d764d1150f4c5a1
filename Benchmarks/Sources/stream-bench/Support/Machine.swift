// Describes the machine a report was measured on.

import Foundation
import Glibc

struct MachineInfo: Codable, Equatable {
    /// `uname -srvm`.
    var uname: String
    /// Online CPUs (what `nproc --all` reports).
    var nproc: Int
    /// "model name" from /proc/cpuinfo.
    var cpuModel: String
    var hostname: String

    static func current() -> MachineInfo {
        var info = utsname()
        _ = Glibc.uname(&info)
        let fields = [
            field(&info.sysname), field(&info.release), field(&info.version), field(&info.machine),
        ]
        let cpuinfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model =
            cpuinfo.split(separator: "\n")
            .first { $0.hasPrefix("model name") }
            .flatMap { $0.split(separator: ":", maxSplits: 1).last }
            .map { $0.trimmingCharacters(in: .whitespaces) } ?? "unknown"
        return MachineInfo(
            uname: fields.joined(separator: " "), nproc: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))),
            cpuModel: model, hostname: field(&info.nodename))
    }

    /// A fixed-size C `char[]` field of `utsname` as a String.
    private static func field<T>(_ tuple: inout T) -> String {
        withUnsafeBytes(of: &tuple) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    var summary: String {
        "\(uname) · nproc \(nproc) · \(cpuModel)"
    }
}
