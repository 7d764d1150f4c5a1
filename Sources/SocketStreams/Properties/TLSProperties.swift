// TLS as properties: kCFStreamPropertySocketSecurityLevel, kCFStreamPropertySSLSettings and the typed
// TLSSettings all land in one TLSSettings value (`Connection.set(.tls(…))`), with the property as set kept
// beside it for reading back. Set before TCP is up (before open, or while connecting), TLS runs after
// the proxy stage (if any), before the stream is live; set on a live plain pair, it starts in place
// (STARTTLS). Once a TLS handshake has started, the settings cannot change (setProperty returns
// false), as CFNetwork refuses once its context is past idle.

import Foundation

extension Connection {
    /// `kCFStreamPropertySocketSecurityLevel`: what was set, or after the handshake what was
    /// negotiated (`kCFStreamSocketSecurityLevelTLSv1` for any TLS version: CFNetwork has no level
    /// names for 1.2 and 1.3; `tlsConnectionInfoKey` tells the exact version). Lock held.
    func securityLevelProperty() -> AnyObject? {
        if activeTLS != nil { return kCFStreamSocketSecurityLevelTLSv1 }
        return settings.tlsAsSet[kCFStreamPropertySocketSecurityLevel as String]
    }

    /// Lock held, as for every setter below.
    func setSecurityLevel(_ value: AnyObject?) -> Bool {
        guard let level = SecurityLevel(value) else { return false }
        guard level != .none else { return set(.tls(nil, asSet: TLSAsSet.level(kCFStreamSocketSecurityLevelNone as String))) }
        var tls = settings.tls ?? TLSSettings()
        level.apply(to: &tls)
        var asSet = settings.tlsAsSet
        asSet[kCFStreamPropertySocketSecurityLevel as String] = NSString(string: level.rawValue)
        return set(.tls(tls, asSet: asSet))
    }

    func setSSLSettings(_ value: AnyObject?) -> Bool {
        guard let value, !(value is NSNull) else { return set(.tls(nil, asSet: [:])) }
        guard let dictionary = SSLSettingsDictionary.parse(value) else { return false }
        var asSet = TLSAsSet.level(dictionary.level.rawValue)
        asSet[kCFStreamPropertySSLSettings as String] = value
        return set(.tls(dictionary.settings, asSet: asSet))
    }

    func setTypedTLSSettings(_ value: AnyObject?) -> Bool {
        guard let value else { return set(.tls(nil, asSet: [:])) }
        guard let tls = value as? TLSSettings else { return false }
        return set(.tls(tls, asSet: TLSAsSet.level(kCFStreamSocketSecurityLevelNegotiatedSSL as String)))
    }

    /// `kCFStreamPropertySSLPeerCertificates`: the peer's certificates, DER, leaf first. Lock held.
    func peerCertificatesProperty() -> AnyObject? {
        guard let info = activeTLS?.info else { return nil }
        return info.peerCertificates.map { NSData(data: $0) } as NSArray
    }
}

/// The TLS properties as set, for reading back.
enum TLSAsSet {
    /// Only a security level.
    static func level(_ level: String) -> [String: AnyObject] {
        [kCFStreamPropertySocketSecurityLevel as String: NSString(string: level)]
    }
}

/// `kCFStreamPropertySocketSecurityLevel` values, in Darwin's and swift-corelibs' spellings.
enum SecurityLevel: String {
    case none = "kCFStreamSocketSecurityLevelNone"
    case sslV2 = "kCFStreamSocketSecurityLevelSSLv2"
    case sslV3 = "kCFStreamSocketSecurityLevelSSLv3"
    case tlsV1 = "kCFStreamSocketSecurityLevelTLSv1"
    case tlsV1SSLv3 = "kCFStreamSocketSecurityLevelTLSv1SSLv3"
    case negotiatedSSL = "kCFStreamSocketSecurityLevelNegotiatedSSL"

    init?(_ value: AnyObject?) {
        let text: String?
        if let level = value as? StreamSocketSecurityLevel {
            text = level.rawValue
        } else {
            text = value as? String
        }
        guard let text else { return nil }
        switch text {
        case "NSStreamSocketSecurityLevelSSLv2": self = .sslV2  // swift-corelibs' raw values
        case "NSStreamSocketSecurityLevelSSLv3": self = .sslV3
        default:
            guard let level = SecurityLevel(rawValue: text) else { return nil }
            self = level
        }
    }

    /// Sets the versions a level allows. SSLv2/SSLv3 cannot be honoured: the handshake will fail
    /// with a protocol-version error rather than silently offer TLS.
    func apply(to settings: inout TLSSettings) {
        switch self {
        case .none: break
        case .sslV2, .sslV3: settings.refusedLevel = rawValue
        case .tlsV1, .tlsV1SSLv3, .negotiatedSSL:
            settings.refusedLevel = nil
            settings.minimumVersion = .v1_2
        }
    }
}

/// The `kCFStreamPropertySSLSettings` dictionary, read into TLSSettings.
struct SSLSettingsDictionary {
    var settings = TLSSettings()
    var level = SecurityLevel.negotiatedSSL

    /// Nil when the value is not a dictionary or a known key has a value of the wrong type.
    static func parse(_ value: AnyObject) -> SSLSettingsDictionary? {
        guard let dictionary = (value as? [String: Any]) ?? (value as? NSDictionary).flatMap(bridge) else { return nil }
        var result = SSLSettingsDictionary()
        for (key, entry) in dictionary {
            let object = entry as AnyObject
            switch key {
            case kCFStreamSSLLevel:
                guard let level = SecurityLevel(object), level != .none else { return nil }
                result.level = level
            case kCFStreamSSLPeerName:
                if object is NSNull {
                    result.settings.peerName = .none
                } else if let name = object as? String {
                    result.settings.peerName = .name(name)
                } else {
                    return nil
                }
            case kCFStreamSSLValidatesCertificateChain:
                guard let flag = PropertyValue.bool(object) else { return nil }
                result.settings.validatesCertificateChain = flag
            case kCFStreamSSLAllowsExpiredCertificates:
                guard let flag = PropertyValue.bool(object) else { return nil }
                result.settings.allowsExpiredCertificates = flag
            case kCFStreamSSLAllowsExpiredRoots:
                guard let flag = PropertyValue.bool(object) else { return nil }
                result.settings.allowsExpiredRoots = flag
            case kCFStreamSSLAllowsAnyRoot:
                guard let flag = PropertyValue.bool(object) else { return nil }
                result.settings.allowsAnyRoot = flag
            case kCFStreamSSLIsServer:
                guard let flag = PropertyValue.bool(object) else { return nil }
                result.settings.role = flag ? .server : .client
            case kCFStreamSSLCertificates:
                // Darwin: [SecIdentity, SecCertificate…]. Here: a TLSIdentity, alone or first in an array.
                if let identity = object as? TLSIdentity {
                    result.settings.identity = identity
                } else if let array = object as? [Any], let identity = array.first.flatMap({ $0 as AnyObject as? TLSIdentity }) {
                    result.settings.identity = identity
                } else {
                    return nil
                }
            default:
                break  // keys CFNetwork defines for other platforms, or none at all: ignored, as CFNetwork does
            }
        }
        result.level.apply(to: &result.settings)
        return result
    }

    private static func bridge(_ dictionary: NSDictionary) -> [String: Any]? {
        var result: [String: Any] = [:]
        for (key, value) in dictionary {
            guard let key = key as? String else { return nil }
            result[key] = value
        }
        return result
    }
}
