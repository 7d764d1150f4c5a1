// `NWConnectionGroup` with an `NWMulticastGroup`, as Apple-platform code uses it, over loopback: IPv4
// multicast reaches the sockets that joined on 127.0.0.1 when the sender's IP_MULTICAST_IF is 127.0.0.1
// (see MulticastAndBroadcastTests in GCDAsyncUdpSocketTests), so every group here joins on the loopback
// interface only (`requiredInterfaceType = .loopback`). Port 0 in the members: the group binds a port the
// system picks, and sends to the group go there.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class ConnectionGroupTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "ConnectionGroupTests")
    private static let groupAddress = "239.7.7.7"

    /// What a receive handler saw: "text from PORT complete", and who waits for which text.
    private final class Received: Sendable {
        let messages = Locked<[String]>([])
        let remotes = Locked<[NWEndpoint]>([])
        private let waiters = Locked<[(String, XCTestExpectation)]>([])

        func add(_ text: String, _ line: String, from remote: NWEndpoint?) {
            messages.mutate { $0.append(line) }
            if let remote { remotes.mutate { $0.append(remote) } }
            let due = waiters.mutate { list -> [XCTestExpectation] in
                defer { list.removeAll { $0.0 == text } }
                return list.filter { $0.0 == text }.map(\.1)
            }
            due.forEach { $0.fulfill() }
        }

        /// Fulfilled when a message with this text arrives (after this call).
        func expect(_ text: String, in test: XCTestCase) -> XCTestExpectation {
            let expectation = test.expectation(description: "received \(text)")
            waiters.mutate { $0.append((text, expectation)) }
            return expectation
        }
    }

    private static func loopbackUDP(reuse: Bool = false) -> NWParameters {
        let parameters = NWParameters.udp
        parameters.requiredInterfaceType = .loopback
        parameters.allowLocalEndpointReuse = reuse
        return parameters
    }

    /// A started, ready group on `239.7.7.7` (port 0: the system's pick), whose handler records into
    /// `received` and fulfils `arrived` once per message.
    private func readyGroup(
        received: Received, arrived: XCTestExpectation?, port: NWEndpoint.Port = .any, reuse: Bool = false, source: NWEndpoint? = nil,
        maximumMessageSize: Int = .max, reject: Bool = true
    ) throws -> NWConnectionGroup {
        let descriptor = try NWMulticastGroup(for: [.hostPort(host: NWEndpoint.Host(Self.groupAddress), port: port)], from: source)
        let group = NWConnectionGroup(with: descriptor, using: Self.loopbackUDP(reuse: reuse))
        group.setReceiveHandler(maximumMessageSize: maximumMessageSize, rejectOversizedMessages: reject) { message, content, isComplete in
            let text = String(decoding: content ?? Data(), as: UTF8.self)
            var port = 0
            if case .hostPort(_, let remote)? = message.remoteEndpoint { port = Int(remote.rawValue) }
            received.add(text, "\(text) from \(port) \(isComplete ? "complete" : "partial")", from: message.remoteEndpoint)
            if text == "ping" { message.reply(content: Data("pong".utf8)) }
            arrived?.fulfill()
        }
        let ready = expectation(description: "group ready")
        group.stateUpdateHandler = { state in if state == .ready { ready.fulfill() } }
        group.start(queue: queue)
        wait(for: [ready], timeout: shortTimeout)
        addCleanup { group.cancel() }
        return group
    }

    /// The group's own port, learnt from a message it sends itself (multicast loops back by default).
    private func port(of group: NWConnectionGroup, received: Received) throws -> UInt16 {
        let looped = received.expect("self", in: self)
        group.send(content: Data("self".utf8)) { error in XCTAssertNil(error) }
        wait(for: [looped], timeout: shortTimeout)
        guard case .hostPort(_, let port)? = received.remotes.value.last else { throw NWError.posix(.ENOENT) }
        return port.rawValue
    }

    /// A send to the group (no endpoint) comes back to the group over loopback, from the group's own
    /// port; a reply to it goes to its sender, the group again.
    func testASendToTheGroupIsReceivedAndReplied() throws {
        let received = Received()
        let arrived = expectation(description: "ping and pong")
        arrived.expectedFulfillmentCount = 2
        let group = try readyGroup(received: received, arrived: arrived)
        group.send(content: Data("ping".utf8)) { error in XCTAssertNil(error) }
        wait(for: [arrived], timeout: shortTimeout)
        let messages = received.messages.value
        XCTAssertEqual(messages.count, 2)
        XCTAssertTrue(messages[0].hasPrefix("ping from "), "\(messages)")
        XCTAssertTrue(messages[1].hasPrefix("pong from "), "\(messages)")
        XCTAssertTrue(messages.allSatisfy { $0.hasSuffix("complete") })
        XCTAssertEqual(group.state, .ready)
    }

    /// A peer outside the package (a plain socket sending to the group through 127.0.0.1) reaches the
    /// group; the group answers it with `send(content:to:)`.
    func testAPeerSendsToTheGroupAndIsAnswered() throws {
        let received = Received()
        let group = try readyGroup(received: received, arrived: nil)
        let port = try port(of: group, received: received)
        let peer = try RawUDPPeer()
        addCleanup { peer.close() }
        try peer.multicast(on: "127.0.0.1")
        let heard = received.expect("from the peer", in: self)
        try peer.send(Data("from the peer".utf8), to: port, host: Self.groupAddress)
        wait(for: [heard], timeout: shortTimeout)
        XCTAssertTrue(received.messages.value.contains("from the peer from \(peer.port) complete"), "\(received.messages.value)")
        let answered = expectation(description: "answered")
        group.send(content: Data("answer".utf8), to: .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(peer.port))!)) {
            error in
            XCTAssertNil(error)
            answered.fulfill()
        }
        wait(for: [answered], timeout: shortTimeout)
        let (reply, from) = try peer.receive()
        XCTAssertEqual(reply, Data("answer".utf8))
        XCTAssertEqual(from, Int(port))
    }

    /// A source filter (`from:`) lets only that sender's datagrams through. Two groups share the port
    /// (`allowLocalEndpointReuse`): one with no filter learns it, one with the filter is tested on it.
    func testASourceFilterKeepsOtherSendersOut() throws {
        let allowed = try RawUDPPeer()
        let other = try RawUDPPeer()
        addCleanup {
            allowed.close()
            other.close()
        }
        let open = Received()
        let unfiltered = try readyGroup(received: open, arrived: nil, reuse: true)
        let port = try port(of: unfiltered, received: open)
        let received = Received()
        let arrived = expectation(description: "the allowed sender's datagram")
        _ = try readyGroup(
            received: received, arrived: arrived, port: NWEndpoint.Port(rawValue: port)!, reuse: true,
            source: .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(allowed.port))!))
        try other.multicast(on: "127.0.0.1")
        try allowed.multicast(on: "127.0.0.1")
        let both = open.expect("allowed", in: self)
        try other.send(Data("blocked".utf8), to: port, host: Self.groupAddress)
        try allowed.send(Data("allowed".utf8), to: port, host: Self.groupAddress)
        wait(for: [arrived, both], timeout: shortTimeout)
        XCTAssertEqual(received.messages.value, ["allowed from \(allowed.port) complete"])
        XCTAssertTrue(open.messages.value.contains("blocked from \(other.port) complete"), "the unfiltered group hears both")
    }

    /// `rejectOversizedMessages`: a datagram above `maximumMessageSize` is dropped; without it, its
    /// beginning arrives, not complete.
    func testOversizedMessagesAreRejectedOrCut() throws {
        let rejecting = Received()
        let arrivedRejecting = expectation(description: "the short one")
        let group = try readyGroup(received: rejecting, arrived: arrivedRejecting, maximumMessageSize: 4, reject: true)
        group.send(content: Data("toolong".utf8)) { _ in }
        group.send(content: Data("ok".utf8)) { _ in }
        wait(for: [arrivedRejecting], timeout: shortTimeout)
        XCTAssertEqual(rejecting.messages.value.map { $0.components(separatedBy: " ")[0] }, ["ok"])
        group.cancel()

        let cutting = Received()
        let arrivedCut = expectation(description: "the cut one")
        let second = try readyGroup(received: cutting, arrived: arrivedCut, maximumMessageSize: 4, reject: false)
        second.send(content: Data("toolong".utf8)) { _ in }
        wait(for: [arrivedCut], timeout: shortTimeout)
        XCTAssertEqual(
            cutting.messages.value.map { $0.components(separatedBy: " ").first! + " " + $0.components(separatedBy: " ").last! },
            ["tool partial"])
    }

    /// A send made before `start` is held and goes out once ready; `.cancelled` is last (a send after it is
    /// never called back), and the group's socket is closed.
    func testSendsBeforeStartAndAfterCancel() throws {
        // A first group makes the queue's reactor, which outlives it; the count is taken after.
        let warmUp = try readyGroup(received: Received(), arrived: nil)
        let warmedUp = expectation(description: "warm-up cancelled")
        warmUp.stateUpdateHandler = { state in if state == .cancelled { warmedUp.fulfill() } }
        warmUp.cancel()
        wait(for: [warmedUp], timeout: shortTimeout)
        // Sockets, not every descriptor: the registry's cache of idle reactors may let go of an earlier
        // test's while this one runs, closing its epoll and event descriptors.
        let baseline = RawSocket.openSocketCount()
        do {
            let descriptor = try NWMulticastGroup(for: [.hostPort(host: NWEndpoint.Host(Self.groupAddress), port: .any)])
            let group = NWConnectionGroup(with: descriptor, using: Self.loopbackUDP())
            let events = Locked<[String]>([])
            let arrived = expectation(description: "early arrived")
            group.setReceiveHandler { _, content, _ in
                events.mutate { $0.append("received \(String(decoding: content ?? Data(), as: UTF8.self))") }
                arrived.fulfill()
            }
            group.send(content: Data("early".utf8)) { error in events.mutate { $0.append("sent \(String(describing: error))") } }
            let cancelled = expectation(description: "cancelled")
            group.stateUpdateHandler = { state in
                events.mutate { $0.append("state \(state)") }
                if state == .cancelled { cancelled.fulfill() }
            }
            group.start(queue: queue)
            wait(for: [arrived], timeout: shortTimeout)
            group.cancel()
            wait(for: [cancelled], timeout: shortTimeout)
            group.send(content: Data("late".utf8)) { _ in events.mutate { $0.append("a send after cancelled was called") } }
            queue.sync {}
            XCTAssertEqual(events.value, ["state ready", "sent nil", "received early", "state cancelled"])
        }
        // The socket is closed by its owner's teardown, posted at the cancel: a bounded poll of that.
        let deadline = Date().addingTimeInterval(shortTimeout)
        while RawSocket.openSocketCount() > baseline, Date() < deadline { usleep(2_000) }
        XCTAssertEqual(RawSocket.openSocketCount(), baseline)
    }

    /// Descriptors that are not a multicast group are refused at once.
    func testBadGroupsAreRefused() {
        XCTAssertThrowsError(try NWMulticastGroup(for: []))
        XCTAssertThrowsError(try NWMulticastGroup(for: [.hostPort(host: "127.0.0.1", port: 5000)]))
        XCTAssertThrowsError(try NWMulticastGroup(for: [.hostPort(host: "239.1.1.1", port: 5000), .hostPort(host: "ff12::1", port: 5000)]))
        XCTAssertThrowsError(try NWMulticastGroup(for: [.hostPort(host: "example.com", port: 5000)]))
        XCTAssertNoThrow(try NWMulticastGroup(for: [.hostPort(host: "239.1.1.1", port: 5000), .hostPort(host: "239.1.1.2", port: 5000)]))
    }
}

extension RawUDPPeer {
    /// Sends `data` to `host` (numeric IPv4) and `port`.
    func send(_ data: Data, to port: UInt16, host: String) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw NWError.posix(.EINVAL) }
        let sent = data.withUnsafeBytes { bytes in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, bytes.baseAddress, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        guard sent == data.count else { throw NWError.posix(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    /// Sends multicast out of the interface with this IPv4 address (`IP_MULTICAST_IF`).
    func multicast(on address: String) throws {
        var interface = in_addr()
        guard inet_pton(AF_INET, address, &interface) == 1,
            setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &interface, socklen_t(MemoryLayout<in_addr>.size)) == 0
        else { throw NWError.posix(POSIXErrorCode(rawValue: errno) ?? .EINVAL) }
    }
}
