// One accepted connection on the benchmark server and where it is in the protocol
// (see Protocol/WireProtocol.swift). The server owns the fd; `BenchServer.close(_:)` closes it.

/// The server side of one client connection.
final class ServerConnection {
    enum State {
        /// Collecting the request header.
        case readingHeader
        /// Download: this many bytes still to send.
        case sendingDownload(remaining: UInt64)
        /// Upload: this many bytes still to receive out of `total`.
        case receivingUpload(remaining: UInt64, total: UInt64)
        /// Echo: this many bytes still to read and send back.
        case echoing(remaining: UInt64)
        /// Group echo: '+' sent, waiting for the rest of the group.
        case waitingForGroup
        /// Idle: '+' sent, holding the connection until a release.
        case holdingIdle
        /// Reset: this many bytes still to send before waiting for the client's byte.
        case sendingBeforeReset(remaining: UInt64)
        /// Reset: everything sent; the client's next byte says it has read it all, and the server resets.
        case awaitingResetAck
        /// The last reply is queued; send FIN once it is flushed.
        case finishingAfterFlush
        /// A UDP sink or echo session: its port sent, waiting for the client's 'F'.
        case datagramSession
        /// A UDP fan-in: its peers' ports sent, waiting for the client's 'G' (the fan-in then runs at once):
        /// `count` datagrams of `size` bytes from each peer to 127.0.0.1:`port`.
        case fanInReady(count: UInt64, size: Int, port: UInt16)
        /// FIN sent; discard anything the client still sends until it closes.
        case draining
    }

    let fd: Int32
    var state: State = .readingHeader
    /// Header bytes received so far.
    var header: [UInt8] = []
    /// Bytes queued for sending (replies and echoed data), from `outputOffset` on.
    var output: [UInt8] = []
    var outputOffset = 0
    /// The epoll events this fd is currently registered for.
    var registeredEvents: UInt32
    var isClosed = false
    /// The OpenSSL session on a TLS connection (freed with the connection).
    var ssl: OpaquePointer?
    /// The TLS handshake is not finished yet.
    var handshaking = false
    /// OpenSSL needs the socket writable to go on (a handshake or read that had to send).
    var tlsWantsOutput = false
    /// Where a connection on the SOCKS5 port is in its handshake (nil once done, and on the other ports).
    var socksPhase: SOCKSPhase?
    /// The SOCKS5 message read so far (the greeting, then the CONNECT request).
    var socksMessage: [UInt8] = []
    /// The UDP socket of a sink or echo session (closed with the connection).
    var datagramPeer: DatagramPeer?
    /// The sending sockets of a fan-in session (closed with the connection).
    var fanInPeers: FanInPeers?

    enum SOCKSPhase {
        /// Reading the 3-byte greeting; the method reply follows.
        case greeting
        /// Reading the CONNECT request; the success reply follows, then the plain protocol.
        case request
    }

    init(fd: Int32, registeredEvents: UInt32) {
        self.fd = fd
        self.registeredEvents = registeredEvents
    }

    var hasPendingOutput: Bool { outputOffset < output.count }

    /// Download or pre-reset data is still to be sent (the server wants EPOLLOUT).
    var isSendingDownload: Bool {
        switch state {
        case .sendingDownload, .sendingBeforeReset: return true
        default: return false
        }
    }

    var isEchoing: Bool {
        if case .echoing = state { return true }
        return false
    }
}
