import HTTPParsing

/// Builds the HTTP/1.1 requests `stream-get` sends.
public enum HTTPRequest {
    /// The `User-Agent` header value.
    public static let userAgent = "stream-get/0.1 (SocketStreams)"

    /// The bytes of `GET <path> HTTP/1.1` for `url`, with `Host` (including `:port` unless it is 80),
    /// `User-Agent`, `Accept: */*` and `Connection: close`, ending with the empty line.
    public static func get(_ url: HTTPURL, userAgent: String = HTTPRequest.userAgent) -> [UInt8] {
        make(method: "GET", url: url, userAgent: userAgent, closesConnection: true)
    }

    /// The bytes of a request without a body: `METHOD <path> HTTP/1.1`, `Host`, `User-Agent`, `Accept: */*`,
    /// `Connection: close` when `closesConnection` (otherwise HTTP/1.1's default, keep-alive, applies), then `headers`
    /// as curl's `-H` treats them: `Name: value` replaces a default header of that name or is added,
    /// `Name:` removes the default, `Name;` sends the header with an empty value.
    public static func make(
        method: String, url: HTTPURL, headers: [String] = [], userAgent: String = HTTPRequest.userAgent,
        closesConnection: Bool
    ) -> [UInt8] {
        var fields: [(name: String, line: String?)] = [
            ("Host", "Host: \(url.hostHeader)"), ("User-Agent", "User-Agent: \(userAgent)"), ("Accept", "Accept: */*"),
        ]
        if closesConnection { fields.append(("Connection", "Connection: close")) }
        for header in headers {
            let name: String
            let line: String?
            if let colon = header.firstIndex(of: ":") {
                name = String(header[..<colon]).trimmingSpaces
                let value = String(header[header.index(after: colon)...]).trimmingSpaces
                line = value.isEmpty ? nil : "\(name): \(value)"
            } else if header.hasSuffix(";") {
                name = String(header.dropLast()).trimmingSpaces
                line = "\(name):"
            } else {
                continue
            }
            if let index = fields.firstIndex(where: { $0.name.lowercased() == name.lowercased() }) {
                fields[index].line = line
            } else {
                fields.append((name, line))
            }
        }
        let lines = ["\(method) \(url.path) HTTP/1.1"] + fields.compactMap(\.line)
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
    }

    /// Whether `-H` values are acceptable: `Name: value`, `Name:` or `Name;` with a token name and no line break.
    public static func isValidHeader(_ header: String) -> Bool {
        guard !header.contains("\r"), !header.contains("\n") else { return false }
        let name: Substring
        if let colon = header.firstIndex(of: ":") {
            name = header[..<colon]
        } else if header.hasSuffix(";") {
            name = header.dropLast()
        } else {
            return false
        }
        return !name.isEmpty && name.utf8.allSatisfy { HTTPSyntax.isTokenCharacter($0) }
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs.
    var trimmingSpaces: String {
        var text = Substring(self)
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return String(text)
    }
}
