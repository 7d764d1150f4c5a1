import CSocketStreamsShims
import Dispatch
import Foundation
import Glibc
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// The engine's datagram socket on its own, against plain kernel sockets: batches in and out, the
/// receive modes, what it reports and in which order, and what it reports nothing of after a close.
final class DatagramSocketTests: SocketStreamsTestCase {
    /// What a datagram socket reported, in order, with waits.
    final class Reports: DatagramSocketDelegate, @unchecked Sendable {
        // @unchecked Sendable: every field is reached only under `condition`.
        private let condition = NSCondition()
        private var datagrams: [(bytes: [UInt8], sender: SocketAddress, truncated: Bool)] = []
        private var batches: [Int] = []
        private var outcomes: [(tag: Int, error: DatagramSendError?)] = []
        private var failures: [DatagramSendError] = []
        /// Called on the owner for each batch, before it is recorded.
        var onBatch: (@Sendable (DatagramSocket) -> Void)?

        func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
            onBatch?(socket)
            let copies = datagrams.map { (Array($0.bytes), $0.sender, $0.truncated) }
            condition.lock()
            self.datagrams += copies
            batches.append(copies.count)
            condition.broadcast()
            condition.unlock()
        }

        func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
            condition.lock()
            self.outcomes += outcomes.map { ($0.tag, $0.error) }
            condition.broadcast()
            condition.unlock()
        }

        func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {
            condition.lock()
            failures.append(error)
            condition.broadcast()
            condition.unlock()
        }

        func snapshot() -> (
            datagrams: [(bytes: [UInt8], sender: SocketAddress, truncated: Bool)], batches: [Int],
            outcomes: [(tag: Int, error: DatagramSendError?)], failures: [DatagramSendError]
        ) {
            condition.lock()
            defer { condition.unlock() }
            return (datagrams, batches, outcomes, failures)
        }

        /// Waits until `done` holds of what was reported.
        @discardableResult
        func wait(timeout: TimeInterval = 10, file: StaticString = #filePath, line: UInt = #line, until done: () -> Bool) -> Bool {
            let deadline = Date(timeIntervalSinceNow: timeout)
            condition.lock()
            defer { condition.unlock() }
            while !done() {
                if !condition.wait(until: deadline) {
                    XCTFail("not reported within \(timeout) s", file: file, line: line)
                    return false
                }
            }
            return true
        }

        var datagramCount: Int { datagrams.count }
        var outcomeCount: Int { outcomes.count }
        var failureCount: Int { failures.count }
    }

    /// A plain blocking UDP socket bound to 127.0.0.1 (the peer).
    final class Peer {
        let fd: Int32
        let address: SocketAddress

        init() throws {
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            precondition(fd >= 0)
            let rc = SocketAddress(numericHost: "127.0.0.1", port: 0)!.withSockAddr { Glibc.bind(fd, $0, $1) }
            precondition(rc == 0)
            self.fd = fd
            address = try Posix.localAddress(fd)
        }

        func send(_ bytes: [UInt8], to destination: SocketAddress) {
            let sent = bytes.withUnsafeBytes { buffer in
                destination.withSockAddr { sendto(fd, buffer.baseAddress, buffer.count, 0, $0, $1) }
            }
            precondition(sent == bytes.count)
        }

        /// The next datagram, within 5 s (nil if none came).
        func receive() -> [UInt8]? {
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var buffer = [UInt8](repeating: 0, count: 70_000)
            let count = recv(fd, &buffer, buffer.count, 0)
            return count < 0 ? nil : Array(buffer[0..<count])
        }

        deinit { Glibc.close(fd) }
    }

    private func makeSocket(_ reports: Reports, queue: DispatchQueue = DispatchQueue(label: "datagrams"), size: Int = 65_535) throws
        -> DatagramSocket
    {
        let socket = try DatagramSocket(family: AF_INET, owner: .queue(queue), delegate: reports, maximumDatagramSize: size)
        try socket.bind(to: SocketAddress(numericHost: "127.0.0.1", port: 0)!)
        addCleanup { socket.close() }
        return socket
    }

    /// A burst arrives in batches (fewer deliveries than datagrams), in order, each with its sender.
    func testABurstArrivesInBatchesInOrder() throws {
        let reports = Reports()
        let socket = try makeSocket(reports)
        let peer = try Peer()
        let local = try XCTUnwrap(socket.localAddress)
        // Queued in the kernel before reading starts (200 small datagrams fit the default receive buffer,
        // which counts each datagram's whole buffer, not its bytes: some 250 fit, the rest are dropped).
        for index in 0..<200 { peer.send(Array("\(index)".utf8), to: local) }
        socket.setReceiveMode(.continuous)
        reports.wait { reports.datagramCount == 200 }
        let seen = reports.snapshot()
        XCTAssertEqual(seen.datagrams.map { String(decoding: $0.bytes, as: UTF8.self) }, (0..<200).map(String.init))
        XCTAssertTrue(seen.datagrams.allSatisfy { $0.sender == peer.address })
        // The batch grows from 8 as batches come full: 8, 16, 32, 64, 64, then the rest.
        XCTAssertLessThanOrEqual(seen.batches.count, 6, "batches: \(seen.batches)")
        XCTAssertEqual(seen.batches.max(), DatagramSocket.batch)
    }

    /// A zero-length datagram is a datagram, and one larger than the maximum is cut and said to be.
    func testEmptyAndTruncatedDatagrams() throws {
        let reports = Reports()
        let socket = try makeSocket(reports, size: 100)
        let peer = try Peer()
        let local = try XCTUnwrap(socket.localAddress)
        socket.setReceiveMode(.continuous)
        peer.send([], to: local)
        peer.send([UInt8](repeating: 7, count: 100), to: local)
        peer.send([UInt8](repeating: 8, count: 101), to: local)
        reports.wait { reports.datagramCount == 3 }
        let seen = reports.snapshot().datagrams
        XCTAssertEqual(seen.map(\.bytes.count), [0, 100, 100])
        XCTAssertEqual(seen.map(\.truncated), [false, false, true])
        XCTAssertEqual(reports.snapshot().failures.count, 0)
    }

    /// `.once` takes exactly one datagram off the kernel; pausing leaves the rest there for later.
    func testOnceTakesOneAndPauseLeavesTheRestInTheKernel() throws {
        let reports = Reports()
        let socket = try makeSocket(reports)
        let peer = try Peer()
        let local = try XCTUnwrap(socket.localAddress)
        for index in 0..<3 { peer.send([UInt8(index)], to: local) }
        socket.setReceiveMode(.once)
        reports.wait { reports.datagramCount == 1 }
        XCTAssertEqual(socket.receiveMode, .paused)
        // Nothing more comes while paused: a ping through a second socket on the same queue proves the
        // owner has run since.
        let probe = Reports()
        let other = try makeSocket(probe)
        other.setReceiveMode(.continuous)
        peer.send([9], to: try XCTUnwrap(other.localAddress))
        probe.wait { probe.datagramCount == 1 }
        XCTAssertEqual(reports.snapshot().datagrams.map(\.bytes), [[0]])
        XCTAssertEqual(Posix.bytesAvailable(socket.fd) > 0, true, "the other two wait in the kernel")
        socket.setReceiveMode(.continuous)
        reports.wait { reports.datagramCount == 3 }
        XCTAssertEqual(reports.snapshot().datagrams.map(\.bytes), [[0], [1], [2]])
    }

    /// Sends go out in order, and their outcomes come back in the same order, a refused one (too large)
    /// failing alone, the socket still usable after it.
    func testOutcomesComeInSendOrderAndAFailureFailsOnlyItsDatagram() throws {
        let reports = Reports()
        let socket = try makeSocket(reports)
        let peer = try Peer()
        for tag in 0..<10 {
            let size = tag == 4 ? 70_000 : 10
            socket.send(Data(repeating: UInt8(tag), count: size), to: peer.address, timeout: nil, tag: tag)
        }
        reports.wait { reports.outcomeCount == 10 }
        let outcomes = reports.snapshot().outcomes
        XCTAssertEqual(outcomes.map(\.tag), Array(0..<10))
        XCTAssertEqual(outcomes[4].error, .system(code: EMSGSIZE, function: "sendmmsg"))
        XCTAssertTrue(outcomes.enumerated().allSatisfy { $0.offset == 4 || $0.element.error == nil })
        var received: [UInt8] = []
        for _ in 0..<9 { received.append(try XCTUnwrap(peer.receive()).first!) }
        XCTAssertEqual(received, [0, 1, 2, 3, 5, 6, 7, 8, 9])
    }

    /// A send made from inside a report is reported after the sends made before it (those of its batch).
    func testASendFromInsideAReportKeepsTheOrder() throws {
        final class Chain: DatagramSocketDelegate, @unchecked Sendable {
            // @unchecked Sendable: `tags` is reached only on the socket's owner, and read after the waits.
            var tags: [Int] = []
            let done = DispatchSemaphore(value: 0)
            var destination: SocketAddress?
            func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {}
            func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
                for tag in outcomes.map(\.tag) {
                    tags.append(tag)
                    if tag <= 3 { socket.send(Data([1]), to: destination, timeout: nil, tag: tag + 100) }
                    if tags.count == 6 { done.signal() }
                }
            }
            func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {}
        }
        let chain = Chain()
        let queue = DispatchQueue(label: "chain")
        let socket = try DatagramSocket(family: AF_INET, owner: .queue(queue), delegate: chain)
        addCleanup { socket.close() }
        let peer = try Peer()
        chain.destination = peer.address
        // The owner's queue is held while the three are queued, so they leave in one batch; the sends made
        // from their reports come after all three.
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }
        for tag in 1...3 { socket.send(Data([0]), to: peer.address, timeout: nil, tag: tag) }
        gate.signal()
        XCTAssertEqual(chain.done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(queue.sync { chain.tags }, [1, 2, 3, 101, 102, 103])
    }

    /// After `close` nothing is reported, later requests are dropped, and the fd is gone.
    func testNothingIsReportedAfterClose() throws {
        let reports = Reports()
        let queue = DispatchQueue(label: "closing")
        let socket = try makeSocket(reports, queue: queue)
        let peer = try Peer()
        let local = try XCTUnwrap(socket.localAddress)
        socket.setReceiveMode(.continuous)
        // The fd itself, not the process-wide count of handles, which an earlier test's close may still
        // be lowering on its own owner.
        let fd = socket.fd
        var before = stat()
        XCTAssertEqual(fstat(fd, &before), 0)
        queue.sync { socket.close() }
        XCTAssertEqual(socket.fd, -1)
        var after = stat()
        XCTAssertTrue(fstat(fd, &after) == -1 || after.st_ino != before.st_ino, "fd \(fd) is still the socket")
        peer.send([1], to: local)
        socket.send(Data([1]), to: peer.address, timeout: nil, tag: 1)
        XCTAssertThrowsError(try socket.bind(to: SocketAddress(numericHost: "127.0.0.1", port: 0)!))
        queue.sync {}
        XCTAssertEqual(reports.snapshot().outcomes.count + reports.snapshot().datagrams.count, 0)
    }

    /// A connected socket hears only its peer, and an ICMP port unreachable is reported as ECONNREFUSED
    /// without closing anything.
    func testAConnectedSocketFiltersAndReportsRefusal() throws {
        let reports = Reports()
        let socket = try makeSocket(reports)
        let peer = try Peer()
        let stranger = try Peer()
        try socket.connect(to: peer.address)
        socket.setReceiveMode(.continuous)
        let local = try XCTUnwrap(socket.localAddress)
        stranger.send([1], to: local)
        peer.send([2], to: local)
        reports.wait { reports.datagramCount == 1 }
        XCTAssertEqual(reports.snapshot().datagrams.map(\.bytes), [[2]])
        // A port nobody listens on (a peer's, once it is closed): the kernel answers the next datagram
        // with an ICMP port unreachable, which the connected socket reports.
        var gone: Peer? = try Peer()
        let unbound = gone!.address
        gone = nil
        let lonely = try makeSocket(reports)
        try lonely.connect(to: unbound)
        lonely.setReceiveMode(.continuous)
        lonely.send(Data([3]), to: nil, timeout: nil, tag: 7)
        reports.wait { reports.failureCount >= 1 }
        XCTAssertEqual(reports.snapshot().failures.first, .system(code: ECONNREFUSED, function: "recvmmsg"))
        XCTAssertFalse(lonely.isClosed)
    }

    /// The batch helpers themselves.
    func testFIFOPrefixAndAddressBytes() {
        var fifo = FIFO<Int>()
        XCTAssertEqual(fifo.prefix(3), [])
        for value in 0..<10 { fifo.append(value) }
        fifo.removeFirst()
        XCTAssertEqual(fifo.prefix(3), [1, 2, 3])
        XCTAssertEqual(fifo.prefix(100), Array(1..<10))
        for text in ["127.0.0.1", "::1", "fe80::1", "10.1.2.3"] {
            let address = SocketAddress(numericHost: text, port: 4242)!
            let bytes = address.sockaddrBytes
            let back = bytes.withUnsafeBytes { SocketAddress(sockaddrBytes: $0) }
            XCTAssertEqual(back, address)
            XCTAssertEqual(back?.port, 4242)
            XCTAssertEqual(address.withPort(7).port, 7)
        }
        XCTAssertNil([UInt8](repeating: 0, count: 3).withUnsafeBytes { SocketAddress(sockaddrBytes: $0) })
        XCTAssertNil([UInt8](repeating: 0, count: 16).withUnsafeBytes { SocketAddress(sockaddrBytes: $0) }, "AF_UNSPEC")
    }
}
