@testable import CocoaAsyncSocket
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

    /// A socket given no socket queue works on its delegate's queue (issue 48): it holds that queue's
    /// reactor while connected, one reactor for every socket on the queue, so twenty sockets cost their
    /// twenty descriptors and the queue's reactor's few (an epoll set, an eventfd, the queue thread's
    /// none), never a reactor each (a private queue per socket was an epoll set and, for the first
    /// eight, a thread each: forty descriptors or more).
    func testASocketWithoutAQueueWorksOnItsDelegatesQueueAndCostsOneDescriptor() throws {
        let delegateQueue = DispatchQueue(label: "delegate of twenty")
        let reactor = try ReactorRegistry.shared.acquire(queue: delegateQueue)  // the test's own use
        defer { ReactorRegistry.shared.release(reactor) }
        try connectTwenty(delegateQueue: delegateQueue, reactor: reactor, usesBefore: 1, spare: 3)
    }

    /// On the main queue or a global one (where a socket does not work: see
    /// `GCDAsyncSocket.workQueue(delegateQueue:)`), a socket given no socket queue works on the stream
    /// thread, holding its reactor, and costs no descriptor beyond its own socket.
    func testASocketWithoutAQueueOnAGlobalQueueWorksOnTheStreamThread() throws {
        let reactor = try StreamThread.reactor()
        try connectTwenty(delegateQueue: .global(), reactor: reactor, usesBefore: ReactorRegistry.shared.useCount(of: reactor), spare: 0)
    }

    /// Twenty sockets on `delegateQueue`, each echoing a line: each engine holds a use of `reactor`
    /// while connected, the sockets cost at most `spare` descriptors beyond their own, and every use is
    /// given back once they have disconnected.
    private func connectTwenty(delegateQueue: DispatchQueue, reactor: Reactor, usesBefore: Int, spare: Int) throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let descriptorsBefore = try openDescriptors()
        let recorder = Recorder()
        let count = 20
        let sockets = (0..<count).map { _ in GCDAsyncSocket(delegate: recorder, delegateQueue: delegateQueue) }
        for (index, socket) in sockets.enumerated() {
            try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
            socket.write("s\(index)\n".data(using: .utf8)!, withTimeout: 5, tag: index)
            socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: index)
        }
        recorder.wait(for: "read ", count: count)
        for index in 0..<count { XCTAssertEqual(recorder.data(tag: index), "s\(index)\n".data(using: .utf8)) }
        let descriptors = try openDescriptors() - descriptorsBefore
        XCTAssertLessThanOrEqual(descriptors, count + spare, "\(descriptors) descriptors for \(count) connected sockets")
        XCTAssertGreaterThanOrEqual(ReactorRegistry.shared.useCount(of: reactor), usesBefore + count, "each engine holds one use")
        sockets.forEach { $0.disconnect() }
        recorder.wait(for: "disconnect", count: count)
        XCTAssertTrue(
            waitUntilReleased { ReactorRegistry.shared.useCount(of: reactor) == usesBefore },
            "\(ReactorRegistry.shared.useCount(of: reactor)) uses once the connections ended (\(usesBefore) before)")
    }

    /// `perform` on a socket without a socket queue runs its block where the socket's work runs, its
    /// delegate's queue, and returns once it has run: from a test thread, from the delegate queue, and
    /// inline when nested (a `sync` onto the queue from there would wait for itself); on a global
    /// delegate queue, on the stream thread.
    func testPerformWithoutASocketQueueRunsWhereTheSocketWorks() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let socket = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        recorder.wait(for: "connect")
        let ran = Trail()
        socket.perform {
            ran.append("test thread: \(Self.onDelegateQueue) \(socket.socketFD() >= 0)")
            socket.perform { ran.append("nested: \(Self.onDelegateQueue)") }
        }
        queue.sync {
            socket.perform { ran.append("delegate queue: \(Self.onDelegateQueue)") }
        }
        XCTAssertEqual(ran.values, ["test thread: true true", "nested: true", "delegate queue: true"])
        XCTAssertFalse(Self.onDelegateQueue)
        socket.disconnect()

        let global = GCDAsyncSocket(delegate: recorder, delegateQueue: .global())
        try global.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        recorder.wait(for: "connect", count: 2)
        global.perform {
            ran.append("global: \(onStreamThread)")
            global.perform { ran.append("global nested: \(onStreamThread)") }
        }
        XCTAssertEqual(ran.values.suffix(2), ["global: true", "global nested: true"])
        global.disconnect()
    }

    /// `perform` on a socket given no queue, from eight threads at once while 2 MiB flow through it,
    /// then from one thread while another disconnects it: every block runs once, where the socket
    /// works (its delegate's queue), none waits for ever, and the bytes all arrive. (The echo goes in
    /// lockstep, 32 KiB at a time: socat's PIPE echo stops for good once more than its pipe holds is in
    /// flight.)
    func testPerformFromManyThreadsWhileDataFlowsAndWhileDisconnecting() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let recorder = Recorder()
        let chunk = Data((0..<32_768).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        let rounds = 64
        recorder.onRead = { socket, _, tag in
            guard tag + 1 < rounds else { return }
            socket.write(chunk, withTimeout: 30, tag: tag + 1)
            socket.readData(toLength: UInt(chunk.count), withTimeout: 30, tag: tag + 1)
        }
        let socket = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        socket.write(chunk, withTimeout: 30, tag: 0)
        socket.readData(toLength: UInt(chunk.count), withTimeout: 30, tag: 0)
        let ran = Marker()
        let elsewhere = Marker()
        let counting = NSLock()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<200 {
                socket.perform {
                    let offTheQueue = !Self.onDelegateQueue
                    counting.withLock {
                        ran.value += 1
                        if offTheQueue { elsewhere.value += 1 }
                    }
                    XCTAssertGreaterThanOrEqual(socket.socketFD(), -1)
                }
            }
        }
        XCTAssertEqual(ran.value, 1_600)
        XCTAssertEqual(elsewhere.value, 0)
        recorder.wait(for: "read \(rounds - 1) ", timeout: 30)
        for round in 0..<rounds { XCTAssertTrue(recorder.data(tag: round) == chunk, "round \(round): the echo differs") }
        DispatchQueue.concurrentPerform(iterations: 2) { worker in
            if worker == 0 { return socket.disconnect() }
            for _ in 0..<100 { socket.perform { counting.withLock { ran.value += 1 } } }
        }
        recorder.wait(for: "disconnect")
        XCTAssertEqual(ran.value, 1_700)
        XCTAssertTrue(socket.isDisconnected)
    }

    /// GCDAsyncSocket posts a call only to a delegate that responds to it. A delegate that leaves
    /// `didWriteDataWithTag` to its default (which does nothing) is posted it once, for the first
    /// write; from then on its type is known not to implement it and later writes post nothing (issue
    /// 25: each such block woke a dispatch worker). A delegate that implements it gets every call, and
    /// a read's call is never skipped.
    func testACallLeftToItsDefaultIsNotPostedAgain() throws {
        let (peer, port) = try Peer.socatEcho()
        defer { peer.stop() }
        let reader = LinesOnly()
        let recorder = Recorder()
        XCTAssertFalse(DelegateDefaults.leaves(.didWrite, to: reader))
        let socket = GCDAsyncSocket(delegate: reader, delegateQueue: queue)
        try socket.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        for index in 0..<20 {
            socket.write("w\(index)\n".data(using: .utf8)!, withTimeout: 5, tag: index)
            socket.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: index)
        }
        XCTAssertTrue(reader.waitForLines(20), "lines read: \(reader.lines)")
        XCTAssertEqual(reader.lines, (0..<20).map { "w\($0)\n" })
        XCTAssertTrue(DelegateDefaults.leaves(.didWrite, to: reader), "the default ran for the first write")
        XCTAssertFalse(DelegateDefaults.leaves(.didWrite, to: recorder), "Recorder implements it")
        XCTAssertFalse(DelegateDefaults.leaves([.didWrite, .readPartial], to: reader), "only what ran is known")
        socket.disconnect()

        let other = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try other.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        for index in 0..<5 { other.write("r\(index)\n".data(using: .utf8)!, withTimeout: 5, tag: index) }
        recorder.wait(for: "wrote ", count: 5)
        other.disconnect()
    }

    /// Whether the caller runs on the stream thread.
    private var onStreamThread: Bool { StreamThread.thread === Thread.current }

    /// Whether the caller runs on the test's delegate queue (marked in `setUp`).
    private static var onDelegateQueue: Bool { DispatchQueue.getSpecific(key: Self.delegateQueueKey) == true }
    private static let delegateQueueKey = DispatchSpecificKey<Bool>()

    override func setUp() {
        super.setUp()
        queue.setSpecific(key: Self.delegateQueueKey, value: true)
    }

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

/// A delegate that reads lines and implements nothing else: `didWriteDataWithTag` is the protocol's
/// default.
// @unchecked Sendable: `read` is reached only under `condition`.
private final class LinesOnly: NSObject, GCDAsyncSocketDelegate, @unchecked Sendable {
    private let condition = NSCondition()
    private var read: [String] = []

    var lines: [String] { condition.withLock { read } }

    func waitForLines(_ count: Int) -> Bool {
        let deadline = Date(timeIntervalSinceNow: 10)
        condition.lock()
        defer { condition.unlock() }
        while read.count < count {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }

    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
        condition.withLock {
            read.append(String(decoding: data, as: UTF8.self))
            condition.broadcast()
        }
    }
}
