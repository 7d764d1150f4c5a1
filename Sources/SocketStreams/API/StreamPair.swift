import Foundation

/// Creates an unopened stream pair connected to `host` and `port` (`CFStreamCreatePairWithSocketToHost`).
///
/// Nothing touches the network until either stream is opened. Then the name is resolved off the
/// delivering thread, IPv6 and IPv4 addresses are raced (RFC 8305 Happy Eyeballs) and `openCompleted`
/// arrives on both opened streams once TCP is up. The socket is closed when both streams are closed
/// or released.
///
/// A host with non-ASCII labels ("bücher.example") is converted to its A-labels ("xn--bcher-kva.example",
/// UTS 46 / IDNA 2008) here, once: that is the name resolved, sent as SNI, matched against the
/// certificate and sent to a proxy. A name that has no A-label form fails at `open()` as an unresolvable
/// name does, with the reason, and nothing is dialled.
///
/// `port` must be in 0...65535. CFNetwork masks it to 16 bits (74636 dials 9100); this package never
/// does: such a pair connects nowhere, and its first `open()` fails with `errorOccurred` and an
/// `NSPOSIXErrorDomain` `EINVAL` error whose message names the port.
public func createStreamPair(host: String, port: Int) -> (input: SocketInputStream, output: SocketOutputStream) {
    makePair(Connection(endpoint: .host(IDNA.asciiOrSame(host), port: port)))
}

/// Creates a stream pair around an already-connected socket (`CFStreamCreatePairWithSocket`).
///
/// `open()` completes at once. The fd is made non-blocking and, by default, is NOT closed with the
/// streams (`kCFStreamPropertyShouldCloseNativeSocket` is false); set that property to true to hand over ownership.
public func createStreamPair(nativeSocket: Int32) -> (input: SocketInputStream, output: SocketOutputStream) {
    makePair(Connection(endpoint: .native(fd: nativeSocket)))
}

/// Creates an unopened stream pair that connects to a Unix-domain stream socket (`connect(2)` to
/// `AF_UNIX` `path`). The streams own their socket.
public func createStreamPair(unixSocketPath path: String) -> (input: SocketInputStream, output: SocketOutputStream) {
    makePair(Connection(endpoint: .unix(path: path)))
}

func makePair(_ connection: Connection) -> (input: SocketInputStream, output: SocketOutputStream) {
    StreamThread.prepare()  // the stream thread's fds, set aside while the process has some
    return (makeInput(connection), makeOutput(connection))
}

/// The input stream of a new pair, in a region of its own: the connection (which is `Sendable`) holds
/// it unretained, so the input and output can each be sent (`StreamListener.AcceptHandler`).
func makeInput(_ connection: Connection) -> sending SocketInputStream {
    let input = SocketInputStream(connection: connection)
    connection.lock.withLock { connection.inputStream = UnretainedReference(input) }
    return input
}

/// The output stream of a new pair, in a region of its own (see `makeInput`).
func makeOutput(_ connection: Connection) -> sending SocketOutputStream {
    let output = SocketOutputStream(connection: connection)
    connection.lock.withLock { connection.outputStream = UnretainedReference(output) }
    return output
}

extension Stream {
    /// `+[NSStream getStreamsToHostWithName:port:inputStream:outputStream:]`, which Foundation on
    /// Linux lacks. Call sites written for Apple platforms compile unchanged:
    ///
    ///     var i: InputStream?; var o: OutputStream?
    ///     Stream.getStreamsToHost(withName: "example.com", port: 80, inputStream: &i, outputStream: &o)
    ///
    /// Either pointer may be nil; a stream nobody takes is released at once, which leaves the other
    /// as the only owner of the socket. A `port` outside 0...65535 is not masked to 16 bits as on
    /// Apple platforms: the pair dials nothing and fails at open with `EINVAL` (this signature cannot throw).
    public class func getStreamsToHost(
        withName hostname: String,
        port: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?,
        outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        let pair = createStreamPair(host: hostname, port: port)
        inputStream?.pointee = pair.input
        outputStream?.pointee = pair.output
    }

    /// `setProperty(_:forKey:)` for any value, as on Apple platforms, where the parameter is `Any?`
    /// (Foundation on Linux takes `AnyObject?`). Lets `stream.setProperty(StreamSocketSecurityLevel.negotiatedSSL,
    /// forKey: .socketSecurityLevelKey)` compile unchanged.
    @discardableResult
    public func setProperty(_ property: Any?, forKey key: Stream.PropertyKey) -> Bool {
        setProperty(property.map { $0 as AnyObject }, forKey: key)
    }
}
