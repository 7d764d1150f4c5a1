// RFC 7692's permessage-deflate: the negotiation as plain values (`WebSocketDeflate.Parameters`: an
// offer or a response parsed from `Sec-WebSocket-Extensions`, checked, answered) and the compression
// through the system zlib (`WebSocketDeflater`, `WebSocketInflater`), tested in `WebSocketDeflateTests`.
//
// - A client offers it only when the application's additional headers carry a
//   `Sec-WebSocket-Extensions` naming permessage-deflate (Apple's Swift API has no switch for it; see
//   Guides/NetworkFramework.md); a server accepts the first valid offer it can honour.
// - Window bits: 9-15. zlib's raw deflate cannot use an 8-bit window, so an offer asking the server to
//   use 8 (`server_max_window_bits=8`) is declined, and a response asking the client to use 8
//   (`client_max_window_bits=8`) fails the handshake. Inflating always uses a 15-bit window, which reads
//   what any smaller window wrote.
// - A message is deflated with Z_SYNC_FLUSH, its trailing 00 00 ff ff removed; inflating appends them.
//   Inflating is bounded: at most `chunk` bytes come out a step, so a message over the maximum size
//   fails (1009) after at most that much more than the maximum was produced.
//
// The zlib streams are owned by one connection's WebSocket framer (its parser holds the inflater), on
// the connection's owner; `deinit` ends them.

import CZlib
import Foundation

enum WebSocketDeflate {
    static let name = "permessage-deflate"
    /// The 4 bytes a sync flush ends with, removed from the wire (RFC 7692 7.2.1).
    static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    /// One permessage-deflate offer or response's parameters (RFC 7692 7.1).
    struct Parameters: Equatable {
        var serverNoContextTakeover = false
        var clientNoContextTakeover = false
        /// nil: absent; in an offer, `clientMaxWindowBits` may be present without a value (0 here).
        var serverMaxWindowBits: Int?
        var clientMaxWindowBits: Int?

        /// The extension header's value for these parameters.
        var headerValue: String {
            var parts = [WebSocketDeflate.name]
            if serverNoContextTakeover { parts.append("server_no_context_takeover") }
            if clientNoContextTakeover { parts.append("client_no_context_takeover") }
            if let bits = serverMaxWindowBits { parts.append("server_max_window_bits=\(bits)") }
            if let bits = clientMaxWindowBits { parts.append(bits == 0 ? "client_max_window_bits" : "client_max_window_bits=\(bits)") }
            return parts.joined(separator: "; ")
        }
    }

    /// One extension of a `Sec-WebSocket-Extensions` value: its name and parameters (a value unquoted).
    struct Extension: Equatable {
        var name: String
        var parameters: [(name: String, value: String?)]

        static func == (lhs: Extension, rhs: Extension) -> Bool {
            lhs.name == rhs.name && lhs.parameters.map(\.name) == rhs.parameters.map(\.name)
                && lhs.parameters.map(\.value) == rhs.parameters.map(\.value)
        }
    }

    /// The extensions of a header value ("a; b=1, c"); nil if it is malformed.
    static func extensions(_ value: String) -> [Extension]? {
        var result: [Extension] = []
        for item in value.split(separator: ",", omittingEmptySubsequences: false) {
            let pieces = item.split(separator: ";", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard let name = pieces.first, isToken(name) else { return nil }
            var parameters: [(name: String, value: String?)] = []
            for piece in pieces.dropFirst() {
                let pair = piece.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
                guard let key = pair.first, isToken(key) else { return nil }
                var parameterValue: String?
                if pair.count == 2 {
                    var text = pair[1]
                    if text.count >= 2, text.hasPrefix("\""), text.hasSuffix("\"") { text = String(text.dropFirst().dropLast()) }
                    guard isToken(text) else { return nil }
                    parameterValue = text
                }
                parameters.append((key, parameterValue))
            }
            result.append(Extension(name: name.lowercased(), parameters: parameters))
        }
        return result
    }

    private static func isToken(_ text: String) -> Bool {
        !text.isEmpty
            && text.unicodeScalars.allSatisfy { $0.value > 32 && $0.value < 127 && !"()<>@,;:\\\"/[]?={}".unicodeScalars.contains($0) }
    }

    /// A window size value: 8-15, digits only, no leading zero.
    private static func windowBits(_ value: String?) -> Int? {
        guard let value, value.count <= 2, value.first != "0", value.allSatisfy(\.isASCII), let bits = Int(value), (8...15).contains(bits)
        else { return nil }
        return bits
    }

    /// A permessage-deflate extension's parameters; nil if one is unknown, repeated or has a bad value.
    /// `isOffer`: `client_max_window_bits` may have no value (0 here).
    static func parameters(of item: Extension, isOffer: Bool) -> Parameters? {
        guard item.name == name else { return nil }
        var parameters = Parameters()
        var seen = Set<String>()
        for (key, value) in item.parameters {
            let key = key.lowercased()
            guard seen.insert(key).inserted else { return nil }
            switch key {
            case "server_no_context_takeover":
                guard value == nil else { return nil }
                parameters.serverNoContextTakeover = true
            case "client_no_context_takeover":
                guard value == nil else { return nil }
                parameters.clientNoContextTakeover = true
            case "server_max_window_bits":
                guard let bits = windowBits(value) else { return nil }
                parameters.serverMaxWindowBits = bits
            case "client_max_window_bits":
                if value == nil, isOffer {
                    parameters.clientMaxWindowBits = 0
                } else {
                    guard let bits = windowBits(value) else { return nil }
                    parameters.clientMaxWindowBits = bits
                }
            default:
                return nil
            }
        }
        return parameters
    }

    /// The permessage-deflate offers in a client's `Sec-WebSocket-Extensions` (other extensions are
    /// ignored; an offer with bad parameters is left out).
    static func offers(in value: String?) -> [Parameters] {
        guard let value, let items = extensions(value) else { return [] }
        return items.filter { $0.name == name }.compactMap { parameters(of: $0, isOffer: true) }
    }

    /// The offer a client's additional headers make, if they name permessage-deflate.
    static func clientOffer(in additionalHeaders: [(name: String, value: String)]) -> [Parameters] {
        offers(in: additionalHeaders.filter { $0.name.lowercased() == "sec-websocket-extensions" }.map(\.value).joined(separator: ", "))
    }

    /// A server's answer to a client's offers: the first it can honour (nil: none, no extension).
    /// It uses its 15-bit window unless the client limits it (8 cannot be honoured: that offer is
    /// declined); it leaves the client's window as the client has it.
    static func accept(_ offers: [Parameters]) -> Parameters? {
        for offer in offers {
            if offer.serverMaxWindowBits == 8 { continue }
            var response = offer
            if offer.clientMaxWindowBits == 0 { response.clientMaxWindowBits = nil }
            return response
        }
        return nil
    }

    /// What a client agrees to from a server's `Sec-WebSocket-Extensions`, given what it offered:
    /// `.success(nil)` when the server accepted nothing, `.failure` when the response is not valid
    /// (an extension not offered, more than one, bad parameters, a window the client cannot use).
    static func check(response value: String?, offers: [Parameters]) -> Result<Parameters?, HandshakeError> {
        guard let value, !value.trimmingCharacters(in: .whitespaces).isEmpty else { return .success(nil) }
        guard let items = extensions(value), items.count == 1, let item = items.first, item.name == name, !offers.isEmpty,
            let response = parameters(of: item, isOffer: false)
        else { return .failure(HandshakeError()) }
        // client_max_window_bits only if the client offered it, at most what it asked; 8 cannot be used.
        if let bits = response.clientMaxWindowBits {
            guard
                offers.contains(where: { offer in
                    offer.clientMaxWindowBits.map { $0 == 0 || bits <= $0 } ?? false
                }), bits >= 9
            else { return .failure(HandshakeError()) }
        }
        // server_max_window_bits at most what the client asked for.
        if let asked = offers.compactMap(\.serverMaxWindowBits).max() {
            guard let bits = response.serverMaxWindowBits, bits <= asked else { return .failure(HandshakeError()) }
        }
        // server_no_context_takeover when the client asked for it.
        if offers.allSatisfy(\.serverNoContextTakeover), !response.serverNoContextTakeover { return .failure(HandshakeError()) }
        return .success(response)
    }

    struct HandshakeError: Error, Equatable {}
}

/// Compresses one side's messages (RFC 7692 7.2.1): raw deflate, Z_SYNC_FLUSH, the tail removed.
final class WebSocketDeflater {
    private let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
    private let noContextTakeover: Bool
    private var initialized = false

    /// nil if zlib refuses the window (9-15 work).
    init?(windowBits: Int = 15, noContextTakeover: Bool) {
        self.noContextTakeover = noContextTakeover
        stream.initialize(to: z_stream())
        let status = deflateInit2_(
            stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -Int32(windowBits), 8, Z_DEFAULT_STRATEGY, zlibVersion(),
            Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else {
            stream.deallocate()
            return nil
        }
        initialized = true
    }

    deinit {
        if initialized {
            deflateEnd(stream)
            stream.deallocate()
        }
    }

    /// The compressed bytes of the next part of a message; at its end (`isFinal`) without the tail,
    /// and a message that is one empty part is one 0x00 byte.
    func compress(_ data: Data, isFinal: Bool, isWhole: Bool = false) -> Data {
        var output = Data()
        var input = [UInt8](data)
        var buffer = [UInt8](repeating: 0, count: 16_384)
        input.withUnsafeMutableBufferPointer { inBytes in
            stream.pointee.next_in = inBytes.baseAddress
            stream.pointee.avail_in = UInt32(inBytes.count)
            repeat {
                let produced = buffer.withUnsafeMutableBufferPointer { outBytes in
                    stream.pointee.next_out = outBytes.baseAddress
                    stream.pointee.avail_out = UInt32(outBytes.count)
                    let status = deflate(stream, Z_SYNC_FLUSH)
                    return status == Z_OK ? outBytes.count - Int(stream.pointee.avail_out) : 0
                }
                output.append(contentsOf: buffer[0..<produced])
            } while stream.pointee.avail_out == 0
            stream.pointee.next_in = nil
        }
        if isFinal {
            if output.count >= 4, output.suffix(4).elementsEqual(WebSocketDeflate.tail) { output.removeLast(4) }
            if output.isEmpty, isWhole { output = Data([0x00]) }
            if noContextTakeover { deflateReset(stream) }
        }
        return output
    }
}

/// Decompresses the peer's messages, in bounded steps.
final class WebSocketInflater {
    private let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
    private let noContextTakeover: Bool
    private var initialized = false
    /// The most bytes one step of inflating produces.
    let chunk: Int

    init?(noContextTakeover: Bool, chunk: Int = 65_536) {
        self.noContextTakeover = noContextTakeover
        self.chunk = chunk
        stream.initialize(to: z_stream())
        guard inflateInit2_(stream, -15, zlibVersion(), Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            stream.deallocate()
            return nil
        }
        initialized = true
    }

    deinit {
        if initialized {
            inflateEnd(stream)
            stream.deallocate()
        }
    }

    /// Inflates the next compressed bytes of a message (with the tail appended at its end, `isFinal`),
    /// handing out at most `chunk` bytes at a time; `output` returns false to stop (the message is too
    /// big). Returns false if the data is not valid deflate data.
    func decompress(_ data: some Collection<UInt8>, isFinal: Bool, output: (Data) -> Bool) -> Bool {
        var input = [UInt8](data)
        if isFinal { input += WebSocketDeflate.tail }
        guard !input.isEmpty else { return true }
        var buffer = [UInt8](repeating: 0, count: chunk)
        var valid = true
        input.withUnsafeMutableBufferPointer { inBytes in
            stream.pointee.next_in = inBytes.baseAddress
            stream.pointee.avail_in = UInt32(inBytes.count)
            while true {
                var status: Int32 = Z_OK
                let produced = buffer.withUnsafeMutableBufferPointer { outBytes in
                    stream.pointee.next_out = outBytes.baseAddress
                    stream.pointee.avail_out = UInt32(outBytes.count)
                    status = inflate(stream, Z_SYNC_FLUSH)
                    return outBytes.count - Int(stream.pointee.avail_out)
                }
                if status == Z_STREAM_END {
                    // A final block ended the stream: what follows is a new one.
                    inflateReset(stream)
                } else if status != Z_OK, status != Z_BUF_ERROR {
                    valid = false
                    break
                }
                if produced > 0, !output(Data(buffer[0..<produced])) { break }
                if stream.pointee.avail_in == 0, produced < chunk { break }
                if status == Z_BUF_ERROR, produced == 0 { break }
            }
            stream.pointee.next_in = nil
        }
        if isFinal, noContextTakeover { inflateReset(stream) }
        return valid
    }
}
