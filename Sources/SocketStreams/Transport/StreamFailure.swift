import Glibc

/// Why a connection failed, as the layers below the streams report it: what went wrong, during
/// which operation, and with which endpoint. Typed, so code inside the library can inspect it; the
/// CFNetwork-shaped `NSError` a client sees is built once, when the failure becomes a stream's
/// `streamError` (`StreamErrors.error(for:)`).
struct StreamFailure: Error, Sendable {
    /// What went wrong.
    enum Reason: Sendable {
        /// A system call failed with this errno (`NSPOSIXErrorDomain`).
        case posix(Int32)
        /// `getaddrinfo` failed (`kCFErrorDomainCFNetwork` code 2, or the errno for `EAI_SYSTEM`).
        case resolution(ResolutionError)
        /// A handshake stage's own failure, already in CFNetwork's terms: an `NSError` domain and code,
        /// the `CFStreamError` domain and code it came from, extra userInfo, and a message.
        case protocolError(ProtocolFailure)
    }

    /// The operation that failed; it words the message.
    enum Operation: Sendable, Equatable {
        /// Resolving the host name.
        case resolve
        /// Establishing TCP (or the Unix-domain connection).
        case connect
        /// Taking over a native socket.
        case adopt
        /// Attaching to a run loop (the reactor's fds could not be created).
        case schedule
        case read
        case write
        /// A handshake stage, by its name ("SOCKS5 handshake via proxy 127.0.0.1 port 1080", "TLS handshake").
        case handshake(String)
        /// A proxy's reply: the failure's message names the proxy and the target itself.
        case proxyReply
        /// Establishing TCP to the proxy, named as in "SOCKS5 proxy 127.0.0.1 port 1080".
        case connectToProxy(String)
    }

    var reason: Reason
    var operation: Operation
    /// The endpoint the message names; the connection fills it in with its target when nil.
    var endpoint: Endpoint?

    init(_ reason: Reason, _ operation: Operation, endpoint: Endpoint? = nil) {
        self.reason = reason
        self.operation = operation
        self.endpoint = endpoint
    }

    static func posix(_ code: Int32, _ operation: Operation, endpoint: Endpoint? = nil) -> StreamFailure {
        StreamFailure(.posix(code), operation, endpoint: endpoint)
    }
}

/// A failure a handshake stage reports in CFNetwork's own terms (a SOCKS reply code, a TLS alert).
struct ProtocolFailure: Sendable {
    /// The `NSError` domain, e.g. `kCFErrorDomainCFNetwork` or `NSOSStatusErrorDomain`.
    var domain: String
    var code: Int
    /// The `CFStreamError` behind it (`_kCFStreamErrorDomainKey`/`_kCFStreamErrorCodeKey`).
    var streamDomain: Int
    var streamCode: Int
    /// Extra userInfo entries (strings, numbers, arrays of them).
    var userInfo: [String: any Sendable] = [:]
    /// What the message says after the operation and endpoint.
    var message: String
}
