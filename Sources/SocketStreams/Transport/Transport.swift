// The seam between a connection and its bytes. A connection reads and writes through a transport,
// never through its fd directly: the plain socket (`SocketTransport`), a buffer of bytes a handshake
// read past its reply (`PrefixedTransport`), and later TLS, each wrapping the one below.
//
// A transport may hold bytes the kernel does not show (decrypted plaintext, bytes read past a proxy's
// reply), so the fd's readiness alone cannot say whether a read would block: `hasBufferedInput`
// tells. It may need the opposite readiness to make progress (TLS reading may need to write, and
// writing may need to read), so it reports the readiness each direction waits for, and `ready(_:)`
// turns what the fd reported into what the stream can now do.

import Glibc

/// Readiness of the socket, as a transport waits for it.
struct Interest: OptionSet, Sendable {
    let rawValue: UInt8
    static let readable = Interest(rawValue: 1)
    static let writable = Interest(rawValue: 2)

    /// `poll(2)` for this readiness: true once `fd` is ready, false when `timeout` (milliseconds;
    /// -1: none) passed first.
    @inline(__always)
    func poll(_ fd: Int32, timeout: Int32 = -1) -> Bool {
        var events: Int16 = 0
        if contains(.readable) { events |= Int16(POLLIN) }
        if contains(.writable) { events |= Int16(POLLOUT) }
        return ((try? Posix.poll(fd, events: events, timeout: timeout)) ?? 0) != 0
    }
}

/// The outcome of a non-blocking transport read or write.
enum TransportIO {
    /// This many bytes (more than 0) moved.
    case processed(Int)
    /// Nothing can move until the transport's interest for this direction is reported.
    case wouldBlock
    /// Read only: the peer ended the stream cleanly.
    case end
    /// The transport failed; the connection fails with it. (Boxed, so the common cases stay small.)
    indirect case failed(StreamFailure)
}

/// A byte stream over one socket, possibly layered over another transport.
protocol Transport: AnyObject, Sendable {
    /// The socket's fd: what the connection registers with epoll and polls on.
    var fd: Int32 { get }

    /// Reads up to `count` bytes without blocking (`count` > 0).
    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO

    /// Writes up to `count` bytes without blocking (`count` > 0).
    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO

    /// The readiness the next read waits for after `.wouldBlock`.
    var readInterest: Interest { get }

    /// The readiness the next write waits for after `.wouldBlock`.
    var writeInterest: Interest { get }

    /// Bytes held here that a read returns without the fd being readable.
    var hasBufferedInput: Bool { get }

    /// Bytes accepted by `write` that have not reached the kernel yet.
    var hasPendingOutput: Bool { get }

    /// The send-space charge (`SendSpace.charge` of each send, added up) of every byte this transport
    /// has handed the socket since the last call, and the count starts again; nil if it cannot tell
    /// (its writes do not go straight to the socket's fd), when the connection polls instead.
    func takeSendCharge() -> Int?

    /// Pushes pending output towards the kernel: `.processed` once none is left, else `.wouldBlock`.
    func flush() -> TransportIO

    /// The fd reported `events`: returns the directions that can now make progress. A transport may
    /// do work here (TLS reads records into its plaintext buffer).
    func ready(_ events: Interest) -> Interest

    /// Ends the write side and keeps the read side: a TLS layer sends close_notify (once, without
    /// waiting for the peer's), then the socket sends FIN (`shutdown(fd, SHUT_WR)`). `.processed(0)`
    /// once done; `.wouldBlock` while what must go first (a record's tail, the close_notify) waits for
    /// `writeInterest`, then call it again; `.failed` if the socket refused. Later writes fail with
    /// EPIPE. Nothing new is flushed: bytes `write` has not accepted are not sent.
    func shutdownOutput() -> TransportIO

    /// Ends the transport and releases what it holds (a TLS session), then closes the transport below.
    /// Called exactly once, by the connection, after the fd has left every epoll set; the fd itself
    /// belongs to the connection's socket handle, which gives it back afterwards.
    func close()
}

extension Transport {
    var readInterest: Interest { .readable }
    var writeInterest: Interest { .writable }
    var hasPendingOutput: Bool { false }
    func takeSendCharge() -> Int? { nil }
    func flush() -> TransportIO { .processed(0) }
    func ready(_ events: Interest) -> Interest { events }
}
