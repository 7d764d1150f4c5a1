// The fault matrix's UDP column: GCDAsyncUdpSocket, the engine's DatagramSocket, AsyncDatagramSocket and
// NWConnection over UDP, connected to a DatagramFaultRelay in front of a real peer (a python UDP echo), against the faults a user-space
// relay can make to datagrams (drop, duplicate, reorder, truncate), and a closed port (the ICMP port
// unreachable a connected socket is told of). Each cell states what the face receives: exactly the
// datagrams the fault lets through, in the order it sends them, byte for byte, and no error; for the
// closed port, ECONNREFUSED (GCDAsyncUdpSocket closes with it, as CocoaAsyncSocket does; DatagramSocket
// reports it and stays open). The relay's own count of what it sent back says when nothing more can
// come, so no cell waits to see that nothing happens.
#if canImport(Glibc)
    import Glibc
#endif
import CocoaAsyncSocket
import Foundation
import SocketStreams
import SocketStreamsTestSupport
import TestPeers
import XCTest

/// What a UDP face received, and the errors it reported, with waits.
final class DatagramInbox: @unchecked Sendable {
    // @unchecked: every field only under `condition`.
    private let condition = NSCondition()
    private var datagrams: [Data] = []
    private var errors: [NSError] = []
    private var closes = 0

    func received(_ data: Data) {
        condition.lock()
        datagrams.append(data)
        condition.broadcast()
        condition.unlock()
    }

    func failed(_ error: NSError?, closed: Bool) {
        condition.lock()
        if let error { errors.append(error) }
        if closed { closes += 1 }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until `count` datagrams or an error arrived, at most `within` seconds.
    func wait(count: Int, within: TimeInterval) -> (datagrams: [Data], errors: [NSError], closes: Int) {
        let deadline = Date(timeIntervalSinceNow: within)
        condition.lock()
        defer { condition.unlock() }
        while datagrams.count < count && errors.isEmpty {
            if !condition.wait(until: deadline) { break }
        }
        return (datagrams, errors, closes)
    }

    /// Waits until the face reported its close, at most `within` seconds.
    func waitForClose(within: TimeInterval) -> Bool {
        let deadline = Date(timeIntervalSinceNow: within)
        condition.lock()
        defer { condition.unlock() }
        while closes == 0 {
            if !condition.wait(until: deadline) { return closes > 0 }
        }
        return true
    }
}

/// A UDP face connected to 127.0.0.1:`port`, receiving continuously.
protocol DatagramFaceDriver: AnyObject {
    var inbox: DatagramInbox { get }
    func send(_ datagrams: [Data])
    /// Closes the socket, returning once the face says it is closed.
    func close()
}

/// GCDAsyncUdpSocket as Apple-platform code uses it: bind, connect, beginReceiving, send with a tag.
final class GCDAsyncUdpSocketDriver: NSObject, DatagramFaceDriver, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
    // @unchecked: `socket` is set in init and used from the test's thread; the delegate calls touch only
    // the inbox.
    let inbox = DatagramInbox()
    private var socket: GCDAsyncUdpSocket!

    init(port: Int) throws {
        super.init()
        socket = GCDAsyncUdpSocket(delegate: self, delegateQueue: DriverQueues.gcdAsyncUdpSocket, socketQueue: nil)
        try socket.connect(toHost: "127.0.0.1", onPort: UInt16(port))
        try socket.beginReceiving()
    }

    func send(_ datagrams: [Data]) {
        for (tag, datagram) in datagrams.enumerated() { socket.send(datagram, withTimeout: 5, tag: tag) }
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
        inbox.received(data)
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
        inbox.failed(error as NSError?, closed: false)
    }

    func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
        inbox.failed(error as NSError?, closed: true)
    }

    func close() {
        socket.close()
        _ = inbox.waitForClose(within: 5)
    }
}

/// The engine's DatagramSocket on a queue of its own, connected, reading continuously.
final class DatagramSocketDriver: DatagramFaceDriver, DatagramSocketDelegate, @unchecked Sendable {
    // @unchecked: `socket` is set in init and used from the test's thread; the delegate calls touch only
    // the inbox.
    let inbox = DatagramInbox()
    private var socket: DatagramSocket!

    init(port: Int) throws {
        socket = try DatagramSocket(family: AF_INET, owner: .queue(DriverQueues.datagramSocket), delegate: self)
        try socket.connect(to: SocketAddress(numericHost: "127.0.0.1", port: port)!)
        socket.setReceiveMode(.continuous)
    }

    func send(_ datagrams: [Data]) {
        for (tag, datagram) in datagrams.enumerated() { socket.send(datagram, to: nil, timeout: nil, tag: tag) }
    }

    func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        for datagram in datagrams { inbox.received(Data(datagram.bytes)) }
    }

    func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        for outcome in outcomes {
            if case .system(let code, _)? = outcome.error {
                inbox.failed(NSError(domain: NSPOSIXErrorDomain, code: Int(code)), closed: false)
            }
        }
    }

    func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {
        if case .system(let code, _) = error { inbox.failed(NSError(domain: NSPOSIXErrorDomain, code: Int(code)), closed: false) }
    }

    func close() {
        socket.close()
        socket = nil
    }
}

/// AsyncDatagramSocket as async code uses it: connected, one task iterating `datagrams`, the sends
/// awaited one after another. An error the kernel reports ends one iteration (ECONNREFUSED); the
/// reading task then iterates again, as the type's documentation says reading goes on.
final class AsyncDatagramSocketDriver: DatagramFaceDriver, @unchecked Sendable {
    // @unchecked: `socket` and `reader` are set in init and used from the test's thread; the tasks touch
    // only the inbox and the socket, which is Sendable.
    let inbox = DatagramInbox()
    private let socket: AsyncDatagramSocket
    private var reader: Task<Void, Never>?

    init(port: Int) throws {
        let made = Guarded<Result<AsyncDatagramSocket, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<AsyncDatagramSocket, any Error>
            do {
                result = .success(try await AsyncDatagramSocket(connectingTo: "127.0.0.1", port: port))
            } catch {
                result = .failure(error)
            }
            made.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        socket = try made.withLock { $0! }.get()
        let (socket, inbox) = (self.socket, self.inbox)
        reader = Task {
            while true {
                do {
                    for try await datagram in socket.datagrams { inbox.received(Data(datagram.bytes)) }
                    return inbox.failed(nil, closed: true)
                } catch let error as DatagramSocketError where error.code == .system {
                    inbox.failed(NSError(domain: NSPOSIXErrorDomain, code: Int(error.errorNumber)), closed: false)
                } catch {
                    return inbox.failed(nil, closed: true)  // closed
                }
            }
        }
    }

    func send(_ datagrams: [Data]) {
        let (socket, inbox) = (self.socket, self.inbox)
        let done = DispatchSemaphore(value: 0)
        Task {
            for datagram in datagrams {
                do { try await socket.send(Array(datagram)) } catch { inbox.failed(error as NSError, closed: false) }
            }
            done.signal()
        }
        done.wait()
    }

    func close() {
        socket.close()
        _ = inbox.waitForClose(within: 5)
        reader = nil
    }
}

extension DriverQueues {
    static let gcdAsyncUdpSocket = DispatchQueue(label: "FaultMatrix.GCDAsyncUdpSocket")
    static let datagramSocket = DispatchQueue(label: "FaultMatrix.DatagramSocket")
}

final class DatagramFaultTests: SocketStreamsTestCase {
    static let faults: [DatagramFaultRelay.Fault] = [.none, .drop(every: 3), .duplicate, .reorder, .truncate(bytes: 10)]
    static let faces: [(name: String, make: @Sendable (Int) throws -> DatagramFaceDriver)] = [
        ("GCDAsyncUdpSocket", { try GCDAsyncUdpSocketDriver(port: $0) }),
        ("DatagramSocket", { try DatagramSocketDriver(port: $0) }),
        ("AsyncDatagramSocket", { try AsyncDatagramSocketDriver(port: $0) }),
        ("NWConnection", { try NWUDPConnectionDriver(port: $0) }),
    ]

    /// A python UDP echo on 127.0.0.1 (each datagram back to its sender as it came); its port.
    private func startUDPEcho() throws -> Int {
        let python = try Peer.locate("python3", hint: "python3 is expected on the image")
        let script = """
            import socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(('127.0.0.1', 0))
            print('ready', s.getsockname()[1], flush=True)
            while True:
                data, peer = s.recvfrom(65535)
                s.sendto(data, peer)
            """
        let peer = Peer(name: "python UDP echo", executable: python, arguments: ["-c", script])
        let port = try XCTUnwrap(Int(try peer.start(readyPattern: #"ready (\d+)"#)))
        addCleanup { peer.stop() }
        return port
    }

    func testDatagramFaults() throws {
        let echo = try startUDPEcho()
        // Ten datagrams of 200 bytes, each its own (an even count: reorder swaps pairs).
        let datagrams = (0..<10).map { testPayload(200, seed: UInt8($0)) }
        for face in Self.faces {
            // A warm-up: the queue's reactor is made at the first use, and stays.
            for (index, fault) in ([.none] + Self.faults).enumerated() {
                let report = index > 0
                let descriptorsBefore = RawSocket.openSocketCount()
                let relay = try DatagramFaultRelay(upstreamPort: echo, fault: fault)
                let driver = try face.make(relay.port)
                let expected = fault.outcome(of: datagrams)
                driver.send(datagrams)
                XCTAssertTrue(relay.waitUntilSent(expected.count, timeout: 10), "\(face.name) \(fault): the relay sent \(relay.sent)")
                let (received, errors, _) = driver.inbox.wait(count: expected.count, within: 10)
                XCTAssertEqual(received, expected, "\(face.name) \(fault): \(received.map(\.count)) B")
                XCTAssertEqual(relay.sent, expected.count, "\(face.name) \(fault): the relay sent more")
                XCTAssertEqual(errors, [], "\(face.name) \(fault)")
                driver.close()
                relay.stop()
                guard report else { continue }
                let deadline = Date(timeIntervalSinceNow: 5)
                while RawSocket.openSocketCount() > descriptorsBefore && Date() < deadline { sched_yield() }
                XCTAssertLessThanOrEqual(RawSocket.openSocketCount(), descriptorsBefore, "\(face.name) \(fault): sockets left open")
                print(
                    "fault-matrix | \(face.name) | udp | \(fault) | \(received.count) datagrams | \(errors.isEmpty ? "no error" : "\(errors)")"
                )
            }
        }
    }

    /// A closed port: the ICMP port unreachable the kernel reports on a connected socket is ECONNREFUSED.
    /// GCDAsyncUdpSocket closes with it (udpSocketDidClose, once), as CocoaAsyncSocket does with its
    /// recvfrom error; DatagramSocket reports it (receiveFailed) and stays open; AsyncDatagramSocket ends
    /// the iteration with it and stays open.
    func testAClosedPortIsConnectionRefused() throws {
        // A port nothing listens on: bound for its number, then closed.
        let probe = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) == 0 && getsockname(probe, $0, &length) == 0 }
        }
        Glibc.close(probe)
        XCTAssertTrue(bound, "a UDP port for the closed-port cell")
        let closed = Int(UInt16(bigEndian: address.sin_port))
        // NWConnection keeps a UDP flow ready through an ICMP port unreachable, at most failing the send
        // it came back for (Network.framework's policy for datagrams): DatagramConnectionTests has that
        // cell, which no single outcome here can state.
        for face in Self.faces where face.name != "NWConnection" {
            let driver = try face.make(closed)
            driver.send([Data("anyone there?".utf8)])
            let (received, errors, closes) = driver.inbox.wait(count: 1, within: 10)
            XCTAssertEqual(received, [], face.name)
            XCTAssertEqual(errors.map(\.domain), [NSPOSIXErrorDomain], "\(face.name): \(errors)")
            XCTAssertEqual(errors.map(\.code), [Int(ECONNREFUSED)], "\(face.name): \(errors)")
            if driver is GCDAsyncUdpSocketDriver {
                XCTAssertTrue(driver.inbox.waitForClose(within: 5), "\(face.name): not closed")
                XCTAssertEqual(driver.inbox.wait(count: 0, within: 0).closes, 1, "\(face.name): udpSocketDidClose calls")
            } else {
                XCTAssertEqual(closes, 0, face.name)
                driver.close()
            }
            print("fault-matrix | \(face.name) | udp | closed port | \(received.count) datagrams | \(errors)")
        }
    }
}
