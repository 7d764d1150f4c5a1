import CocoaAsyncSocket
@testable import SocketStreams
import TestPeers
import XCTest

/// The engine under a GCDAsyncSocket connection is the socket's own (issue 25: no `PackageOperations`
/// object between them): it holds its socket queue's reactor, one use in the registry, for as long as
/// it lives, and gives it back once the connection has ended (as the pair gives back its own): a use
/// kept would leave more than the test's own afterwards, one given back twice fewer than two while
/// the next connection's engine holds one.
final class GCDAsyncSocketEngineTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    func testTheEngineHoldsTheSocketQueuesReactorWhileItLives() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let socketQueue = DispatchQueue(label: "socket")
        let reactor = try ReactorRegistry.shared.acquire(queue: socketQueue)  // the test's own use
        defer { ReactorRegistry.shared.release(reactor) }
        let recorder = Recorder()
        let socket = GCDAsyncSocket(delegate: recorder, delegateQueue: queue, socketQueue: socketQueue)
        XCTAssertEqual(ReactorRegistry.shared.useCount(of: reactor), 1, "a socket that has not connected holds none")
        for round in 1...3 {
            try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
            // The engine's use is taken in `connect`; the pair takes its own once scheduled.
            XCTAssertGreaterThanOrEqual(ReactorRegistry.shared.useCount(of: reactor), 2, "round \(round): the engine holds one")
            socket.write("r\(round)\n".data(using: .utf8)!, withTimeout: 5, tag: round)
            socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: round)
            recorder.wait(for: "read \(round)")
            socket.disconnect()
            recorder.wait(for: "disconnect", count: round)
            XCTAssertTrue(
                waitUntilReleased { ReactorRegistry.shared.useCount(of: reactor) == 1 },
                "round \(round): \(ReactorRegistry.shared.useCount(of: reactor)) uses once the connection ended")
        }
    }

    /// Checks `condition` until it holds or 10 s pass, yielding the CPU between checks: the engine
    /// goes when the last work posted for it on the socket queue has run, with no event to wait on.
    private func waitUntilReleased(_ condition: () -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: 10)
        while !condition() {
            if Date() >= deadline { return false }
            sched_yield()
        }
        return true
    }
}
