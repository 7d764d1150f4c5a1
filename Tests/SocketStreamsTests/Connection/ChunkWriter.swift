import Foundation

/// A delegate that writes on every `hasSpaceAvailable`: the next of `sizes` (round and round) bytes,
/// until `limit` writes or `total` bytes have gone. Counts the events, the writes and the bytes, and
/// times the slowest write (one that blocked in a callout shows here). Used on the run loop's thread.
final class ChunkWriter: NSObject, StreamDelegate {
    let sizes: [Int]
    /// Writes at the most; lower it to have later events only counted.
    var limit: Int
    let total: Int
    private let buffer: [UInt8]
    private(set) var writes = 0
    private(set) var events = 0
    private(set) var bytes = 0
    private(set) var failure: String?
    private(set) var slowestWrite: TimeInterval = 0
    /// The socket to look at before each write (`watch`), and how many writes found POLLOUT off:
    /// the send-space bound lets a writer fill the buffer past where POLLOUT turns off.
    private var watched: Int32?
    private(set) var writesPastPollout = 0

    init(sizes: [Int], limit: Int = .max, total: Int = .max) {
        precondition(!sizes.isEmpty && sizes.allSatisfy { $0 > 0 })
        self.sizes = sizes
        self.limit = limit
        self.total = total
        buffer = [UInt8](repeating: 0x44, count: sizes.max()!)
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable:
            events += 1
            guard writes < limit, bytes < total, let output = stream as? OutputStream else { return }
            let count = min(sizes[writes % sizes.count], total - bytes)
            if let watched {
                var entry = pollfd(fd: watched, events: Int16(POLLOUT), revents: 0)
                if poll(&entry, 1, 0) == 0 { writesPastPollout += 1 }
            }
            let start = Date()
            let written = buffer.withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: count) }
            slowestWrite = max(slowestWrite, Date().timeIntervalSince(start))
            guard written > 0 else {
                failure = "write returned \(written)"
                return
            }
            writes += 1
            bytes += written
        case .errorOccurred:
            failure = String(describing: stream.streamError)
        default:
            break
        }
    }

    /// Polls `fd` for POLLOUT before each write from now on (counted in `writesPastPollout`).
    func watch(_ fd: Int32) {
        watched = fd
    }
}
