#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import SocketStreams

/// How `stream-get` reaches a URL through a proxy, chosen as curl chooses: `-x`/`--socks*` first, then
/// the environment (`http_proxy` for http:// URLs, `https_proxy`/`HTTPS_PROXY` for https://, then
/// `all_proxy`/`ALL_PROXY`), unless `--noproxy` or `NO_PROXY`/`no_proxy` names the host.
public struct StreamGetProxyRoute: Sendable, Equatable {
    /// The proxy, as the library takes it.
    public var configuration: ProxyConfiguration
    /// curl's `--socks4` and `--socks5` (`socks4://`, `socks5://`): the URL's host is resolved here and
    /// the proxy is sent the address; otherwise the proxy is sent the name.
    public var resolvesLocally: Bool

    public init(configuration: ProxyConfiguration, resolvesLocally: Bool) {
        self.configuration = configuration
        self.resolvesLocally = resolvesLocally
    }

    /// The route for `url`: nil when no proxy applies.
    /// - Parameters:
    ///   - proxy: the `-x`/`--socks*` value (`[scheme://][user[:password]@]host[:port]`); nil: none given.
    ///   - proxyUser: `-U user[:password]`.
    ///   - noProxy: `--noproxy LIST`; overrides the environment's.
    ///   - environment: where `*_proxy` and `NO_PROXY` are read from; nil ignores the environment.
    /// - Throws: `StreamGetUsageError` for a proxy string that cannot be used.
    public static func route(
        for url: HTTPURL, proxy: String?, proxyUser: String?, noProxy: String?,
        environment: [String: String]?
    ) throws(StreamGetUsageError) -> StreamGetProxyRoute? {
        var chosen = proxy
        if chosen == nil, let environment {
            let names = url.secure ? ["https_proxy", "HTTPS_PROXY"] : ["http_proxy"]  // curl: no HTTP_PROXY (CGI)
            chosen = (names + ["all_proxy", "ALL_PROXY"]).lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        guard let chosen else { return nil }
        let exclusions = noProxy ?? environment.flatMap { $0["no_proxy"] ?? $0["NO_PROXY"] }
        if let exclusions, excludes(exclusions, host: url.host) { return nil }
        var route = try parse(chosen)
        if let proxyUser {
            let parts = proxyUser.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            route.configuration.username = String(parts[0])
            route.configuration.password = parts.count > 1 ? String(parts[1]) : nil
        }
        return route
    }

    /// Parses `[scheme://][user[:password]@]host[:port][/]`; the scheme defaults to http, the port to
    /// 1080 (as curl does).
    package static func parse(_ text: String) throws(StreamGetUsageError) -> StreamGetProxyRoute {
        func invalid(_ why: String) -> StreamGetUsageError { StreamGetUsageError("invalid proxy \"\(text)\": \(why)") }
        var rest = Substring(text)
        var scheme = "http"
        if let separator = rest.firstRange(of: "://") {
            scheme = rest[..<separator.lowerBound].lowercased()
            rest = rest[separator.upperBound...]
        }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let parts = userInfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let user = percentDecoded(parts[0]), let pass = parts.count > 1 ? percentDecoded(parts[1]) : "" else {
                throw invalid("bad percent-encoding in the user name or password")
            }
            username = user
            password = parts.count > 1 ? pass : nil
        }
        let endpoint: HTTPURL
        do {
            endpoint = try HTTPURL(parsing: "http://" + rest)
        } catch {
            throw invalid("\(error)")
        }
        guard endpoint.path == "/" else { throw invalid("a proxy has no path") }
        // HTTPURL fills in 80 when the authority has no port; a proxy's default is 1080. (Comparing the text's
        // end with ":\(port)" took "host:08000" for a proxy without a port, and so used 1080.)
        let port = endpoint.hasExplicitPort ? endpoint.port : 1080
        let kind: ProxyConfiguration.Kind
        let resolvesLocally: Bool
        switch scheme {
        case "http": (kind, resolvesLocally) = (.httpConnect, false)
        case "socks4": (kind, resolvesLocally) = (.socks4, true)
        case "socks4a": (kind, resolvesLocally) = (.socks4, false)
        case "socks5": (kind, resolvesLocally) = (.socks5, true)
        case "socks5h": (kind, resolvesLocally) = (.socks5, false)
        case "https": throw invalid("HTTPS proxies (TLS to the proxy) are not supported; use http://")
        default: throw invalid("unknown scheme \"\(scheme)\": expected http, socks4, socks4a, socks5 or socks5h")
        }
        return StreamGetProxyRoute(
            configuration: ProxyConfiguration(kind: kind, host: endpoint.host, port: port, username: username, password: password),
            resolvesLocally: resolvesLocally)
    }

    /// curl's `NO_PROXY` rule: `*` matches every host; otherwise a comma-separated list of names (a leading
    /// dot ignored) matching the host or any host under it, or addresses matching exactly.
    static func excludes(_ list: String, host: String) -> Bool {
        let host = host.lowercased()
        for item in list.split(separator: ",") {
            var entry = item.trimmingCharacters(in: .whitespaces).lowercased()
            if entry == "*" { return true }
            if entry.hasPrefix("[") && entry.hasSuffix("]") { entry = String(entry.dropFirst().dropLast()) }
            if entry.hasPrefix(".") { entry.removeFirst() }
            guard !entry.isEmpty else { continue }
            if host == entry || host.hasSuffix("." + entry) { return true }
        }
        return false
    }

    private static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next(), let low = iterator.next(),
                    let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// Resolves `host` here (curl's `--socks4`/`--socks5`): the first address of `family`
    /// (`AF_INET` for SOCKS4, `AF_UNSPEC` otherwise), as text.
    static func resolveLocally(_ host: String, family: Int32) -> String? {
        var hints = addrinfo()
        hints.ai_family = family
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return nil }
        defer { freeaddrinfo(list) }
        var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        guard
            getnameinfo(
                first.pointee.ai_addr, first.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0,
                NI_NUMERICHOST) == 0
        else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension StreamGetProxyRoute {
    /// Resolves `host` as the pair is about to, only to time the lookup for `-w`'s `time_namelookup` (the pair
    /// reports no event when its own lookup ends); the pair still resolves the name itself and tries every address.
    static func timeLookup(of host: String) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        if getaddrinfo(host, nil, &hints, &list) == 0 { freeaddrinfo(list) }
    }
}
