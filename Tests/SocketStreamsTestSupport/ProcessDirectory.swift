// A directory a test process makes once and shares (the test PKI, the TLS corpus).

import Foundation
import Glibc

/// A temporary directory named with the test process's id (`<prefix>-<pid>`), removed when the
/// process exits; the directories of the same prefix left by processes that are gone (a crash, a
/// kill, a runner that stopped it) are removed when the next process makes its own.
package enum ProcessDirectory {
    private static let made = Locked<[URL]>([])

    /// A new, empty directory for this process.
    package static func make(prefix: String) throws -> URL {
        let temporary = URL(fileURLWithPath: NSTemporaryDirectory())
        removeLeftOvers(prefix: prefix, in: temporary)
        let directory = temporary.appendingPathComponent("\(prefix)-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let first = made.mutate { made -> Bool in
            made.append(directory)
            return made.count == 1
        }
        if first { atexit { ProcessDirectory.removeAll() } }
        return directory
    }

    private static func removeAll() {
        for directory in made.value { try? FileManager.default.removeItem(at: directory) }
    }

    /// Removes `<prefix>-<pid>` directories whose process no longer exists (`kill(pid, 0)` fails with
    /// ESRCH; EPERM means it exists, as another user's).
    private static func removeLeftOvers(prefix: String, in temporary: URL) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: temporary.path) else { return }
        for name in names where name.hasPrefix(prefix + "-") {
            guard let pid = pid_t(name.dropFirst(prefix.count + 1)), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { try? FileManager.default.removeItem(at: temporary.appendingPathComponent(name)) }
        }
    }
}
