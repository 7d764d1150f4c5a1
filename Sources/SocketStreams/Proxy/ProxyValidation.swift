// What a proxy means for a pair: its target as the proxy is asked for it, and what a configuration
// must satisfy before anything is sent.

import HTTPParsing

extension ProxyTarget {
    /// The pair's target as a proxy is asked for it; nil for Unix paths, native sockets and a port
    /// outside 0...65535 (never masked: such a pair fails at open, see `PortNumber`).
    init?(_ endpoint: Endpoint) {
        guard case .host(let name, let port) = endpoint, let port16 = UInt16(exactly: port) else { return nil }
        let bare = name.hasPrefix("[") && name.hasSuffix("]") ? String(name.dropFirst().dropLast()) : name
        if let numeric = SocketAddress(numericHost: bare, port: Int(port16)) {
            let bytes = numeric.addressBytes
            self.init(address: bytes.count == 4 ? .ipv4(bytes) : .ipv6(bytes), port: port16, host: bare)
        } else {
            self.init(address: .name(name), port: port16, host: name)
        }
    }
}

/// What a proxy configuration must satisfy before anything is sent.
enum ProxyValidation {
    static func accepts(_ configuration: ProxyConfiguration, target proxyTarget: ProxyTarget) -> Bool {
        guard !configuration.host.isEmpty, isPrintable(configuration.host), PortNumber.isDialable(configuration.port)
        else { return false }
        let user = Array((configuration.username ?? "").utf8)
        let password = Array((configuration.password ?? "").utf8)
        if case .name(let name) = proxyTarget.address, !HTTPSyntax.isHostName(name) { return false }
        switch configuration.kind {
        case .socks4:
            // No IPv6 in SOCKS4; the USERID is NUL-terminated.
            if case .ipv6 = proxyTarget.address { return false }
            return !user.contains(0) && user.count <= 512 && configuration.additionalHeaders.isEmpty
        case .socks5:
            // RFC 1928/1929: one length byte each for the name, the username and the password.
            if case .name(let name) = proxyTarget.address, name.utf8.count > 255 { return false }
            return user.count <= 255 && password.count <= 255 && configuration.additionalHeaders.isEmpty
        case .httpConnect:
            // Basic credentials cannot hold a colon in the user-id (RFC 7617); no field may break the head.
            guard !user.contains(UInt8(ascii: ":")), isFieldValue(user), isFieldValue(password) else { return false }
            return configuration.additionalHeaders.allSatisfy { HTTPSyntax.isToken($0.name) && isFieldValue(Array($0.value.utf8)) }
        }
    }

    private static func isPrintable(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F }
    }

    private static func isFieldValue(_ bytes: [UInt8]) -> Bool {
        bytes.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }
    }
}
