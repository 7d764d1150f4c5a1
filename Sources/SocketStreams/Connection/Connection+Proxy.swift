// Proxies as properties: CFNetwork's kCFStreamPropertySOCKSProxy dictionary, the CONNECT SPI
// dictionary and our typed ProxyConfiguration all land in one ProxyConfiguration. Set before open only
// (CFNetwork refuses once the stream is opening), on pairs created for a host and port. Everything the
// proxy will be sent is checked here, so a bad value is `false` from setProperty, not a request with a
// header injected or a name cut short.

import Foundation
import HTTPParsing

extension Connection {
    /// Applies a proxy (nil: none) and remembers the property as set. Lock held.
    func setProxy(_ configuration: ProxyConfiguration?, property: (key: String, value: AnyObject)?) -> Bool {
        lock.assertHeld()
        guard case .idle = phase, let proxyTarget = ProxyTarget(target) else { return false }
        if let configuration {
            guard ProxyValidation.accepts(configuration, target: proxyTarget) else { return false }
        }
        proxy = configuration
        self.proxyTarget = configuration == nil ? nil : proxyTarget
        proxyProperty = configuration == nil ? nil : property
        return true
    }

    /// `kCFStreamPropertySOCKSProxy`, `kCFStreamPropertyCONNECTProxy`, `proxyConfigurationKey`: what was set.
    func proxyPropertyValue(forKey key: String) -> AnyObject? {
        if key == Stream.PropertyKey.proxyConfigurationKey.rawValue { return proxy.map { $0 as AnyObject } }
        guard let stored = proxyProperty, stored.key == key else { return nil }
        return stored.value
    }

    func setSOCKSProxy(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return setProxy(nil, property: nil) }
        switch ProxyDictionary.socks(value, target: target) {
        case .invalid: return false
        case .disabled: return setProxy(nil, property: nil)
        case .proxy(let configuration):
            return setProxy(configuration, property: (kCFStreamPropertySOCKSProxy as String, value))
        }
    }

    func setCONNECTProxy(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return setProxy(nil, property: nil) }
        guard let configuration = ProxyDictionary.connect(value) else { return false }
        return setProxy(configuration, property: (kCFStreamPropertyCONNECTProxy as String, value))
    }

    func setTypedProxy(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return setProxy(nil, property: nil) }
        guard let configuration = value as? ProxyConfiguration else { return false }
        return setProxy(configuration, property: nil)
    }
}

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

/// CFNetwork's proxy dictionaries, read into a ProxyConfiguration.
enum ProxyDictionary {
    enum SOCKSResult {
        case invalid
        /// `SOCKSEnable` = 0: no proxy.
        case disabled
        case proxy(ProxyConfiguration)
    }

    /// `kCFStreamPropertySOCKSProxy`: keys as CF raw strings (`SOCKSProxy`, `SOCKSPort`, …), Foundation on
    /// Linux's (`NSStreamSOCKSProxyKey`, `NSStreamSOCKSPortKey`) or `StreamSOCKSProxyConfiguration`s;
    /// SystemConfiguration's `SOCKSEnable`, `ExceptionsList` and `ExcludeSimpleHostnames` as CFNetwork
    /// reads them. Other keys are ignored.
    static func socks(_ value: AnyObject, target: Endpoint) -> SOCKSResult {
        guard let entries = entries(value) else { return .invalid }
        var host: String?
        var port = 1080
        var kind = ProxyConfiguration.Kind.socks5
        var user: String?
        var password: String?
        for (key, entry) in entries {
            switch key {
            case kCFStreamPropertySOCKSProxyHost, StreamSOCKSProxyConfiguration.hostKey.rawValue:
                guard let text = string(entry) else { return .invalid }
                host = text
            case kCFStreamPropertySOCKSProxyPort, StreamSOCKSProxyConfiguration.portKey.rawValue:
                guard let number = PropertyValue.integer(entry) else { return .invalid }
                port = number
            case kCFStreamPropertySOCKSVersion:
                let version = (entry as? StreamSOCKSProxyVersion)?.rawValue ?? string(entry)
                switch version {
                case kCFStreamSocketSOCKSVersion4: kind = .socks4
                case kCFStreamSocketSOCKSVersion5: kind = .socks5
                default: return .invalid
                }
            case kCFStreamPropertySOCKSUser:
                guard let text = string(entry) else { return .invalid }
                user = text
            case kCFStreamPropertySOCKSPassword:
                guard let text = string(entry) else { return .invalid }
                password = text
            case "SOCKSEnable":
                guard let enabled = PropertyValue.flag(entry) else { return .invalid }
                if !enabled { return .disabled }
            case "ExceptionsList":
                guard let list = entry as? [Any] else { return .invalid }
                let patterns = list.compactMap(string)
                guard patterns.count == list.count else { return .invalid }
                if case .host(let name, _) = target, patterns.contains(where: { matches(name, exception: $0) }) {
                    return .invalid  // CFNetwork: set returns false when the target is excluded
                }
            case "ExcludeSimpleHostnames":
                guard let exclude = PropertyValue.flag(entry) else { return .invalid }
                if exclude, case .host(let name, _) = target, SocketAddress(numericHost: name, port: 0) == nil,
                    !name.contains(".")
                {
                    return .invalid
                }
            default:
                break
            }
        }
        guard let host else { return .invalid }
        return .proxy(ProxyConfiguration(kind: kind, host: host, port: port, username: user, password: password))
    }

    /// `kCFStreamPropertyCONNECTProxy`: host, port (both required) and additional header fields.
    static func connect(_ value: AnyObject) -> ProxyConfiguration? {
        guard let entries = entries(value) else { return nil }
        var host: String?
        var port: Int?
        var headers: [(name: String, value: String)] = []
        for (key, entry) in entries {
            switch key {
            case kCFStreamPropertyCONNECTProxyHost:
                guard let text = string(entry) else { return nil }
                host = text
            case kCFStreamPropertyCONNECTProxyPort:
                guard let number = PropertyValue.integer(entry) else { return nil }
                port = number
            case kCFStreamPropertyCONNECTAdditionalHeaders:
                guard let fields = self.entries(entry as AnyObject) else { return nil }
                for (name, fieldValue) in fields.sorted(by: { $0.key < $1.key }) {
                    guard let text = string(fieldValue) else { return nil }
                    headers.append((name, text))
                }
            default:
                break
            }
        }
        guard let host, let port else { return nil }
        return ProxyConfiguration(kind: .httpConnect, host: host, port: port, additionalHeaders: headers)
    }

    /// A dictionary's entries with its keys as strings (String, NSString, or a Foundation key struct).
    private static func entries(_ value: AnyObject) -> [String: Any]? {
        guard let dictionary = value as? [AnyHashable: Any] else { return nil }
        var result: [String: Any] = [:]
        for (key, entry) in dictionary {
            if let text = key.base as? String {
                result[text] = entry
            } else if let socksKey = key.base as? StreamSOCKSProxyConfiguration {
                result[socksKey.rawValue] = entry
            } else {
                return nil
            }
        }
        return result
    }

    private static func string(_ value: Any) -> String? {
        if let text = value as? String { return text }
        if let text = value as? NSString { return String(text) }
        return nil
    }

    /// SystemConfiguration's exception patterns: an exact host, or `*.suffix` / `.suffix`.
    private static func matches(_ host: String, exception pattern: String) -> Bool {
        let host = host.lowercased()
        let pattern = pattern.lowercased()
        if pattern.hasPrefix("*.") { return host.hasSuffix(String(pattern.dropFirst())) }
        if pattern.hasPrefix(".") { return host.hasSuffix(pattern) }
        return host == pattern
    }
}
