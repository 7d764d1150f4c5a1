import CocoaAsyncSocket
import TestPeers
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// Everything a delegate was told, in order, as text ("connect 127.0.0.1", "read 1 hello", …), with
/// waits. Written as an Apple-platform GCDAsyncSocket delegate is: an NSObject subclass with the
/// protocol's Swift signatures.
// @unchecked Sendable: every field is reached only under `condition`.
final class Recorder: NSObject, GCDAsyncSocketDelegate, @unchecked Sendable {
    private let condition = NSCondition()
    private var log: [String] = []
    private var reads: [Int: Data] = [:]
    private var sockets: [GCDAsyncSocket] = []
    private var disconnectErrors: [Error?] = []
    /// Extensions to give to timeout questions, in order (then 0).
    var extensions: [TimeInterval] = []
    /// Called for every read (on the delegate queue).
    var onRead: ((GCDAsyncSocket, Data, Int) -> Void)?
    /// Called for every accepted socket (on the delegate queue).
    var onAccept: ((GCDAsyncSocket) -> Void)?
    /// Called for every completed write, before it is recorded (on the delegate queue).
    var onWrite: ((GCDAsyncSocket, Int) -> Void)?
    /// Called at `socketDidDisconnect`, before it is recorded (on the delegate queue).
    var onDisconnect: ((Error?) -> Void)?

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

    var accepted: [GCDAsyncSocket] {
        condition.lock()
        defer { condition.unlock() }
        return sockets
    }

    var errors: [Error?] {
        condition.lock()
        defer { condition.unlock() }
        return disconnectErrors
    }

    func data(tag: Int) -> Data? {
        condition.lock()
        defer { condition.unlock() }
        return reads[tag]
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

    func socket(_ sock: GCDAsyncSocket, didConnectToHost host: String, port: UInt16) {
        record("connect \(host) \(port)")
    }

    func socket(_ sock: GCDAsyncSocket, didConnectTo url: URL) {
        record("connect-url \(url.path)")
    }

    func socket(_ sock: GCDAsyncSocket, didAcceptNewSocket newSocket: GCDAsyncSocket) {
        condition.lock()
        sockets.append(newSocket)
        condition.unlock()
        onAccept?(newSocket)
        record("accept \(newSocket.connectedHost ?? "?")")
    }

    func socket(_ sock: GCDAsyncSocket, didRead data: Data, withTag tag: Int) {
        condition.lock()
        reads[tag] = data
        condition.unlock()
        onRead?(sock, data, tag)
        record("read \(tag) \(String(decoding: data, as: UTF8.self))")
    }

    func socket(_ sock: GCDAsyncSocket, didReadPartialDataOfLength partialLength: UInt, tag: Int) {
        record("partial \(tag) \(partialLength)")
    }

    func socket(_ sock: GCDAsyncSocket, didWriteDataWithTag tag: Int) {
        onWrite?(sock, tag)
        record("wrote \(tag)")
    }

    func socket(_ sock: GCDAsyncSocket, shouldTimeoutReadWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval {
        record("timeout-read \(tag) \(length)")
        condition.lock()
        defer { condition.unlock() }
        return extensions.isEmpty ? 0 : extensions.removeFirst()
    }

    func socket(_ sock: GCDAsyncSocket, shouldTimeoutWriteWithTag tag: Int, elapsed: TimeInterval, bytesDone length: UInt) -> TimeInterval {
        record("timeout-write \(tag)")
        return 0
    }

    func socketDidCloseReadStream(_ sock: GCDAsyncSocket) {
        record("read-closed")
    }

    /// Decides trust (nil: rejects).
    var trustDecision: ((SecTrust) -> Bool)?

    func socket(_ sock: GCDAsyncSocket, didReceive trust: SecTrust, completionHandler: @escaping (Bool) -> Void) {
        record("trust \(trust.verifyResult) \(trust.certificateChain.count)")
        completionHandler(trustDecision?(trust) ?? false)
        completionHandler(true)  // only the first call counts
    }

    func socketDidSecure(_ sock: GCDAsyncSocket) {
        record("secure")
    }

    func socketDidDisconnect(_ sock: GCDAsyncSocket, withError err: Error?) {
        condition.lock()
        disconnectErrors.append(err)
        condition.unlock()
        onDisconnect?(err)
        if let err = err as NSError? {
            record("disconnect \(err.domain) \(err.code)")
        } else {
            record("disconnect nil")
        }
    }
}

/// The peers these tests use (TestPeers' `Peer`: a child process on loopback, ready once it printed
/// its readiness line).
extension Peer {
    /// `openssl s_server -rev` (each line sent back reversed) presenting `certificate`/`key`.
    static func opensslReverse(certificate: String, key: String) throws -> (Peer, UInt16) {
        let openssl = try locate("openssl", hint: "apt-get install -y --no-install-recommends openssl")
        let peer = Peer(
            name: "openssl s_server -rev", executable: openssl,
            arguments: ["s_server", "-accept", "127.0.0.1:0", "-cert", certificate, "-key", key, "-rev"])
        let port = try peer.start(readyPattern: #"^ACCEPT .*:(\d+)\s*$"#)
        return (peer, try Self.port(port, peer))
    }

    /// `socat TCP4-LISTEN:0,bind=127.0.0.1,reuseaddr,fork PIPE`: an echo server; returns its port.
    static func socatEcho() throws -> (Peer, UInt16) {
        let socat = try locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let peer = Peer(
            name: "socat echo", executable: socat, arguments: ["-d", "-d", "TCP4-LISTEN:0,bind=127.0.0.1,reuseaddr,fork", "PIPE"])
        let port = try peer.start(readyPattern: #"listening on AF=2 .*:(\d+)\s*$"#)
        return (peer, try Self.port(port, peer))
    }

    private static func port(_ text: String, _ peer: Peer) throws -> UInt16 {
        guard let port = UInt16(text), port > 0 else { throw PeerError.notReady(peer.name, output: peer.printed) }
        return port
    }
}

/// A plain POSIX listener on 127.0.0.1 whose connections are read to their end on a thread each: the
/// byte counts arrive in `finished`, in the order the connections end.
// @unchecked Sendable: `counts` and `stopped` are reached only under `condition`; `fd` and `port` are constants.
final class CountingListener: @unchecked Sendable {
    let fd: Int32
    let port: UInt16
    private let condition = NSCondition()
    private var counts: [Int] = []
    private var stopped = false

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Int32 in
                guard bind(fd, pointer, length) == 0, listen(fd, 1024) == 0 else { return -1 }
                return getsockname(fd, pointer, &length)
            }
        }
        guard bound == 0 else { throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno)) }
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }
                Thread.detachNewThread { [self] in
                    var total = 0
                    var buffer = [UInt8](repeating: 0, count: 65_536)
                    while true {
                        let count = read(client, &buffer, buffer.count)
                        if count <= 0 { break }
                        total += count
                    }
                    close(client)
                    condition.lock()
                    counts.append(total)
                    condition.broadcast()
                    condition.unlock()
                }
            }
        }
    }

    deinit { stop() }

    /// Closes the listening socket (once): its port then refuses connections.
    func stop() {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped else { return }
        stopped = true
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }

    /// Waits for the next connection to end and returns how many bytes it carried.
    func nextCount(timeout: TimeInterval = 10) -> Int? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while counts.isEmpty {
            if !condition.wait(until: deadline) { return nil }
        }
        return counts.removeFirst()
    }
}

/// A self-signed certificate for "localhost", made at test time with openssl: PEM files, the DER
/// certificate (to pin) and a PKCS#12 bundle with an empty password.
struct TestCertificate {
    let directory: URL
    var certificate: String { directory.appendingPathComponent("cert.pem").path }
    var key: String { directory.appendingPathComponent("key.pem").path }
    let der: Data
    let pkcs12: Data

    init() throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("gcd-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let certificate = directory.appendingPathComponent("cert.pem").path
        let key = directory.appendingPathComponent("key.pem").path
        let derPath = directory.appendingPathComponent("cert.der").path
        let p12Path = directory.appendingPathComponent("id.p12").path
        try Self.openssl([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate, "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
        ])
        try Self.openssl(["x509", "-in", certificate, "-outform", "DER", "-out", derPath])
        try Self.openssl(["pkcs12", "-export", "-in", certificate, "-inkey", key, "-out", p12Path, "-passout", "pass:"])
        der = try Data(contentsOf: URL(fileURLWithPath: derPath))
        pkcs12 = try Data(contentsOf: URL(fileURLWithPath: p12Path))
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let exit = ChildExit.waitOrEnd(process, timeout: 60)
        guard exit == .exited(0) else {
            throw NSError(
                domain: "openssl", code: Int(exit?.status ?? -1),
                userInfo: [NSLocalizedDescriptionKey: "openssl \(arguments): \(String(describing: exit))"])
        }
    }
}

// MARK: - waiting for a stream pair's open

/// Signalled by the client callback when the open completes or fails.
final class OpenSignal {
    let semaphore = DispatchSemaphore(value: 0)
}

/// Waits until the stream's open completes or fails, told by a client callback on a dispatch queue
/// (a C-compatible callback: the signal travels in the context's `info`).
func waitForOpen(_ stream: CFReadStream, file: StaticString = #filePath, line: UInt = #line) {
    let signal = OpenSignal()
    var context = CFStreamClientContext(
        version: 0, info: Unmanaged.passUnretained(signal).toOpaque(), retain: nil, release: nil, copyDescription: nil)
    let events = CFStreamEventType.openCompleted.rawValue | CFStreamEventType.errorOccurred.rawValue
    XCTAssertTrue(
        CFReadStreamSetClient(
            stream, events,
            { _, _, info in Unmanaged<OpenSignal>.fromOpaque(info!).takeUnretainedValue().semaphore.signal() }, &context),
        file: file, line: line)
    CFReadStreamSetDispatchQueue(stream, DispatchQueue(label: "cf open"))
    // The open may have completed before the client was set: then no event comes.
    if CFReadStreamGetStatus(stream) == .opening {
        XCTAssertEqual(signal.semaphore.wait(timeout: .now() + 10), .success, "the open did not end", file: file, line: line)
    }
    CFReadStreamSetClient(stream, 0, nil, nil)
    CFReadStreamSetDispatchQueue(stream, nil)
    withExtendedLifetime(signal) {}
}
