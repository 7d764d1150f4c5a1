// A run loop's reactor: the epoll fd is the port of a version-1 CFRunLoopSource in the run loop's mode,
// so CoreFoundation's own wait (epoll on Linux) wakes when a socket, the eventfd or the timerfd in it
// is ready, and calls the source's perform on the run loop's thread, in that mode, with no thread hop.

import CoreFoundation
import Foundation

/// Drives a reactor from a run loop: a version-1 run-loop source whose port is the epoll fd.
final class RunLoopSourceDriver: RunLoopDriver {
    nonisolated(unsafe) let cfRunLoop: CFRunLoop  // CoreFoundation's run loops may be used from any thread
    let mode: String
    let signals: RunLoopSignals
    /// The source while attached; `detach` takes it (from whichever thread releases the last use).
    private let source = Guarded<CFRunLoopSource?>(nil)

    init(runLoop: CFRunLoop, mode: String, signals: RunLoopSignals) {
        self.cfRunLoop = runLoop
        self.mode = mode
        self.signals = signals
    }

    /// Creates the source, which retains `reactor` through its context's callbacks, and adds it to
    /// the run loop in its mode.
    func attach(_ reactor: Reactor) throws(SystemError) {
        var context = CFRunLoopSourceContext1()
        context.version = 1
        context.info = Unmanaged.passUnretained(reactor).toOpaque()
        context.retain = { info in
            _ = Unmanaged<Reactor>.fromOpaque(info!).retain()
            return info
        }
        context.release = { info in Unmanaged<Reactor>.fromOpaque(info!).release() }
        context.getPort = { info in Unmanaged<Reactor>.fromOpaque(info!).takeUnretainedValue().epollFD }
        context.perform = { info in Unmanaged<Reactor>.fromOpaque(info!).takeUnretainedValue().performForRunLoop() }
        let created = withUnsafeMutablePointer(to: &context) { pointer in
            pointer.withMemoryRebound(to: CFRunLoopSourceContext.self, capacity: 1) { CFRunLoopSourceCreate(nil, 0, $0) }
        }
        guard let created else { throw SystemError(code: ENOMEM, function: "CFRunLoopSourceCreate") }
        source.withLock { $0 = created }
        CFRunLoopAddSource(cfRunLoop, created, runLoopMode(mode))
        CFRunLoopWakeUp(cfRunLoop)
    }

    /// Not known without a cost (`ReactorDriver.isCurrentContext`).
    var isCurrentContext: Bool { false }

    /// Removes the source from its run loop; CoreFoundation then drops its reference to the reactor,
    /// after any perform in progress has returned.
    func detach() {
        let detached = source.withLock { source -> CFRunLoopSource? in
            defer { source = nil }
            return source
        }
        if let detached { CFRunLoopSourceInvalidate(detached) }
    }
}

extension Reactor {
    /// The version-1 source's perform callback: the run loop saw the epoll fd readable.
    fileprivate func performForRunLoop() {
        if performRounds(fetched: nil, count: 0, single: false, timersDue: false, rearm: .wake).again { driver.wake(self) }
    }
}

/// The CFString for a run-loop mode name. The common-modes pseudo-mode must be CoreFoundation's own
/// constant: `CFRunLoopAddSource` recognises it by pointer, and an equal string would instead name
/// an ordinary mode that nobody runs.
private func runLoopMode(_ string: String) -> CFRunLoopMode {
    if string == RunLoop.Mode.common.rawValue { return kCFRunLoopCommonModes }
    if string == RunLoop.Mode.default.rawValue { return kCFRunLoopDefaultMode }
    return CFStringCreateWithCString(nil, string, CFStringBuiltInEncodings.UTF8.rawValue)
}
