// The peer every client is measured against: a single-threaded, non-blocking, level-triggered
// epoll server on raw syscalls (no SocketStreams). It runs as its own process
// (`stream-bench server`), prints its ephemeral ports on stdout, and exits when stdin closes,
// so it never outlives the harness that started it. Given a certificate and key, it also listens on
// a second port where every connection speaks TLS 1.3 through OpenSSL (non-blocking, the same
// protocol inside). The UDP workloads' peers (sink, echo, blast, fan-in: Server/DatagramPeers.swift) are UDP
// sockets it opens on 127.0.0.1 when a connection to the plain port asks for one. A third port is a SOCKS5 front: it answers the handshake itself and then serves
// the plain protocol on the same connection, as if it were the target (terminating, not relaying, so
// no relay's copies on the same CPUs hide the clients' differences). It prints "PORT TLSPORT
// SOCKSPORT" (TLSPORT 0 without TLS).

import COpenSSL
import CSocketStreamsShims
import Glibc

final class BenchServer {
    private let listenFD: Int32
    private let epollFD: Int32
    let port: UInt16
    /// The TLS listener and its context, when TLS is on.
    private let tlsListenFD: Int32
    let tlsPort: UInt16
    private let tlsContext: OpaquePointer?
    /// The SOCKS5 listener, and its success reply (bound to 127.0.0.1:`port`).
    private let socksListenFD: Int32
    let socksPort: UInt16
    private let socksReply: [UInt8]
    /// Connections indexed by fd.
    private var connections: [ServerConnection?] = []
    /// Group-echo groups still filling up: members and the per-member echo size.
    private var groups: [UInt64: (size: Int, bytes: UInt64, members: [ServerConnection])] = [:]
    /// Idle connections by group, waiting for a release.
    private var idleGroups: [UInt64: [ServerConnection]] = [:]
    /// Payload for downloads (64 KiB, one write each).
    private let chunk: UnsafeMutableRawBufferPointer
    /// Receive buffer.
    private let scratch: UnsafeMutableRawBufferPointer
    private let watchesStdin: Bool
    /// The UDP sockets of the sink and echo sessions, and the blast.
    private let datagramPeers = DatagramPeers()

    private static let maxEvents: Int32 = 1024

    init(tls: (certificate: String, key: String)?) throws {
        (listenFD, port) = try Posix.listenOnLoopback(backlog: 4096)
        if let tls {
            tlsContext = try BenchTLS.serverContext(certificate: tls.certificate, key: tls.key)
            (tlsListenFD, tlsPort) = try Posix.listenOnLoopback(backlog: 4096)
        } else {
            tlsContext = nil
            (tlsListenFD, tlsPort) = (-1, 0)
        }
        (socksListenFD, socksPort) = try Posix.listenOnLoopback(backlog: 4096)
        socksReply = BenchSOCKS.reply(port: port)
        epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        if epollFD < 0 { throw BenchError.syscall("epoll_create1", errno: cssh_errno()) }
        chunk = .allocate(byteCount: Payload.chunkSize, alignment: 16)
        Payload.fillChunk(chunk)
        scratch = .allocate(byteCount: Payload.chunkSize, alignment: 16)
        try Self.register(epollFD, fd: listenFD, events: cssh_epollin())
        if tlsListenFD >= 0 { try Self.register(epollFD, fd: tlsListenFD, events: cssh_epollin()) }
        try Self.register(epollFD, fd: socksListenFD, events: cssh_epollin())
        // Stdin is the harness's pipe: EOF means "shut down". /dev/null or a regular file
        // cannot be watched by epoll (EPERM); then the server runs until killed.
        watchesStdin = (try? Self.register(epollFD, fd: 0, events: cssh_epollin())) != nil
    }

    deinit {
        chunk.deallocate()
        scratch.deallocate()
    }

    /// Serves until stdin reaches end of file.
    func run() throws {
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(Self.maxEvents))
        defer { events.deallocate() }
        while true {
            let count = epoll_wait(epollFD, events, Self.maxEvents, -1)
            if count < 0 {
                let code = cssh_errno()
                if code == EINTR { continue }
                throw BenchError.syscall("epoll_wait", errno: code)
            }
            for i in 0..<Int(count) {
                let fd = events[i].data.fd
                let mask = events[i].events
                if fd == listenFD {
                    try acceptAll(from: listenFD)
                } else if fd == tlsListenFD {
                    try acceptAll(from: tlsListenFD)
                } else if fd == socksListenFD {
                    try acceptAll(from: socksListenFD)
                } else if fd == 0 && watchesStdin {
                    if stdinClosed() {
                        shutDown()
                        return
                    }
                } else if let peer = datagramPeers.peer(fd) {
                    do {
                        try datagramPeers.drain(peer)
                    } catch {
                        // The client sees its session fail (a count short, or no echo).
                        Posix.printError("stream-bench server: UDP port \(peer.port): \(error); closing it")
                        datagramPeers.close(peer)
                    }
                } else if Int(fd) < connections.count, let connection = connections[Int(fd)] {
                    handle(connection, events: mask)
                }
            }
        }
    }

    // MARK: Accepting and closing

    private func acceptAll(from listener: Int32) throws {
        while let fd = try Posix.accept(listener) {
            try? Posix.setNoDelay(fd)
            let connection = ServerConnection(fd: fd, registeredEvents: cssh_epollin())
            if listener == tlsListenFD, let tlsContext {
                guard let ssl = SSL_new(tlsContext) else {
                    Posix.close(fd)
                    continue
                }
                SSL_set_fd(ssl, fd)
                SSL_set_accept_state(ssl)
                connection.ssl = ssl
                connection.handshaking = true
            } else if listener == socksListenFD {
                connection.socksPhase = .greeting
            }
            do {
                try Self.register(epollFD, fd: fd, events: connection.registeredEvents)
            } catch {
                Posix.close(fd)
                throw error
            }
            if Int(fd) >= connections.count {
                connections.append(contentsOf: repeatElement(nil, count: Int(fd) + 1 - connections.count))
            }
            connections[Int(fd)] = connection
        }
    }

    private func close(_ connection: ServerConnection) {
        guard !connection.isClosed else { return }
        connection.isClosed = true
        connections[Int(connection.fd)] = nil
        if let ssl = connection.ssl { SSL_free(ssl) }
        if let peer = connection.datagramPeer { datagramPeers.close(peer) }
        connection.fanInPeers?.close()
        Posix.close(connection.fd)  // also removes it from the epoll set
    }

    private func shutDown() {
        for case let connection? in connections { close(connection) }
        Posix.close(listenFD)
        if tlsListenFD >= 0 { Posix.close(tlsListenFD) }
        Posix.close(socksListenFD)
        if let tlsContext { SSL_CTX_free(tlsContext) }
        Posix.close(epollFD)
    }

    private func stdinClosed() -> Bool {
        switch try? Posix.read(0, into: scratch.baseAddress!, count: scratch.count) {
        case .processed?, .wouldBlock?: return false
        case .endOfFile?, nil: return true
        }
    }

    // MARK: Events

    private func handle(_ connection: ServerConnection, events: UInt32) {
        do {
            if events & (cssh_epollin() | cssh_epollerr() | cssh_epollhup()) != 0 {
                try readAvailable(connection)
            }
            if !connection.isClosed && events & cssh_epollout() != 0 {
                if connection.tlsWantsOutput {
                    connection.tlsWantsOutput = false
                    try readAvailable(connection)  // a handshake or read that waited to write
                }
                if !connection.isClosed { try flush(connection) }
            }
            if !connection.isClosed {
                try updateInterest(connection)
            }
        } catch {
            // Resets and similar: the client reports its own failure; the server just lets go.
            close(connection)
        }
    }

    private func readAvailable(_ connection: ServerConnection) throws {
        while !connection.isClosed {
            // Echo back-pressure: read more only once the previous echo is fully sent.
            if connection.isEchoing && connection.hasPendingOutput { return }
            var limit = scratch.count
            if case .echoing(let remaining) = connection.state {
                limit = Int(min(UInt64(limit), remaining))
            }
            switch try receive(connection, into: scratch.baseAddress!, count: limit) {
            case .wouldBlock:
                return
            case .endOfFile:
                close(connection)
                return
            case .processed(let n):
                try consume(connection, UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
            }
        }
    }

    private func consume(_ connection: ServerConnection, _ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count && !connection.isClosed {
            let available = bytes.count - offset
            switch connection.state {
            case .readingHeader:
                if connection.header.isEmpty && Request.headerLength(opcode: bytes[offset]) == nil {
                    return protocolViolation(connection, "unknown opcode \(bytes[offset])")
                }
                let length = Request.headerLength(opcode: connection.header.first ?? bytes[offset])!
                let take = min(length - connection.header.count, available)
                connection.header.append(contentsOf: bytes[offset..<offset + take])
                offset += take
                if connection.header.count == length {
                    guard let request = Request.decode(connection.header[...]) else {
                        return protocolViolation(connection, "malformed header")
                    }
                    connection.header = []
                    try start(connection, request)
                }
            case .receivingUpload(let remaining, let total):
                let take = Int(min(UInt64(available), remaining))
                offset += take
                if remaining == UInt64(take) {
                    connection.output.appendBigEndian(total)
                    connection.state = .finishingAfterFlush
                    try flush(connection)
                } else {
                    connection.state = .receivingUpload(remaining: remaining - UInt64(take), total: total)
                }
            case .echoing(let remaining):
                let take = Int(min(UInt64(available), remaining))
                connection.output.append(contentsOf: bytes[offset..<offset + take])
                offset += take
                connection.state = remaining == UInt64(take) ? .finishingAfterFlush : .echoing(remaining: remaining - UInt64(take))
                try flush(connection)
            case .datagramSession:
                guard bytes[offset] == Request.datagramFinish, let peer = connection.datagramPeer else {
                    return protocolViolation(connection, "expected 'F' to end a UDP session, got \(bytes[offset])")
                }
                offset += 1
                connection.output.append(contentsOf: try datagramPeers.finish(peer))
                datagramPeers.close(peer)
                connection.datagramPeer = nil
                connection.state = .finishingAfterFlush
                try flush(connection)
            case .fanInReady(let count, let size, let port):
                guard bytes[offset] == Request.fanInStart, let peers = connection.fanInPeers else {
                    return protocolViolation(connection, "expected 'G' to start a fan-in, got \(bytes[offset])")
                }
                offset += 1
                let sent = try datagramPeers.fanIn(peers, count: count, size: size, port: port, control: connection.fd)
                peers.close()
                connection.fanInPeers = nil
                connection.output.appendBigEndian(count * UInt64(peers.fds.count))
                connection.output.appendBigEndian(sent.nanoseconds)
                connection.output.appendBigEndian(sent.markers)
                connection.state = .finishingAfterFlush
                try flush(connection)
            case .draining:
                offset = bytes.count
            case .awaitingResetAck:
                return reset(connection)  // any byte: the client has read everything sent
            case .sendingDownload, .sendingBeforeReset, .waitingForGroup, .holdingIdle, .finishingAfterFlush:
                return protocolViolation(connection, "\(available) unexpected bytes in state \(connection.state)")
            }
        }
    }

    private func start(_ connection: ServerConnection, _ request: Request) throws {
        switch request {
        case .download(let bytes):
            connection.state = bytes == 0 ? .finishingAfterFlush : .sendingDownload(remaining: bytes)
        case .upload(let bytes):
            if bytes == 0 {
                connection.output.appendBigEndian(UInt64(0))
                connection.state = .finishingAfterFlush
            } else {
                connection.state = .receivingUpload(remaining: bytes, total: bytes)
            }
        case .echo(let bytes):
            connection.state = bytes == 0 ? .finishingAfterFlush : .echoing(remaining: bytes)
        case .connect:
            connection.output.append(Request.connectReply)
            connection.state = .finishingAfterFlush
        case .groupEcho(let id, let size, let bytes):
            connection.output.append(Request.ackReply)
            connection.state = .waitingForGroup
            var group = groups[id] ?? (size: Int(size), bytes: bytes, members: [])
            group.members.append(connection)
            if group.members.count >= group.size {
                groups[id] = nil
                try flush(connection)
                startGroup(group.members, echoBytes: group.bytes)
                return
            }
            groups[id] = group
        case .idle(let id):
            connection.output.append(Request.ackReply)
            connection.state = .holdingIdle
            idleGroups[id, default: []].append(connection)
        case .heldEcho(let id):
            // Echoing with no end of its own: the release below ends it, after what is being echoed.
            connection.state = .echoing(remaining: .max)
            idleGroups[id, default: []].append(connection)
        case .release(let id):
            for member in idleGroups.removeValue(forKey: id) ?? [] where !member.isClosed {
                member.state = .finishingAfterFlush
                settle(member)
            }
            connection.output.append(Request.ackReply)
            connection.state = .finishingAfterFlush
        case .reset(let bytes):
            connection.state = bytes == 0 ? .awaitingResetAck : .sendingBeforeReset(remaining: bytes)
        case .sink(let count, let size):
            guard let size = Self.datagramSize(size) else { return protocolViolation(connection, "sink: datagram size \(size)") }
            try openDatagramSession(connection, .sink(size: size), count: count)
        case .datagramEcho(let size):
            guard Self.datagramSize(size) != nil else { return protocolViolation(connection, "echo: datagram size \(size)") }
            try openDatagramSession(connection, .echo, count: 0)
        case .blast(let count, let size, let port):
            guard let size = Self.datagramSize(size), port != 0 else {
                return protocolViolation(connection, "blast: datagram size \(size), port \(port)")
            }
            let nanoseconds = try datagramPeers.blast(count: count, size: size, port: port, control: connection.fd)
            connection.output.appendBigEndian(count)
            connection.output.appendBigEndian(nanoseconds)
            connection.state = .finishingAfterFlush
        case .fanIn(let peers, let count, let size, let port):
            guard let size = Self.datagramSize(size), port != 0, peers > 0 else {
                return protocolViolation(connection, "fan-in: \(peers) peers, datagram size \(size), port \(port)")
            }
            let opened = try FanInPeers(count: Int(peers))
            connection.fanInPeers = opened
            for peerPort in opened.ports { connection.output.appendBigEndian(peerPort) }
            connection.state = .fanInReady(count: count, size: size, port: port)
        }
        try flush(connection)
    }

    /// A size the UDP peers can send and check: room for the sequence number, at most a UDP payload.
    private static func datagramSize(_ size: UInt32) -> Int? {
        (DatagramPayload.minimumSize...DatagramPayload.maximumSize).contains(Int(size)) ? Int(size) : nil
    }

    /// Opens the session's UDP socket and answers its port; the connection then waits for 'F'.
    private func openDatagramSession(_ connection: ServerConnection, _ role: DatagramPeer.Role, count: UInt64) throws {
        let peer = try datagramPeers.open(role, count: count, epollFD: epollFD)
        connection.datagramPeer = peer
        connection.output.appendBigEndian(peer.port)
        connection.state = .datagramSession
    }

    /// Sends 'G' to every member of a complete group and switches them to echoing.
    private func startGroup(_ members: [ServerConnection], echoBytes: UInt64) {
        for member in members where !member.isClosed {
            member.output.append(Request.goReply)
            member.state = echoBytes == 0 ? .finishingAfterFlush : .echoing(remaining: echoBytes)
            settle(member)
        }
    }

    /// Flushes and re-registers a connection other than the one whose event is being handled.
    private func settle(_ connection: ServerConnection) {
        do {
            try flush(connection)
            if !connection.isClosed { try updateInterest(connection) }
        } catch {
            close(connection)
        }
    }

    /// Sends queued output, then download data, then FIN when the connection's part is done.
    private func flush(_ connection: ServerConnection) throws {
        while connection.hasPendingOutput {
            let sent = try connection.output.withUnsafeBytes { bytes in
                try transmit(connection, bytes.baseAddress! + connection.outputOffset, count: bytes.count - connection.outputOffset)
            }
            guard case .processed(let n) = sent else { return }
            connection.outputOffset += n
        }
        connection.output.removeAll(keepingCapacity: true)
        connection.outputOffset = 0

        switch connection.state {
        case .sendingDownload(let remaining):
            let left = try sendChunks(connection, remaining)
            connection.state = left == 0 ? .finishingAfterFlush : .sendingDownload(remaining: left)
        case .sendingBeforeReset(let remaining):
            let left = try sendChunks(connection, remaining)
            connection.state = left == 0 ? .awaitingResetAck : .sendingBeforeReset(remaining: left)
        default:
            break
        }
        if case .finishingAfterFlush = connection.state {
            if let ssl = connection.ssl {
                _ = SSL_shutdown(ssl)  // close_notify, before the FIN
                ERR_clear_error()
            }
            try Posix.shutdownWrite(connection.fd)
            connection.state = .draining
        }
    }

    /// Sends `remaining` bytes of the download chunk; returns what is still unsent when the socket
    /// is full (0 once everything went).
    private func sendChunks(_ connection: ServerConnection, _ remaining: UInt64) throws -> UInt64 {
        var remaining = remaining
        while remaining > 0 {
            let count = Int(min(UInt64(chunk.count), remaining))
            guard case .processed(let n) = try transmit(connection, chunk.baseAddress!, count: count) else { return remaining }
            remaining -= UInt64(n)
        }
        return 0
    }

    /// Closes with SO_LINGER {1, 0}: the kernel sends RST instead of FIN (the soak's reset peer).
    private func reset(_ connection: ServerConnection) {
        Posix.setResetOnClose(connection.fd)
        close(connection)
    }

    private func updateInterest(_ connection: ServerConnection) throws {
        var events: UInt32 = 0
        if !(connection.isEchoing && connection.hasPendingOutput) { events |= cssh_epollin() }
        if connection.hasPendingOutput || connection.isSendingDownload || connection.tlsWantsOutput { events |= cssh_epollout() }
        guard events != connection.registeredEvents else { return }
        var event = epoll_event()
        event.events = events
        event.data.fd = connection.fd
        if epoll_ctl(epollFD, EPOLL_CTL_MOD, connection.fd, &event) != 0 {
            throw BenchError.syscall("epoll_ctl(MOD)", errno: cssh_errno())
        }
        connection.registeredEvents = events
    }

    // MARK: Plain, TLS or SOCKS5 I/O

    /// Reads plaintext: straight from the socket (finishing a SOCKS5 handshake first), or through
    /// OpenSSL (finishing the TLS handshake first).
    private func receive(_ connection: ServerConnection, into buffer: UnsafeMutableRawPointer, count: Int) throws -> IOResult {
        if connection.socksPhase != nil, try !advanceSOCKS(connection) { return .wouldBlock }
        guard let ssl = connection.ssl else { return try Posix.read(connection.fd, into: buffer, count: count) }
        if connection.handshaking, try !advanceHandshake(connection, ssl) { return .wouldBlock }
        var done = 0
        if SSL_read_ex(ssl, buffer, count, &done) == 1 { return .processed(done) }
        switch SSL_get_error(ssl, 0) {
        case SSL_ERROR_WANT_READ: return .wouldBlock
        case SSL_ERROR_WANT_WRITE:
            connection.tlsWantsOutput = true
            return .wouldBlock
        case SSL_ERROR_ZERO_RETURN:
            return .endOfFile
        default:
            ERR_clear_error()
            return .endOfFile  // an end without close_notify, or a failure: the client reports its own
        }
    }

    /// Writes plaintext: straight to the socket, or through OpenSSL.
    private func transmit(_ connection: ServerConnection, _ buffer: UnsafeRawPointer, count: Int) throws -> IOResult {
        guard let ssl = connection.ssl else { return try Posix.send(connection.fd, buffer, count: count) }
        if connection.handshaking, try !advanceHandshake(connection, ssl) { return .wouldBlock }
        var done = 0
        if SSL_write_ex(ssl, buffer, count, &done) == 1 { return .processed(done) }
        switch SSL_get_error(ssl, 0) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wouldBlock
        default:
            ERR_clear_error()
            throw BenchError("TLS write failed")
        }
    }

    /// Drives the server handshake; true once it is done.
    private func advanceHandshake(_ connection: ServerConnection, _ ssl: OpaquePointer) throws -> Bool {
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            connection.handshaking = false
            return true
        }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return false
        case SSL_ERROR_WANT_WRITE:
            connection.tlsWantsOutput = true
            return false
        default:
            ERR_clear_error()
            throw BenchError("TLS handshake failed")
        }
    }

    /// Drives the SOCKS5 handshake of a connection on the SOCKS5 port; true once it is done. It reads
    /// exactly the greeting (05 01 00) and the CONNECT request (its length from ATYP), never a byte
    /// more, so what follows in the socket is the plain protocol. Each reply is queued and flushed.
    private func advanceSOCKS(_ connection: ServerConnection) throws -> Bool {
        while let phase = connection.socksPhase {
            let length: Int
            switch phase {
            case .greeting: length = BenchSOCKS.greeting.count
            case .request:
                guard let requestLength = BenchSOCKS.requestLength(connection.socksMessage) else {
                    protocolViolation(connection, "SOCKS5 request \(connection.socksMessage) has an unknown address type")
                    return false
                }
                length = requestLength
            }
            if connection.socksMessage.count < length {
                let wanted = length - connection.socksMessage.count
                switch try Posix.read(connection.fd, into: scratch.baseAddress!, count: wanted) {
                case .wouldBlock: return false
                case .endOfFile: throw BenchError("end of stream in the SOCKS5 handshake")
                case .processed(let n): connection.socksMessage.append(contentsOf: scratch[0..<n])
                }
                continue  // a request's length grows as its address type and a name's length arrive
            }
            switch phase {
            case .greeting:
                guard connection.socksMessage == BenchSOCKS.greeting else {
                    protocolViolation(connection, "SOCKS5 greeting \(connection.socksMessage), expected [5, 1, 0]")
                    return false
                }
                connection.output.append(contentsOf: BenchSOCKS.methodReply)
                connection.socksPhase = .request
            case .request:
                guard connection.socksMessage.starts(with: BenchSOCKS.requestPrefix) else {
                    protocolViolation(connection, "SOCKS5 request \(connection.socksMessage) is not a CONNECT")
                    return false
                }
                connection.output.append(contentsOf: socksReply)
                connection.socksPhase = nil
            }
            connection.socksMessage.removeAll()
            try flush(connection)
        }
        return true
    }

    private func protocolViolation(_ connection: ServerConnection, _ message: String) {
        Posix.printError("stream-bench server: fd \(connection.fd): \(message); closing")
        close(connection)
    }

    private static func register(_ epollFD: Int32, fd: Int32, events: UInt32) throws {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
            throw BenchError.syscall("epoll_ctl(ADD)", errno: cssh_errno())
        }
    }
}

/// `stream-bench server [--cpu N] [--tls-cert FILE --tls-key FILE]`.
enum ServerCommand {
    static func run(_ arguments: [String]) -> Int32 {
        var cpu = -1
        var certificate: String?
        var key: String?
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--tls-cert": certificate = iterator.next()
            case "--tls-key": key = iterator.next()
            case "--cpu":
                guard let value = iterator.next().flatMap(Int.init) else {
                    Posix.printError("stream-bench server: --cpu needs a number")
                    return 2
                }
                cpu = value
            default:
                Posix.printError("stream-bench server: unknown argument \(argument)")
                return 2
            }
        }
        do {
            Posix.raiseFileDescriptorLimit()
            if cpu >= 0 { try Posix.pinToCPU(cpu) }
            let server = try BenchServer(tls: certificate.flatMap { certificate in key.map { (certificate, $0) } })
            // Readiness: the plain, TLS (0 without TLS) and SOCKS5 ports on stdout, unbuffered, so the
            // harness sees them at once.
            let line = Array("\(server.port) \(server.tlsPort) \(server.socksPort)\n".utf8)
            _ = line.withUnsafeBytes { Glibc.write(1, $0.baseAddress!, $0.count) }
            try server.run()
            return 0
        } catch {
            Posix.printError("stream-bench server: \(error)")
            return 1
        }
    }
}
