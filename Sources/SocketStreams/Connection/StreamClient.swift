import CoreFoundation
import Foundation

/// A `CFReadStreamSetClient`/`CFWriteStreamSetClient` client: the callback, the events it asked for,
/// and its context's `info`, retained with the context's `retain` when set and released with its
/// `release` when the client goes (replaced, removed, or the pair released).
final class StreamClient: @unchecked Sendable {
    private let events: CFOptionFlags
    private let info: UnsafeMutableRawPointer?
    private let release: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?
    private let callback: (Stream, CFStreamEventType, UnsafeMutableRawPointer?) -> Void

    init(
        events: CFOptionFlags, context: CFStreamClientContext?,
        callback: @escaping (Stream, CFStreamEventType, UnsafeMutableRawPointer?) -> Void
    ) {
        self.events = events
        self.callback = callback
        if let context, let retain = context.retain {
            info = retain(context.info)
        } else {
            info = context?.info
        }
        release = context?.release
    }

    deinit { release?(info) }

    /// Calls back for `event` if the client asked for it.
    func deliver(_ stream: Stream, _ event: Stream.Event) {
        guard events & CFOptionFlags(event.rawValue) != 0 else { return }
        callback(stream, CFStreamEventType(rawValue: CFOptionFlags(event.rawValue)), info)
    }
}
