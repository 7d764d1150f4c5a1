import CSocketStreamsShims
import Foundation
import Glibc

extension Connection {
    /// `CFReadStreamCopyProperty` / `CFWriteStreamCopyProperty` for the keys socket streams know.
    func property(forKey key: String) -> AnyObject? {
        lock.withLock {
            switch key {
            case kCFStreamPropertySocketNativeHandle:
                let fd: Int32
                if let socket {
                    fd = socket.fd
                } else if case .native(let native) = target {
                    fd = native
                } else {
                    return nil
                }
                return withUnsafeBytes(of: fd) { Data($0) } as NSData
            case kCFStreamPropertySocketRemoteHostName:
                switch target {
                case .host(let name, _): return NSString(string: name)
                case .unix(let path): return NSString(string: path)
                case .native: return nil
                }
            case kCFStreamPropertySocketRemotePortNumber:
                if case .host(_, let port) = target { return NSNumber(value: port & 0xFFFF) }
                return nil
            case kCFStreamPropertyShouldCloseNativeSocket:
                // Unset on host pairs (nil); native-socket pairs store false, as CFNetwork does.
                if closesNativeSocketWasSet { return NSNumber(value: closesNativeSocket) }
                if case .native = target, !closesNativeSocket { return NSNumber(value: false) }
                return nil
            case Stream.PropertyKey.connectTimeoutKey.rawValue:
                return connectTimeout.map { NSNumber(value: $0) }
            case Stream.PropertyKey.tcpNoDelayKey.rawValue:
                return noDelay.map { NSNumber(value: $0) }
            case kCFStreamPropertySocketSecurityLevel:
                return securityLevelProperty()
            case kCFStreamPropertySSLSettings:
                return tlsDictionary
            case kCFStreamPropertySSLPeerCertificates:
                return peerCertificatesProperty()
            case Stream.PropertyKey.tlsSettingsKey.rawValue:
                return tlsSettings.map { $0 as AnyObject }
            case Stream.PropertyKey.tlsConnectionInfoKey.rawValue:
                return activeTLS?.info.map { $0 as AnyObject }
            case kCFStreamPropertySOCKSProxy, kCFStreamPropertyCONNECTProxy, Stream.PropertyKey.proxyConfigurationKey.rawValue:
                return proxyPropertyValue(forKey: key)
            default:
                return nil
            }
        }
    }

    /// `CFReadStreamSetProperty` / `CFWriteStreamSetProperty`. Returns false for keys this stream
    /// does not support and for values of the wrong type; nothing is ever accepted and ignored.
    func setProperty(_ value: AnyObject?, forKey key: String) -> Bool {
        lock.withLock {
            switch key {
            case kCFStreamPropertyShouldCloseNativeSocket:
                guard let flag = PropertyValue.bool(value) else { return false }
                closesNativeSocket = flag
                closesNativeSocketWasSet = true
                socket?.closesOnRelease = flag
            case Stream.PropertyKey.connectTimeoutKey.rawValue:
                guard case .idle = phase, let seconds = PropertyValue.double(value), seconds >= 0 else { return false }
                connectTimeout = seconds
            case Stream.PropertyKey.tcpNoDelayKey.rawValue:
                guard let flag = PropertyValue.bool(value) else { return false }
                if case .unix = target { return false }
                noDelay = flag
                if let socket {
                    try? Posix.setOption(socket.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: flag ? 1 : 0)
                }
            case kCFStreamPropertySocketSecurityLevel:
                return setSecurityLevel(value)
            case kCFStreamPropertySSLSettings:
                return setSSLSettings(value)
            case Stream.PropertyKey.tlsSettingsKey.rawValue:
                return setTypedTLSSettings(value)
            case kCFStreamPropertySOCKSProxy:
                return setSOCKSProxy(value)
            case kCFStreamPropertyCONNECTProxy:
                return setCONNECTProxy(value)
            case Stream.PropertyKey.proxyConfigurationKey.rawValue:
                return setTypedProxy(value)
            default:
                return false
            }
            return true
        }
    }
}

/// Reads property values in any of the boxings Swift code on Linux produces (NSNumber, a bridged
/// Swift number or Bool, NSString/String).
enum PropertyValue {
    static func bool(_ value: AnyObject?) -> Bool? {
        if let flag = value as? Bool { return flag }
        if let number = value as? NSNumber { return number.boolValue }
        if let text = value as? String {
            switch text.lowercased() {
            case "true", "yes", "1": return true
            case "false", "no", "0": return false
            default: return nil  // "maybe" is not a Bool: refuse it rather than guess
            }
        }
        return nil
    }

    static func double(_ value: AnyObject?) -> Double? {
        if let number = value as? Double { return number }
        if let number = value as? Int { return Double(number) }
        if let number = value as? NSNumber { return number.doubleValue }
        return nil
    }
}
