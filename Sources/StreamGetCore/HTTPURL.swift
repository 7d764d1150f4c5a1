import HTTPParsing
import SocketStreams
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a command-line URL was rejected.
public enum HTTPURLError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A scheme other than `http` or `https`.
    case unsupportedScheme(String)
    /// No host between `//` and the path.
    case missingHost
    /// A host that is neither a DNS name, an IPv4 address nor a bracketed IPv6 literal.
    case invalidHost(String)
    /// A port that is not a decimal number from 0 to 65535 (leading zeros allowed, as curl reads them).
    case invalidPort(String)
    /// `user:password@` in the authority.
    case userInfoNotSupported
    /// A space or control character anywhere in the URL.
    case invalidCharacter
    /// A host with non-ASCII labels that has no A-label form (IDNA 2008), and why.
    case invalidInternationalisedHost(String, reason: String)

    /// A one-line explanation suitable for an error message.
    public var description: String {
        switch self {
        case .unsupportedScheme(let scheme):
            return "unsupported URL scheme \"\(scheme)\": only http:// and https:// URLs are supported"
        case .missingHost:
            return "the URL has no host"
        case .invalidHost(let host):
            return "invalid host \"\(host)\" (write IPv6 addresses in brackets: http://[::1]:8080/)"
        case .invalidPort(let port):
            return "invalid port \"\(port)\": expected a decimal number from 0 to 65535"
        case .userInfoNotSupported:
            return "user names and passwords in URLs are not supported"
        case .invalidCharacter:
            return "the URL contains a space or a control character (percent-encode it, e.g. %20)"
        case .invalidInternationalisedHost(let host, let reason):
            return "invalid internationalised host \"\(host)\": \(reason)"
        }
    }
}

/// An `http://` or `https://host[:port]/path` URL, split into what an HTTP/1.1 GET needs.
public struct HTTPURL: Sendable, Equatable, CustomStringConvertible {
    /// `https`: the connection is TLS, and the default port 443.
    public var secure: Bool
    /// The host to connect to: a DNS name, an IPv4 address, or an IPv6 address without brackets
    /// (a zone, if any, follows `%`).
    public var host: String
    /// The TCP port (80, or 443 for https, when the URL has none).
    public var port: Int
    /// The request target in origin form: the path (at least `/`) and the query, without the fragment.
    public var path: String
    /// Whether the URL named its port (`http://host:80/` did, `http://host/` and `http://host:/` did not).
    /// Not part of equality: both spellings are the same URL.
    public var hasExplicitPort = false

    /// Equal when scheme, host, port and path are.
    public static func == (lhs: HTTPURL, rhs: HTTPURL) -> Bool {
        lhs.secure == rhs.secure && lhs.host == rhs.host && lhs.port == rhs.port && lhs.path == rhs.path
    }

    /// Creates a URL from its parts.
    public init(host: String, port: Int? = nil, path: String = "/", secure: Bool = false) {
        self.host = host
        self.port = port ?? (secure ? 443 : 80)
        hasExplicitPort = port != nil
        self.path = path
        self.secure = secure
    }

    /// The port the scheme implies.
    public var defaultPort: Int { secure ? 443 : 80 }

    /// Parses a command-line URL.
    ///
    /// Accepts `http://` and `https://host[:port][/path][?query][#fragment]` with a DNS name, an IPv4 address or a
    /// bracketed IPv6 literal (`http://[::1]:8080/`, zones as `[fe80::1%25eth0]`); the scheme may be omitted
    /// (`localhost:8080/x` is http). Non-ASCII characters in the path are percent-encoded as UTF-8.
    /// - Throws: `HTTPURLError`.
    public init(parsing string: String) throws(HTTPURLError) {
        secure = false
        if string.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            throw .invalidCharacter
        }
        var rest = Substring(string)
        if let separator = rest.firstRange(of: "://") {
            let scheme = rest[..<separator.lowerBound].lowercased()
            switch scheme {
            case "http": break
            case "https": secure = true
            default: throw .unsupportedScheme(String(rest[..<separator.lowerBound]))
            }
            rest = rest[separator.upperBound...]
        }
        // Delimiters are found among Unicode scalars, not Characters: a combining mark after "#" or "/"
        // makes one Character of both, and the delimiter would pass unseen (then percent-encoding
        // kept a literal "#" in the path that parsing the URL's description cut off; found by proxy-fuzz).
        let scalars = rest.unicodeScalars
        let authorityEnd = scalars.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? scalars.endIndex
        let authority = Substring(scalars[..<authorityEnd])
        var target = Substring(scalars[authorityEnd...])
        if let hash = target.unicodeScalars.firstIndex(of: "#") { target = Substring(target.unicodeScalars[..<hash]) }
        if authority.contains("@") { throw .userInfoNotSupported }

        let hostPart: Substring
        let portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalidHost(String(authority)) }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let afterClose = authority[authority.index(after: close)...]
            if afterClose.isEmpty {
                portPart = nil
            } else if afterClose.hasPrefix(":") {
                portPart = afterClose.dropFirst()
            } else {
                throw .invalidHost(String(authority))
            }
            host = try Self.validatedIPv6(hostPart)
        } else {
            let colons = authority.filter { $0 == ":" }.count
            if colons > 1 { throw .invalidHost(String(authority)) }
            if let colon = authority.firstIndex(of: ":") {
                hostPart = authority[..<colon]
                portPart = authority[authority.index(after: colon)...]
            } else {
                hostPart = authority
                portPart = nil
            }
            guard !hostPart.isEmpty else { throw .missingHost }
            var name = String(hostPart)
            if !name.utf8.allSatisfy({ $0 < 0x80 }) {
                // A U-label host: its A-labels are what is resolved, sent as SNI and Host, and verified.
                switch IDNA.toASCII(name) {
                case .success(let ascii): name = ascii
                case .failure(let failure): throw .invalidInternationalisedHost(name, reason: failure.reason)
                }
            }
            guard HTTPSyntax.isHostName(name) else { throw .invalidHost(name) }
            host = name
        }
        if let portPart, !portPart.isEmpty {
            port = try Self.parsePort(portPart)
            hasExplicitPort = true
        } else {
            port = secure ? 443 : 80  // "http://host:/" means the default port (RFC 3986 §3.2.3)
        }
        var pathText = String(target)
        if pathText.unicodeScalars.first.map({ $0 == "?" }) ?? true { pathText = "/" + pathText }
        path = Self.percentEncodingNonASCII(pathText)
    }

    /// A port as curl reads it: decimal digits only, leading zeros allowed (`08000` is 8000), 0 to 65535.
    /// - Throws: `HTTPURLError.invalidPort`.
    static func parsePort(_ text: Substring) throws(HTTPURLError) -> Int {
        let significant = text.drop { $0 == "0" }
        guard !text.isEmpty, text.allSatisfy(\.isASCIIDigitCharacter), significant.count <= 5,
            let value = significant.isEmpty ? 0 : Int(significant), value <= 65535
        else { throw .invalidPort(String(text)) }
        return value
    }

    /// Checks an IPv6 literal from between brackets and decodes a `%25` zone separator.
    private static func validatedIPv6(_ literal: Substring) throws(HTTPURLError) -> String {
        var address = String(literal)
        var zone = ""
        if let percent = literal.firstIndex(of: "%") {
            address = String(literal[..<percent])
            let zoneText = literal[percent...]
            guard zoneText.hasPrefix("%25"), zoneText.count > 3 else { throw .invalidHost("[\(literal)]") }
            zone = "%" + zoneText.dropFirst(3)
        }
        var storage = in6_addr()
        guard !address.isEmpty, inet_pton(AF_INET6, address, &storage) == 1 else {
            throw .invalidHost("[\(literal)]")
        }
        return address + zone
    }

    /// Percent-encodes every non-ASCII UTF-8 byte of `text` (RFC 3986 §2.1).
    private static func percentEncodingNonASCII(_ text: String) -> String {
        var result = ""
        for byte in text.utf8 {
            if byte < 0x80 {
                result.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                result += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return result
    }

    /// Scheme, host and port: where credentials may go (curl sends them to the URL's origin only).
    public var origin: String { "\(secure ? "https" : "http")://\(hostForURL.lowercased()):\(port)" }

    /// The last segment of the path, without the query (curl's `-O` name; empty when the path ends with `/`).
    public var remoteFileName: String {
        let pathOnly = path.prefix { $0 != "?" }
        return String(pathOnly[(pathOnly.lastIndex(of: "/").map { pathOnly.index(after: $0) } ?? pathOnly.startIndex)...])
    }

    /// Resolves a `Location` value against this URL (RFC 3986 §5.2): an absolute `http[s]://` URL, a
    /// scheme-relative `//host/path`, an absolute path, a query, or a path relative to this one's directory, with
    /// `.` and `..` segments removed. Spaces are percent-encoded first, as curl does.
    /// - Throws: `HTTPURLError` for another scheme or an unusable URL.
    public func resolving(_ location: String) throws(HTTPURLError) -> HTTPURL {
        var reference = location.trimmingSpaces.replacingSpaces
        if reference.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { throw .invalidCharacter }
        if let hash = reference.firstIndex(of: "#") { reference = String(reference[..<hash]) }
        if let colon = reference.firstIndex(of: ":"),
            let first = reference.first, first.isASCII, first.isLetter,
            reference[..<colon].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
        {
            return try HTTPURL(parsing: reference)
        }
        if reference.hasPrefix("//") { return try HTTPURL(parsing: (secure ? "https:" : "http:") + reference) }
        var resolved = self
        resolved.hasExplicitPort = hasExplicitPort
        let basePath = String(path.prefix { $0 != "?" })
        if reference.isEmpty { return resolved }
        if reference.hasPrefix("?") {
            resolved.path = basePath + reference
            return resolved
        }
        let query = reference.firstIndex(of: "?").map { String(reference[$0...]) } ?? ""
        let referencePath = String(reference.prefix { $0 != "?" })
        let merged =
            referencePath.hasPrefix("/")
            ? referencePath : String(basePath[...(basePath.lastIndex(of: "/") ?? basePath.startIndex)]) + referencePath
        resolved.path = Self.percentEncodingNonASCII(Self.removingDotSegments(merged) + query)
        return resolved
    }

    /// RFC 3986 §5.2.4: the path without `.` and `..` segments (never above the root).
    static func removingDotSegments(_ path: String) -> String {
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        for (offset, segment) in segments.enumerated() {
            let isLast = offset == segments.count - 1
            switch segment {
            case ".":
                if isLast { output.append("") }
            case "..":
                if !output.isEmpty { output.removeLast() }
                if isLast { output.append("") }
            default:
                output.append(segment)
            }
        }
        return "/" + output.joined(separator: "/")
    }

    /// Whether the host is an IPv6 address (and must be bracketed in URLs and the Host header).
    public var isIPv6Literal: Bool { host.contains(":") }

    /// The host as written in a URL authority: IPv6 addresses in brackets with the zone as `%25zone`.
    private var hostForURL: String {
        guard isIPv6Literal else { return host }
        return "[" + host.split(separator: "%", omittingEmptySubsequences: false).joined(separator: "%25") + "]"
    }

    /// The `Host` header value: the host (IPv6 in brackets, without a zone) and `:port` unless the port is 80.
    public var hostHeader: String {
        var name = host
        if isIPv6Literal {
            if let percent = name.firstIndex(of: "%") { name = String(name[..<percent]) }
            name = "[" + name + "]"
        }
        return port == defaultPort ? name : "\(name):\(port)"
    }

    /// `host:port` as used in messages (`[::1]:8080` for IPv6).
    public var endpointDescription: String {
        isIPv6Literal ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// The normalised URL, e.g. `http://[::1]:8080/index.html` (the port is omitted when it is the scheme's default).
    public var description: String {
        let scheme = secure ? "https" : "http"
        return port == defaultPort ? "\(scheme)://\(hostForURL)\(path)" : "\(scheme)://\(hostForURL):\(port)\(path)"
    }
}

extension String {
    /// The string with each space percent-encoded (`%20`).
    fileprivate var replacingSpaces: String { split(separator: " ", omittingEmptySubsequences: false).joined(separator: "%20") }
}

extension Character {
    /// Whether this is one of the ASCII digits 0-9 (and not some other Unicode digit).
    var isASCIIDigitCharacter: Bool { isASCII && isNumber }
}
