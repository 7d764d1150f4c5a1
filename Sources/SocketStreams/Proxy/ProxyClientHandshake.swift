// The client side of the proxy protocols as a pure state machine: bytes in, bytes out, no I/O, so
// every reply can be fed split at any byte boundary in tests and fuzzed.
//
// - SOCKS4 (and 4a, for host names): one request, an 8-byte reply.
// - SOCKS5 (RFC 1928): method selection, RFC 1929 username/password when both are given, CONNECT, a
//   reply whose length depends on its address type.
// - HTTP CONNECT (RFC 9110 §9.3.6): one request, a response head parsed by `HTTPResponseParser`.
//
// `wanted` bounds every read: SOCKS replies are read exactly, never a byte past their end, so the
// target's first bytes stay in the socket. An HTTP head has no length known in advance, so the machine
// takes what arrives and hands back the bytes after the head (`leftover`), which the stream then reads
// first.

import HTTPParsing

/// One proxy handshake, as a value: `output` to send, then `wanted` bytes at most to read and `receive`.
package struct ProxyClientHandshake: Sendable {
    package enum State: Sendable, Equatable {
        /// SOCKS5: waiting for the 2-byte method selection.
        case socks5Method
        /// SOCKS5: waiting for the 2-byte RFC 1929 status.
        case socks5Auth
        /// SOCKS5: waiting for the first 5 bytes of the CONNECT reply (VER REP RSV ATYP and the first
        /// address byte, which for ATYP 3 is the name's length).
        case socks5ReplyHead
        /// SOCKS5: waiting for the rest of the reply, this many bytes.
        case socks5ReplyTail(Int)
        /// SOCKS4: waiting for the 8-byte reply.
        case socks4Reply
        /// HTTP: reading the response head.
        case httpHead
        case established
        case failed
    }

    package static let httpMaxHeadSize = 16 * 1024

    package let kind: ProxyConfiguration.Kind
    private let username: [UInt8]
    private let password: [UInt8]
    private let target: ProxyTarget
    package private(set) var state: State
    /// Bytes to send before reading (taken by the driver).
    private(set) var output: [UInt8] = []
    /// The reply bytes gathered for the current state.
    private var reply: [UInt8] = []
    private var http: HTTPResponseParser
    /// HTTP: bytes after the response head, which belong to the stream.
    package private(set) var leftover: [UInt8] = []
    private let offersCredentials: Bool

    package init(configuration: ProxyConfiguration, target: ProxyTarget) {
        kind = configuration.kind
        username = Array((configuration.username ?? "").utf8)
        password = Array((configuration.password ?? "").utf8)
        self.target = target
        http = HTTPResponseParser(maxHeadSize: Self.httpMaxHeadSize, request: .connect)
        offersCredentials = !username.isEmpty && !password.isEmpty
        switch configuration.kind {
        case .socks5:
            state = .socks5Method
            output = offersCredentials ? [5, 2, 0, 2] : [5, 1, 0]
        case .socks4:
            state = .socks4Reply
            output = Self.socks4Request(target, userID: username)
        case .httpConnect:
            state = .httpHead
            output = Self.connectRequest(target, configuration: configuration)
        }
    }

    /// Takes the bytes to send now.
    package mutating func takeOutput() -> [UInt8] {
        defer { output = [] }
        return output
    }

    /// The most bytes the next read may take: exactly what the current SOCKS reply still lacks (0 when
    /// nothing is awaited), or a buffer's worth for an HTTP head.
    package var wanted: Int {
        switch state {
        case .socks5Method, .socks5Auth: return 2 - reply.count
        case .socks5ReplyHead: return 5 - reply.count
        case .socks5ReplyTail(let count): return count - reply.count
        case .socks4Reply: return 8 - reply.count
        case .httpHead: return 4096
        case .established, .failed: return 0
        }
    }

    /// Bytes received (at most `wanted`). The machine may produce `output` or reach `.established`.
    package mutating func receive(_ bytes: UnsafeRawBufferPointer) throws(ProxyError) {
        do {
            try step(bytes)
        } catch {
            state = .failed
            throw error
        }
    }

    /// `receive` for bytes in an array.
    package mutating func receive(_ bytes: ArraySlice<UInt8>) throws(ProxyError) {
        var failure: ProxyError?
        bytes.withUnsafeBytes { raw in
            do throws(ProxyError) {
                try receive(raw)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    /// The proxy closed the connection: an error unless established.
    package mutating func endOfStream() -> ProxyError {
        state = .failed
        return .closed
    }

    private mutating func step(_ bytes: UnsafeRawBufferPointer) throws(ProxyError) {
        if case .httpHead = state { return try stepHTTP(bytes) }
        precondition(bytes.count <= wanted, "read past the proxy's reply")
        reply.append(contentsOf: bytes)
        guard wanted == 0 else { return }
        let complete = reply
        reply.removeAll(keepingCapacity: true)
        switch state {
        case .socks5Method:
            guard complete[0] == 5 else { throw .wrongVersion(got: complete[0], expected: 5, phase: .methodSelection) }
            switch complete[1] {
            case 0:
                output = Self.socks5Connect(target)
                state = .socks5ReplyHead
            case 2 where offersCredentials:
                output = [1, UInt8(username.count)] + username + [UInt8(password.count)] + password
                state = .socks5Auth
            case 0xFF:
                throw .noAcceptableMethod(offeredCredentials: offersCredentials)
            default:
                throw .unexpectedMethod(complete[1])
            }
        case .socks5Auth:
            // RFC 1929 says VER 1; some servers answer with 5. Either is taken; the status decides.
            guard complete[0] == 1 || complete[0] == 5 else {
                throw .wrongVersion(got: complete[0], expected: 1, phase: .authentication)
            }
            guard complete[1] == 0 else { throw .badCredentials(status: complete[1]) }
            output = Self.socks5Connect(target)
            state = .socks5ReplyHead
        case .socks5ReplyHead:
            guard complete[0] == 5 else { throw .wrongVersion(got: complete[0], expected: 5, phase: .connectReply) }
            guard complete[1] == 0 else { throw .socks5Refused(reply: complete[1]) }
            // The bound address and port that follow are read and dropped.
            switch complete[3] {
            case 1: state = .socks5ReplyTail(4 - 1 + 2)
            case 4: state = .socks5ReplyTail(16 - 1 + 2)
            case 3: state = .socks5ReplyTail(Int(complete[4]) + 2)
            default: throw .badAddressType(complete[3])
            }
        case .socks5ReplyTail:
            state = .established
        case .socks4Reply:
            guard complete[0] == 0 else { throw .wrongVersion(got: complete[0], expected: 0, phase: .connectReply) }
            guard complete[1] == 90 else { throw .socks4Rejected(code: complete[1]) }
            state = .established
        case .httpHead, .established, .failed:
            preconditionFailure("no reply expected in \(state)")
        }
    }

    private mutating func stepHTTP(_ bytes: UnsafeRawBufferPointer) throws(ProxyError) {
        let events: [HTTPResponseEvent]
        do {
            events = try http.feed(Array(bytes))
        } catch {
            throw .httpMalformed(error.description)
        }
        for event in events {
            guard case .head(let head) = event else { continue }
            guard (200..<300).contains(head.statusCode) else {
                throw .httpRefused(
                    status: head.statusCode, reason: head.reasonPhrase,
                    head: String(decoding: head.rawBytes, as: UTF8.self))
            }
            leftover = Array(bytes.suffix(http.bytesAfterEnd))
            state = .established
            return
        }
    }

    // MARK: requests

    /// VN 4, CD 1 (CONNECT), DSTPORT, DSTIP, USERID NUL; for a name, DSTIP 0.0.0.1 and the name NUL after
    /// the USERID (SOCKS4a).
    static func socks4Request(_ target: ProxyTarget, userID: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [4, 1, UInt8(target.port >> 8), UInt8(target.port & 0xFF)]
        switch target.address {
        case .ipv4(let address):
            bytes.append(contentsOf: address)
            bytes.append(contentsOf: userID)
            bytes.append(0)
        case .name(let name):
            bytes.append(contentsOf: [0, 0, 0, 1])
            bytes.append(contentsOf: userID)
            bytes.append(0)
            bytes.append(contentsOf: name.utf8)
            bytes.append(0)
        case .ipv6: preconditionFailure("refused when the proxy was set")
        }
        return bytes
    }

    /// VER 5, CMD 1 (CONNECT), RSV, ATYP and address, DST.PORT.
    static func socks5Connect(_ target: ProxyTarget) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(7 + 255)
        bytes.append(contentsOf: [5, 1, 0])
        switch target.address {
        case .ipv4(let address):
            bytes.append(1)
            bytes.append(contentsOf: address)
        case .ipv6(let address):
            bytes.append(4)
            bytes.append(contentsOf: address)
        case .name(let name):
            bytes.append(3)
            bytes.append(UInt8(name.utf8.count))
            bytes.append(contentsOf: name.utf8)
        }
        bytes.append(UInt8(target.port >> 8))
        bytes.append(UInt8(target.port & 0xFF))
        return bytes
    }

    /// `CONNECT host:port HTTP/1.1`, `Host`, Basic `Proxy-Authorization` when a username is given, then
    /// the additional fields.
    static func connectRequest(_ target: ProxyTarget, configuration: ProxyConfiguration) -> [UInt8] {
        var text = "CONNECT \(target.authority) HTTP/1.1\r\nHost: \(target.authority)\r\n"
        if let user = configuration.username, !user.isEmpty {
            let credentials = Array("\(user):\(configuration.password ?? "")".utf8)
            text += "Proxy-Authorization: Basic \(Base64.encode(credentials))\r\n"
        }
        for field in configuration.additionalHeaders {
            text += "\(field.name): \(field.value)\r\n"
        }
        return Array((text + "\r\n").utf8)
    }
}
