// What the soak counts: per lane, the operations completed (an expected error such as ECONNREFUSED on
// the refused lanes is a completed operation), the unexpected errors by kind, and the operations in
// flight (so the end of the run can wait until everything has closed). Lanes report from their own
// threads, queues and run loops; a lock keeps the counts consistent.

import Foundation
import Glibc

/// One lane of the soak's load: a kind of operation, the way its streams are driven, and its peer.
struct SoakLane {
    /// What one operation is.
    enum Kind: String, CaseIterable {
        /// Connect, one exchange of a byte each way, close.
        case short
        /// 50 round trips of 64 bytes on one connection.
        case echo
        /// 2 MiB down or up on one connection (alternating).
        case bulk
        /// A connection that stays open for minutes, one round trip every few seconds.
        case long
        /// A TLS handshake and 10 round trips.
        case tls
        /// A connect to a port nobody listens on: ECONNREFUSED is the expected outcome.
        case refused
        /// A peer that resets after its data: the data, then ECONNRESET, is the expected outcome.
        case reset
        /// The listener's side: one accepted pair served to its end.
        case served
    }

    var kind: Kind
    /// delegate (the soak's run loop thread), thread (`RunLoop.socketStreams`), queue (a dispatch
    /// queue), polling (blocking calls on unscheduled streams), listener (the accepted pairs).
    var style: String
    /// server (the epoll server process), listener (the in-process `StreamListener`s), or the
    /// refused ports.
    var peer: String
    /// The error every operation must end with (refused, reset), nil for lanes that must succeed.
    var expectedError: String?

    var name: String { "\(kind.rawValue)/\(style)/\(peer)" }
}

/// The counts of every lane, shared by all of them.
final class SoakCounters: @unchecked Sendable {
    struct Count {
        /// Completed operations (with the expected error, on the refused and reset lanes).
        var operations = 0
        /// Unexpected errors by kind ("ECONNRESET", "short read", …).
        var unexpected: [String: Int] = [:]
        /// Operations begun and not ended yet.
        var inFlight = 0

        var unexpectedTotal: Int { unexpected.values.reduce(0, +) }
    }

    /// An unexpected error's first occurrence, for the report.
    struct FirstError {
        var lane: String
        var kind: String
        var message: String
        var seconds: Double
    }

    private let lock = NSLock()
    private var lanes: [SoakLane] = []
    private var counts: [Count] = []
    private var firstErrors: [String: FirstError] = [:]
    private let start = Posix.monotonicNanoseconds()
    /// How many unexpected errors are echoed to stderr as they happen (the rest are only counted).
    private static let printedErrors = 20
    private var printed = 0

    /// Adds a lane; returns its index for the other calls.
    func register(_ lane: SoakLane) -> Int {
        lock.withLock {
            lanes.append(lane)
            counts.append(Count())
            return lanes.count - 1
        }
    }

    func began(_ lane: Int) {
        lock.withLock { counts[lane].inFlight += 1 }
    }

    /// An operation ended as it should (for a refused or reset lane: with its expected error).
    func completed(_ lane: Int) {
        lock.withLock {
            counts[lane].inFlight -= 1
            counts[lane].operations += 1
        }
    }

    /// An operation ended with an unexpected error of `kind`.
    func failed(_ lane: Int, kind: String, message: String) {
        let line: String? = lock.withLock {
            counts[lane].inFlight -= 1
            counts[lane].unexpected[kind, default: 0] += 1
            let seconds = Stopwatch.seconds(from: start, to: Posix.monotonicNanoseconds())
            let key = lanes[lane].name + " " + kind
            if firstErrors[key] == nil {
                firstErrors[key] = FirstError(lane: lanes[lane].name, kind: kind, message: message, seconds: seconds)
            }
            guard printed < Self.printedErrors else { return nil }
            printed += 1
            return "stream-bench soak: UNEXPECTED \(kind) on \(lanes[lane].name) at \(Int(seconds)) s: \(message)"
        }
        if let line { Posix.printError(line) }
    }

    var allLanes: [SoakLane] { lock.withLock { lanes } }

    var snapshot: [Count] { lock.withLock { counts } }

    var inFlight: Int { lock.withLock { counts.reduce(0) { $0 + $1.inFlight } } }

    /// The first message of every lane × kind of unexpected error, in the order they happened.
    var firstUnexpectedErrors: [FirstError] {
        lock.withLock { firstErrors.values.sorted { $0.seconds < $1.seconds } }
    }
}

/// Short names for error kinds, so the report counts "ECONNRESET" and not whole messages.
enum SoakErrorKind {
    /// "ECONNREFUSED" for a POSIX error, "kCFErrorDomainCFNetwork 2" for others; nil for no error.
    static func of(_ error: Error?) -> String? {
        guard let error else { return nil }
        let nsError = error as NSError
        if nsError.domain == NSPOSIXErrorDomain { return errnoName(Int32(nsError.code)) }
        return "\(nsError.domain) \(nsError.code)"
    }

    /// The error of a pair: the input stream's, else the output stream's.
    static func of(_ input: Stream, _ output: Stream) -> String? {
        of(input.streamError) ?? of(output.streamError)
    }

    /// For a failure known only by its message (the polling client's `BenchError`s): the errno name
    /// of an NSError description in it ("Domain=NSPOSIXErrorDomain Code=104"), otherwise the message
    /// up to its first colon ("short read", "read failed").
    static func of(message: String) -> String {
        if let domain = message.range(of: "Domain=NSPOSIXErrorDomain Code="),
            let code = Int32(message[domain.upperBound...].prefix { $0.isNumber })
        {
            return errnoName(code)
        }
        return String(message.prefix { $0 != ":" }.prefix(60))
    }

    static func errnoName(_ code: Int32) -> String {
        switch code {
        case ECONNREFUSED: return "ECONNREFUSED"
        case ECONNRESET: return "ECONNRESET"
        case EPIPE: return "EPIPE"
        case ETIMEDOUT: return "ETIMEDOUT"
        case EMFILE: return "EMFILE"
        case ENFILE: return "ENFILE"
        case ENOBUFS: return "ENOBUFS"
        case ENOMEM: return "ENOMEM"
        case EADDRNOTAVAIL: return "EADDRNOTAVAIL"
        case EADDRINUSE: return "EADDRINUSE"
        case ENETUNREACH: return "ENETUNREACH"
        case EHOSTUNREACH: return "EHOSTUNREACH"
        case ECONNABORTED: return "ECONNABORTED"
        default: return "errno \(code)"
        }
    }
}
