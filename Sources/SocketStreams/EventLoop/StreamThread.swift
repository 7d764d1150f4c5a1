import CoreFoundation
import Foundation

/// The package's own run-loop thread, started on first use.
///
/// It runs a Foundation `RunLoop` in the default mode forever. Connection establishment (name
/// resolution results, non-blocking connects, Happy Eyeballs and connect-timeout timers) runs on its
/// reactor, and clients may schedule streams on its run loop (`RunLoop.socketStreams`) the way
/// GCDAsyncSocket schedules its CFStreams on a dedicated thread.
enum StreamThread {
    private final class Startup: @unchecked Sendable {
        let ready = DispatchSemaphore(value: 0)
        var runLoop: RunLoop?
        var reactor: Reactor?
    }

    private final class Shared: @unchecked Sendable {
        let runLoop: RunLoop
        let reactor: Reactor
        init(_ runLoop: RunLoop, _ reactor: Reactor) {
            self.runLoop = runLoop
            self.reactor = reactor
        }
    }

    private static let shared: Shared = {
        let startup = Startup()
        let thread = Thread {
            startup.runLoop = RunLoop.current
            // Never released: the reactor's source keeps the run loop alive.
            startup.reactor = ReactorRegistry.shared.acquire(cfRunLoop: CFRunLoopGetCurrent(), mode: RunLoop.Mode.default.rawValue)
            startup.ready.signal()
            while true {
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
            }
        }
        thread.name = "SocketStreams"
        thread.start()
        startup.ready.wait()
        return Shared(startup.runLoop!, startup.reactor!)
    }()

    /// The stream thread's run loop.
    static var runLoop: RunLoop { shared.runLoop }
    /// The reactor serving the stream thread's run loop in the default mode.
    static var reactor: Reactor { shared.reactor }
}

extension RunLoop {
    /// The run loop of SocketStreams' dedicated stream thread, started on first use.
    ///
    /// Schedule streams here (`stream.schedule(in: .socketStreams, forMode: .default)`) to have their
    /// delegates called on that thread, like CFNetwork clients that keep a private CFStream thread.
    /// Delegate callouts run on that thread: do not block in them.
    public static var socketStreams: RunLoop { StreamThread.runLoop }
}
