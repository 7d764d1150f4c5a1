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

    /// A socket given no socket queue works on the stream thread (issue 25): it holds that thread's
    /// reactor while connected, as a queue's engine holds its queue's, and costs no file descriptor
    /// beyond its own socket: a private queue per socket was a reactor per socket, an epoll set (and,
    /// for the first eight, a thread) each, so twenty sockets held forty descriptors or more.
    func testASocketWithoutAQueueWorksOnTheStreamThreadAndCostsOneDescriptor() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let reactor = try StreamThread.reactor()
        let usesBefore = ReactorRegistry.shared.useCount(of: reactor)
        let descriptorsBefore = try openDescriptors()
        let recorder = Recorder()
        let count = 20
        let sockets = (0..<count).map { _ in GCDAsyncSocket(delegate: recorder, delegateQueue: queue) }
        for (index, socket) in sockets.enumerated() {
            try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
            socket.write("s\(index)\n".data(using: .utf8)!, withTimeout: 5, tag: index)
            socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: index)
        }
        recorder.wait(for: "read ", count: count)
        for index in 0..<count { XCTAssertEqual(recorder.data(tag: index), "s\(index)\n".data(using: .utf8)) }
        let descriptors = try openDescriptors() - descriptorsBefore
        XCTAssertLessThanOrEqual(descriptors, count, "\(descriptors) descriptors for \(count) connected sockets")
        XCTAssertGreaterThanOrEqual(ReactorRegistry.shared.useCount(of: reactor), usesBefore + count, "each engine holds one use")
        sockets.forEach { $0.disconnect() }
        recorder.wait(for: "disconnect", count: count)
        XCTAssertTrue(
            waitUntilReleased { ReactorRegistry.shared.useCount(of: reactor) == usesBefore },
            "\(ReactorRegistry.shared.useCount(of: reactor)) uses once the connections ended (\(usesBefore) before)")
    }

    /// `perform` on a socket without a socket queue runs its block on the stream thread, where the
    /// socket's work runs, and returns once it has run: from a test thread, from the delegate queue, and
    /// inline when nested (a post to the stream thread from there would wait for itself).
    func testPerformWithoutASocketQueueRunsOnTheStreamThread() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let socket = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        recorder.wait(for: "connect")
        let ran = Trail()
        socket.perform {
            ran.append("test thread: \(onStreamThread) \(socket.socketFD() >= 0)")
            socket.perform { ran.append("nested: \(onStreamThread)") }
        }
        queue.sync {
            socket.perform { ran.append("delegate queue: \(onStreamThread)") }
        }
        XCTAssertEqual(ran.values, ["test thread: true true", "nested: true", "delegate queue: true"])
        XCTAssertFalse(onStreamThread)
        socket.disconnect()
    }

    /// Whether the caller runs on the stream thread.
    private var onStreamThread: Bool { StreamThread.thread === Thread.current }

    /// The descriptors the process has open now.
    private func openDescriptors() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
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
