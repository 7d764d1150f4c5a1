/// Builds the HTTP/1.1 requests `stream-get` sends.
public enum HTTPRequest {
    /// The `User-Agent` header value.
    public static let userAgent = "stream-get/0.1 (SocketStreams)"

    /// The bytes of `GET <path> HTTP/1.1` for `url`, with `Host` (including `:port` unless it is 80),
    /// `User-Agent`, `Accept: */*` and `Connection: close`, ending with the empty line.
    public static func get(_ url: HTTPURL, userAgent: String = HTTPRequest.userAgent) -> [UInt8] {
        let lines = [
            "GET \(url.path) HTTP/1.1",
            "Host: \(url.hostHeader)",
            "User-Agent: \(userAgent)",
            "Accept: */*",
            "Connection: close",
        ]
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
    }
}
