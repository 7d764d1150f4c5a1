import Foundation

/// `kCFStreamPropertySocketNativeHandle`: `Data` holding the socket's `Int32` fd. Read-only.
public let kCFStreamPropertySocketNativeHandle = "kCFStreamPropertySocketNativeHandle"
/// `kCFStreamPropertySocketRemoteHostName`: the host name the pair was created with (or the Unix path). Read-only.
public let kCFStreamPropertySocketRemoteHostName = "kCFStreamPropertySocketRemoteHostName"
/// `kCFStreamPropertySocketRemotePortNumber`: the port the pair was created with, as an `NSNumber`. Read-only.
public let kCFStreamPropertySocketRemotePortNumber = "kCFStreamPropertySocketRemotePortNumber"
/// `kCFStreamPropertyShouldCloseNativeSocket`: whether the fd is closed with the streams. Default true
/// for host and Unix pairs, false for native-socket pairs. May be set at any time.
public let kCFStreamPropertyShouldCloseNativeSocket = "kCFStreamPropertyShouldCloseNativeSocket"

extension Stream.PropertyKey {
    /// SocketStreams' own: the longest the open may take, name lookup included, in seconds
    /// (a number; 0 or unset means no limit). Set before `open()`. On expiry both streams get
    /// `errorOccurred` with `NSPOSIXErrorDomain` `ETIMEDOUT`. CFNetwork has no public equivalent.
    public static let connectTimeoutKey = Stream.PropertyKey("SocketStreamsPropertyConnectTimeout")

    /// SocketStreams' own: `TCP_NODELAY` (a Bool) on the pair's TCP socket. May be set at any time.
    public static let tcpNoDelayKey = Stream.PropertyKey("SocketStreamsPropertyTCPNoDelay")
}
