// RFC 6455's opening handshake as plain values (tested in `WebSocketHandshakeTests`): the client's
// GET with Upgrade and its `Sec-WebSocket-Key`, the server's 101 with `Sec-WebSocket-Accept`
// (base64(SHA-1(key + GUID)), SHA-1 from OpenSSL), a rejection (400), and the checks each side makes
// of the other's head (permessage-deflate's parameters in WebSocketDeflate.swift). HTTP heads are parsed here only as far as the handshake needs: a start line and
// header fields, at most `maximumHeadLength` bytes.

import COpenSSL
import Foundation

enum WebSocketHandshake {
    static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    /// A handshake head longer than this fails the handshake.
    static let maximumHeadLength = 16_384

    /// The fields the handshake itself uses: not "additional" headers on either side.
    static let handshakeFields: Set<String> = [
        "host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version", "sec-websocket-protocol",
        "sec-websocket-extensions", "sec-websocket-accept",
    ]

    /// `Sec-WebSocket-Accept` for a client's key: base64(SHA-1(key + GUID)).
    static func accept(forKey key: String) -> String {
        let input = Array((key + guid).utf8)
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        _ = EVP_Digest(input, input.count, &digest, &length, EVP_sha1(), nil)
        return Data(digest.prefix(Int(length))).base64EncodedString()
    }

    /// A new `Sec-WebSocket-Key`: 16 random bytes, base64.
    static func randomKey() -> String {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
    }

    /// A client's opening request.
    static func request(
        host: String, path: String, key: String, subprotocols: [String], additionalHeaders: [(name: String, value: String)]
    ) -> Data {
        var lines = [
            "GET \(path.isEmpty ? "/" : path) HTTP/1.1", "Host: \(host)", "Upgrade: websocket", "Connection: Upgrade",
            "Sec-WebSocket-Key: \(key)", "Sec-WebSocket-Version: 13",
        ]
        if !subprotocols.isEmpty { lines.append("Sec-WebSocket-Protocol: \(subprotocols.joined(separator: ", "))") }
        lines += additionalHeaders.map { "\($0.name): \($0.value)" }
        return Data((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
    }

    /// A server's 101 accepting a client whose key was `key`.
    static func response(
        key: String, subprotocol: String?, extensions: String? = nil, additionalHeaders: [(name: String, value: String)]
    ) -> Data {
        var lines = [
            "HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
            "Sec-WebSocket-Accept: \(accept(forKey: key))",
        ]
        if let subprotocol { lines.append("Sec-WebSocket-Protocol: \(subprotocol)") }
        if let extensions { lines.append("Sec-WebSocket-Extensions: \(extensions)") }
        lines += additionalHeaders.map { "\($0.name): \($0.value)" }
        return Data((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
    }

    /// A server's refusal (what Apple's server sends when its request handler rejects): 400, then the
    /// connection closes.
    static func rejection(additionalHeaders: [(name: String, value: String)] = []) -> Data {
        let lines =
            ["HTTP/1.1 400 Bad Request", "Connection: close", "Content-Length: 0"] + additionalHeaders.map { "\($0.name): \($0.value)" }
        return Data((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)
    }

    /// An HTTP head: its start line and fields, in order.
    struct Head {
        let startLine: String
        let fields: [(name: String, value: String)]

        /// The value of the field named `name` (case-insensitively), fields of that name joined by ", ".
        func field(_ name: String) -> String? {
            let values = fields.filter { $0.name.lowercased() == name }.map(\.value)
            return values.isEmpty ? nil : values.joined(separator: ", ")
        }

        /// The comma-separated tokens of a field, trimmed.
        func tokens(_ name: String) -> [String] {
            (field(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }

        /// The fields that are not the handshake's own.
        var additionalFields: [(name: String, value: String)] {
            fields.filter { !WebSocketHandshake.handshakeFields.contains($0.name.lowercased()) }
        }
    }

    /// The length of the head at the start of `bytes`, through its empty line; nil while it is
    /// incomplete.
    static func headLength(in bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4)
        where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index + 4
        }
        return nil
    }

    /// Parses a head (through its empty line); nil if it is not one.
    static func parseHead(_ bytes: some Collection<UInt8>) -> Head? {
        guard let text = String(bytes: bytes, encoding: .utf8) ?? String(bytes: bytes, encoding: .isoLatin1) else { return nil }
        var lines = text.components(separatedBy: "\r\n")
        while lines.last == "" { lines.removeLast() }
        guard let startLine = lines.first, !startLine.isEmpty else { return nil }
        var fields: [(name: String, value: String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty else { return nil }
            fields.append((name, line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        return Head(startLine: startLine, fields: fields)
    }

    /// What a client learns from a server's accepting response.
    struct Accepted {
        let subprotocol: String?
        let additionalHeaders: [(name: String, value: String)]
        /// permessage-deflate's parameters if the server accepted the client's offer.
        var deflate: WebSocketDeflate.Parameters?
    }

    /// Checks a server's response to a request sent with `key` offering `offered` and the
    /// permessage-deflate `deflateOffers`: 101, Upgrade and Connection, the right accept, a subprotocol
    /// among those offered, no extension but permessage-deflate when offered, with valid parameters.
    static func check(
        response head: Head, key: String, offered: [String], deflateOffers: [WebSocketDeflate.Parameters] = []
    ) -> Accepted? {
        let parts = head.startLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1] == "101" else { return nil }
        guard head.tokens("upgrade").contains(where: { $0.lowercased() == "websocket" }),
            head.tokens("connection").contains(where: { $0.lowercased() == "upgrade" }),
            head.field("sec-websocket-accept") == accept(forKey: key),
            case .success(let deflate) = WebSocketDeflate.check(response: head.field("sec-websocket-extensions"), offers: deflateOffers)
        else { return nil }
        let subprotocol = head.field("sec-websocket-protocol")
        if let subprotocol, !offered.contains(subprotocol) { return nil }
        return Accepted(subprotocol: subprotocol, additionalHeaders: head.additionalFields, deflate: deflate)
    }

    /// What a server learns from a client's request.
    struct Requested {
        let key: String
        let target: String
        let subprotocols: [String]
        let additionalHeaders: [(name: String, value: String)]
        /// The client's `Sec-WebSocket-Extensions`, if any.
        var extensions: String?
    }

    /// Checks a client's opening request: GET over HTTP/1.1, Upgrade and Connection, version 13, a key
    /// of 16 bytes.
    static func check(request head: Head) -> Requested? {
        let parts = head.startLine.split(separator: " ")
        guard parts.count == 3, parts[0] == "GET", parts[2] == "HTTP/1.1" else { return nil }
        guard head.tokens("upgrade").contains(where: { $0.lowercased() == "websocket" }),
            head.tokens("connection").contains(where: { $0.lowercased() == "upgrade" }),
            head.field("sec-websocket-version") == "13",
            let key = head.field("sec-websocket-key"), Data(base64Encoded: key)?.count == 16
        else { return nil }
        return Requested(
            key: key, target: String(parts[1]), subprotocols: head.tokens("sec-websocket-protocol"),
            additionalHeaders: head.additionalFields, extensions: head.field("sec-websocket-extensions"))
    }
}
