// CoreFoundation's spelling of socket streams, with Darwin's Swift signatures, so that CF-style stream
// code compiles and runs with `import SocketStreams`.
//
// On Linux, Foundation does not export CoreFoundation, and CoreFoundation's own stream functions
// need CFNetwork (CFStreamCreatePairWithSocketToHost crashes). This module re-exports CoreFoundation
// (CFRunLoop, CFIndex, CFStreamStatus, CFStreamEventType, CFStreamError, CFStreamClientContext, …) and
// declares over it the stream names that must mean our pairs: `CFReadStream` is the `InputStream`
// (as toll-free bridging makes it on Darwin), `CFString` is `NSString` (so `"x" as CFString` works),
// `CFError` is `NSError`, and the `CFReadStream…`/`CFWriteStream…` functions call the stream.
//
// A file that also writes `import CoreFoundation` sees both modules' `CFReadStream`, `CFString` and
// `CFError` and must name ours `SocketStreams.CFReadStream` (or drop that import: this module
// re-exports CoreFoundation).

@_exported import CoreFoundation
import Dispatch
import Foundation

/// `CFReadStream`: on Linux the read stream object itself (Darwin bridges it toll-free to
/// `InputStream`), so `readStream!.takeRetainedValue()` assigns to an `InputStream?`.
public typealias CFReadStream = InputStream
/// `CFWriteStream`: the `OutputStream` (see `CFReadStream`).
public typealias CFWriteStream = OutputStream
/// `CFError`: the `NSError` a stream's `streamError` holds (`CFErrorGetCode`, `CFErrorGetDomain` work on it).
public typealias CFError = NSError
/// `CFErrorDomain`.
public typealias CFErrorDomain = CFString

/// `CFReadStreamClientCallBack`. Darwin's is a C function pointer; here any closure (a closure that
/// captures nothing, or a global function, as C code would pass).
public typealias CFReadStreamClientCallBack = (CFReadStream?, CFStreamEventType, UnsafeMutableRawPointer?) -> Void
/// `CFWriteStreamClientCallBack` (see `CFReadStreamClientCallBack`).
public typealias CFWriteStreamClientCallBack = (CFWriteStream?, CFStreamEventType, UnsafeMutableRawPointer?) -> Void

/// `CFStreamPropertyKey`: a property name, made from a `kCFStream…` constant with `init(rawValue:)`.
public struct CFStreamPropertyKey: RawRepresentable, Hashable, @unchecked Sendable {
    /// The constant's string, such as `kCFStreamPropertySocketSecurityLevel`.
    public var rawValue: CFString
    /// The key for a `kCFStream…` constant (`CFStreamPropertyKey(rawValue: kCFStreamPropertyShouldCloseNativeSocket)`).
    public init(rawValue: CFString) { self.rawValue = rawValue }
    /// The key for a `kCFStream…` constant, as Swift imports the Darwin initialiser.
    public init(_ rawValue: CFString) { self.rawValue = rawValue }
}

extension CFRunLoopMode {
    /// `CFRunLoopMode.defaultMode` (`kCFRunLoopDefaultMode`).
    public static var defaultMode: CFRunLoopMode { kCFRunLoopDefaultMode }
    /// `CFRunLoopMode.commonModes` (`kCFRunLoopCommonModes`).
    public static var commonModes: CFRunLoopMode { kCFRunLoopCommonModes }
}

/// Lets `kCFStream… as Stream.PropertyKey` compile, as it does on Darwin, where the constants bridge.
extension Stream.PropertyKey: @retroactive _ObjectiveCBridgeable {
    public func _bridgeToObjectiveC() -> NSString { NSString(string: rawValue) }
    public static func _forceBridgeFromObjectiveC(_ source: NSString, result: inout Stream.PropertyKey?) {
        result = Stream.PropertyKey(rawValue: String(source))
    }
    public static func _conditionallyBridgeFromObjectiveC(_ source: NSString, result: inout Stream.PropertyKey?) -> Bool {
        result = Stream.PropertyKey(rawValue: String(source))
        return true
    }
    public static func _unconditionallyBridgeFromObjectiveC(_ source: NSString?) -> Stream.PropertyKey {
        Stream.PropertyKey(rawValue: source.map(String.init) ?? "")
    }
}

// MARK: - creating pairs

/// `CFStreamCreatePairWithSocketToHost`: a pair for `host`:`port` (see `createStreamPair(host:port:)`).
/// A `port` above 65535 is not masked to 16 bits as CFNetwork does: the pair dials nothing and its
/// open fails with `kCFStreamEventErrorOccurred`, POSIX `EINVAL`.
/// Either pointer may be nil; each stream returned is +1, as `Unmanaged…takeRetainedValue()` expects.
public func CFStreamCreatePairWithSocketToHost(
    _ alloc: CFAllocator?, _ host: CFString!, _ port: UInt32,
    _ readStream: UnsafeMutablePointer<Unmanaged<CFReadStream>?>?,
    _ writeStream: UnsafeMutablePointer<Unmanaged<CFWriteStream>?>?
) {
    let pair = createStreamPair(host: String(host ?? ""), port: Int(port))
    readStream?.pointee = .passRetained(pair.input)
    writeStream?.pointee = .passRetained(pair.output)
}

/// `CFStreamCreatePairWithSocket`: a pair over a connected native socket (see
/// `createStreamPair(nativeSocket:)`; the socket is not closed with the streams unless
/// `kCFStreamPropertyShouldCloseNativeSocket` is set).
public func CFStreamCreatePairWithSocket(
    _ alloc: CFAllocator?, _ sock: CFSocketNativeHandle,
    _ readStream: UnsafeMutablePointer<Unmanaged<CFReadStream>?>?,
    _ writeStream: UnsafeMutablePointer<Unmanaged<CFWriteStream>?>?
) {
    let pair = createStreamPair(nativeSocket: sock)
    readStream?.pointee = .passRetained(pair.input)
    writeStream?.pointee = .passRetained(pair.output)
}

// MARK: - read streams

/// `CFReadStreamOpen`: true unless the stream has already failed.
@discardableResult
public func CFReadStreamOpen(_ stream: CFReadStream!) -> Bool {
    stream.open()
    return stream.streamStatus != .error
}

/// `CFReadStreamClose`.
public func CFReadStreamClose(_ stream: CFReadStream!) { stream.close() }

/// `CFReadStreamRead`: bytes read, 0 at the end, -1 on error.
public func CFReadStreamRead(_ stream: CFReadStream!, _ buffer: UnsafeMutablePointer<UInt8>!, _ bufferLength: CFIndex) -> CFIndex {
    stream.read(buffer, maxLength: bufferLength)
}

/// `CFReadStreamHasBytesAvailable`.
public func CFReadStreamHasBytesAvailable(_ stream: CFReadStream!) -> Bool { stream.hasBytesAvailable }

/// `CFReadStreamGetStatus`.
public func CFReadStreamGetStatus(_ stream: CFReadStream!) -> CFStreamStatus {
    CFStreamStatus(rawValue: CFIndex(stream.streamStatus.rawValue)) ?? .error
}

/// `CFReadStreamCopyError`: the stream's error (the `NSError` of `streamError`), nil if none.
public func CFReadStreamCopyError(_ stream: CFReadStream!) -> CFError! { stream.streamError as NSError? }

/// `CFReadStreamGetError`: the legacy `CFStreamError`, with CFNetwork's domain numbers (1 POSIX,
/// 3 SSL, 4 HTTP, 5 SOCKS, 12 NetDB); `(0, 0)` without an error.
public func CFReadStreamGetError(_ stream: CFReadStream!) -> CFStreamError { CFStreamErrorFor(stream.streamError) }

/// `CFReadStreamSetProperty` (shared by both streams of a pair).
@discardableResult
public func CFReadStreamSetProperty(_ stream: CFReadStream!, _ propertyName: CFStreamPropertyKey!, _ propertyValue: CFTypeRef!) -> Bool {
    stream.setProperty(propertyValue, forKey: Stream.PropertyKey(rawValue: String(propertyName.rawValue)))
}

/// `CFReadStreamSetProperty` with the name as a `CFString` (older SDKs' spelling).
@discardableResult
public func CFReadStreamSetProperty(_ stream: CFReadStream!, _ propertyName: CFString!, _ propertyValue: CFTypeRef!) -> Bool {
    CFReadStreamSetProperty(stream, CFStreamPropertyKey(rawValue: propertyName), propertyValue)
}

/// `CFReadStreamCopyProperty`.
public func CFReadStreamCopyProperty(_ stream: CFReadStream!, _ propertyName: CFStreamPropertyKey!) -> CFTypeRef! {
    stream.property(forKey: Stream.PropertyKey(rawValue: String(propertyName.rawValue)))
}

/// `CFReadStreamCopyProperty` with the name as a `CFString`.
public func CFReadStreamCopyProperty(_ stream: CFReadStream!, _ propertyName: CFString!) -> CFTypeRef! {
    CFReadStreamCopyProperty(stream, CFStreamPropertyKey(rawValue: propertyName))
}

/// `CFReadStreamSetClient`: `clientCB` is called for the events in `streamEvents` (a
/// `CFStreamEventType` mask) wherever the stream is scheduled, with `clientContext.info`. The
/// context's `retain` is called on `info` now and its `release` when the client is replaced or
/// removed (a nil callback or no events). While a client is set it gets the events, not the delegate.
/// Returns false for streams that are not SocketStreams pairs.
@discardableResult
public func CFReadStreamSetClient(
    _ stream: CFReadStream!, _ streamEvents: CFOptionFlags, _ clientCB: CFReadStreamClientCallBack!,
    _ clientContext: UnsafeMutablePointer<CFStreamClientContext>!
) -> Bool {
    guard let socket = stream as? SocketInputStream else { return false }
    let client = clientCB.map { callback in
        StreamClient(events: streamEvents, context: clientContext?.pointee) { stream, event, info in
            callback(stream as? InputStream, event, info)
        }
    }
    socket.connection.setClient(client, for: .input)
    return true
}

/// `CFReadStreamScheduleWithRunLoop` (any `CFRunLoop` and mode, `commonModes` included).
public func CFReadStreamScheduleWithRunLoop(_ stream: CFReadStream!, _ runLoop: CFRunLoop!, _ runLoopMode: CFRunLoopMode!) {
    if let socket = stream as? SocketInputStream {
        socket.connection.schedule(.input, onCFRunLoop: runLoop, mode: runLoopModeName(runLoopMode))
    }
}

/// `CFReadStreamUnscheduleFromRunLoop`.
public func CFReadStreamUnscheduleFromRunLoop(_ stream: CFReadStream!, _ runLoop: CFRunLoop!, _ runLoopMode: CFRunLoopMode!) {
    if let socket = stream as? SocketInputStream {
        socket.connection.unschedule(.input, fromCFRunLoop: runLoop, mode: runLoopModeName(runLoopMode))
    }
}

/// `CFReadStreamSetDispatchQueue`: events (to the delegate or the client) are delivered on `q`, one at
/// a time, never on the caller's thread. Setting a queue unschedules the stream from every run loop;
/// scheduling on a run loop clears the queue; nil stops delivery.
public func CFReadStreamSetDispatchQueue(_ stream: CFReadStream!, _ q: DispatchQueue!) {
    (stream as? SocketInputStream)?.connection.setDispatchQueue(q, for: .input)
}

/// `CFReadStreamCopyDispatchQueue`: the queue set, nil if none.
public func CFReadStreamCopyDispatchQueue(_ stream: CFReadStream!) -> DispatchQueue! {
    (stream as? SocketInputStream)?.connection.dispatchQueue(of: .input)
}

// MARK: - write streams

/// `CFWriteStreamOpen`: true unless the stream has already failed.
@discardableResult
public func CFWriteStreamOpen(_ stream: CFWriteStream!) -> Bool {
    stream.open()
    return stream.streamStatus != .error
}

/// `CFWriteStreamClose`.
public func CFWriteStreamClose(_ stream: CFWriteStream!) { stream.close() }

/// `CFWriteStreamWrite`: bytes written (at least 1), -1 on error.
public func CFWriteStreamWrite(_ stream: CFWriteStream!, _ buffer: UnsafePointer<UInt8>!, _ bufferLength: CFIndex) -> CFIndex {
    stream.write(buffer, maxLength: bufferLength)
}

/// `CFWriteStreamCanAcceptBytes`.
public func CFWriteStreamCanAcceptBytes(_ stream: CFWriteStream!) -> Bool { stream.hasSpaceAvailable }

/// `CFWriteStreamGetStatus`.
public func CFWriteStreamGetStatus(_ stream: CFWriteStream!) -> CFStreamStatus {
    CFStreamStatus(rawValue: CFIndex(stream.streamStatus.rawValue)) ?? .error
}

/// `CFWriteStreamCopyError`.
public func CFWriteStreamCopyError(_ stream: CFWriteStream!) -> CFError! { stream.streamError as NSError? }

/// `CFWriteStreamGetError` (see `CFReadStreamGetError`).
public func CFWriteStreamGetError(_ stream: CFWriteStream!) -> CFStreamError { CFStreamErrorFor(stream.streamError) }

/// `CFWriteStreamSetProperty`.
@discardableResult
public func CFWriteStreamSetProperty(_ stream: CFWriteStream!, _ propertyName: CFStreamPropertyKey!, _ propertyValue: CFTypeRef!) -> Bool {
    stream.setProperty(propertyValue, forKey: Stream.PropertyKey(rawValue: String(propertyName.rawValue)))
}

/// `CFWriteStreamSetProperty` with the name as a `CFString`.
@discardableResult
public func CFWriteStreamSetProperty(_ stream: CFWriteStream!, _ propertyName: CFString!, _ propertyValue: CFTypeRef!) -> Bool {
    CFWriteStreamSetProperty(stream, CFStreamPropertyKey(rawValue: propertyName), propertyValue)
}

/// `CFWriteStreamCopyProperty`.
public func CFWriteStreamCopyProperty(_ stream: CFWriteStream!, _ propertyName: CFStreamPropertyKey!) -> CFTypeRef! {
    stream.property(forKey: Stream.PropertyKey(rawValue: String(propertyName.rawValue)))
}

/// `CFWriteStreamCopyProperty` with the name as a `CFString`.
public func CFWriteStreamCopyProperty(_ stream: CFWriteStream!, _ propertyName: CFString!) -> CFTypeRef! {
    CFWriteStreamCopyProperty(stream, CFStreamPropertyKey(rawValue: propertyName))
}

/// `CFWriteStreamSetClient` (see `CFReadStreamSetClient`).
@discardableResult
public func CFWriteStreamSetClient(
    _ stream: CFWriteStream!, _ streamEvents: CFOptionFlags, _ clientCB: CFWriteStreamClientCallBack!,
    _ clientContext: UnsafeMutablePointer<CFStreamClientContext>!
) -> Bool {
    guard let socket = stream as? SocketOutputStream else { return false }
    let client = clientCB.map { callback in
        StreamClient(events: streamEvents, context: clientContext?.pointee) { stream, event, info in
            callback(stream as? OutputStream, event, info)
        }
    }
    socket.connection.setClient(client, for: .output)
    return true
}

/// `CFWriteStreamScheduleWithRunLoop`.
public func CFWriteStreamScheduleWithRunLoop(_ stream: CFWriteStream!, _ runLoop: CFRunLoop!, _ runLoopMode: CFRunLoopMode!) {
    if let socket = stream as? SocketOutputStream {
        socket.connection.schedule(.output, onCFRunLoop: runLoop, mode: runLoopModeName(runLoopMode))
    }
}

/// `CFWriteStreamUnscheduleFromRunLoop`.
public func CFWriteStreamUnscheduleFromRunLoop(_ stream: CFWriteStream!, _ runLoop: CFRunLoop!, _ runLoopMode: CFRunLoopMode!) {
    if let socket = stream as? SocketOutputStream {
        socket.connection.unschedule(.output, fromCFRunLoop: runLoop, mode: runLoopModeName(runLoopMode))
    }
}

/// `CFWriteStreamSetDispatchQueue` (see `CFReadStreamSetDispatchQueue`).
public func CFWriteStreamSetDispatchQueue(_ stream: CFWriteStream!, _ q: DispatchQueue!) {
    (stream as? SocketOutputStream)?.connection.setDispatchQueue(q, for: .output)
}

/// `CFWriteStreamCopyDispatchQueue`.
public func CFWriteStreamCopyDispatchQueue(_ stream: CFWriteStream!) -> DispatchQueue! {
    (stream as? SocketOutputStream)?.connection.dispatchQueue(of: .output)
}

// MARK: - errors

/// `CFErrorGetCode`.
public func CFErrorGetCode(_ err: CFError!) -> CFIndex { err.code }
/// `CFErrorGetDomain`.
public func CFErrorGetDomain(_ err: CFError!) -> CFErrorDomain! { NSString(string: err.domain) }
/// `CFErrorCopyDescription`.
public func CFErrorCopyDescription(_ err: CFError!) -> CFString! { NSString(string: err.localizedDescription) }
/// `CFErrorCopyUserInfo`.
public func CFErrorCopyUserInfo(_ err: CFError!) -> NSDictionary! { err.userInfo as NSDictionary }

/// The legacy `CFStreamError` for a stream error: the `_kCFStreamErrorDomainKey`/`_kCFStreamErrorCodeKey`
/// every error of ours carries.
func CFStreamErrorFor(_ error: Error?) -> CFStreamError {
    guard let error = error as NSError? else { return CFStreamError(domain: 0, error: 0) }
    let domain =
        (error.userInfo[StreamErrors.streamErrorDomainKey] as? NSNumber)?.intValue
        ?? (error.userInfo[StreamErrors.streamErrorDomainKey] as? Int)
    let code =
        (error.userInfo[StreamErrors.streamErrorCodeKey] as? NSNumber)?.intValue
        ?? (error.userInfo[StreamErrors.streamErrorCodeKey] as? Int)
    if let domain, let code { return CFStreamError(domain: CFIndex(domain), error: Int32(truncatingIfNeeded: code)) }
    if error.domain == NSPOSIXErrorDomain { return CFStreamError(domain: 1, error: Int32(truncatingIfNeeded: error.code)) }
    return CFStreamError(domain: -1, error: Int32(truncatingIfNeeded: error.code))
}

/// A run-loop mode's name as the reactors key it (CoreFoundation's string, copied).
private func runLoopModeName(_ mode: CFRunLoopMode?) -> String {
    guard let mode else { return RunLoop.Mode.default.rawValue }
    if CFEqual(mode, kCFRunLoopCommonModes) { return RunLoop.Mode.common.rawValue }
    let length = CFStringGetLength(mode)
    let capacity = CFStringGetMaximumSizeForEncoding(length, CFStringBuiltInEncodings.UTF8.rawValue) + 1
    var buffer = [CChar](repeating: 0, count: capacity)
    guard CFStringGetCString(mode, &buffer, capacity, CFStringBuiltInEncodings.UTF8.rawValue) else {
        return RunLoop.Mode.default.rawValue
    }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
