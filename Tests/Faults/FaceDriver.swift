// What the fault matrix drives: one small adapter per face (connect, send, receive, close), each
// reading continuously in the face's own way, so that every fault × face cell is one row of a table.
// This file imports Foundation only; each driver lives in a file that imports its face's module.
import Foundation
import SocketStreamsTestSupport

/// How a connection ended, as the test saw it.
enum End: Equatable, Sendable, CustomStringConvertible {
    /// End of stream: read 0, a nil chunk, `isComplete`, `socketDidDisconnect` without an error.
    case endOfStream
    /// An error, by domain and code (an NWError as "NWError.posix", "NWError.tls"...).
    case error(domain: String, code: Int)
    /// Nothing ended it by the test's deadline.
    case waiting

    var description: String {
        switch self {
        case .endOfStream: return "end of stream"
        case .error(let domain, let code): return "error \(domain) \(code)"
        case .waiting: return "waiting"
        }
    }

    init(_ error: Error) {
        let error = error as NSError
        self = .error(domain: error.domain, code: error.code)
    }
}

enum Transport: String, CaseIterable, Sendable {
    /// Plain TCP, or TLS; either may go through a proxy (``FaceSettings/proxy``).
    case plain, tls
}

/// The proxy a connection goes through (the faces that offer proxies: the pairs, AsyncConnection and
/// QueuedSocket, through `ProxyConfiguration`).
enum ProxyKind: String, Sendable {
    case socks5 = "SOCKS5"
    case httpConnect = "CONNECT"
}

/// What a test sets on every connection of a face.
struct FaceSettings {
    var transport: Transport
    /// The open's limit (name lookup, TCP and the TLS handshake where the face's timeout covers it).
    var connectTimeout: TimeInterval = 1
    /// For the faces that offer read timeouts (GCDAsyncSocket, QueuedSocket): each read's, so a
    /// trickle under load must not leave a gap this long.
    var readTimeout: TimeInterval = 1
    /// The same for writes (-1: none).
    var writeTimeout: TimeInterval = -1
    /// The test CA's certificate (PEM), which the TLS clients trust.
    var caCertificate: String
    /// TLS: whether a TCP end without close_notify is an error (TLSSettings.requiresCloseNotify), for
    /// the faces that offer the choice; the others keep their default (an end at a record boundary is
    /// the end of the stream).
    var requiresCloseNotify = true
    /// The proxy the connection goes through, if any.
    var proxy: ProxyKind?
    /// Through a proxy: the target's port (on 127.0.0.1); the port a driver connects to is then the proxy's.
    var proxyTarget: Int?
    /// The host a driver connects to (a name for the resolver tests).
    var host = "127.0.0.1"
}

/// The queues the drivers deliver on, one per face for the whole run: the library keeps a reactor
/// per queue it serves (two descriptors) until the queue goes, so a queue per connection would make
/// the descriptor counts drift.
enum DriverQueues {
    static let queuedSocket = DispatchQueue(label: "FaultMatrix.QueuedSocket")
    static let gcdAsyncSocket = DispatchQueue(label: "FaultMatrix.GCDAsyncSocket")
    static let nwConnection = DispatchQueue(label: "FaultMatrix.NWConnection")
}

/// One face of the library, driven synchronously from the test's thread; every call returns within
/// the deadline it is given or the face's own timeouts.
protocol FaceDriver: AnyObject {
    /// Connects (and secures, for TLS) to 127.0.0.1:`port`; nil once connected, else how it ended.
    func connect(port: Int) -> End?
    /// Queues or writes `data` (the face's way; a write that cannot finish ends the connection).
    func send(_ data: Data)
    /// Waits until `count` bytes have arrived in all, the connection ended or `within` seconds passed;
    /// returns every byte received so far and the end (nil: none yet, `.waiting` at the deadline).
    func receive(count: Int, within: TimeInterval) -> (data: Data, end: End?)
    /// How many ends the face reported (errors, ends of stream, disconnects) before ``close()``.
    var endsReported: Int { get }
    /// Closes or cancels the connection, returning once the face says it is closed.
    func close()
}

/// The bytes and the end a continuously reading driver has seen, with waits.
final class Inbox: @unchecked Sendable {
    // @unchecked: every field is reached only under `condition`.
    private let condition = NSCondition()
    private var bytes = Data()
    private var ending: End?
    private var ends = 0
    private var closing = false

    func append(_ data: Data) {
        condition.lock()
        bytes.append(data)
        condition.broadcast()
        condition.unlock()
    }

    /// Records an end reported by the face (not counted once the test closed it).
    func end(_ end: End) {
        condition.lock()
        if !closing {
            ends += 1
            if ending == nil { ending = end }
        }
        condition.broadcast()
        condition.unlock()
    }

    func markClosing() {
        condition.lock()
        closing = true
        condition.unlock()
    }

    var endsReported: Int {
        condition.lock()
        defer { condition.unlock() }
        return ends
    }

    func wait(count: Int, within: TimeInterval) -> (data: Data, end: End?) {
        let deadline = Date(timeIntervalSinceNow: within)
        condition.lock()
        defer { condition.unlock() }
        while bytes.count < count && ending == nil {
            if !condition.wait(until: deadline) { return (bytes, ending ?? .waiting) }
        }
        return (bytes, ending)
    }
}
