#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation

/// `write(2)`, named apart from `OutputSink.write`.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
        Glibc.write(descriptor, bytes, count)
    #else
        Darwin.write(descriptor, bytes, count)
    #endif
}

/// `close(2)`, named apart from `HTTPFetch.close()`-style methods.
private func systemClose(_ descriptor: Int32) -> Int32 {
    #if canImport(Glibc)
        Glibc.close(descriptor)
    #else
        Darwin.close(descriptor)
    #endif
}

/// A body written to a file (`-o`/`-O`): bytes go to a temporary file beside it, renamed to the final name only when
/// the transfer succeeded, so a failure never leaves a partial file under that name. A path that exists and is not
/// a regular file (`/dev/null`, a FIFO) is written directly.
public final class FileDownload: OutputSink {
    /// The final path.
    public let path: String
    /// The temporary path written to until `commit()`; nil when writing to `path` directly.
    public let temporaryPath: String?
    /// The open temporary file.
    private var descriptor: Int32
    /// The first write error (`errno`), if any.
    public private(set) var writeError: Int32?

    /// Creates the temporary file (`.NAME.stream-get-PID.part` in the same directory), creating missing directories
    /// first when `createDirectories` (curl's `--create-dirs`).
    /// - Throws: a message naming the path and the failure.
    public init(path: String, createDirectories: Bool) throws(StreamGetUsageError) {
        self.path = path
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        if createDirectories {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw StreamGetUsageError("cannot create the directory \(directory): \((error as NSError).localizedDescription)")
            }
        }
        var status = stat()
        if stat(path, &status) == 0, status.st_mode & S_IFMT != S_IFREG {
            temporaryPath = nil
            descriptor = open(path, O_WRONLY | O_CLOEXEC)
        } else {
            let temporaryPath = (directory as NSString).appendingPathComponent(".\(url.lastPathComponent).stream-get-\(getpid()).part")
            self.temporaryPath = temporaryPath
            descriptor = open(temporaryPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        }
        guard descriptor >= 0 else {
            throw StreamGetUsageError("cannot create \(path): \(String(cString: strerror(errno)))")
        }
    }

    deinit { discard() }

    /// Writes all of `bytes` to the temporary file; the first failure is kept in `writeError` and later writes are
    /// dropped.
    public func write(_ bytes: [UInt8]) {
        guard writeError == nil, descriptor >= 0 else { return }
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let count = systemWrite(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if count < 0 {
                    if errno == EINTR { continue }
                    writeError = errno
                    return
                }
                offset += count
            }
        }
    }

    /// Closes the temporary file and renames it to `path`.
    /// - Throws: a message when a write, the close or the rename failed (the temporary file is then removed).
    public func commit() throws(StreamGetUsageError) {
        if let writeError {
            discard()
            throw StreamGetUsageError("cannot write \(path): \(String(cString: strerror(writeError)))")
        }
        let closed = systemClose(descriptor) == 0
        descriptor = -1
        guard let temporaryPath else { return }
        guard closed, rename(temporaryPath, path) == 0 else {
            let error = errno
            unlink(temporaryPath)
            throw StreamGetUsageError("cannot write \(path): \(String(cString: strerror(error)))")
        }
    }

    /// Closes and removes the temporary file (a failed transfer); nothing is left under either name.
    public func discard() {
        guard descriptor >= 0 else { return }
        _ = systemClose(descriptor)
        descriptor = -1
        if let temporaryPath { unlink(temporaryPath) }
    }
}

/// curl's progress meter on stderr while a body arrives: the bytes so far, the percentage and time left when the
/// length is known, and the rate, redrawn in place (`\r`) at most every half second and once at the end. With
/// `bar` it draws curl's `-#` bar instead.
public final class ProgressMeter {
    /// Where the meter is drawn.
    private let err: OutputSink
    /// `-#`.
    private let bar: Bool
    /// When the transfer began.
    private let start = FetchTimings.now()
    /// When the meter was last drawn.
    private var lastDrawn: UInt64 = 0
    /// Whether anything was drawn.
    private var drawn = false
    /// The latest figures.
    private var received = 0
    private var expected: Int?

    /// A meter drawing on `err`.
    public init(err: OutputSink, bar: Bool) {
        self.err = err
        self.bar = bar
    }

    /// Records the body bytes so far; redraws when half a second passed since the last drawing.
    public func update(received: Int, expected: Int?) {
        self.received = received
        self.expected = expected
        let now = FetchTimings.now()
        if !drawn || now - lastDrawn >= 500_000_000 { draw(now: now) }
    }

    /// Draws the final figures and ends the line.
    public func finish() {
        draw(now: FetchTimings.now())
        err.write("\n")
    }

    /// Whether the meter belongs on stderr: it is a terminal (never a pipe or a file).
    public static func stderrIsTerminal() -> Bool { isatty(2) == 1 }

    private func draw(now: UInt64) {
        lastDrawn = now
        let elapsed = Double(now - start) / 1e9
        let rate = elapsed > 0 ? Double(received) / elapsed : 0
        if bar {
            let width = 60
            let fraction = expected.map { $0 > 0 ? min(1, Double(received) / Double($0)) : 1 } ?? 0
            let filled = Int(fraction * Double(width))
            let percent = expected == nil ? "   --.-%" : String(format: " %6.1f%%", fraction * 100)
            err.write("\r" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + percent)
        } else {
            var line = "\r" + Self.size(received)
            if let expected {
                let percent = expected > 0 ? min(100, received * 100 / expected) : 100
                line += " of \(Self.size(expected)) \(String(format: "%3d", percent))%"
            }
            line += "  \(Self.size(Int(rate)))/s  \(Self.clock(elapsed)) spent"
            if let expected, rate > 0 {
                line += "  \(Self.clock(Double(max(0, expected - received)) / rate)) left"
            }
            err.write(line + "   ")
        }
        drawn = true
    }

    /// `512`, `12.3k`, `256.0M`, `1.5G`: bytes in curl's units (1024-based).
    static func size(_ bytes: Int) -> String {
        let units = ["k", "M", "G", "T"]
        var value = Double(bytes)
        var unit = ""
        for next in units where value >= 1024 {
            value /= 1024
            unit = next
        }
        return unit.isEmpty ? "\(bytes)" : String(format: "%.1f", value) + unit
    }

    /// `0:00:07`: a duration in curl's H:MM:SS.
    static func clock(_ seconds: Double) -> String {
        let total = Int(seconds.rounded())
        return String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
    }
}
