import Foundation
import SocketStreams

/// Bool: the delegate decides whether to trust the server, in
/// ``GCDAsyncSocketDelegate/socket(_:didReceive:completionHandler:)`` (`GCDAsyncSocketManuallyEvaluateTrust`).
public let GCDAsyncSocketManuallyEvaluateTrust = "GCDAsyncSocketManuallyEvaluateTrust"
/// Data: a key for resuming an earlier session with the same peer (`GCDAsyncSocketSSLPeerID`): sessions are
/// then shared only by sockets given the same peer ID. Without one, a client still resumes sessions by host
/// and port (SecureTransport resumes only with a peer ID; the porting guide says why this differs).
public let GCDAsyncSocketSSLPeerID = "GCDAsyncSocketSSLPeerID"
/// NSNumber holding an `SSLProtocol` value: the oldest version (`GCDAsyncSocketSSLProtocolVersionMin`).
/// 4 (TLS 1.0), 7 (TLS 1.1) and 8 (TLS 1.2) mean TLS 1.2 here, the oldest this library offers; 10 TLS 1.3.
public let GCDAsyncSocketSSLProtocolVersionMin = "GCDAsyncSocketSSLProtocolVersionMin"
/// NSNumber holding an `SSLProtocol` value: the newest version (`GCDAsyncSocketSSLProtocolVersionMax`):
/// 8 TLS 1.2, 10 TLS 1.3; older ones cannot be honoured and disconnect with OtherError.
public let GCDAsyncSocketSSLProtocolVersionMax = "GCDAsyncSocketSSLProtocolVersionMax"
/// Bool (`GCDAsyncSocketSSLSessionOptionFalseStart`): accepted and ignored (OpenSSL has no equivalent).
public let GCDAsyncSocketSSLSessionOptionFalseStart = "GCDAsyncSocketSSLSessionOptionFalseStart"
/// Bool (`GCDAsyncSocketSSLSessionOptionSendOneByteRecord`): accepted and ignored.
public let GCDAsyncSocketSSLSessionOptionSendOneByteRecord = "GCDAsyncSocketSSLSessionOptionSendOneByteRecord"
/// Array of NSNumber (IANA cipher suite numbers) (`GCDAsyncSocketSSLCipherSuites`): accepted and
/// ignored; OpenSSL's defaults apply.
public let GCDAsyncSocketSSLCipherSuites = "GCDAsyncSocketSSLCipherSuites"
/// Array of String: the ALPN protocols offered (`GCDAsyncSocketSSLALPN`).
public let GCDAsyncSocketSSLALPN = "GCDAsyncSocketSSLALPN"
/// Bool (`GCDAsyncSocketUseCFStreamForTLS`, iOS): accepted; the one TLS path is used.
public let GCDAsyncSocketUseCFStreamForTLS = "GCDAsyncSocketUseCFStreamForTLS"
/// Data (`GCDAsyncSocketSSLDiffieHellmanParameters`, macOS): accepted and ignored.
public let GCDAsyncSocketSSLDiffieHellmanParameters = "GCDAsyncSocketSSLDiffieHellmanParameters"
/// `kCFStreamSSLPeerName` as a `String` (a C macro on Apple platforms, which Swift cannot see there).
public let GCDAsyncSocketSSLPeerName = kCFStreamSSLPeerName as String
/// `kCFStreamSSLCertificates` as a `String`: a ``TLSIdentity`` (wrapped with
/// ``GCDAsyncSocketIdentity``) or PKCS#12 `Data` with an empty password, alone or first in an array.
public let GCDAsyncSocketSSLCertificates = kCFStreamSSLCertificates as String
/// `kCFStreamSSLIsServer` as a `String`.
public let GCDAsyncSocketSSLIsServer = kCFStreamSSLIsServer as String

/// A ``TLSIdentity`` as an object for `startTLS`'s `[String: NSObject]` dictionary under
/// `kCFStreamSSLCertificates` (where Apple code puts a `SecIdentity`).
public final class GCDAsyncSocketIdentity: NSObject, Sendable {
    /// The identity.
    public let identity: TLSIdentity

    /// Wraps `identity`.
    public init(_ identity: TLSIdentity) {
        self.identity = identity
    }
}

/// `startTLS`'s dictionary, read as GCDAsyncSocket reads it.
enum GCDAsyncSocketTLS {
    struct Parsed {
        var settings: TLSSettings
        var manualTrust: Bool
    }

    static func parse(_ dictionary: [String: NSObject]) throws -> Parsed {
        var settings = TLSSettings()
        // GCDAsyncSocket checks the name only when kCFStreamSSLPeerName is given.
        settings.peerName = .none
        var manualTrust = false
        func invalid(_ key: String) -> GCDAsyncSocketError {
            GCDAsyncSocketError(.otherError, message: "Invalid value for \(key).")
        }
        func bool(_ key: String, _ value: NSObject) throws -> Bool {
            guard let number = value as? NSNumber else { throw invalid(key) }
            return number.boolValue
        }
        let isServerKey = kCFStreamSSLIsServer as String
        let peerNameKey = kCFStreamSSLPeerName as String
        let certificatesKey = kCFStreamSSLCertificates as String
        let refusedKeys: Set<String> = [
            kCFStreamSSLAllowsAnyRoot as String, kCFStreamSSLAllowsExpiredRoots as String,
            kCFStreamSSLAllowsExpiredCertificates as String, kCFStreamSSLValidatesCertificateChain as String,
            kCFStreamSSLLevel as String,
        ]
        for (key, value) in dictionary {
            switch key {
            case isServerKey:
                settings.role = try bool(key, value) ? .server : .client
            case GCDAsyncSocketManuallyEvaluateTrust:
                manualTrust = try bool(key, value)
            case peerNameKey:
                if value is NSNull {
                    settings.peerName = .none
                } else if let name = value as? String {
                    settings.peerName = .name(name)
                } else {
                    throw invalid(key)
                }
            case certificatesKey:
                let first = (value as? NSArray)?.firstObject as? NSObject ?? value
                if let wrapped = first as? GCDAsyncSocketIdentity {
                    settings.identity = wrapped.identity
                } else if let data = first as? Data {
                    settings.identity = TLSIdentity(pkcs12: data, password: "")
                } else {
                    throw invalid(key)
                }
            case GCDAsyncSocketSSLPeerID:
                guard let peerID = value as? Data else { throw invalid(key) }
                settings.sessionPeerID = peerID
            case GCDAsyncSocketSSLProtocolVersionMin:
                guard let number = value as? NSNumber else { throw invalid(key) }
                if number.intValue >= 10 { settings.minimumVersion = .v1_3 } else if number.intValue > 0 { settings.minimumVersion = .v1_2 }
            case GCDAsyncSocketSSLProtocolVersionMax:
                guard let number = value as? NSNumber else { throw invalid(key) }
                switch number.intValue {
                case 0: break
                case 8, 9: settings.maximumVersion = .v1_2
                case 10...: settings.maximumVersion = .v1_3
                default:
                    throw GCDAsyncSocketError(
                        .otherError, message: "Invalid value for \(key): versions older than TLS 1.2 (SSLProtocol 8) are not offered.")
                }
            case GCDAsyncSocketSSLSessionOptionFalseStart, GCDAsyncSocketSSLSessionOptionSendOneByteRecord,
                GCDAsyncSocketUseCFStreamForTLS:
                _ = try bool(key, value)
            case GCDAsyncSocketSSLCipherSuites:
                guard value is NSArray else { throw invalid(key) }
            case GCDAsyncSocketSSLDiffieHellmanParameters:
                guard value is Data || value is NSData else { throw invalid(key) }
            case GCDAsyncSocketSSLALPN:
                guard let array = value as? NSArray else { throw invalid(key) }
                var protocols: [String] = []
                for entry in array {
                    guard let name = entry as? String else { throw invalid(key) }
                    protocols.append(name)
                }
                settings.alpnProtocols = protocols
            case _ where refusedKeys.contains(key):
                // GCDAsyncSocket refuses the options SecureTransport deprecated.
                throw GCDAsyncSocketError(.otherError, message: "Security option unavailable - \(key)")
            default:
                break
            }
        }
        if manualTrust, settings.role == .server {
            throw GCDAsyncSocketError(.otherError, message: "Manual trust validation is not supported for server sockets")
        }
        return Parsed(settings: settings, manualTrust: manualTrust)
    }
}
