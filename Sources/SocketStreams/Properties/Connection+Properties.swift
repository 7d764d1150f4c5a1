// The two key switches: `CFReadStreamCopyProperty`/`CFReadStreamSetProperty` (and the write
// stream's, and Foundation's `property(forKey:)`/`setProperty(_:forKey:)`) for every key a socket
// stream pair knows, mapped onto the connection's typed settings. Both streams of a pair share one
// property set.

import Foundation

extension Connection {
    /// `CFReadStreamCopyProperty` / `CFWriteStreamCopyProperty` for the keys socket streams know.
    func property(forKey key: String) -> AnyObject? {
        lock.withLock {
            switch key {
            case kCFStreamPropertySocketNativeHandle:
                guard let fd = nativeDescriptorLocked else { return nil }
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
                if let closesNativeSocketAsSet { return NSNumber(value: closesNativeSocketAsSet) }
                if case .native = target { return NSNumber(value: false) }
                return nil
            case Stream.PropertyKey.connectTimeoutKey.rawValue:
                return settings.connectTimeout.map { NSNumber(value: $0) }
            case Stream.PropertyKey.tcpNoDelayKey.rawValue:
                return noDelay.map { NSNumber(value: $0) }
            case kCFStreamNetworkServiceType:
                return settings.trafficClassAsSet.map { NSString(string: $0) }
            case Stream.PropertyKey.localBindingKey.rawValue:
                return settings.localBinding.map { $0 as AnyObject }
            case Stream.PropertyKey.tcpFastOpenKey.rawValue:
                return settings.fastOpen ? NSNumber(value: true) : nil
            case Stream.PropertyKey.shutdownOutputKey.rawValue:
                return NSNumber(value: options?.outputShutDown ?? false)
            case kCFStreamPropertySocketSecurityLevel:
                return securityLevelProperty()
            case kCFStreamPropertySSLSettings:
                return settings.tlsAsSet[kCFStreamPropertySSLSettings as String]
            case kCFStreamPropertySSLPeerCertificates:
                return peerCertificatesProperty()
            case Stream.PropertyKey.tlsSettingsKey.rawValue:
                return settings.tls.map { $0 as AnyObject }
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
                setClosesNativeSocket(flag)
            case Stream.PropertyKey.connectTimeoutKey.rawValue:
                guard let seconds = PropertyValue.double(value), seconds >= 0 else { return false }
                return set(.connectTimeout(seconds))
            case Stream.PropertyKey.localBindingKey.rawValue:
                if value == nil || value is NSNull { return set(.localBinding(nil)) }
                guard let binding = value as? LocalBinding else { return false }
                return set(.localBinding(binding))
            case Stream.PropertyKey.tcpNoDelayKey.rawValue:
                guard let flag = PropertyValue.bool(value) else { return false }
                return setNoDelay(flag)
            case Stream.PropertyKey.tcpFastOpenKey.rawValue:
                guard let flag = PropertyValue.bool(value) else { return false }
                return set(.fastOpen(flag))
            case kCFStreamNetworkServiceType:
                if value == nil || value is NSNull { return set(.trafficClass(nil, asSet: nil)) }
                guard let known = NetworkServiceType(value) else { return false }
                return set(.trafficClass(known.trafficClass, asSet: known.name))
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

extension Connection {
    /// The descriptor `kCFStreamPropertySocketNativeHandle` holds: the connection's socket, or a
    /// native-socket pair's own before it opens; nil otherwise. The package's own layers read it here,
    /// without the property's `NSData` and the `as? Data` bridge back, which cost every read far more
    /// (Benchmarks/results/syscalls.md).
    var nativeDescriptor: Int32? { lock.withLock { nativeDescriptorLocked } }

    /// `nativeDescriptor` with the connection's lock held.
    private var nativeDescriptorLocked: Int32? {
        lock.assertHeld()
        if let socket { return socket.fd }
        if case .native(let native, _) = target { return native }
        return nil
    }
}
