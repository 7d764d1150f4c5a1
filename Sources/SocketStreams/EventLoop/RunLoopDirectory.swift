// From a Foundation RunLoop to its CFRunLoop, which Linux's Foundation does not hand out (moved out of
// Reactor.swift).

import CoreFoundation
import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc
import Synchronization

/// The CFRunLoop behind a Foundation RunLoop, or nil when it cannot be known from this thread.
///
/// `RunLoop.getCFRunLoop()` is internal on Linux. The current and main run loops and the stream
/// thread's are known directly; any other is read from the RunLoop's stored `_cfRunLoopStorage` by
/// reflection. Should a Foundation release rename that field, this returns nil and callers use
/// `onCFRunLoop(of:mode:_:)`'s fallback instead of trapping.
func cfRunLoop(of runLoop: RunLoop) -> CFRunLoop? {
    if runLoop === RunLoop.current { return CFRunLoopGetCurrent() }
    if runLoop === RunLoop.main { return CFRunLoopGetMain() }
    if let ours = StreamThread.knownRunLoop, runLoop === ours.runLoop { return ours.cfRunLoop }
    return RunLoopDirectory.shared.cfRunLoop(of: runLoop)
}

/// Runs `body` with `runLoop`'s CFRunLoop: at once when it is known, else (the fallback) from a
/// one-shot timer on `runLoop` in `mode`, whose callback runs on that run loop's own thread, where
/// `CFRunLoopGetCurrent()` names it. The fallback runs `body` only once that run loop runs in
/// `mode`, which is also the first moment a stream scheduled there could get an event.
func onCFRunLoop(of runLoop: RunLoop, mode: RunLoop.Mode, _ body: @escaping @Sendable (CFRunLoop) -> Void) {
    if let known = cfRunLoop(of: runLoop) { return body(known) }
    let timer = Timer(fire: Date(), interval: 0, repeats: false) { _ in
        let current = CFRunLoopGetCurrent()!
        RunLoopDirectory.shared.learn(RunLoop.current, current)
        body(current)
    }
    runLoop.add(timer, forMode: mode)
}

/// CFRunLoops of run loops other than the current and main ones: found by reflection (dear, so kept
/// for the last few run loops) or learnt on their own thread. Entries hold
/// their RunLoop, so an address cannot be reused by another run loop while cached.
final class RunLoopDirectory: Sendable {
    /// A run loop and its CFRunLoop. Both are thread-safe objects that Swift does not mark Sendable.
    private struct Entry: @unchecked Sendable {
        let runLoop: RunLoop
        let cf: CFRunLoop
    }

    static let shared = RunLoopDirectory()
    private let entries = Guarded<[Entry]>([])
    /// Tests turn reflection off to exercise the fallback.
    let reflectionEnabled = Atomic<Bool>(true)

    func cfRunLoop(of runLoop: RunLoop) -> CFRunLoop? {
        if let hit = entries.withLock({ entries in entries.first { $0.runLoop === runLoop } }) { return hit.cf }
        guard reflectionEnabled.load(ordering: .relaxed) else { return nil }
        for child in Mirror(reflecting: runLoop).children where child.label == "_cfRunLoopStorage" {
            if let value = child.value as AnyObject? {
                // A CF object with no Swift class to check against: reinterpret the reference.
                let cf = Unmanaged<CFRunLoop>.fromOpaque(Unmanaged.passUnretained(value).toOpaque()).takeUnretainedValue()
                learn(runLoop, cf)
                return cf
            }
        }
        return nil
    }

    func learn(_ runLoop: RunLoop, _ cf: CFRunLoop) {
        let entry = Entry(runLoop: runLoop, cf: cf)
        entries.withLock { entries in
            guard !entries.contains(where: { $0.runLoop === entry.runLoop }) else { return }
            entries.insert(entry, at: 0)
            if entries.count > 8 { entries.removeLast() }
        }
    }
}
