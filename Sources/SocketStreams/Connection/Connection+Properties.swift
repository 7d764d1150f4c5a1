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
                } else if case .native(let native, _) = target {
                    fd = native
                } else {
                    return nil
                }
                return withUnsafeBytes(of: fd) { Data($0) } as NSData
            case kCFStreamPropertySocketRemoteHostName:
                switch target {
                case .host(let name, _): return NSString(string: name)
                case .unix(let path): return NSString(string: path)
                case .native(_, let peer): return peer.map { NSString(string: $0.host) }  // accepted: the peer's address
                }
            case kCFStreamPropertySocketRemotePortNumber:
                // As given, never masked: a port outside 0...65535 fails the open (PortNumber).
                switch target {
                case .host(_, let port): return NSNumber(value: port)
                case .native(_, let peer?): return NSNumber(value: peer.port)
                default: return nil
                }
            case kCFStreamPropertyShouldCloseNativeSocket:
                // Unset on host pairs (nil); native-socket pairs store false, as CFNetwork does.
                if closesNativeSocketWasSet { return NSNumber(value: closesNativeSocket) }
                if case .native = target, !closesNativeSocket { return NSNumber(value: false) }
                return nil
            case Stream.PropertyKey.connectTimeoutKey.rawValue:
                return connectTimeout.map { NSNumber(value: $0) }
            case Stream.PropertyKey.tcpNoDelayKey.rawValue:
                return noDelay.map { NSNumber(value: $0) }
            case kCFStreamNetworkServiceType:
                return options?.networkServiceType.map { NSString(string: $0.name) }
            case Stream.PropertyKey.localBindingKey.rawValue:
                return options?.localBinding.map { $0 as AnyObject }
            case Stream.PropertyKey.shutdownOutputKey.rawValue:
                return NSNumber(value: options?.outputShutDown ?? false)
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
        if key == Stream.PropertyKey.shutdownOutputKey.rawValue {
            return PropertyValue.bool(value) == true && shutdownOutput()  // may wait for the socket: not under the lock
        }
        return lock.withLock {
            switch key {
            case kCFStreamPropertyShouldCloseNativeSocket:
                guard let flag = PropertyValue.bool(value) else { return false }
                closesNativeSocket = flag
                closesNativeSocketWasSet = true
                socket?.closesOnRelease = flag
            case Stream.PropertyKey.connectTimeoutKey.rawValue:
                guard case .idle = phase, let seconds = PropertyValue.double(value), seconds >= 0 else { return false }
                connectTimeout = seconds
            case Stream.PropertyKey.localBindingKey.rawValue:
                guard case .idle = phase, case .host = target else { return false }
                if value == nil || value is NSNull {
                    options?.localBinding = nil
                } else {
                    guard let binding = value as? LocalBinding else { return false }
                    someOptions.localBinding = binding
                }
            case Stream.PropertyKey.tcpNoDelayKey.rawValue:
                guard let flag = PropertyValue.bool(value) else { return false }
                if case .unix = target { return false }
                noDelay = flag
                if let socket {
                    try? Posix.setOption(socket.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: flag ? 1 : 0)
                }
            case kCFStreamNetworkServiceType:
                if case .unix = target { return false }
                let serviceType: NetworkServiceType?
                if value == nil || value is NSNull {
                    serviceType = nil
                } else {
                    guard let known = NetworkServiceType(value) else { return false }
                    serviceType = known
                }
                if serviceType != nil || options != nil { someOptions.networkServiceType = serviceType }
                if let socket { (serviceType ?? .standard).apply(to: socket.fd) }
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

/// Reads property values in any of the boxings Swift code on Linux produces (NSNumber, CFBoolean, a
/// bridged Swift number or Bool), and refuses values of another type (nil: setProperty returns false).
///
/// Booleans and numbers are kept apart as CFNetwork keeps them apart (it checks a Boolean with
/// `CFGetTypeID(value) == CFBooleanGetTypeID()`, and a CFNumber is not a CFBoolean): a Boolean-valued
/// key takes a Bool only (Swift `true`, `kCFBooleanTrue`, `NSNumber(value: true)`), never 0, 1 or
/// another number, nor a string such as "true"; a number-valued key never takes a Bool. Only
/// SystemConfiguration's flags, which are CFNumbers there, take a number (`flag`).
enum PropertyValue {
    /// A Boolean, for keys CFNetwork documents as CFBoolean.
    static func bool(_ value: AnyObject?) -> Bool? {
        guard let value, isBoolean(value) else { return nil }
        return (value as? NSNumber)?.boolValue
    }

    /// A number that is not a Bool (`true` is not 1 s).
    static func double(_ value: AnyObject?) -> Double? {
        guard let number = value as? NSNumber, !isBoolean(number) else { return nil }
        return number.doubleValue
    }

    /// An integral number that is not a Bool (1080, not 1080.5, `true` or "1080").
    static func integer(_ value: Any) -> Int? {
        guard !isBoolean(value) else { return nil }
        if let number = value as? NSNumber { return Int(exactly: number.doubleValue) }
        return value as? Int
    }

    /// SystemConfiguration's flags (`SOCKSEnable`, `ExcludeSimpleHostnames`): CFNumbers in its proxy
    /// dictionaries, on when not 0, as CFNetwork reads them; a Bool is taken too. Not a string.
    static func flag(_ value: Any) -> Bool? {
        if let flag = bool(value as AnyObject) { return flag }
        return integer(value).map { $0 != 0 }
    }

    /// Whether `value` is a Boolean rather than a number. On Linux every NSNumber casts to Bool (and
    /// a Bool NSNumber to every number type), so a Bool is told by its type or its `objCType`, "c",
    /// which a CFBoolean and a bridged Bool have and no other number does.
    static func isBoolean(_ value: Any) -> Bool {
        if type(of: value) == Bool.self { return true }
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }
}

extension Connection {
    /// The socket's own address (`getsockname(2)`); nil before it is connected and once it is closed.
    /// Under the lock, so the fd cannot be closed (and its number reused) during the call.
    var localAddress: SocketAddress? {
        lock.withLock { socket.flatMap { try? Posix.localAddress($0.fd) } }
    }
}
