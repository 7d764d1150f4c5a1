// Proxies as properties: CFNetwork's kCFStreamPropertySOCKSProxy dictionary, the CONNECT SPI
// dictionary and the typed ProxyConfiguration all land in one ProxyConfiguration
// (`Connection.set(.proxy(…))`), with the property as set kept beside it for reading back. Set before open
// only (CFNetwork refuses once the stream is opening), on pairs created for a host and port. What the
// proxy will be sent is checked before it is accepted (`ProxyValidation`), so a bad value is `false`
// from setProperty, not a request with a header injected or a name cut short.

import Foundation

extension Connection {
    /// `kCFStreamPropertySOCKSProxy`, `kCFStreamPropertyCONNECTProxy`, `proxyConfigurationKey`: what
    /// was set. Lock held, as for every setter below.
    func proxyPropertyValue(forKey key: String) -> AnyObject? {
        if key == Stream.PropertyKey.proxyConfigurationKey.rawValue { return settings.proxy.map { $0 as AnyObject } }
        return settings.proxyAsSet[key]
    }

    func setSOCKSProxy(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return set(.proxy(nil, asSet: [:])) }
        switch ProxyDictionary.socks(value, target: target) {
        case .invalid: return false
        case .disabled: return set(.proxy(nil, asSet: [:]))
        case .proxy(let configuration):
            return set(.proxy(configuration, asSet: [kCFStreamPropertySOCKSProxy as String: value]))
        }
    }

    func setCONNECTProxy(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return set(.proxy(nil, asSet: [:])) }
        guard let configuration = ProxyDictionary.connect(value) else { return false }
        return set(.proxy(configuration, asSet: [kCFStreamPropertyCONNECTProxy as String: value]))
    }

    func setTypedProxy(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return set(.proxy(nil, asSet: [:])) }
        guard let configuration = value as? ProxyConfiguration else { return false }
        return set(.proxy(configuration, asSet: [:]))
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
