// What the proxy protocols' client (ProxyClientHandshake.swift) is about and fails with: the target as
// the proxy is asked for it, the failures in the proxy's own terms, and Base64 for HTTP Basic credentials.

import HTTPParsing

/// The target as the proxy is asked for it.
package struct ProxyTarget: Sendable, Equatable {
    package enum Address: Sendable, Equatable {
        case ipv4([UInt8])
        case ipv6([UInt8])
        case name(String)
    }

    package var address: Address
    package var port: UInt16
    /// The host as the pair was created with it (an IPv6 literal without brackets).
    package var host: String

    package init(address: Address, port: UInt16, host: String) {
        self.address = address
        self.port = port
        self.host = host
    }

    /// "example.com port 443", as error messages name it.
    package var label: String { "\(host) port \(port)" }

    /// `host:port` as a CONNECT request names it (an IPv6 literal in brackets).
    package var authority: String {
        if case .ipv6 = address { return "[\(host)]:\(port)" }
        return "\(host):\(port)"
    }
}

/// Why a proxy handshake failed, in the proxy's own terms. `ProxyErrors` turns it into CFNetwork's.
package enum ProxyError: Error, Sendable, Equatable {
    /// SOCKS5: the proxy accepted none of the methods offered (it chose 0xFF).
    case noAcceptableMethod(offeredCredentials: Bool)
    /// SOCKS5: the proxy chose a method that was not offered.
    case unexpectedMethod(UInt8)
    /// SOCKS5: the username/password were refused (RFC 1929 status).
    case badCredentials(status: UInt8)
    /// SOCKS5: the CONNECT reply's REP was not 0.
    case socks5Refused(reply: UInt8)
    /// SOCKS5: the reply's address type is not 1, 3 or 4.
    case badAddressType(UInt8)
    /// A reply's version byte is not the protocol's; `phase` says which reply.
    case wrongVersion(got: UInt8, expected: UInt8, phase: Phase)
    /// SOCKS4: the reply's CD was not 90.
    case socks4Rejected(code: UInt8)
    /// HTTP: the proxy answered CONNECT with a status other than 2xx.
    case httpRefused(status: Int, reason: String, head: String)
    /// HTTP: the response is not HTTP, or malformed, or its head too large.
    case httpMalformed(String)
    /// The proxy closed the connection before its reply was complete.
    case closed

    package enum Phase: Sendable, Equatable {
        case methodSelection, authentication, connectReply
    }
}

/// RFC 4648 base64, for Basic credentials.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = Int(bytes[index])
            let b1 = index + 1 < bytes.count ? Int(bytes[index + 1]) : 0
            let b2 = index + 2 < bytes.count ? Int(bytes[index + 2]) : 0
            out.append(alphabet[b0 >> 2])
            out.append(alphabet[(b0 & 3) << 4 | b1 >> 4])
            out.append(index + 1 < bytes.count ? alphabet[(b1 & 15) << 2 | b2 >> 6] : UInt8(ascii: "="))
            out.append(index + 2 < bytes.count ? alphabet[b2 & 63] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
