// Name lookups against a resolver the test controls: TestResolver on 127.0.0.53, named by a
// resolv.conf bind-mounted over /etc/resolv.conf (with a hosts file of localhost only) in a mount
// and network namespace of the test's own, where the test binary runs this test again. Each cell
// states what the face must report: the documented lookup errors (CFNetwork's kCFErrorDomainCFNetwork
// code 2 with the getaddrinfo code for pairs; NWConnection's `.waiting(.dns(...))`), or a connection
// that falls back to what works (A only, AAAA only, an AAAA that black-holes, many addresses of
// which only one answers), with the echo checked byte for byte.
#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreams
import SocketStreamsTestSupport
import TestPeers
import XCTest

final class ResolverFaultTests: SocketStreamsTestCase {
    private static let namespaceVariable = "SOCKETSTREAMS_RESOLVER_NAMESPACE"

    func testLookupFaultsAgainstAResolverOfTheTestsOwn() throws {
        try inResolverNamespace {
            try lookupCells()
        }
    }

    // MARK: the cells

    private func lookupCells() throws {
        // Echoes: 127.0.0.1:P and ::1:Q; a listener on ::1:P whose backlog is full, so that a connect to
        // it hangs (the black-holed AAAA).
        let echoHandler: @Sendable (RawConnection) -> Void = { connection in
            while let chunk = try? RawSocket.readSome(connection.fd, timeout: 10), !chunk.isEmpty {
                try? connection.write(chunk)
            }
        }
        let blackhole = try BacklogFullListener(family: .v6)
        let echo4 = try RawTCPServer(family: .v4, port: blackhole.port, handler: echoHandler)
        let echo6 = try RawTCPServer(family: .v6, handler: echoHandler)
        // And the other way round: 127.0.0.1:R black-holes, ::1:R echoes.
        let blackhole4 = try BacklogFullListener(family: .v4)
        let echo6OnBlackhole4 = try RawTCPServer(family: .v6, port: blackhole4.port, handler: echoHandler)
        defer {
            echo4.stop()
            echo6.stop()
            echo6OnBlackhole4.stop()
            withExtendedLifetime((blackhole, blackhole4)) {}
        }
        let many = (2...16).map { "127.0.0.\($0)" } + ["127.0.0.1"]
        let resolver = try TestResolver(answers: [
            "nxdomain.test": .nxdomain,
            "servfail.test": .servfail,
            "silent.test": .silent,
            "v4only.test": .addresses(["127.0.0.1"]),
            "v6only.test": .addresses(["::1"]),
            "blackhole6.test": .addresses(["::1", "127.0.0.1"]),
            "many.test": .addresses(many),
            // RFC 8305 §3: an AAAA answered 600 ms after the A (::1 black-holing), and one answered
            // 15 ms after it, inside the 50 ms resolution delay (127.0.0.1 black-holing).
            "slowaaaa.test": .slowAAAA(["::1", "127.0.0.1"], aaaaDelay: 0.6),
            "lateaaaa.test": .slowAAAA(["::1", "127.0.0.1"], aaaaDelay: 0.015),
        ])
        defer { resolver.stop() }

        // Failed lookups: getaddrinfo's code, in CFNetwork's error for pairs, as NWError.dns for NWConnection.
        let failures: [(name: String, addrInfo: Int32, dns: Int)] = [
            ("nxdomain.test", EAI_NONAME, -65554),
            ("servfail.test", EAI_AGAIN, -65568),
            ("silent.test", EAI_AGAIN, -65568),
        ]
        for failure in failures {
            XCTAssertEqual(RawSocket.getaddrinfoCode(host: failure.name), failure.addrInfo, "getaddrinfo(\(failure.name))")
            let pair = makePair(host: failure.name, port: echo4.port)
            let settled = callWithDeadline(10) { () -> Bool in
                pair.input.open()
                pair.output.open()
                while pair.input.streamStatus == .opening || pair.output.streamStatus == .opening { sched_yield() }
                return true
            }
            XCTAssertEqual(settled, true, "\(failure.name): the pair never failed")
            let error = try XCTUnwrap(pair.input.streamError as NSError?, failure.name)
            XCTAssertEqual(error.domain, "kCFErrorDomainCFNetwork", "\(failure.name): \(error)")
            XCTAssertEqual(error.code, 2, "\(failure.name): \(error)")
            XCTAssertEqual(intValue(error.userInfo["kCFGetAddrInfoFailureKey"]), Int(failure.addrInfo), "\(failure.name): \(error)")
            XCTAssertEqual(pair.output.streamError as NSError?, error, failure.name)

            var settings = FaceSettings(transport: .plain, caCertificate: "")
            settings.host = failure.name
            settings.connectTimeout = 5
            let connection = NWConnectionDriver(settings)
            XCTAssertEqual(connection.connect(port: echo4.port), .error(domain: "NWError.dns", code: failure.dns), failure.name)
            let states = connection.states.value
            XCTAssertTrue(states.contains { if case .waiting = $0 { return true } else { return false } }, "\(failure.name): \(states)")
            connection.close()
            print("resolver-cell | \(failure.name) | pair: \(error.domain) \(error.code) getaddrinfo \(failure.addrInfo) | nw: \(states)")
        }

        // Lookups that succeed: every face connects to the address that works and echoes byte for byte.
        let successes: [(name: String, port: Int, after: TimeInterval, within: TimeInterval)] = [
            ("v4only.test", echo4.port, 0, 3),
            ("v6only.test", echo6.port, 0, 3),
            // Happy Eyeballs: the AAAA attempt (first, as RFC 6724 sorts ::1) hangs; the A attempt starts
            // after the connection attempt delay (250 ms) and wins, long before any connect timeout.
            ("blackhole6.test", echo4.port, 0.2, 3),
            // 17 addresses, of which only 127.0.0.1 answers (glibc's RFC 6724 sort may put it first).
            ("many.test", echo4.port, 0, 5),
            // The AAAA comes 600 ms after the A: the face connects over A once the resolution delay
            // (50 ms) has passed, without waiting for it (waiting, it would connect after 600 ms at
            // the earliest, and after 850 ms trying the black-holed ::1 first).
            ("slowaaaa.test", echo4.port, 0.045, 0.5),
            // The AAAA comes 15 ms after the A, inside the resolution delay: ::1 is tried first and
            // answers at once (trying the black-holed 127.0.0.1 first, it would connect only after the
            // 250 ms connection attempt delay).
            ("lateaaaa.test", echo6OnBlackhole4.port, 0.015, 0.25),
        ]
        let payload = testPayload(10_000)
        let makers: [(String, (FaceSettings) -> FaceDriver)] = [
            ("polling pair", { PollingPairDriver($0) }),
            ("AsyncConnection", { AsyncConnectionDriver($0) }),
            ("QueuedSocket", { QueuedSocketDriver($0) }),
            ("GCDAsyncSocket", { GCDAsyncSocketDriver($0) }),
            ("NWConnection", { NWConnectionDriver($0) }),
        ]
        for success in successes {
            for (face, make) in makers {
                var settings = FaceSettings(transport: .plain, caCertificate: "")
                settings.host = success.name
                settings.connectTimeout = 5
                let driver = make(settings)
                let started = FaultRelay.now
                let end = driver.connect(port: success.port)
                let connectedAfter = FaultRelay.now - started
                XCTAssertNil(end, "\(face) \(success.name)")
                XCTAssertLessThan(connectedAfter, success.within, "\(face) \(success.name): connected after \(connectedAfter) s")
                XCTAssertGreaterThanOrEqual(
                    connectedAfter, success.after, "\(face) \(success.name): connected after \(connectedAfter) s, before the AAAA's delay")
                if end == nil {
                    driver.send(payload)
                    let (received, receivedEnd) = driver.receive(count: payload.count, within: 5)
                    XCTAssertEqual(received, payload, "\(face) \(success.name)")
                    XCTAssertNil(receivedEnd, "\(face) \(success.name)")
                }
                driver.close()
                print("resolver-cell | \(success.name) | \(face) | connected after \(String(format: "%.2f", connectedAfter)) s")
            }
        }
        // A slow AAAA must not hold up anyone's A: more pairs at once than the machine has cores (a
        // lookup that blocks a worker of a pool that size would starve the others' A lookups until the
        // AAAA's answer, or the resolver's 1 s timeout), each connected over A within 0.5 s.
        let concurrent = ProcessInfo.processInfo.activeProcessorCount + 2
        let pairs = (0..<concurrent).map { _ in makePair(host: "slowaaaa.test", port: echo4.port) }
        let started = FaultRelay.now
        for pair in pairs {
            pair.input.open()
            pair.output.open()
        }
        let openedAfter = callWithDeadline(10) { () -> Double in
            while pairs.contains(where: { $0.output.streamStatus == .opening }) { sched_yield() }
            return FaultRelay.now - started
        }
        XCTAssertLessThan(
            openedAfter ?? 10, 0.5, "\(concurrent) pairs to slowaaaa.test at once: the last opened after \(openedAfter ?? 10) s")
        XCTAssertEqual(pairs.filter { $0.output.streamStatus == .open }.count, concurrent, "\(pairs.map { $0.output.streamError as Any })")
        for pair in pairs {
            pair.input.close()
            pair.output.close()
        }
        print(
            "resolver-cell | slowaaaa.test | \(concurrent) polling pairs at once | opened after \(String(format: "%.2f", openedAfter ?? -1)) s"
        )
        for question in ["blackhole6.test AAAA", "slowaaaa.test AAAA", "slowaaaa.test A", "lateaaaa.test AAAA"] {
            XCTAssertTrue(resolver.asked.contains(question), "\(question): \(resolver.asked)")
        }
    }

    // MARK: the namespace

    /// Runs `body` in this test binary started again in a mount and network namespace of its own,
    /// with loopback up and /etc/resolv.conf and /etc/hosts bind-mounted from the test's files.
    private func inResolverNamespace(test: String = #function, _ body: () throws -> Void) throws {
        let method = test.hasSuffix("()") ? String(test.dropLast(2)) : test
        if ProcessInfo.processInfo.environment[Self.namespaceVariable] == method { return try body() }
        let directory = try makeTemporaryDirectory()
        let resolvConf = directory.appendingPathComponent("resolv.conf")
        let hosts = directory.appendingPathComponent("hosts")
        // One try of one second per query: the silent server's cell then fails in about a second.
        try "nameserver 127.0.0.53\noptions timeout:1 attempts:1\n".write(to: resolvConf, atomically: true, encoding: .utf8)
        try "127.0.0.1 localhost\n::1 localhost ip6-localhost\n".write(to: hosts, atomically: true, encoding: .utf8)
        let unshare = try XCTUnwrap(
            ["/usr/bin/unshare", "/bin/unshare"].first { FileManager.default.isExecutableFile(atPath: $0) }, "util-linux's unshare")
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let namespace = getuid() == 0 ? ["--mount", "--net"] : ["--user", "--map-root-user", "--mount", "--net"]
        let script = "mount --bind \"$1\" /etc/resolv.conf && mount --bind \"$2\" /etc/hosts && ip link set lo up && exec \"$3\" \"$4\""
        let child = Process()
        child.executableURL = URL(fileURLWithPath: unshare)
        child.arguments =
            namespace + [
                "--", "/bin/sh", "-c", script, "sh", resolvConf.path, hosts.path, executable, "\(String(reflecting: Self.self))/\(method)",
            ]
        var environment = ProcessInfo.processInfo.environment
        environment[Self.namespaceVariable] = method
        child.environment = environment
        let logURL = directory.appendingPathComponent("child.log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let log = try FileHandle(forWritingTo: logURL)
        child.standardOutput = log
        child.standardError = log
        try child.run()
        let exit = ChildExit.waitOrEnd(child, timeout: 120)
        try log.close()
        let output = (try? String(contentsOf: logURL, encoding: .utf8)) ?? ""
        print(output.split(separator: "\n").filter { $0.hasPrefix("resolver-cell") }.joined(separator: "\n"))
        XCTAssertNotNil(exit, "the namespace's run hung:\n\(output)")
        XCTAssertEqual(exit?.signalled, false, "the namespace's run crashed:\n\(output)")
        XCTAssertEqual(exit?.status, 0, output)
        XCTAssertTrue(output.contains("Executed 1 test, with 0 failures"), output)
    }
}
