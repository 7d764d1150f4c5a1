// `NWProtocolWebSocket` on a connection: an implementation of the framer machinery
// (`NWProtocolFramerImplementation`), run by the connection's `FramerDriver` like an application's
// framer. The driver maps WebSocket's metadata: a send's `NWProtocolWebSocket.Metadata` reaches
// `handleOutput` in the framer message's "metadata" value (binary when the context has none), and a
// delivered message's metadata is what the application's receive finds in its context.
//
// A client writes its opening request in `start` and marks ready on the server's valid 101; a server
// (a connection a listener accepted) reads the request, asks the options' request handler (on its
// queue) if there is one, and answers 101 or 400. Then frames, through `WebSocketFrameParser` (input)
// and `WebSocketFrame.encode` (output): a client masks what it sends, a server does not.
//
// permessage-deflate (WebSocketDeflate.swift): a client offers it when its additional headers carry a
// `Sec-WebSocket-Extensions` naming it, a server accepts the first valid offer; once negotiated, the
// parser inflates the peer's compressed messages and `handleOutput` compresses every data message (RSV1
// on its first frame). The zlib streams live as long as the framer, ended in `cleanup`.
//
// Close: a close the peer sends is delivered (its code in `closeCode`, its reason as content) and
// echoed; a close the application sends is written; once both went, the sending side ends (TCP FIN,
// after TLS's close_notify). A protocol violation writes a close with its code (1002, 1007, 1009), ends
// the sending side, drains the input, and fails the connection at the peer's end (or `failTimeout`
// after); a failed handshake fails it at once (see Guides/NetworkFramework.md for the errors).
//
// Ownership: every method runs in a framer callback on the connection's owner (its queue), or in a
// block the owner runs (`Instance.async`), one at a time, as the framer contract has it.

import Foundation

// @unchecked Sendable: internal, never handed to the application; its state is touched only in framer
// callbacks on the connection's owner (a server's request handler runs on its own queue and hands its
// answer back through `Instance.async`, a callback too). `connectionMetadata`, read from any thread by
// `NWConnection.metadata(definition:)`, is in a `Guarded` state.
final class WebSocketFramer: NWProtocolFramerImplementation, @unchecked Sendable {
    static let label = "websocket"
    static let definition = NWProtocolFramer.Definition(implementation: WebSocketFramer.self)
    /// The key of a framer message's WebSocket metadata.
    static let metadataKey = "websocket.metadata"
    /// The key of the WebSocket options in the framer options the driver makes.
    static let optionsKey = "websocket.options"

    private enum Phase {
        /// The handshake: the peer's head is awaited.
        case handshake
        /// A server's request handler is deciding.
        case answering(WebSocketHandshake.Requested)
        /// Frames.
        case open
        /// A violation was answered with a close: input is drained (closing a socket with unread bytes
        /// would reset the connection, and the peer could lose the close) until the peer's end or
        /// `failTimeout`, then the connection fails with the error.
        case failing(NWError)
        /// Failed or closed: input is ignored.
        case done
    }

    private let values: NWProtocolWebSocket.Options.Values
    private let isServer: Bool
    private var phase = Phase.handshake
    private var parser: WebSocketFrameParser
    private let key = WebSocketHandshake.randomKey()
    /// The data message being delivered.
    private var receiving: NWProtocolFramer.Message?
    /// The application's data message being sent in parts: the next part is a continuation.
    private var sendingPartial = false
    private var closeSent = false
    private var closeReceived = false
    /// Pings sent with a pong handler, oldest first.
    private var pings: [(payload: Data, queue: DispatchQueue, handler: @Sendable (NWError?) -> Void)] = []
    /// What the handshake told (the server's extra headers, on a client), for `NWConnection.metadata(definition:)`.
    let connectionMetadata = Guarded<NWProtocolWebSocket.Metadata?>(nil)
    private var serverHeaders: [(String, String)]?
    /// A client's permessage-deflate offers (from its additional headers' `Sec-WebSocket-Extensions`).
    private let deflateOffers: [WebSocketDeflate.Parameters]
    /// Compresses what is sent once permessage-deflate was negotiated (the parser holds the inflater).
    private var deflater: WebSocketDeflater?

    init(framer: NWProtocolFramer.Instance) {
        let options = framer.options[Self.optionsKey] as? NWProtocolWebSocket.Options
        values = options?.values.withLock { $0 } ?? NWProtocolWebSocket.Options().values.withLock { $0 }
        isServer = framer.isAcceptedConnection
        parser = WebSocketFrameParser(peerIsClient: isServer, maximumMessageSize: values.maximumMessageSize)
        deflateOffers = isServer || values.skipHandshake ? [] : WebSocketDeflate.clientOffer(in: values.additionalHeaders)
    }

    /// Sets up permessage-deflate's streams for negotiated `parameters`; false if zlib cannot.
    private func startDeflate(_ parameters: WebSocketDeflate.Parameters) -> Bool {
        let ownBits = isServer ? parameters.serverMaxWindowBits : parameters.clientMaxWindowBits
        let ownNoTakeover = isServer ? parameters.serverNoContextTakeover : parameters.clientNoContextTakeover
        let peerNoTakeover = isServer ? parameters.clientNoContextTakeover : parameters.serverNoContextTakeover
        guard let deflater = WebSocketDeflater(windowBits: ownBits ?? 15, noContextTakeover: ownNoTakeover),
            let inflater = WebSocketInflater(noContextTakeover: peerNoTakeover)
        else { return false }
        self.deflater = deflater
        parser.inflater = inflater
        return true
    }

    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult {
        if values.skipHandshake {
            open()
            return .ready
        }
        if !isServer {
            let (host, target) = Self.hostAndTarget(framer.remote)
            framer.writeOutput(
                data: WebSocketHandshake.request(
                    host: host, path: target, key: key, subprotocols: values.subprotocols, additionalHeaders: values.additionalHeaders))
        }
        return .willMarkReady
    }

    /// The Host field and request target for a connection's endpoint: a URL's host, port (when not the
    /// scheme's default), path and query; a host and port's, with "/".
    static func hostAndTarget(_ endpoint: NWEndpoint?) -> (host: String, target: String) {
        func bracketed(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }
        switch endpoint {
        case .url(let url)?:
            let secure = ["wss", "https"].contains(url.scheme?.lowercased() ?? "")
            var host = bracketed(url.host ?? "localhost")
            if let port = url.port, port != (secure ? 443 : 80) { host += ":\(port)" }
            let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            var target = components?.percentEncodedPath ?? "/"
            if target.isEmpty { target = "/" }
            if let query = components?.percentEncodedQuery { target += "?\(query)" }
            return (host, target)
        case .hostPort(let host, let port)?:
            let name = ConnectionConfiguration.text(of: host).split(separator: "%").first.map(String.init) ?? ""
            return ("\(bracketed(name)):\(port.rawValue)", "/")
        default:
            return ("localhost", "/")
        }
    }

    private func open() {
        phase = .open
        let metadata = NWProtocolWebSocket.Metadata(opcode: .cont)
        metadata.values[\.additionalServerHeaders] = serverHeaders
        connectionMetadata.withLock { $0 = metadata }
    }

    // MARK: input

    func handleInput(framer: NWProtocolFramer.Instance) -> Int {
        switch phase {
        case .handshake:
            if let hint = readHandshake(framer) { return hint }
            return handleInput(framer: framer)
        case .answering, .done:
            return 0
        case .failing:
            drain(framer)
            return 0
        case .open:
            return readFrames(framer)
        }
    }

    /// How long a connection that broke the protocol waits for the peer's end after the close.
    static let failTimeout: UInt64 = 200

    /// Consumes the input after a violation; fails the connection at its end.
    private func drain(_ framer: NWProtocolFramer.Instance) {
        var ended = false
        while framer.parseInput(
            minimumIncompleteLength: 1, maximumLength: 65_536,
            parse: { buffer, isComplete in
                ended = isComplete
                return buffer?.count ?? 0
            })
        {}
        if ended { wakeup(framer: framer) }
    }

    /// Reads the peer's head; nil once it was handled (the phase moved on), else the bytes wanted.
    private func readHandshake(_ framer: NWProtocolFramer.Instance) -> Int? {
        var head: WebSocketHandshake.Head?
        var seen = 0
        var malformed = false
        _ = framer.parseInput(minimumIncompleteLength: 1, maximumLength: WebSocketHandshake.maximumHeadLength) { buffer, _ in
            guard let buffer else { return 0 }
            seen = buffer.count
            guard let length = WebSocketHandshake.headLength(in: UnsafeRawBufferPointer(buffer)) else {
                malformed = buffer.count >= WebSocketHandshake.maximumHeadLength
                return 0
            }
            head = WebSocketHandshake.parseHead(UnsafeRawBufferPointer(rebasing: buffer[0..<length]))
            malformed = head == nil
            return length
        }
        if malformed { return failHandshake(framer) }
        guard let head else { return seen + 1 }
        if isServer {
            guard let requested = WebSocketHandshake.check(request: head) else { return failHandshake(framer) }
            guard let (queue, handler) = values.clientRequestHandler else {
                answer(NWProtocolWebSocket.Response(status: .accept, subprotocol: nil), to: requested, framer: framer)
                return phaseIsOpen ? nil : 0
            }
            phase = .answering(requested)
            queue.async { [self] in
                let response = handler(requested.subprotocols, requested.additionalHeaders)
                framer.async { [self] in
                    answer(response, to: requested, framer: framer)
                    if phaseIsOpen { _ = handleInput(framer: framer) }
                }
            }
            return 0
        }
        guard let accepted = WebSocketHandshake.check(response: head, key: key, offered: values.subprotocols, deflateOffers: deflateOffers)
        else {
            return failHandshake(framer)
        }
        if let deflate = accepted.deflate, !startDeflate(deflate) { return failHandshake(framer) }
        serverHeaders = accepted.additionalHeaders.map { ($0.name, $0.value) }
        open()
        framer.markReady()
        return nil
    }

    private var phaseIsOpen: Bool {
        if case .open = phase { return true }
        return false
    }

    /// A server's answer to a valid request.
    private func answer(
        _ response: NWProtocolWebSocket.Response, to requested: WebSocketHandshake.Requested, framer: NWProtocolFramer.Instance
    ) {
        if case .done = phase { return }
        switch response.status {
        case .accept:
            // The first permessage-deflate offer the server can honour is accepted.
            var deflate = WebSocketDeflate.accept(WebSocketDeflate.offers(in: requested.extensions))
            if let parameters = deflate, !startDeflate(parameters) { deflate = nil }
            framer.writeOutput(
                data: WebSocketHandshake.response(
                    key: requested.key, subprotocol: response.subprotocol, extensions: deflate?.headerValue,
                    additionalHeaders: response.additionalHeaders ?? []))
            open()
            framer.markReady()
        case .reject:
            framer.writeOutput(data: WebSocketHandshake.rejection(additionalHeaders: response.additionalHeaders ?? []))
            phase = .done
            framer.markFailed(error: .posix(.ECONNABORTED))
        }
    }

    /// Fails the handshake: a server answers 400 first.
    private func failHandshake(_ framer: NWProtocolFramer.Instance) -> Int {
        if isServer { framer.writeOutput(data: WebSocketHandshake.rejection()) }
        phase = .done
        framer.markFailed(error: .posix(.ECONNABORTED))
        return 0
    }

    private func readFrames(_ framer: NWProtocolFramer.Instance) -> Int {
        while phaseIsOpen {
            let needed = parser.needed
            var events: [WebSocketFrameParser.Event] = []
            var consumed = 0
            let parsed = framer.parseInput(minimumIncompleteLength: needed, maximumLength: max(needed, 65_536)) { buffer, _ in
                guard let buffer else { return 0 }
                (consumed, events) = parser.parse(UnsafeRawBufferPointer(buffer))
                return consumed
            }
            for event in events { handle(event, framer) }
            if !parsed || (consumed == 0 && events.isEmpty) { break }
        }
        if case .failing = phase { drain(framer) }
        return phaseIsOpen ? min(parser.needed, 2 + 8 + 4 + WebSocketFrame.maximumControlPayload) : 0
    }

    private func handle(_ event: WebSocketFrameParser.Event, _ framer: NWProtocolFramer.Instance) {
        guard phaseIsOpen else { return }
        switch event {
        case .data(let bytes, let opcode, let isComplete):
            let message = receiving ?? makeMessage(framer, opcode: opcode == WebSocketFrame.text ? .text : .binary)
            receiving = isComplete ? nil : message
            if closeReceived { return }
            framer.deliverInput(data: bytes, message: message, isComplete: isComplete)
        case .control(WebSocketFrame.ping, let payload):
            if closeReceived { return }
            if values.autoReplyPing {
                write(WebSocketFrame.pong, payload, framer)
            } else {
                framer.deliverInput(data: payload, message: makeMessage(framer, opcode: .ping), isComplete: true)
            }
        case .control(WebSocketFrame.pong, let payload):
            if let index = pings.firstIndex(where: { $0.payload == payload }) {
                for ping in pings[...index] { ping.queue.async { ping.handler(nil) } }
                pings.removeFirst(index + 1)
            } else if !closeReceived {
                framer.deliverInput(data: payload, message: makeMessage(framer, opcode: .pong), isComplete: true)
            }
        case .control(WebSocketFrame.close, let payload):
            guard !closeReceived else { return }
            closeReceived = true
            let message = makeMessage(framer, opcode: .close)
            let metadata = message[Self.metadataKey] as? NWProtocolWebSocket.Metadata
            var code: UInt16?
            if payload.count >= 2 {
                code = UInt16(payload[payload.startIndex]) << 8 | UInt16(payload[payload.startIndex + 1])
                metadata?.closeCode = NWProtocolWebSocket.CloseCode(rawValue: code ?? 0) ?? .privateCode(code ?? 0)
            } else {
                metadata?.closeCode = .protocolCode(.noStatusReceived)
            }
            framer.deliverInput(data: Data(payload.dropFirst(2)), message: message, isComplete: true)
            if !closeSent {
                // The echo carries the peer's code (RFC 6455 5.5.1).
                write(WebSocketFrame.close, WebSocketFrame.closePayload(code: code, reason: Data()), framer)
                closeSent = true
            }
            framer.finishOutput()
        case .control:
            break
        case .failure(let code):
            if !closeSent { write(WebSocketFrame.close, WebSocketFrame.closePayload(code: code, reason: Data()), framer) }
            closeSent = true
            framer.finishOutput()
            phase = .failing(code == 1009 ? .posix(.EMSGSIZE) : .posix(.EPROTO))
            framer.scheduleWakeup(wakeupTime: .milliseconds(Self.failTimeout))
        }
    }

    /// A framer message carrying WebSocket metadata of `opcode` (with the server's headers, on a client).
    private func makeMessage(_ framer: NWProtocolFramer.Instance, opcode: NWProtocolWebSocket.Opcode) -> NWProtocolFramer.Message {
        let message = NWProtocolFramer.Message(instance: framer)
        let metadata = NWProtocolWebSocket.Metadata(opcode: opcode)
        metadata.values[\.additionalServerHeaders] = serverHeaders
        message[Self.metadataKey] = metadata
        return message
    }

    // MARK: output

    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {
        let metadata = message[Self.metadataKey] as? NWProtocolWebSocket.Metadata ?? NWProtocolWebSocket.Metadata(opcode: .binary)
        guard case .open = phase, !closeSent else { return }  // nothing goes after a close
        switch metadata.opcode {
        case .text, .binary, .cont:
            let kind = metadata.opcode == .text ? WebSocketFrame.text : WebSocketFrame.binary
            let opcode = sendingPartial || metadata.opcode == .cont ? WebSocketFrame.continuation : kind
            let isWhole = !sendingPartial && isComplete
            sendingPartial = !isComplete
            if let deflater {
                // A compressed message: RSV1 on its first frame (RFC 7692 6).
                let payload = deflater.compress(content(framer, messageLength), isFinal: isComplete, isWhole: isWhole)
                framer.writeOutput(
                    data: WebSocketFrame.encode(
                        opcode: opcode, fin: isComplete, rsv1: opcode != WebSocketFrame.continuation, payload: payload,
                        mask: isServer ? nil : Self.mask()))
            } else if isServer {
                framer.writeOutput(data: WebSocketFrame.header(opcode: opcode, fin: isComplete, length: messageLength, mask: nil))
                try? framer.writeOutputNoCopy(length: messageLength)
            } else {
                framer.writeOutput(
                    data: WebSocketFrame.encode(opcode: opcode, fin: isComplete, payload: content(framer, messageLength), mask: Self.mask())
                )
            }
        case .ping:
            let payload = content(framer, messageLength).prefix(WebSocketFrame.maximumControlPayload)
            if let pong = metadata.values[\.pongHandler] { pings.append((Data(payload), pong.queue, pong.handler)) }
            write(WebSocketFrame.ping, payload, framer)
        case .pong:
            write(WebSocketFrame.pong, content(framer, messageLength).prefix(WebSocketFrame.maximumControlPayload), framer)
        case .close:
            // A code that may not go on the wire (1005, 1006, 1015) sends a close without one.
            let code = WebSocketFrame.isValidWireCloseCode(metadata.closeCode.rawValue) ? metadata.closeCode.rawValue : nil
            write(WebSocketFrame.close, WebSocketFrame.closePayload(code: code, reason: content(framer, messageLength)), framer)
            closeSent = true
            if closeReceived { framer.finishOutput() }
        }
    }

    /// The application's bytes of the message being output (a copy).
    private func content(_ framer: NWProtocolFramer.Instance, _ length: Int) -> Data {
        var bytes = Data()
        guard length > 0 else { return bytes }
        _ = framer.parseOutput(minimumIncompleteLength: length, maximumLength: length) { buffer, _ in
            if let buffer, let base = buffer.baseAddress { bytes = Data(bytes: base, count: buffer.count) }
            return buffer?.count ?? 0
        }
        return bytes
    }

    /// Writes one whole frame (masked on a client).
    private func write(_ opcode: UInt8, _ payload: some Collection<UInt8>, _ framer: NWProtocolFramer.Instance) {
        framer.writeOutput(data: WebSocketFrame.encode(opcode: opcode, payload: payload, mask: isServer ? nil : Self.mask()))
    }

    private static func mask() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<4).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    // MARK: the driver's mapping

    /// The framer message a send's context goes to `handleOutput` in: its WebSocket metadata (binary
    /// when it has none, as `.defaultMessage`).
    static func message(for context: NWConnection.ContentContext) -> NWProtocolFramer.Message {
        let message = NWProtocolFramer.Message(definition: definition)
        message[metadataKey] =
            context.protocolMetadata(definition: NWProtocolWebSocket.definition) as? NWProtocolWebSocket.Metadata
            ?? NWProtocolWebSocket.Metadata(opcode: .binary)
        return message
    }

    /// The metadata a delivered message reaches the application with.
    static func metadata(of message: NWProtocolFramer.Message) -> NWProtocolMetadata {
        message[metadataKey] as? NWProtocolWebSocket.Metadata ?? NWProtocolWebSocket.Metadata(opcode: .binary)
    }

    // MARK: the rest of the contract

    func wakeup(framer: NWProtocolFramer.Instance) {
        guard case .failing(let error) = phase else { return }
        phase = .done
        framer.markFailed(error: error)
    }

    func stop(framer: NWProtocolFramer.Instance) -> Bool { true }

    func cleanup(framer: NWProtocolFramer.Instance) {
        phase = .done
        // zlib's streams end with the connection.
        deflater = nil
        parser.inflater = nil
        for ping in pings { ping.queue.async { ping.handler(.posix(.ECANCELED)) } }
        pings = []
    }
}
