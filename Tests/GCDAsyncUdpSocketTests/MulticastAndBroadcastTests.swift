import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

// What loopback carries, measured on this project's machines with python sockets, in the suite's namespace
// (only `lo`, up) and in a fresh one:
// * IPv4 multicast needs no setup: a sender whose IP_MULTICAST_IF is 127.0.0.1 reaches the sockets
//   that joined the group on 127.0.0.1 (`lo` has no MULTICAST flag, and needs none for this); without
//   IP_MULTICAST_IF the send fails with ENETUNREACH, there being no route for 224.0.0.0/4.
// * IPv6 multicast is refused (ENETUNREACH) whatever the flags, as no route covers ff00::/8; a
//   unicast route for it through `lo` takes the datagrams and drops them, and only a *local* route
//   (`ip -6 route add local ff00::/8 dev lo table local`) delivers them, to the members only. That
//   route would change the namespace every other test runs in (or the host's, for a plain
//   `swift test` as root), so the IPv6 test runs in a namespace of its own: it starts this test
//   binary again, for itself only, under `unshare --net` (with `--user --map-root-user` when not root)
//   after setting up `lo` there, and checks that run's verdict.
// * Broadcast to 127.255.255.255 (loopback's broadcast address) fails with EACCES without
//   SO_BROADCAST, and with it reaches a socket bound to 0.0.0.0 on that port (not one bound to
//   127.0.0.1). 255.255.255.255 is unreachable with only loopback.

/// Multicast groups joined and left over IPv4 and IPv6, and broadcast with and without
/// `enableBroadcast(true)`.
final class MulticastAndBroadcastTests: XCTestCase {
    let queue = DispatchQueue(label: "delegate")

    /// A socket that joined 239.1.2.3 on 127.0.0.1 gets what is sent to the group through
    /// `sendIPv4Multicast(onInterface: "127.0.0.1")`; once it left, it does not.
    func testIPv4MulticastJoinAndLeave() throws {
        try joinAndLeave(group: "239.1.2.3", receiverInterface: "127.0.0.1", unicast: "127.0.0.1") { sender in
            try sender.sendIPv4Multicast(onInterface: "127.0.0.1")
        }
    }

    /// The same with ff12::1234 on `lo`, in a network namespace of its own (see the top of the file).
    func testIPv6MulticastJoinAndLeave() throws {
        try inMulticastNamespace {
            try joinAndLeave(group: "ff12::1234", receiverInterface: "lo", unicast: "::1") { sender in
                try sender.sendIPv6Multicast(onInterface: "lo")
            }
        }
    }

    /// The receiver binds the wildcard address (a group's datagrams are addressed to the group, not
    /// to 127.0.0.1) and joins on `receiverInterface`; the sender picks its interface with
    /// `chooseInterface`. After the leave, a datagram to the group and then one to the receiver's
    /// own address are sent: the second arriving alone shows the first was not delivered.
    private func joinAndLeave(
        group: String, receiverInterface: String, unicast: String, file: StaticString = #filePath, line: UInt = #line,
        chooseInterface: (GCDAsyncUdpSocket) throws -> Void
    ) throws {
        let ipv6 = group.contains(":")
        let recorder = Recorder()
        let receiver = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: queue)
        try receiver.bind(toPort: 0)
        try receiver.joinMulticastGroup(group, onInterface: receiverInterface)
        let port = ipv6 ? receiver.localPort_IPv6() : receiver.localPort_IPv4()
        XCTAssertNotEqual(port, 0, file: file, line: line)
        try receiver.beginReceiving()

        let senderRecorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: senderRecorder, delegateQueue: DispatchQueue(label: "sender"))
        try chooseInterface(sender)
        sender.send(Data("to the group".utf8), toHost: group, port: port, withTimeout: 5, tag: 1)
        guard recorder.wait(for: "receive to the group", file: file, line: line),
            senderRecorder.wait(for: "sent 1", file: file, line: line)
        else { return }
        XCTAssertEqual(senderRecorder.events, ["sent 1"], file: file, line: line)

        try receiver.leaveMulticastGroup(group, onInterface: receiverInterface)
        sender.send(Data("after leaving".utf8), toHost: group, port: port, withTimeout: 5, tag: 2)
        sender.send(Data("unicast".utf8), toHost: unicast, port: port, withTimeout: 5, tag: 3)
        guard recorder.wait(for: "receive unicast", file: file, line: line),
            senderRecorder.wait(for: "sent 3", file: file, line: line)
        else { return }
        XCTAssertEqual(recorder.received.map(\.text), ["to the group", "unicast"], file: file, line: line)
        XCTAssertEqual(senderRecorder.events, ["sent 1", "sent 2", "sent 3"], file: file, line: line)
        closeAndWait(sender, senderRecorder, file: file, line: line)
        closeAndWait(receiver, recorder, file: file, line: line)
    }

    /// Without `enableBroadcast(true)` a datagram to loopback's broadcast address fails alone with
    /// EACCES; the socket stays open, and once broadcast is enabled the same send reaches a socket
    /// bound to the wildcard address on that port.
    func testBroadcastNeedsEnableBroadcast() throws {
        let recorder = Recorder()
        let receiver = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "receiver"))
        try receiver.bind(toPort: 0)
        let port = receiver.localPort()
        try receiver.beginReceiving()

        let senderRecorder = Recorder()
        let sender = GCDAsyncUdpSocket(delegate: senderRecorder, delegateQueue: queue)
        try sender.bind(toPort: 0, interface: "127.0.0.1")
        let senderPort = sender.localPort()
        sender.send(Data("refused".utf8), toHost: "127.255.255.255", port: port, withTimeout: 5, tag: 1)
        guard senderRecorder.wait(for: "not-sent 1") else { return }
        XCTAssertEqual(senderRecorder.events, ["not-sent 1 \(posixError(EACCES))"])
        XCTAssertFalse(sender.isClosed())

        try sender.enableBroadcast(true)
        sender.send(Data("broadcast".utf8), toHost: "127.255.255.255", port: port, withTimeout: 5, tag: 2)
        guard recorder.wait(for: "receive broadcast"), senderRecorder.wait(for: "sent 2") else { return }
        XCTAssertEqual(senderRecorder.events, ["not-sent 1 \(posixError(EACCES))", "sent 2"])
        XCTAssertEqual(recorder.received.map(\.text), ["broadcast"])
        XCTAssertEqual(recorder.received.first?.port, senderPort)
        XCTAssertEqual(sender.localPort(), senderPort)
        closeAndWait(sender, senderRecorder)
        closeAndWait(receiver, recorder)
    }

    // MARK: a network namespace of its own

    /// Set in the environment of the test process `inMulticastNamespace` starts: the name of the
    /// test it is to run for real.
    private static let namespaceVariable = "GCDASYNCUDPSOCKET_TESTS_IN_NAMESPACE"

    /// In the process `inMulticastNamespace` started, runs `body`. Otherwise starts this test binary
    /// again for the calling test only, in a new network namespace whose `lo` is up and routes ff00::/8
    /// locally, and fails unless that run executed exactly that one test and it passed.
    private func inMulticastNamespace(
        test: String = #function, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void
    ) throws {
        let method = test.hasSuffix("()") ? String(test.dropLast(2)) : test
        if ProcessInfo.processInfo.environment[Self.namespaceVariable] == method { return try body() }
        let unshare = try Peer.locate("unshare", hint: "apt-get install -y --no-install-recommends util-linux")
        let ip = try Self.locateIP()
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        // Root (the suite's own namespace included) may make a network namespace; anyone else needs a
        // user namespace too, as Scripts/test does.
        let namespace = getuid() == 0 ? ["--net"] : ["--user", "--map-root-user", "--net"]
        let script =
            "\(ip) link set lo up && \(ip) -6 route add local ff00::/8 dev lo table local"
            + " && exec env \(Self.namespaceVariable)=\(method) \"$0\" \"$1\""
        let testName = "\(String(reflecting: Self.self))/\(method)"
        let run = try runToEnd(unshare, namespace + ["--", "/bin/sh", "-c", script, executable, testName], timeout: 300)
        XCTAssertEqual(run.exit, .exited(0), "\(testName) in its namespace:\n\(run.output)", file: file, line: line)
        XCTAssertTrue(
            run.output.contains("Executed 1 test, with 0 failures"), "\(testName) in its namespace:\n\(run.output)", file: file,
            line: line)
    }

    /// iproute2's `ip`: in PATH or in a system sbin directory (often missing from a user's PATH).
    private static func locateIP() throws -> String {
        let candidates = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        if let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) { return found }
        return try Peer.locate("ip", hint: "apt-get install -y --no-install-recommends iproute2")
    }
}
