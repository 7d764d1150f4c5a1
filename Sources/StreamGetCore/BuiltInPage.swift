import Foundation

/// The small HTML page `stream-get` serves (and fetches) when run without a URL, and the HTTP responses of that
/// built-in server. Pure functions, so they can be tested without sockets.
public enum BuiltInPage {
    /// The page served for `GET /`.
    public static let html = """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <title>stream-get: built-in page</title>
        </head>
        <body>
        <h1>Hello from SocketStreams</h1>
        <p>This page was served by the built-in listener of <code>stream-get</code>
        (a <code>StreamListener</code> on 127.0.0.1 running on the <code>RunLoop.socketStreams</code> thread)
        and fetched with an HTTP/1.1 GET over a <code>createStreamPair(host:port:)</code> stream pair.</p>
        <p>Run <code>stream-get http://host:port/path</code> to fetch something else.</p>
        </body>
        </html>

        """

    /// The largest request head the built-in server reads before answering 431.
    public static let maxRequestHeadSize = 16 * 1024

    /// The index just after the empty line that ends a request head (`CRLF CRLF`, or `LF LF`), or nil when the head
    /// is not complete yet.
    public static func endOfRequestHead(in bytes: [UInt8]) -> Int? {
        var index = 0
        while let lf = bytes[index...].firstIndex(of: 0x0A) {
            var next = lf + 1
            if next < bytes.count, bytes[next] == 0x0D { next += 1 }
            if next < bytes.count, bytes[next] == 0x0A { return next + 1 }
            index = lf + 1
        }
        return nil
    }

    /// The complete response to a request head (request line and fields, ending with the empty line):
    /// 200 with the page for `GET /` or `GET /index.html`, 404 for another path, 405 for another method,
    /// 400 for a malformed request line.
    public static func response(forRequestHead head: [UInt8]) -> [UInt8] {
        let firstLine = head.split(separator: 0x0A, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        var requestLine = String(decoding: firstLine, as: UTF8.self)
        if requestLine.hasSuffix("\r") { requestLine.removeLast() }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1."), !parts[0].isEmpty, parts[1].hasPrefix("/") else {
            return response(status: 400, reason: "Bad Request", body: "400 Bad Request\n")
        }
        guard parts[0] == "GET" else {
            return response(
                status: 405, reason: "Method Not Allowed", body: "405 Method Not Allowed\n",
                extraHeaders: ["Allow: GET"])
        }
        let path = parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0]
        guard path == "/" || path == "/index.html" else {
            return response(status: 404, reason: "Not Found", body: "404 Not Found: \(path)\n")
        }
        return response(
            status: 200, reason: "OK", body: html, contentType: "text/html; charset=utf-8")
    }

    /// A complete HTTP/1.1 response with `Content-Length`, `Connection: close`, `Date` and `Server` headers.
    public static func response(
        status: Int, reason: String, body: String, contentType: String = "text/plain; charset=utf-8",
        extraHeaders: [String] = []
    ) -> [UInt8] {
        let bodyBytes = Array(body.utf8)
        let lines =
            [
                "HTTP/1.1 \(status) \(reason)",
                "Date: \(httpDate(Date()))",
                "Server: stream-get built-in page",
                "Content-Type: \(contentType)",
                "Content-Length: \(bodyBytes.count)",
                "Connection: close",
            ] + extraHeaders
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8) + bodyBytes
    }

    /// `date` in the IMF-fixdate format of RFC 9110 §5.6.7, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
