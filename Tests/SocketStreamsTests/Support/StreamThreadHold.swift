@testable import SocketStreams
import SocketStreamsTestSupport
import XCTest

/// Keeps the package's stream thread busy inside a task of its own until `release()` (or `timeout`
/// seconds), so that a test can show something completes without that thread: anything that needed
/// it would wait until the release.
final class StreamThreadHold: Sendable {
    private let held = Signal()
    private let released = Signal()
    private let releasedInTime = Locked<Bool?>(nil)

    /// Posts the holding task to the stream thread (starting it if needed).
    init(timeout: TimeInterval = 30) throws {
        try StreamThread.reactor().post { [held, released, releasedInTime] in
            held.raise()
            releasedInTime.value = released.wait(timeout: timeout)
        }
    }

    /// Whether the stream thread is running the holding task (waits up to `timeout` seconds for it).
    func isHolding(timeout: TimeInterval) -> Bool { held.wait(timeout: timeout) }

    /// Lets the stream thread go (again: harmless).
    func release() { released.raise() }

    /// Whether the release came before the hold's timeout (nil while it holds): false means something
    /// waited for the stream thread until the hold gave up.
    var wasReleasedInTime: Bool? { releasedInTime.value }
}
