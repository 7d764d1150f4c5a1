import Foundation
import Glibc

/// The one check every entry that takes a TCP port makes: `createStreamPair(host:port:)` (and so
/// `Stream.getStreamsToHost` and `CFStreamCreatePairWithSocketToHost`), `StreamListener`,
/// `AsyncConnection(host:port:)`, `QueuedSocket`'s `connect` and `accept`, and the proxy settings.
///
/// A port is 0...65535 and is never masked: `sin_port` keeps only the low 16 bits, so 74636 would
/// dial 9100 and -56436 would too, while the caller would be told it reached 74636. CFNetwork masks;
/// this package refuses, with `EINVAL`, before anything is resolved or dialled.
enum PortNumber {
    /// The ports TCP can name.
    static let range = 0...65535

    /// Whether `port` is one TCP can name (0...65535).
    static func isValid(_ port: Int) -> Bool { range.contains(port) }

    /// Whether `port` can be dialled: 1...65535 (a proxy at port 0 is refused where it is set).
    static func isDialable(_ port: Int) -> Bool { port != 0 && isValid(port) }

    /// How a message names a port: "port 80", or "port 74636 (not in 0...65535)".
    static func label(_ port: Int) -> String {
        isValid(port) ? "port \(port)" : "port \(port) (not in 0...65535)"
    }

    /// The error for a port outside 0...65535, for entries that throw: `NSPOSIXErrorDomain` `EINVAL`,
    /// described as "`action` `host` port 74636 (not in 0...65535): Invalid argument".
    static func check(_ port: Int, _ action: @autoclosure () -> String) throws {
        guard !isValid(port) else { return }
        throw StreamErrors.posix(EINVAL, "\(action()) \(label(port))")
    }
}
