import Foundation

/// When the stream events of one exchange came, in `DispatchTime` nanoseconds (a monotonic clock).
public struct FetchTimings: Sendable, Equatable {
    /// When `run(timeout:)` began.
    public var start: UInt64
    /// Whether the exchange uses TLS (`time_appconnect` is 0 without it, as curl prints).
    public var usesTLS: Bool
    /// When the name the pair connects to (the proxy's, through one) had resolved; nil unless timed.
    public var nameResolved: UInt64?
    /// The first `openCompleted`: TCP is up (to the proxy, through one).
    public var connected: UInt64?
    /// The first `hasSpaceAvailable`: the proxy and TLS handshakes are done and the request can go.
    public var handshakesDone: UInt64?
    /// The first `hasBytesAvailable` after the request went out: the response's first byte.
    public var firstByte: UInt64?
    /// When the response was complete (or the exchange failed).
    public var end: UInt64?

    /// Timings that start now-ish; the events fill in the rest.
    public init(start: UInt64 = 0, usesTLS: Bool = false) {
        self.start = start
        self.usesTLS = usesTLS
    }

    /// The monotonic clock, in nanoseconds.
    public static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }
}

/// What one URL's transfer (redirects included) produced, for `-w`.
public struct TransferReport: Sendable {
    /// When the transfer of the URL began (before the first request of a redirect chain).
    public var start: UInt64
    /// The final exchange's event times.
    public var timings = FetchTimings()
    /// Redirects followed; `time_redirect` is the time before the final exchange began.
    public var redirects = 0
    /// The final status code; 0 when no response arrived (printed `000`).
    public var statusCode = 0
    /// Body bytes written.
    public var bodyBytes = 0
    /// Connections opened for this URL (0 when an open one was reused).
    public var connectionsOpened = 0
    /// The final URL.
    public var effectiveURL: String
    /// A `Location` not followed (without `-L`).
    public var redirectURL: String?
    /// The address and port connected to.
    public var remoteEndpoint: (address: String, port: Int)?
    /// `X509_V_OK` (0) when the server certificate was verified; OpenSSL's verify result when it was refused;
    /// nil without TLS.
    public var sslVerifyResult: Int?
    /// The `Content-Type` of the final response.
    public var contentType: String?
    /// The exit code of the transfer.
    public var exitCode: Int32 = 0
    /// The error message, when it failed.
    public var errorMessage = ""
    /// `GET` or `HEAD`.
    public var method = "GET"

    /// A report for a transfer of `url` starting now.
    public init(start: UInt64, effectiveURL: String) {
        self.start = start
        self.effectiveURL = effectiveURL
    }

    /// Seconds from `start` to `instant` (0 for a phase never reached), as curl prints them: `0.012345`.
    private func seconds(_ instant: UInt64?) -> String {
        guard let instant, instant >= start else { return "0.000000" }
        return String(format: "%.6f", Double(instant - start) / 1e9)
    }

    /// The value of curl's `-w` variable `name`, nil for a name `stream-get` does not know.
    public func value(of name: String) -> String? {
        let t = timings
        switch name {
        case "time_namelookup": return seconds(t.nameResolved ?? t.connected)
        case "time_connect": return seconds(t.connected)
        case "time_appconnect": return t.usesTLS ? seconds(t.handshakesDone) : seconds(nil)
        case "time_pretransfer": return seconds(t.handshakesDone)
        case "time_starttransfer": return seconds(t.firstByte)
        case "time_total": return seconds(t.end)
        case "time_redirect": return redirects > 0 ? seconds(t.start) : seconds(nil)
        case "speed_download":
            guard let end = t.end, end > start else { return "0" }
            return String(Int((Double(bodyBytes) / (Double(end - start) / 1e9)).rounded(.down)))
        case "size_download": return String(bodyBytes)
        case "http_code", "response_code": return String(format: "%03d", statusCode)
        case "num_connects": return String(connectionsOpened)
        case "num_redirects": return String(redirects)
        case "url_effective": return effectiveURL
        case "redirect_url": return redirectURL ?? ""
        case "remote_ip": return remoteEndpoint?.address ?? ""
        case "remote_port": return remoteEndpoint.map { String($0.port) } ?? ""
        case "ssl_verify_result": return String(sslVerifyResult ?? 0)
        case "content_type": return contentType ?? ""
        case "exitcode": return String(exitCode)
        case "errormsg": return errorMessage
        case "method": return method
        case "scheme": return effectiveURL.hasPrefix("https:") ? "https" : "http"
        default: return nil
        }
    }

    /// Expands a `-w` format as curl does: `%{name}` variables, `%%`, and the escapes `\n`, `\r`, `\t`, `\\`.
    /// Unknown variables expand to nothing and are reported in `unknown`.
    public func expand(_ format: String, unknown: inout [String]) -> String {
        var result = ""
        var index = format.startIndex
        while index < format.endIndex {
            let character = format[index]
            let next = format.index(after: index)
            if character == "%", next < format.endIndex, format[next] == "%" {
                result.append("%")
                index = format.index(after: next)
            } else if character == "%", next < format.endIndex, format[next] == "{",
                let close = format[next...].firstIndex(of: "}")
            {
                let name = String(format[format.index(after: next)..<close])
                if let value = value(of: name) { result += value } else { unknown.append(name) }
                index = format.index(after: close)
            } else if character == "\\", next < format.endIndex, let escaped = ["n": "\n", "r": "\r", "t": "\t", "\\": "\\"][format[next]] {
                result += escaped
                index = format.index(after: next)
            } else {
                result.append(character)
                index = next
            }
        }
        return result
    }
}
