#if canImport(Glibc)
    import Glibc
#endif
import Foundation

/// How a child process ended.
public struct ChildExit: Sendable, Equatable {
    /// The exit status, or the signal that ended it.
    public var status: Int32
    /// Whether a signal ended it (`status` is then the signal's number).
    public var signalled: Bool

    public init(status: Int32, signalled: Bool) {
        self.status = status
        self.signalled = signalled
    }

    /// Ended with `exit(status)`.
    public static func exited(_ status: Int32) -> ChildExit { ChildExit(status: status, signalled: false) }

    /// Waits, for at most `timeout` seconds, for a child started with Foundation's `Process` to end, and
    /// says how it ended; nil if it is still running at the deadline.
    ///
    /// Not `waitUntilExit()` nor a `terminationHandler`: corelibs-foundation learns of a child's end when
    /// its end of a socket pair closes, and then waits for it with a blocking `waitpid` on its one
    /// process-manager thread. A child that closes the descriptors it inherits, or another child that
    /// inherits that socket (spawned by another thread at the same moment), keeps Foundation from
    /// seeing an end, or from seeing any other child's end, for as long as it runs; the test then
    /// waits forever. Here a thread of ours waits for the kernel's word (`waitid` with `WNOWAIT`, which
    /// leaves the child to be reaped), and the child is reaped here unless Foundation already has.
    public static func wait(for process: Process, timeout: TimeInterval) -> ChildExit? {
        let pid = process.processIdentifier
        guard pid > 0 else { return nil }
        if !process.isRunning { return foundationsWord(process) }
        let ended = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1, errno == EINTR {}
            ended.signal()
        }
        guard ended.wait(timeout: .now() + timeout) == .success else { return nil }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid {
            let signal = status & 0x7f
            return signal == 0 ? .exited((status >> 8) & 0xff) : ChildExit(status: signal, signalled: true)
        }
        // Foundation reaped it first: its status is set once its callback has run, a moment later.
        let deadline = Date(timeIntervalSinceNow: 10)
        while process.isRunning, Date() < deadline { usleep(1_000) }
        guard !process.isRunning else { return nil }
        return foundationsWord(process)
    }

    /// How Foundation says a child it has seen end ended.
    private static func foundationsWord(_ process: Process) -> ChildExit {
        ChildExit(status: process.terminationStatus, signalled: process.terminationReason == .uncaughtSignal)
    }

    /// `wait(for:timeout:)`, and at the deadline the child is ended (SIGTERM, then SIGKILL after 5 s) and
    /// nil returned once it is gone.
    public static func waitOrEnd(_ process: Process, timeout: TimeInterval) -> ChildExit? {
        if let exit = wait(for: process, timeout: timeout) { return exit }
        kill(process.processIdentifier, SIGTERM)
        if wait(for: process, timeout: 5) != nil { return nil }
        kill(process.processIdentifier, SIGKILL)
        _ = wait(for: process, timeout: 10)
        return nil
    }
}
