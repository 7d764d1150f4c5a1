// What the clients whose callbacks come on a dispatch queue (streams-queued, gcdasyncsocket) share: a
// workload's outcome, set by its callbacks, and the benchmark thread's wait for it.

import Dispatch
import SocketStreams

/// A workload driven by callbacks on `queue`: subclasses (the clients' delegates) set `done` or
/// `failure` and count their callbacks in `events`. Its state is touched only on `queue` (callbacks,
/// and `run`'s reads through `queue.sync`), and by the benchmark thread before the first socket
/// exists: hence `@unchecked Sendable`.
class QueueDriver: @unchecked Sendable {
    /// Where the callbacks come.
    let queue: DispatchQueue
    /// The client's name in a stall report.
    private let name: String
    var done = false {
        didSet { if done { finished.signal() } }
    }
    var failure: String? {
        didSet { if failure != nil { finished.signal() } }
    }
    var events = 0
    /// Signalled on the queue when the workload is done or failed.
    private let finished = DispatchSemaphore(value: 0)

    init(queue: DispatchQueue, name: String) {
        self.queue = queue
        self.name = name
    }

    /// Waits until the workload is done or failed (the callbacks run on the queue); checks once a
    /// second that callbacks still come.
    func run() throws {
        var lastProgress = Posix.monotonicNanoseconds()
        var lastEvents = -1
        while true {
            let signalled = finished.wait(timeout: .now() + 1) == .success
            let (done, failure, events) = queue.sync { (self.done, self.failure, self.events) }
            if let failure { throw BenchError(failure) }
            if done { return }
            if signalled { continue }
            let now = Posix.monotonicNanoseconds()
            if events != lastEvents {
                lastEvents = events
                lastProgress = now
            } else if Stopwatch.seconds(from: lastProgress, to: now) > stallTimeout {
                throw BenchError("stalled: no \(name) callback for \(Int(stallTimeout)) s")
            }
        }
    }
}
