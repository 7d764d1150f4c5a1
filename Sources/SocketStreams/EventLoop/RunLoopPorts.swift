// Finding CoreFoundation's port set for one run loop and mode, so that a thread of ours can wait on it
// inside its own epoll set (StreamThread's driven reactor).
//
// On Linux CoreFoundation keeps, for each mode of a run loop, an epoll fd it calls a port set: the run
// loop's wake-up eventfd, the mode's timer port and the port of every version-1 source in that mode.
// The run loop sleeps on it, so it is readable exactly when the run loop has something to do. It is not
// public; the kernel tells which epoll set holds a given fd (`/proc/self/fdinfo/N` lists a `tfd:` line
// for every fd an epoll set watches), so a probe port added to the mode alone finds it.

import CoreFoundation
import Foundation
import Glibc

enum RunLoopPorts {
    /// CoreFoundation's port set for `cfRunLoop`'s default mode, or nil if it cannot be found (no
    /// `/proc`, or no fd for the probe). `likely` are fd numbers to look at first (those just freed for
    /// the run loop); then every fd is. The mode must exist (something is added to it). Call on the run
    /// loop's own thread before anything else uses the run loop.
    static func portSet(of cfRunLoop: CFRunLoop, likely: [Int32]) -> Int32? {
        guard let probe = try? Posix.eventFD() else { return nil }
        defer { Posix.close(probe) }
        var stats = stat()
        guard fstat(probe, &stats) == 0 else { return nil }
        var context = CFRunLoopSourceContext1()
        context.version = 1
        context.info = UnsafeMutableRawPointer(bitPattern: Int(probe) + 1)  // non-nil; never dereferenced
        context.getPort = { info in Int32(Int(bitPattern: info) - 1) }
        context.perform = { _ in }
        let source = withUnsafeMutablePointer(to: &context) { pointer in
            pointer.withMemoryRebound(to: CFRunLoopSourceContext.self, capacity: 1) { CFRunLoopSourceCreate(nil, 0, $0) }
        }
        guard let source else { return nil }
        CFRunLoopAddSource(cfRunLoop, source, kCFRunLoopDefaultMode)
        defer { CFRunLoopSourceInvalidate(source) }
        let watched = Watched(fd: probe, inode: UInt64(stats.st_ino))
        if let found = likely.first(where: { holds($0, watched) }) { return found }
        return allDescriptors().first { !likely.contains($0) && holds($0, watched) }
    }

    /// An fd as an epoll set's fdinfo names it: its number and its inode (a number alone could be a stale
    /// entry of an fd closed and reused).
    private struct Watched {
        let fd: Int32
        let inode: UInt64
    }

    /// Whether `fd` is an epoll set watching `watched` (its fdinfo has `tfd: <fd> … ino:<inode in hex>`).
    private static func holds(_ fd: Int32, _ watched: Watched) -> Bool {
        guard fd >= 0, let info = read("/proc/self/fdinfo/\(fd)") else { return false }
        let wanted = "ino:" + String(watched.inode, radix: 16)
        for line in info.split(separator: "\n") where line.hasPrefix("tfd:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count > 1, Int32(fields[1]) == watched.fd else { continue }
            if fields.contains(where: { $0 == wanted }) { return true }
        }
        return false
    }

    /// The process's open fds (`/proc/self/fd`), empty if it cannot be read.
    private static func allDescriptors() -> [Int32] {
        guard let directory = opendir("/proc/self/fd") else { return [] }
        defer { closedir(directory) }
        var found: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let fd = Int32(name) { found.append(fd) }
        }
        return found
    }

    /// A small /proc file's text (up to 16 KiB), or nil.
    private static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Posix.close(fd) }
        let capacity = 16_384
        return String(unsafeUninitializedCapacity: capacity) { buffer in
            var used = 0
            while used < capacity {
                let n = Glibc.read(fd, buffer.baseAddress! + used, capacity - used)
                if n <= 0 { break }
                used += n
            }
            return used
        }
    }
}
