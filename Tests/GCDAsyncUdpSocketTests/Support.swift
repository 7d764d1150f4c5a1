import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// Everything a GCDAsyncUdpSocket delegate was told, in order, as text ("sent 1", "receive hello from
/// 127.0.0.1 5000", "close nil", …), with waits. Written as an Apple-platform GCDAsyncUdpSocket
/// delegate is: an NSObject subclass with the protocol's Swift signatures.
// @unchecked Sendable: every field is reached only under `condition`, except `onReceive`, which is set
// before the socket it serves is bound and only read afterwards, on the delegate queue.
final class Recorder: NSObject, GCDAsyncUdpSocketDelegate, @unchecked Sendable {
    /// One datagram as `didReceive` gave it.
    struct Datagram {
        let data: Data
        let address: Data
        let context: Any?
        var text: String { String(decoding: data, as: UTF8.self) }
        var host: String? { GCDAsyncUdpSocket.host(fromAddress: address) }
        var port: UInt16 { GCDAsyncUdpSocket.port(fromAddress: address) }
    }

    private let condition = NSCondition()
    private var log: [String] = []
    private var datagrams: [Datagram] = []
    private var closeErrors: [Error?] = []
    /// Called for every datagram, on the delegate queue, after it was recorded.
    var onReceive: ((GCDAsyncUdpSocket, Data, Data) -> Void)?

    /// Records a line of the test's own among the delegate's (a block's turn, say).
    func note(_ line: String) { record(line) }

    private func record(_ line: String) {
        condition.lock()
        log.append(line)
        condition.broadcast()
        condition.unlock()
    }

    var events: [String] {
        condition.lock()
        defer { condition.unlock() }
        return log
    }

    /// The datagrams delivered, in order.
    var received: [Datagram] {
        condition.lock()
        defer { condition.unlock() }
        return datagrams
    }

    /// The errors `udpSocketDidClose` gave, in order.
    var errors: [Error?] {
        condition.lock()
        defer { condition.unlock() }
        return closeErrors
    }

    /// How many events start with `prefix`.
    func count(_ prefix: String) -> Int { events.filter { $0.hasPrefix(prefix) }.count }

    /// The events recorded after the first "close": none, if no callback followed `udpSocketDidClose`.
    var eventsAfterFirstClose: [String] {
        let all = events
        guard let first = all.firstIndex(where: { $0.hasPrefix("close") }) else { return [] }
        return Array(all[(first + 1)...])
    }

    /// Waits until an event starting with `prefix` has been recorded `count` times.
    @discardableResult
    func wait(for prefix: String, count: Int = 1, timeout: TimeInterval = 10, file: StaticString = #filePath, line: UInt = #line) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while log.filter({ $0.hasPrefix(prefix) }).count < count {
            if !condition.wait(until: deadline) {
                XCTFail("no \(count) × \"\(prefix)\" within \(timeout) s; got \(log)", file: file, line: line)
                return false
            }
        }
        return true
    }

    /// Fails as soon as more than `count` events start with `prefix`, watching for `interval`: for
    /// what must not happen (a datagram left in the kernel being delivered), which no event announces.
    func expectNoMore(
        _ prefix: String, than count: Int, within interval: TimeInterval = 0.5, file: StaticString = #filePath, line: UInt = #line
    ) {
        let deadline = Date(timeIntervalSinceNow: interval)
        condition.lock()
        defer { condition.unlock() }
        while log.filter({ $0.hasPrefix(prefix) }).count <= count {
            if !condition.wait(until: deadline) { return }
        }
        XCTFail("more than \(count) × \"\(prefix)\" within \(interval) s: \(log)", file: file, line: line)
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didConnectToAddress address: Data) {
        record("connect \(GCDAsyncUdpSocket.host(fromAddress: address) ?? "?") \(GCDAsyncUdpSocket.port(fromAddress: address))")
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotConnect error: Error?) {
        record("not-connect \(describe(error))")
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didSendDataWithTag tag: Int) {
        record("sent \(tag)")
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didNotSendDataWithTag tag: Int, dueToError error: Error?) {
        record("not-sent \(tag) \(describe(error))")
    }

    func udpSocket(_ sock: GCDAsyncUdpSocket, didReceive data: Data, fromAddress address: Data, withFilterContext filterContext: Any?) {
        let datagram = Datagram(data: data, address: address, context: filterContext)
        condition.lock()
        datagrams.append(datagram)
        condition.unlock()
        let text = data.count <= 64 ? datagram.text : "\(data.count) bytes"
        let context = filterContext.map { " context \($0)" } ?? ""
        record("receive \(text) from \(datagram.host ?? "?") \(datagram.port)\(context)")
        onReceive?(sock, data, address)
    }

    func udpSocketDidClose(_ sock: GCDAsyncUdpSocket, withError error: Error?) {
        condition.lock()
        closeErrors.append(error)
        condition.unlock()
        record("close \(describe(error))")
    }
}

/// An error as "domain code" ("nil" for none), the form the recorder's events carry it in.
func describe(_ error: Error?) -> String {
    guard let error = error as NSError? else { return "nil" }
    return "\(error.domain) \(error.code)"
}

/// "GCDAsyncUdpSocketErrorDomain 1" and so on: a GCDAsyncUdpSocket error as `describe` gives it.
func udpError(_ code: GCDAsyncUdpSocketError.Code) -> String { "\(GCDAsyncUdpSocketErrorDomain) \(code.rawValue)" }

/// "NSPOSIXErrorDomain 98" and so on: an errno as `describe` gives it.
func posixError(_ code: Int32) -> String { "\(NSPOSIXErrorDomain) \(code)" }

/// The domain of resolver failures, as GCDAsyncUdpSocket spells it: the literal string
/// "kCFStreamErrorDomainNetDB" (CFNetwork's `kCFStreamErrorDomainNetDB` is a number, not this).
let netDBDomain = "kCFStreamErrorDomainNetDB"

/// Hands a socket to another thread: whether GCDAsyncUdpSocket is marked Sendable is the module's
/// business (on Apple platforms it is not), and its API may be called from any thread.
// @unchecked Sendable: `socket` is a constant, and GCDAsyncUdpSocket's methods are thread-safe.
final class Handed: @unchecked Sendable {
    let socket: GCDAsyncUdpSocket
    init(_ socket: GCDAsyncUdpSocket) { self.socket = socket }
}

/// A GCDAsyncUdpSocket echo server on `interface`: every datagram is sent back to where it came from.
func echoServer(on interface: String, file: StaticString = #filePath, line: UInt = #line) throws -> (GCDAsyncUdpSocket, Recorder) {
    let recorder = Recorder()
    recorder.onReceive = { socket, data, address in socket.send(data, toAddress: address, withTimeout: -1, tag: 0) }
    let server = GCDAsyncUdpSocket(delegate: recorder, delegateQueue: DispatchQueue(label: "echo server"))
    try server.bind(toPort: 0, interface: interface)
    try server.beginReceiving()
    XCTAssertNotEqual(server.localPort(), 0, file: file, line: line)
    return (server, recorder)
}

/// Closes `socket` and waits for its one `udpSocketDidClose(nil)`.
func closeAndWait(_ socket: GCDAsyncUdpSocket, _ recorder: Recorder, file: StaticString = #filePath, line: UInt = #line) {
    socket.close()
    recorder.wait(for: "close nil", file: file, line: line)
}

/// The peers these tests use (TestPeers' `Peer`: a child process on loopback, ready once it printed
/// its readiness line).
extension Peer {
    /// `socat UDP4-LISTEN:0,bind=127.0.0.1 PIPE` (`UDP6-LISTEN:0,bind=[::1]` for IPv6): an echo for the
    /// first peer that sends to it (socat then talks to that peer only); returns its port. The pipe can
    /// join datagrams that arrive together, so a test waits for each echo before it sends the next.
    /// `-T 30`: gone after 30 s without traffic, should a test leave it behind.
    static func socatUDPEcho(ipv6: Bool = false) throws -> (Peer, UInt16) {
        let socat = try locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let address = ipv6 ? "UDP6-LISTEN:0,bind=[::1]" : "UDP4-LISTEN:0,bind=127.0.0.1"
        let peer = Peer(name: "socat UDP echo", executable: socat, arguments: ["-d", "-d", "-T", "30", address, "PIPE"])
        let ready = ipv6 ? #"listening on UDP AF=10 \[[0-9a-f:]+\]:(\d+)\s*$"# : #"listening on UDP AF=2 [0-9.]+:(\d+)\s*$"#
        let port = try peer.start(readyPattern: ready)
        return (peer, try Self.port(port, peer))
    }

    /// A python UDP echo bound to `host` port 0: each datagram goes back to its sender as it came, an
    /// empty one included; returns its port.
    static func pythonUDPEcho(host: String = "127.0.0.1") throws -> (Peer, UInt16) {
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((sys.argv[1], 0))
            print('ready', s.getsockname()[1], flush=True)
            while True:
                data, peer = s.recvfrom(65535)
                s.sendto(data, peer)
            """
        return try python("python UDP echo", script, [host])
    }

    /// python sending `payloads` (an empty string is an empty datagram) from one socket to
    /// `host`:`port`, in order; ready once every `sendto` returned. Returns the port it sent from.
    static func pythonUDPSender(to host: String, port: UInt16, payloads: [String]) throws -> (Peer, UInt16) {
        let script = """
            import signal, socket, sys
            host, port = sys.argv[1], int(sys.argv[2])
            s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_DGRAM)
            for payload in sys.argv[3:]:
                s.sendto(payload.encode(), (host, port))
            print('ready', s.getsockname()[1], flush=True)
            signal.pause()
            """
        return try python("python UDP sender", script, [host, String(port)] + payloads)
    }

    /// python holding a UDP socket bound to 127.0.0.1 port 0 without any reuse option; returns its port.
    static func pythonUDPPortHolder() throws -> (Peer, UInt16) {
        let script = """
            import signal, socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(('127.0.0.1', 0))
            print('ready', s.getsockname()[1], flush=True)
            signal.pause()
            """
        return try python("python UDP port holder", script, [])
    }

    /// python receiving on 127.0.0.1 port 0 and printing "received N PAYLOAD" for the Nth datagram;
    /// returns its port.
    static func pythonUDPReceiver() throws -> (Peer, UInt16) {
        let script = """
            import socket
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(('127.0.0.1', 0))
            print('ready', s.getsockname()[1], flush=True)
            count = 0
            while True:
                data, peer = s.recvfrom(65535)
                count += 1
                print('received', count, data.decode(), flush=True)
            """
        return try python("python UDP receiver", script, [])
    }

    /// The payloads a `pythonUDPReceiver` printed, in order.
    var receivedPayloads: [String] {
        printed.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            guard words.count == 3, words[0] == "received", Int(words[1]) != nil else { return nil }
            return String(words[2])
        }
    }

    private static func python(_ name: String, _ script: String, _ arguments: [String]) throws -> (Peer, UInt16) {
        let python = try locate("python3", hint: "apt-get install -y --no-install-recommends python3")
        let peer = Peer(name: name, executable: python, arguments: ["-u", "-c", script] + arguments)
        let port = try peer.start(readyPattern: #"^ready (\d+)\s*$"#)
        return (peer, try Self.port(port, peer))
    }

    private static func port(_ text: String, _ peer: Peer) throws -> UInt16 {
        guard let port = UInt16(text), port > 0 else { throw PeerError.notReady(peer.name, output: peer.printed) }
        return port
    }
}

/// Runs a program to its end, for at most `timeout` seconds (then it is ended), and returns how it
/// ended and what it printed (stdout and stderr merged). Its output is read as it comes, on a thread
/// of its own, so a chatty program never blocks on a full pipe; `setpriv --pdeathsig` ends it should
/// the test process die first.
func runToEnd(_ executable: String, _ arguments: [String], timeout: TimeInterval) throws -> (exit: ChildExit?, output: String) {
    let process = Process()
    let setpriv = "/usr/bin/setpriv"
    if FileManager.default.isExecutableFile(atPath: setpriv) {
        process.executableURL = URL(fileURLWithPath: setpriv)
        process.arguments = ["--pdeathsig", "TERM", "--", executable] + arguments
    } else {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
    }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle.nullDevice
    let output = OutputCollector()
    let reader = pipe.fileHandleForReading
    Thread.detachNewThread {
        while true {
            let data = reader.availableData
            output.append(data)
            if data.isEmpty { return }
        }
    }
    try process.run()
    let exit = ChildExit.waitOrEnd(process, timeout: timeout)
    return (exit, output.text(waitingForEnd: 10))
}

/// What a child printed, collected by a reader thread until the end of its output.
// @unchecked Sendable: `bytes` and `ended` are reached only under `condition`.
private final class OutputCollector: @unchecked Sendable {
    private let condition = NSCondition()
    private var bytes = Data()
    private var ended = false

    func append(_ data: Data) {
        condition.lock()
        if data.isEmpty { ended = true } else { bytes.append(data) }
        condition.broadcast()
        condition.unlock()
    }

    /// The output, once it ended (or after `timeout`: a grandchild may still hold the pipe).
    func text(waitingForEnd timeout: TimeInterval) -> String {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while !ended, condition.wait(until: deadline) {}
        return String(decoding: bytes, as: UTF8.self)
    }
}
