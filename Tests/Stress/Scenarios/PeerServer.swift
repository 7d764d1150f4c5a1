#if canImport(Glibc)
    import Glibc
#endif
import COpenSSL
import CSocketStreamsShims
import Foundation
import SocketStreams

/// The stress scenarios' peer (Glibc, epoll through the package's C shim, OpenSSL): one thread, one `epoll` set, non-blocking sockets, able to hold
/// thousands of connections at once. It listens on 127.0.0.1 (ephemeral ports), one port per mode and
/// security: plain TCP, and TLS done here with OpenSSL directly (memory BIOs, so no write of this server
/// can raise SIGPIPE), with an identity made at start (`TLSIdentity.makeSelfSignedPEM`).
///
/// It is written against Glibc and OpenSSL, not the library's networking (only its `Guarded` lock), so a
/// fault it sees is the client's.
/// Connection state lives on the server thread; other threads see counters and records through a lock.
public final class PeerServer: Sendable {
    /// How much echo reply may wait before the server stops reading: more than any scenario has in
    /// flight on one connection (4 x 256 KiB). microsocks relays with blocking writes in one thread per
    /// connection, favouring the client's side; a server that stopped reading at the first byte of
    /// waiting reply could leave it blocked in a write to this server that never completes, and then
    /// it never sees the client close (a relay that held both of its sockets for good after the client
    /// had gone: once in a CI run, "1 connections still open at the peer"; reproduced with a Python
    /// client and a blocking echo server through microsocks at 16 MB in flight, 2 of 4 tries).
    static let echoWindow = 8 << 20

    /// What the server does with each connection of a port.
    public enum Mode: Int, Sendable, CaseIterable, CustomStringConvertible {
        /// Sends back what it reads; it stops reading once ``PeerServer/echoWindow`` bytes of reply wait
        /// (the client's reading is the backpressure beyond that).
        case echo
        /// Writes continuously until the peer closes; reads and discards anything sent.
        case flood
        /// Reads and discards.
        case sink
        /// A sink that, when the connection ends, records its first 16 bytes and how many bytes arrived
        /// (``PeerServer/record(prefix:timeout:)``).
        case record

        public var description: String { ["echo", "flood", "sink", "record"][rawValue] }
    }

    /// What a `record` connection received, reported when it ended.
    public struct Record: Sendable {
        /// Its first 16 bytes (fewer if fewer arrived).
        public let prefix: [UInt8]
        /// The number of bytes that arrived.
        public let total: Int
    }

    private struct Shared {
        var live = 0
        var accepted = 0
        var records: [[UInt8]: Int] = [:]
        var recordWaiters: [Int: (prefix: [UInt8], continuation: CheckedContinuation<Int?, Never>)] = [:]
        var idleWaiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        var nextWaiter = 0
        var failure: String?
    }

    /// The port of each mode, plain TCP.
    public let plainPorts: [Mode: Int]
    /// The port of each mode, TLS.
    public let tlsPorts: [Mode: Int]
    /// The certificate (PEM) clients trust for the TLS ports: self-signed, for 127.0.0.1 and localhost.
    public let certificatePEM: Data

    private let shared = Guarded(Shared())
    private let wakeWriter: Int32
    private let stopped = DispatchSemaphore(value: 0)

    /// Binds every port and starts the thread.
    public init(certificatePEM: Data, privateKeyPEM: Data) throws {
        self.certificatePEM = certificatePEM
        var listeners: [(fd: Int32, mode: Mode, tls: Bool)] = []
        var plain: [Mode: Int] = [:]
        var tls: [Mode: Int] = [:]
        do {
            for secure in [false, true] {
                for mode in Mode.allCases {
                    let (fd, port) = try Self.listen()
                    listeners.append((fd, mode, secure))
                    if secure { tls[mode] = port } else { plain[mode] = port }
                }
            }
        } catch {
            for listener in listeners { close(listener.fd) }
            throw error
        }
        plainPorts = plain
        tlsPorts = tls
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else {
            for listener in listeners { close(listener.fd) }
            throw StressError("pipe: \(String(cString: strerror(errno)))")
        }
        for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        wakeWriter = pipeFDs[1]
        let wakeReader = pipeFDs[0]
        let listenerList = listeners.map { ListenerSpec(fd: $0.fd, mode: $0.mode, tls: $0.tls) }
        let thread = Thread { [self] in
            let loop = ServerLoop(server: self, listeners: listenerList, wakeReader: wakeReader)
            loop.run(certificatePEM: certificatePEM, privateKeyPEM: privateKeyPEM)
            stopped.signal()
        }
        thread.name = "stress-peer"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Stops the thread and closes every socket it holds; returns once it has.
    public func stop() {
        var byte: UInt8 = 1
        _ = write(wakeWriter, &byte, 1)
        stopped.wait()
        close(wakeWriter)
        let waiters = shared.withLock { shared in
            defer {
                shared.recordWaiters.removeAll()
                shared.idleWaiters.removeAll()
            }
            return (shared.recordWaiters.values.map(\.continuation), Array(shared.idleWaiters.values))
        }
        for waiter in waiters.0 { waiter.resume(returning: nil) }
        for waiter in waiters.1 { waiter.resume(returning: false) }
    }

    /// The port of `mode`, TLS or not.
    public func port(_ mode: Mode, tls: Bool) -> Int { (tls ? tlsPorts : plainPorts)[mode]! }

    /// Connections open now (accepted and not yet closed by the server).
    public var liveConnections: Int { shared.withLock { $0.live } }

    /// Connections accepted since start.
    public var acceptedConnections: Int { shared.withLock { $0.accepted } }

    /// A fault of the server itself (a failed epoll call), if one happened: the run is not trustworthy.
    public var failure: String? { shared.withLock { $0.failure } }

    /// Waits until no connection is open; false if some still are after `timeout` seconds.
    public func waitUntilIdle(timeout: Double) async -> Bool {
        let id = shared.withLock { shared -> Int in
            shared.nextWaiter += 1
            return shared.nextWaiter
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let idle = shared.withLock { shared -> Bool in
                if shared.live == 0 { return true }
                shared.idleWaiters[id] = continuation
                return false
            }
            if idle { return continuation.resume(returning: true) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                shared.withLock { $0.idleWaiters.removeValue(forKey: id) }?.resume(returning: false)
            }
        }
    }

    /// The number of bytes the `record` connection that began with `prefix` (16 bytes) received, once
    /// it has ended; nil if it has not ended within `timeout` seconds. Each record is handed out once.
    public func record(prefix: [UInt8], timeout: Double) async -> Int? {
        let id = shared.withLock { shared -> Int in
            shared.nextWaiter += 1
            return shared.nextWaiter
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Int?, Never>) in
            let total = shared.withLock { shared -> Int? in
                if let total = shared.records.removeValue(forKey: prefix) { return total }
                shared.recordWaiters[id] = (prefix, continuation)
                return nil
            }
            if let total { return continuation.resume(returning: total) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                shared.withLock { $0.recordWaiters.removeValue(forKey: id) }?.continuation.resume(returning: nil)
            }
        }
    }

    // MARK: called on the server thread

    fileprivate func accepted() {
        shared.withLock {
            $0.live += 1
            $0.accepted += 1
        }
    }

    fileprivate func ended(record: Record?) {
        var resume: [(CheckedContinuation<Int?, Never>, Int)] = []
        var idle: [CheckedContinuation<Bool, Never>] = []
        shared.withLock { shared in
            shared.live -= 1
            if let record {
                if let (id, waiter) = shared.recordWaiters.first(where: { $0.value.prefix == record.prefix }) {
                    shared.recordWaiters.removeValue(forKey: id)
                    resume.append((waiter.continuation, record.total))
                } else {
                    shared.records[record.prefix] = record.total
                }
            }
            if shared.live == 0 {
                idle = Array(shared.idleWaiters.values)
                shared.idleWaiters.removeAll()
            }
        }
        for (waiter, total) in resume { waiter.resume(returning: total) }
        for waiter in idle { waiter.resume(returning: true) }
    }

    fileprivate func fail(_ message: String) {
        shared.withLock { if $0.failure == nil { $0.failure = message } }
    }

    /// A non-blocking listening socket on 127.0.0.1, port chosen by the kernel.
    private static func listen() throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw StressError("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, 4096) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            throw StressError("bind/listen: \(message)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }
}

private struct ListenerSpec: Sendable {
    let fd: Int32
    let mode: PeerServer.Mode
    let tls: Bool
}

/// The server thread's state: the epoll set, the listeners and every connection. Used on that thread only.
private final class ServerLoop {
    let server: PeerServer
    let listeners: [Int32: ListenerSpec]
    let wakeReader: Int32
    let epoll: Int32
    var connections: [Int32: PeerConnection] = [:]
    var context: OpaquePointer?
    /// Scratch space for reads, and the bytes a flood sends.
    var scratch = [UInt8](repeating: 0, count: 65_536)
    let floodBytes = [UInt8]((0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })

    init(server: PeerServer, listeners: [ListenerSpec], wakeReader: Int32) {
        self.server = server
        self.listeners = Dictionary(uniqueKeysWithValues: listeners.map { ($0.fd, $0) })
        self.wakeReader = wakeReader
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
    }

    func run(certificatePEM: Data, privateKeyPEM: Data) {
        OpenSSLLibrary.prepare()
        defer { shutdown() }
        guard epoll >= 0 else { return server.fail("epoll_create1: \(String(cString: strerror(errno)))") }
        guard let context = Self.makeContext(certificatePEM: certificatePEM, privateKeyPEM: privateKeyPEM) else {
            return server.fail("the TLS server context could not be made")
        }
        self.context = context
        add(wakeReader, events: cssh_epollin())
        for fd in listeners.keys { add(fd, events: cssh_epollin()) }
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while true {
            let count = epoll_wait(epoll, &events, Int32(events.count), -1)
            if count < 0 {
                if errno == EINTR { continue }
                return server.fail("epoll_wait: \(String(cString: strerror(errno)))")
            }
            for index in 0..<Int(count) {
                let fd = events[index].data.fd
                if fd == wakeReader { return }
                if let listener = listeners[fd] {
                    acceptAll(listener)
                } else if let connection = connections[fd] {
                    service(connection)
                }
            }
        }
    }

    private func add(_ fd: Int32, events: UInt32) {
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        if epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) != 0 { server.fail("epoll_ctl ADD: \(String(cString: strerror(errno)))") }
    }

    private func acceptAll(_ listener: ListenerSpec) {
        while true {
            let fd = accept(listener.fd, nil, nil)
            guard fd >= 0 else {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if errno != EAGAIN && errno != EWOULDBLOCK { server.fail("accept: \(String(cString: strerror(errno)))") }
                return
            }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            // No Nagle: an echo reply must not wait for the client's delayed ACK (40 ms a round trip).
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if listener.mode == .flood {
                // A bounded send buffer bounds what a thousand flooded connections hold in the kernel. At
                // 32 KiB (two TLS records) each record waited for the client's delayed ACK: 40 ms an
                // iteration of release-while-flowing over TLS; 128 KiB keeps it flowing.
                var size: Int32 = 131_072
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
            var ssl: OpaquePointer?
            if listener.tls {
                ssl = SSL_new(context)
                let input = BIO_new(BIO_s_mem())
                let output = BIO_new(BIO_s_mem())
                SSL_set_bio(ssl, input, output)
                SSL_set_accept_state(ssl)
                // One ticket for an echo client (it reads): sent as the handshake ends, it acknowledges
                // the client's Finished at once. With none, a client's first record waits behind its
                // Finished for this side's delayed ACK (Nagle on the client: 40 ms an iteration).
                if listener.mode == .echo { SSL_set_num_tickets(ssl, 1) }
            }
            let connection = PeerConnection(fd: fd, mode: listener.mode, ssl: ssl)
            connections[fd] = connection
            server.accepted()
            add(fd, events: cssh_epollin())
            connection.interest = cssh_epollin()
            service(connection)
        }
    }

    /// Does what the connection's mode asks until the socket would block, then sets what to wait for.
    private func service(_ connection: PeerConnection) {
        if !connection.handshaken {
            switch handshake(connection) {
            case .done: connection.handshaken = true
            case .blocked: return watch(connection)
            case .failed: return finish(connection)
            }
        }
        switch connection.mode {
        case .sink, .record:
            while true {
                let count = readApp(connection)
                if count < 0 { return finish(connection) }
                if count == 0 { break }
                if connection.mode == .record {
                    if connection.prefix.count < 16 {
                        connection.prefix += scratch[0..<min(count, 16 - connection.prefix.count)]
                    }
                    connection.total += count
                }
            }
        case .flood:
            while true {
                let count = readApp(connection)
                if count < 0 { return finish(connection) }
                if count == 0 { break }
            }
            while true {
                let count = floodBytes.withUnsafeBufferPointer { writeApp(connection, $0) }
                if count < 0 { return finish(connection) }
                if count == 0 { break }
            }
        case .echo:
            while true {
                while connection.pendingStart < connection.pending.count {
                    let count = connection.pending[connection.pendingStart...].withUnsafeBufferPointer { writeApp(connection, $0) }
                    if count < 0 { return finish(connection) }
                    if count == 0 { break }
                    connection.pendingStart += count
                }
                if connection.pendingStart == connection.pending.count || connection.pendingStart >= PeerServer.echoWindow {
                    connection.pending.removeFirst(connection.pendingStart)
                    connection.pendingStart = 0
                }
                if connection.pending.count >= PeerServer.echoWindow { break }
                let count = readApp(connection)
                if count < 0 { return finish(connection) }
                if count == 0 { break }
                connection.pending += scratch[0..<count]
            }
        }
        watch(connection)
    }

    /// Waits for what the connection needs next: room to write (bytes waiting, or a flood), or bytes
    /// to read (an echo connection stops once `echoWindow` bytes of reply wait).
    private func watch(_ connection: PeerConnection) {
        let wantsOutput =
            !connection.cipherOut.isEmpty || connection.pendingStart < connection.pending.count
            || (connection.mode == .flood && connection.handshaken)
        let wantsInput = connection.mode != .echo || connection.pending.count - connection.pendingStart < PeerServer.echoWindow
        var events: UInt32 = 0
        if wantsInput { events |= cssh_epollin() }
        if wantsOutput { events |= cssh_epollout() }
        if events == 0 { events = cssh_epollin() }
        guard events != connection.interest else { return }
        connection.interest = events
        var event = epoll_event(events: events, data: epoll_data_t(fd: connection.fd))
        if epoll_ctl(epoll, EPOLL_CTL_MOD, connection.fd, &event) != 0 { server.fail("epoll_ctl MOD: \(String(cString: strerror(errno)))") }
    }

    private func finish(_ connection: PeerConnection) {
        connections.removeValue(forKey: connection.fd)
        epoll_ctl(epoll, EPOLL_CTL_DEL, connection.fd, nil)
        close(connection.fd)
        if let ssl = connection.ssl { SSL_free(ssl) }
        connection.ssl = nil
        server.ended(record: connection.mode == .record ? PeerServer.Record(prefix: connection.prefix, total: connection.total) : nil)
    }

    private func shutdown() {
        for connection in Array(connections.values) { finish(connection) }
        for fd in listeners.keys { close(fd) }
        close(wakeReader)
        if epoll >= 0 { close(epoll) }
        if let context { SSL_CTX_free(context) }
    }

    // MARK: bytes in and out (plain, or through the connection's TLS)

    private enum Progress { case done, blocked, failed }

    /// Reads into `scratch`: the count (> 0), 0 when it would block, -1 at the end or on an error.
    private func readApp(_ connection: PeerConnection) -> Int {
        guard let ssl = connection.ssl else {
            let count = recv(connection.fd, &scratch, scratch.count, 0)
            if count > 0 { return count }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return 0 }
            return -1
        }
        while true {
            let count = SSL_read(ssl, &scratch, Int32(scratch.count))
            if count > 0 {
                _ = flushCipher(connection)
                return Int(count)
            }
            let error = SSL_get_error(ssl, count)
            ERR_clear_error()
            guard error == SSL_ERROR_WANT_READ else { return -1 }
            if flushCipher(connection) < 0 { return -1 }
            switch feedCipher(connection) {
            case .done: continue
            case .blocked: return 0
            case .failed: return -1
            }
        }
    }

    /// Writes from `bytes`: the count taken (> 0), 0 when it would block, -1 on an error.
    private func writeApp(_ connection: PeerConnection, _ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        guard let ssl = connection.ssl else {
            let count = send(connection.fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if count >= 0 { return count }
            if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return 0 }
            return -1
        }
        let flushed = flushCipher(connection)
        if flushed < 0 { return -1 }
        if flushed == 0 { return 0 }  // TLS records from before still wait for room
        let count = SSL_write(ssl, bytes.baseAddress, Int32(min(bytes.count, 16_384)))
        guard count > 0 else {
            ERR_clear_error()
            return -1
        }
        return flushCipher(connection) < 0 ? -1 : Int(count)
    }

    private func handshake(_ connection: PeerConnection) -> Progress {
        guard let ssl = connection.ssl else { return .done }
        while true {
            let result = SSL_do_handshake(ssl)
            if flushCipher(connection) < 0 { return .failed }
            if result == 1 { return .done }
            let error = SSL_get_error(ssl, result)
            ERR_clear_error()
            guard error == SSL_ERROR_WANT_READ else { return .failed }
            let fed = feedCipher(connection)
            if fed != .done { return fed }
        }
    }

    /// Moves bytes from the socket into the TLS input BIO.
    private func feedCipher(_ connection: PeerConnection) -> Progress {
        let count = recv(connection.fd, &scratch, scratch.count, 0)
        if count > 0 {
            BIO_write(SSL_get_rbio(connection.ssl), scratch, Int32(count))
            return .done
        }
        if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return .blocked }
        return .failed
    }

    /// Sends the TLS output BIO's bytes: 1 when all are sent, 0 when some wait for room, -1 on an error.
    private func flushCipher(_ connection: PeerConnection) -> Int {
        guard let ssl = connection.ssl, let output = SSL_get_wbio(ssl) else { return 1 }
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while BIO_ctrl_pending(output) > 0 {
            let count = BIO_read(output, &chunk, Int32(chunk.count))
            if count <= 0 { break }
            connection.cipherOut += chunk[0..<Int(count)]
        }
        while !connection.cipherOut.isEmpty {
            let sent = connection.cipherOut.withUnsafeBytes {
                send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if sent > 0 {
                connection.cipherOut.removeFirst(sent)
                continue
            }
            if sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return 0 }
            return -1
        }
        return 1
    }

    private static func makeContext(certificatePEM: Data, privateKeyPEM: Data) -> OpaquePointer? {
        guard let context = SSL_CTX_new(TLS_server_method()) else { return nil }
        let certificateBIO = certificatePEM.withUnsafeBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        let keyBIO = privateKeyPEM.withUnsafeBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        defer {
            BIO_free(certificateBIO)
            BIO_free(keyBIO)
        }
        guard let certificate = PEM_read_bio_X509(certificateBIO, nil, nil, nil) else {
            SSL_CTX_free(context)
            return nil
        }
        defer { X509_free(certificate) }
        guard let key = PEM_read_bio_PrivateKey(keyBIO, nil, nil, nil) else {
            SSL_CTX_free(context)
            return nil
        }
        defer { EVP_PKEY_free(key) }
        guard SSL_CTX_use_certificate(context, certificate) == 1, SSL_CTX_use_PrivateKey(context, key) == 1 else {
            SSL_CTX_free(context)
            return nil
        }
        // No TLS 1.3 session tickets by default (an echo connection takes one): a client that never reads (a `record` connection) would otherwise
        // close with them unread, which makes its kernel send RST, and the RST can discard bytes the
        // server had not read yet.
        SSL_CTX_set_num_tickets(context, 0)
        _ = cssl_ctx_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        return context
    }
}

/// One accepted connection (server thread only).
private final class PeerConnection {
    let fd: Int32
    let mode: PeerServer.Mode
    var ssl: OpaquePointer?
    var handshaken: Bool
    var interest: UInt32 = 0
    /// An echo reply not yet written: `pending[pendingStart...]`.
    var pending: [UInt8] = []
    var pendingStart = 0
    /// TLS records not yet sent.
    var cipherOut: [UInt8] = []
    var prefix: [UInt8] = []
    var total = 0

    init(fd: Int32, mode: PeerServer.Mode, ssl: OpaquePointer?) {
        self.fd = fd
        self.mode = mode
        self.ssl = ssl
        handshaken = ssl == nil
    }
}

/// A failure of the stress harness itself (not of the code under test).
public struct StressError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
