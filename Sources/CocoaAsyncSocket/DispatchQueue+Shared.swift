// Which delegate queues the sockets may work on (GCDAsyncSocket's and GCDAsyncUdpSocket's choice of
// where a socket given no socket queue works).

import Dispatch

extension DispatchQueue {
    /// Whether this is the main queue or a global one (by label: each `DispatchQueue.main` and
    /// `DispatchQueue.global()` is a new wrapper), where a socket does not work: the main thread often
    /// blocks, and a global queue's blocks may run side by side.
    var isMainOrGlobal: Bool { label == DispatchQueue.main.label || label.hasPrefix("com.apple.root.") }
}
