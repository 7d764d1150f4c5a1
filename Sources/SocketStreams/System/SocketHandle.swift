import Synchronization

/// Owns one socket file descriptor and gives it back to the kernel exactly once.
///
/// `release()` closes the fd when the handle owns it (`kCFStreamPropertyShouldCloseNativeSocket`),
/// or merely lets go of it otherwise. A handle that is deinitialised without `release()` is a leak,
/// which debug builds catch with an assertion; `openCount` lets tests check that none are left.
final class SocketHandle: @unchecked Sendable {
    /// The descriptor. Valid until `release()`.
    let fd: Int32
    /// Whether `release()` calls `close(2)`.
    var closesOnRelease: Bool
    /// The client lent this fd (a native socket): it may close it under us, so EBADF on it is
    /// reported as the stream's error rather than trapped on (`Posix.lend`).
    let isLent: Bool
    private var released = false

    private static let live = Atomic<Int>(0)

    /// How many handles exist that have not been released (for leak checks in tests).
    static var openCount: Int { live.load(ordering: .relaxed) }

    init(fd: Int32, closesOnRelease: Bool, lent: Bool = false) {
        self.fd = fd
        self.closesOnRelease = closesOnRelease
        isLent = lent
        if lent { Posix.lend(fd) }
        Self.live.add(1, ordering: .relaxed)
    }

    /// Closes (or lets go of) the fd. Callers serialise calls; a second call is a bug.
    func release() {
        precondition(!released, "socket fd \(fd) released twice")
        released = true
        Self.live.subtract(1, ordering: .relaxed)
        if closesOnRelease { Posix.close(fd) }
        if isLent { Posix.unlend(fd) }
    }

    deinit {
        assert(released, "leak of open socket fd \(fd)")
    }
}
