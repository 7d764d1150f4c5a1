#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

// `NWPathMonitor` against the kernel. The tests that change links, addresses and routes run each in a
// network namespace of its own: the test starts this test binary again, for itself only, under
// `unshare --net` (with `--user --map-root-user` when not root, as Scripts/test does), and checks that
// run's verdict; there, as root of the namespace, it runs `ip` to add veth and VXLAN links (this kernel has no dummy links), addresses
// and routes. Nothing sleeps: each step waits for the update it should cause, with a timeout.

/// What a handler saw, in order, and a wait for the next that matches.
final class PathRecorder: Sendable {
    private let paths = Guarded<[NWPath]>([])
    private let arrived = DispatchSemaphore(value: 0)

    var all: [NWPath] { paths.withLock { $0 } }
    var count: Int { paths.withLock { $0.count } }

    func record(_ path: NWPath) {
        paths.withLock { $0.append(path) }
        arrived.signal()
    }

    /// Waits until an update after the first `after` ones matches; returns it.
    @discardableResult
    func wait(after: Int = 0, timeout: TimeInterval = 10, file: StaticString = #filePath, line: UInt = #line, _ matches: (NWPath) -> Bool)
        -> NWPath?
    {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let found = paths.withLock({ $0.dropFirst(after).first(where: matches) }) { return found }
            let left = deadline.timeIntervalSinceNow
            guard left > 0, arrived.wait(timeout: .now() + left) == .success else {
                XCTFail("no matching update within \(timeout) s; seen: \(all.map(\.debugDescription))", file: file, line: line)
                return nil
            }
        }
    }
}

final class PathMonitorTests: XCTestCase {
    let queue = DispatchQueue(label: "monitor")

    // MARK: in the suite's own namespace

    /// Before start: no queue, an unsatisfied path. The first update comes after start, asynchronously,
    /// on the queue; `currentPath` is that path. A loopback monitor is satisfied by `lo` (up in the
    /// suite's namespace, as on any host).
    func testTheFirstUpdateArrivesAfterStart() throws {
        let monitor = NWPathMonitor()
        XCTAssertNil(monitor.queue)
        XCTAssertEqual(monitor.currentPath.status, .unsatisfied)
        let recorder = PathRecorder()
        let queue = self.queue
        monitor.pathUpdateHandler = { path in
            dispatchPrecondition(condition: .onQueue(queue))
            recorder.record(path)
        }
        monitor.start(queue: queue)
        XCTAssertTrue(monitor.queue === queue)
        let first = try XCTUnwrap(recorder.wait { _ in true })
        queue.sync {}
        XCTAssertEqual(monitor.currentPath, first)
        monitor.cancel()
        XCTAssertNil(monitor.pathUpdateHandler, "released by cancel")

        let loopback = NWPathMonitor(requiredInterfaceType: .loopback)
        let loopbackRecorder = PathRecorder()
        loopback.pathUpdateHandler = { loopbackRecorder.record($0) }
        loopback.start(queue: queue)
        let path = try XCTUnwrap(loopbackRecorder.wait { _ in true })
        XCTAssertEqual(path.status, .satisfied, path.debugDescription)
        XCTAssertEqual(path.availableInterfaces.map(\.type), [.loopback])
        XCTAssertTrue(path.usesInterfaceType(.loopback))
        XCTAssertTrue(path.supportsIPv4)
        XCTAssertEqual(path.gateways, [])
        loopback.cancel()
    }

    // MARK: in namespaces of their own

    /// A fresh namespace (lo down), then: lo up; a veth pair added, brought up, given an address (no
    /// route yet: still unsatisfied), a default route (satisfied), down (unsatisfied: the kernel drops the
    /// route), up, the route again (satisfied), an IPv6 address and route, the IPv4 address removed
    /// (IPv6 only), the link deleted (unsatisfied). One update per change of the path, none repeated.
    func testLinksAddressesAndRoutes() throws {
        try inNamespace {
            let recorder = PathRecorder()
            let loopbackRecorder = PathRecorder()
            let changes = PathRecorder()
            let observation = NetworkChanges.shared.observe { changes.record(NWPath.unknown) }
            let monitor = NWPathMonitor()
            monitor.pathUpdateHandler = { recorder.record($0) }
            monitor.start(queue: queue)
            let loopback = NWPathMonitor(requiredInterfaceType: .loopback)
            loopback.pathUpdateHandler = { loopbackRecorder.record($0) }
            loopback.start(queue: queue)

            let first = try XCTUnwrap(recorder.wait { _ in true })
            XCTAssertEqual(first, NWPath(status: .unsatisfied), "a namespace with nothing up")
            XCTAssertEqual(try XCTUnwrap(loopbackRecorder.wait { _ in true }).status, .unsatisfied, "lo is down in a new namespace")
            try ip("link", "set", "lo", "up")
            let lo = try XCTUnwrap(loopbackRecorder.wait(after: 1) { $0.status == .satisfied })
            XCTAssertEqual(lo.availableInterfaces.map(\.name), ["lo"])
            changes.wait { _ in true }

            try ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
            try ip("link", "set", "veth1", "up")
            try ip("link", "set", "veth0", "up")
            try ip("addr", "add", "10.9.0.2/24", "dev", "veth0")
            try ip("route", "add", "default", "via", "10.9.0.1", "dev", "veth0")
            let up = try XCTUnwrap(recorder.wait(after: 1) { $0.status == .satisfied })
            XCTAssertEqual(up.availableInterfaces.map(\.name), ["veth0"])
            XCTAssertEqual(up.availableInterfaces.first?.type, .wiredEthernet, "a veth is wired")
            XCTAssertTrue(up.supportsIPv4)
            XCTAssertFalse(up.supportsIPv6)
            XCTAssertEqual(up.gateways, [.hostPort(host: "10.9.0.1", port: 0)])

            try ip("link", "set", "veth0", "down")
            recorder.wait(after: 2) { $0.status == .unsatisfied }
            try ip("link", "set", "veth0", "up")
            try ip("route", "add", "default", "via", "10.9.0.1", "dev", "veth0")
            recorder.wait(after: 3) { $0.status == .satisfied }

            try ip("-6", "addr", "add", "2001:db8::2/64", "dev", "veth0", "nodad")
            try ip("-6", "route", "add", "default", "via", "2001:db8::1", "dev", "veth0")
            recorder.wait(after: 4) { $0.supportsIPv6 && $0.supportsIPv4 }
            try ip("addr", "del", "10.9.0.2/24", "dev", "veth0")
            let v6 = try XCTUnwrap(recorder.wait(after: 5) { !$0.supportsIPv4 })
            XCTAssertEqual(v6.status, .satisfied)
            XCTAssertTrue(v6.supportsIPv6)
            XCTAssertEqual(v6.gateways, [.hostPort(host: "2001:db8::1", port: 0)])
            try ip("link", "del", "veth0")
            recorder.wait(after: 6) { $0.status == .unsatisfied }

            let statuses = recorder.all.map { "\($0.status) v4:\($0.supportsIPv4) v6:\($0.supportsIPv6)" }
            XCTAssertEqual(
                statuses,
                [
                    "unsatisfied v4:false v6:false", "satisfied v4:true v6:false", "unsatisfied v4:false v6:false",
                    "satisfied v4:true v6:false", "satisfied v4:true v6:true", "satisfied v4:false v6:true",
                    "unsatisfied v4:false v6:false",
                ])
            for (previous, next) in zip(recorder.all, recorder.all.dropFirst()) { XCTAssertNotEqual(previous, next, "a repeated path") }
            XCTAssertEqual(loopbackRecorder.count, 2, "lo's path changed once: \(loopbackRecorder.all)")
            monitor.cancel()
            loopback.cancel()
            observation.cancel()
        }
    }

    /// A veth pair is wired Ethernet: a monitor requiring `.wiredEthernet` is satisfied through it, and
    /// not once its peer is down (no carrier); a VXLAN link is `.other`, so a monitor prohibiting wired
    /// interfaces is satisfied through it alone; a monitor requiring `.wifi` never is.
    func testInterfaceTypes() throws {
        try inNamespace {
            try ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
            try ip("addr", "add", "10.8.0.2/24", "dev", "veth0")
            try ip("link", "set", "veth0", "up")
            let wired = PathRecorder()
            let prohibited = PathRecorder()
            let wifi = PathRecorder()
            let monitors = [
                (NWPathMonitor(requiredInterfaceType: .wiredEthernet), wired),
                (NWPathMonitor(prohibitedInterfaceTypes: [.wiredEthernet]), prohibited),
                (NWPathMonitor(requiredInterfaceType: .wifi), wifi),
            ]
            for (monitor, recorder) in monitors {
                monitor.pathUpdateHandler = { recorder.record($0) }
                monitor.start(queue: queue)
            }
            XCTAssertEqual(try XCTUnwrap(wired.wait { _ in true }).status, .unsatisfied)
            try ip("link", "set", "veth1", "up")
            try ip("route", "add", "default", "via", "10.8.0.1", "dev", "veth0")
            let path = try XCTUnwrap(wired.wait(after: 1) { $0.status == .satisfied })
            XCTAssertEqual(path.availableInterfaces.map(\.name), ["veth0"])
            XCTAssertTrue(path.usesInterfaceType(.wiredEthernet))

            try ip("link", "add", "vx0", "type", "vxlan", "id", "5", "dstport", "4789")
            try ip("addr", "add", "10.6.0.2/24", "dev", "vx0")
            try ip("link", "set", "vx0", "up")
            try ip("route", "add", "default", "via", "10.6.0.1", "dev", "vx0", "metric", "500")
            let other = try XCTUnwrap(prohibited.wait(after: 1) { $0.status == .satisfied })
            XCTAssertEqual(other.availableInterfaces.map(\.name), ["vx0"])
            XCTAssertEqual(other.availableInterfaces.map(\.type), [.other])

            try ip("link", "set", "veth1", "down")
            wired.wait(after: 2) { $0.status == .unsatisfied }
            XCTAssertEqual(wired.all.map(\.status), [.unsatisfied, .satisfied, .unsatisfied])
            XCTAssertEqual(prohibited.all.map(\.status), [.unsatisfied, .satisfied])
            XCTAssertEqual(wifi.all.map(\.status), [.unsatisfied])
            for (monitor, _) in monitors { monitor.cancel() }
        }
    }

    /// After `cancel()` the handler is not called again (a second monitor on the same queue sees the
    /// change that would have been reported), and once every monitor is cancelled the routing socket is
    /// closed: the process holds as many fds as before, and no NETLINK_ROUTE socket.
    func testCancelStopsUpdatesAndLeaksNoFD() throws {
        try inNamespace {
            // A first start and cancel, so that what stays for the process's life (the queue's reactor in
            // its cache, Dispatch's own fds) is there before counting.
            let warmUp = NWPathMonitor()
            let warmUpRecorder = PathRecorder()
            warmUp.pathUpdateHandler = { warmUpRecorder.record($0) }
            warmUp.start(queue: queue)
            warmUpRecorder.wait { _ in true }
            warmUp.cancel()
            let fds = try Self.openFDs()
            XCTAssertEqual(try Self.routingSockets(), 0)

            let cancelled = NWPathMonitor()
            let kept = NWPathMonitor()
            let cancelledRecorder = PathRecorder()
            let keptRecorder = PathRecorder()
            cancelled.pathUpdateHandler = { cancelledRecorder.record($0) }
            kept.pathUpdateHandler = { keptRecorder.record($0) }
            cancelled.start(queue: queue)
            kept.start(queue: queue)
            cancelledRecorder.wait { _ in true }
            keptRecorder.wait { _ in true }
            XCTAssertEqual(try Self.routingSockets(), 1, "one socket for every monitor")
            cancelled.cancel()
            try ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
            try ip("link", "set", "veth1", "up")
            try ip("addr", "add", "10.7.0.2/24", "dev", "veth0")
            try ip("link", "set", "veth0", "up")
            try ip("route", "add", "default", "via", "10.7.0.1")
            keptRecorder.wait(after: 1) { $0.status == .satisfied }
            queue.sync {}
            XCTAssertEqual(cancelledRecorder.count, 1, "no update after cancel")
            cancelled.start(queue: queue)
            XCTAssertNil(cancelled.pathUpdateHandler)
            kept.cancel()
            XCTAssertEqual(try Self.routingSockets(), 0, "the socket is closed when cancel returns")
            XCTAssertEqual(try Self.openFDs(), fds)
        }
    }

    /// `cancel()` from inside the handler returns (it does not wait for itself), and no later update runs.
    func testCancelFromTheHandler() throws {
        try inNamespace {
            let recorder = PathRecorder()
            let monitor = NWPathMonitor(requiredInterfaceType: .loopback)
            let calls = Guarded(0)
            monitor.pathUpdateHandler = { [unowned monitor] path in
                calls.withLock { $0 += 1 }
                monitor.cancel()
                recorder.record(path)
            }
            monitor.start(queue: queue)
            recorder.wait { _ in true }
            try ip("link", "set", "lo", "up")
            let witness = PathRecorder()
            let other = NWPathMonitor(requiredInterfaceType: .loopback)
            other.pathUpdateHandler = { witness.record($0) }
            other.start(queue: queue)
            witness.wait { $0.status == .satisfied }
            queue.sync {}
            XCTAssertEqual(calls.withLock { $0 }, 1)
            other.cancel()
        }
    }

    // MARK: helpers

    /// The fds the process has open.
    static func openFDs() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
    }

    /// How many NETLINK_ROUTE sockets the process holds: its fds' socket inodes found in
    /// /proc/net/netlink with protocol 0.
    static func routingSockets() throws -> Int {
        var inodes = Set<String>()
        for name in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + name),
                target.hasPrefix("socket:[")
            else { continue }
            inodes.insert(String(target.dropFirst(8).dropLast()))
        }
        let table = try String(contentsOfFile: "/proc/net/netlink", encoding: .utf8)
        return table.split(separator: "\n").dropFirst().filter { row in
            let columns = row.split(separator: " ")
            return columns.count >= 10 && columns[1] == "0" && inodes.contains(String(columns[columns.count - 1]))
        }.count
    }

    static let ipTool = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Runs `ip` with `arguments`; fails the test unless it exits 0.
    func ip(_ arguments: String..., file: StaticString = #filePath, line: UInt = #line) throws {
        let tool = try XCTUnwrap(Self.ipTool, "iproute2's ip is needed (apt-get install iproute2)", file: file, line: line)
        let run = try Self.run(tool, arguments, timeout: 30)
        XCTAssertEqual(run.status, 0, "ip \(arguments.joined(separator: " ")): \(run.output)", file: file, line: line)
    }

    /// Runs a program to its end (or kills it after `timeout` seconds): its exit status and its output
    /// (stdout and stderr). With `posix_spawn(3)` and `waitpid(2)`, not Foundation's `Process`, whose
    /// run-loop wake-up needs a loopback socket pair, which a new namespace's `lo`, down, cannot give.
    static func run(_ path: String, _ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval) throws -> (
        status: Int32, output: String
    ) {
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { throw POSIXError(.EMFILE) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
        posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 2)
        posix_spawn_file_actions_addclose(&actions, pipeFDs[0])
        let environment = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, envp)
        close(pipeFDs[1])
        guard spawned == 0 else {
            close(pipeFDs[0])
            throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .ENOENT)
        }
        // Kill it at the deadline; the read below then ends.
        let finished = Guarded(false)
        let child = pid
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout) {
            if !finished.withLock({ $0 }) { kill(child, SIGKILL) }
        }
        var output = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(pipeFDs[0], &chunk, chunk.count)
            if count > 0 {
                output += chunk[0..<count]
            } else if count == 0 || errno != EINTR {
                break
            }
        }
        close(pipeFDs[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        finished.withLock { $0 = true }
        let exited = status & 0x7F == 0
        return (exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F), String(decoding: output, as: UTF8.self))
    }

    /// Set in the environment of the run `inNamespace` starts: the test it is to run for real.
    static let namespaceVariable = "SOCKETSTREAMS_PATH_TESTS_IN_NAMESPACE"

    /// In the run `inNamespace` started, runs `body`. Otherwise runs this test binary again for the
    /// calling test only, in a new network namespace (only `lo`, down), and fails unless that run executed
    /// exactly that one test and it passed.
    func inNamespace(test: String = #function, file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) throws {
        let method = test.hasSuffix("()") ? String(test.dropLast(2)) : test
        if ProcessInfo.processInfo.environment[Self.namespaceVariable] == method { return try body() }
        let unshare = try XCTUnwrap(
            ["/usr/bin/unshare", "/bin/unshare"].first { FileManager.default.isExecutableFile(atPath: $0) },
            "util-linux's unshare is needed", file: file, line: line)
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let namespace = getuid() == 0 ? ["--net"] : ["--user", "--map-root-user", "--net"]
        let testName = "\(String(reflecting: Self.self))/\(method)"
        var environment = ProcessInfo.processInfo.environment
        environment[Self.namespaceVariable] = method
        let run = try Self.run(unshare, namespace + ["--", executable, testName], environment: environment, timeout: 300)
        XCTAssertEqual(run.status, 0, "\(testName) in its namespace:\n\(run.output)", file: file, line: line)
        XCTAssertTrue(
            run.output.contains("Executed 1 test, with 0 failures"), "\(testName) in its namespace:\n\(run.output)", file: file, line: line)
    }
}
