// TEMPORARY public API stubs so that tools and benchmarks can be written in parallel.
// Replaced by the real implementation.
import Foundation

public final class SocketInputStream: InputStream {
    init() { super.init(data: Data()) }
}
public final class SocketOutputStream: OutputStream {
    init() { super.init(toMemory: ()) }
    required init(toMemory: ()) { super.init(toMemory: ()) }
}

/// CFStreamCreatePairWithSocketToHost.
public func createStreamPair(host: String, port: Int) -> (input: SocketInputStream, output: SocketOutputStream) {
    fatalError("stub")
}
/// CFStreamCreatePairWithSocket.
public func createStreamPair(nativeSocket: Int32) -> (input: SocketInputStream, output: SocketOutputStream) {
    fatalError("stub")
}
/// A pair connected to a Unix-domain socket.
public func createStreamPair(unixSocketPath: String) -> (input: SocketInputStream, output: SocketOutputStream) {
    fatalError("stub")
}
extension Stream {
    public class func getStreamsToHost(
        withName hostname: String, port: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?, outputStream: UnsafeMutablePointer<OutputStream?>?
    ) { fatalError("stub") }
}
extension RunLoop {
    /// The package's dedicated stream run-loop thread.
    public static var socketStreams: RunLoop { fatalError("stub") }
}
extension Stream.PropertyKey {
    public static let connectTimeoutKey = Stream.PropertyKey("SocketStreamsPropertyConnectTimeout")
    public static let tcpNoDelayKey = Stream.PropertyKey("SocketStreamsPropertyTCPNoDelay")
}
public final class StreamListener: @unchecked Sendable {
    public init(host: String? = nil, port: Int = 0, backlog: Int32 = 128) throws { fatalError("stub") }
    public init(unixSocketPath: String, backlog: Int32 = 128) throws { fatalError("stub") }
    public var port: Int { fatalError("stub") }
    public func start(
        in runLoop: RunLoop, forMode mode: RunLoop.Mode = .default,
        accept: @escaping (SocketInputStream, SocketOutputStream) -> Void
    ) { fatalError("stub") }
    public func close() {}
}
