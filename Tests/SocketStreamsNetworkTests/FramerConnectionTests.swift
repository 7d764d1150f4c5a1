// NWConnection and NWListener with an `NWProtocolFramer` in their stacks, written as Apple-platform code
// writes them (the shape of Apple's TicTacToe sample: a 4-byte big-endian length and a type byte before
// each message): messages echoed by a listener with the same framer, over TCP and over TLS, through a
// relay that forwards one byte at a time, zero-length and metadata-only messages, a handshake that
// marks the framer ready, pass-through after it, and `markFailed` failing the connection.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

/// A length-prefixed framer: `[length: UInt32 big-endian][type: UInt8][body]`.
final class LengthPrefixedFramer: NWProtocolFramerImplementation {
    static let definition = NWProtocolFramer.Definition(implementation: LengthPrefixedFramer.self)
    static var label: String { "LengthPrefixed" }
    static let headerSize = 5

    init(framer: NWProtocolFramer.Instance) {}
    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult { .ready }
    func wakeup(framer: NWProtocolFramer.Instance) {}
    func stop(framer: NWProtocolFramer.Instance) -> Bool { true }
    func cleanup(framer: NWProtocolFramer.Instance) {}

    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {
        let length = UInt32(messageLength)
        let header = Data([
            UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff), message.frameType,
        ])
        framer.writeOutput(data: header)
        do {
            try framer.writeOutputNoCopy(length: messageLength)
        } catch {
            XCTFail("writeOutputNoCopy: \(error)")
        }
    }

    func handleInput(framer: NWProtocolFramer.Instance) -> Int {
        while true {
            var header: (length: Int, type: UInt8)?
            let parsed = framer.parseInput(minimumIncompleteLength: Self.headerSize, maximumLength: Self.headerSize) { buffer, _ in
                guard let buffer, buffer.count >= Self.headerSize else { return 0 }
                header = (buffer.prefix(4).reduce(0) { $0 << 8 | Int($1) }, buffer[4])
                return Self.headerSize
            }
            guard parsed, let header else { return Self.headerSize }
            let message = NWProtocolFramer.Message(instance: framer)
            message["type"] = header.type
            if !framer.deliverInputNoCopy(length: header.length, message: message, isComplete: true) { return 0 }
        }
    }
}

extension NWProtocolFramer.Message {
    /// A message of `LengthPrefixedFramer` of this type.
    convenience init(frameType: UInt8) {
        self.init(definition: LengthPrefixedFramer.definition)
        self["type"] = frameType
    }

    var frameType: UInt8 { self["type"] as? UInt8 ?? 0 }
}

/// A framer that says "HELLO" and waits for the peer's before it marks ready (`.willMarkReady`), then
/// lets everything pass through; anything but "HELLO" fails the connection with `.posix(.EPROTO)`.
final class HelloFramer: NWProtocolFramerImplementation {
    static let definition = NWProtocolFramer.Definition(implementation: HelloFramer.self)
    static var label: String { "Hello" }
    static let hello = Data("HELLO".utf8)

    init(framer: NWProtocolFramer.Instance) {}

    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult {
        XCTAssertEqual(framer.remote.map { "\($0)" }?.hasPrefix("127.0.0.1:"), true)
        XCTAssertNotNil(framer.local, "the transport is up")
        XCTAssertNotNil(framer.parameters?.defaultProtocolStack.applicationProtocols.first as? NWProtocolFramer.Options)
        XCTAssertEqual(framer.options["greeting"] as? String, "HELLO")
        framer.writeOutput(data: Self.hello)
        return .willMarkReady
    }

    func handleInput(framer: NWProtocolFramer.Instance) -> Int {
        var greeting: Data?
        let parsed = framer.parseInput(minimumIncompleteLength: 5, maximumLength: 5) { buffer, _ in
            guard let buffer, buffer.count == 5 else { return 0 }
            greeting = Data(buffer)
            return 5
        }
        guard parsed, let greeting else { return 5 }
        guard greeting == Self.hello else {
            framer.markFailed(error: .posix(.EPROTO))
            return 0
        }
        framer.passThroughInput()
        framer.passThroughOutput()
        framer.markReady()
        return 0
    }

    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {
        XCTFail("output passes through once ready")
    }

    func wakeup(framer: NWProtocolFramer.Instance) {}
    func stop(framer: NWProtocolFramer.Instance) -> Bool { true }
    func cleanup(framer: NWProtocolFramer.Instance) {}
}

final class FramerConnectionTests: SocketStreamsTestCase {
    let queue = DispatchQueue(label: "FramerConnectionTests")

    func framed(_ parameters: NWParameters, _ definition: NWProtocolFramer.Definition) -> NWParameters {
        let options = NWProtocolFramer.Options(definition: definition)
        options["greeting"] = "HELLO"
        parameters.defaultProtocolStack.applicationProtocols.insert(options, at: 0)
        return parameters
    }

    /// A listener whose connections echo each framed message back with its type, until the peer's end.
    private func framedEchoListener(_ parameters: NWParameters) throws -> NWListener {
        let listener = try NWListener(using: framed(parameters, LengthPrefixedFramer.definition), on: .any)
        let serverQueue = DispatchQueue(label: "framed-echo")
        listener.newConnectionHandler = { connection in
            connection.start(queue: serverQueue)
            @Sendable func next() {
                connection.receiveMessage { content, context, isComplete, error in
                    guard error == nil,
                        let message = context?.protocolMetadata(definition: LengthPrefixedFramer.definition) as? NWProtocolFramer.Message
                    else { return connection.cancel() }
                    let reply = NWConnection.ContentContext(
                        identifier: "echo", metadata: [NWProtocolFramer.Message(frameType: message.frameType)])
                    connection.send(content: content, contentContext: reply, isComplete: true, completion: .idempotent)
                    next()
                }
            }
            next()
        }
        try startListener(listener)
        return listener
    }

    func startListener(_ listener: NWListener) throws {
        let ready = expectation(description: "listener ready")
        listener.stateUpdateHandler = { if $0 == .ready { ready.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [ready], timeout: shortTimeout)
        _ = try XCTUnwrap(listener.port)
    }

    /// Starts `connection` and waits for `.ready` or `.failed`; returns the states it went through.
    func start(_ connection: NWConnection) -> [NWConnection.State] {
        startAndSettle(connection, on: queue, timeout: shortTimeout * 4)
    }

    /// Sends each (type, body) as a framed message, receives as many with `receiveMessage`.
    func exchange(_ connection: NWConnection, _ messages: [(UInt8, Data)]) -> [(UInt8, Data?)] {
        let received = Locked<[(UInt8, Data?)]>([])
        let done = expectation(description: "all echoed")
        done.expectedFulfillmentCount = messages.count
        for (type, body) in messages {
            let context = NWConnection.ContentContext(identifier: "message", metadata: [NWProtocolFramer.Message(frameType: type)])
            connection.send(content: body, contentContext: context, isComplete: true, completion: .contentProcessed { XCTAssertNil($0) })
        }
        for _ in messages {
            connection.receiveMessage { content, context, isComplete, error in
                XCTAssertNil(error)
                XCTAssertTrue(isComplete, "a framed message comes complete")
                let message = context?.protocolMetadata(definition: LengthPrefixedFramer.definition) as? NWProtocolFramer.Message
                received.mutate { $0.append((message?.frameType ?? 0, content)) }
                done.fulfill()
            }
        }
        wait(for: [done], timeout: shortTimeout * 4)
        return received.value
    }

    /// The messages the echo tests send: made on each use (a stored or static value is reported by
    /// LeakSanitizer: an XCTest case lives until exit, and a global's large `Data` is not followed).
    static var sample: [(UInt8, Data)] {
        [(1, Data("move e2e4".utf8)), (2, Data()), (3, Data(repeating: 0xab, count: 70_000)), (4, Data([0])), (5, Data("end".utf8))]
    }

    func assertEchoed(_ echoed: [(UInt8, Data?)], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(echoed.map(\.0), Self.sample.map(\.0), file: file, line: line)
        XCTAssertEqual(echoed.map { $0.1 ?? Data() }, Self.sample.map(\.1), file: file, line: line)
        XCTAssertNil(echoed[1].1, "a zero-length message comes with no content, its metadata only", file: file, line: line)
    }

    func testFramedMessagesEchoThroughAListenerWithTheSameFramer() throws {
        let listener = try framedEchoListener(.tcp)
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        assertEchoed(exchange(connection, Self.sample))
    }

    func testFramedMessagesSurviveAPeerThatWritesOneByteAtATime() throws {
        let listener = try framedEchoListener(.tcp)
        let relay = try startRelay(to: Int(listener.port!.rawValue), fault: .segment(maxSegment: 1, delay: 0.001))
        let port = NWEndpoint.Port(rawValue: UInt16(relay.port))!
        let connection = NWConnection(host: "127.0.0.1", port: port, using: framed(.tcp, LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        let small = Self.sample.filter { $0.1.count < 1000 }
        let echoed = exchange(connection, small)
        XCTAssertEqual(echoed.map(\.0), small.map(\.0))
        XCTAssertEqual(echoed.map { $0.1 ?? Data() }, small.map(\.1))
        // The relay counts a write once it is done, which may be after the client has read it.
        let bytes = small.reduce(0) { $0 + 5 + $1.1.count }
        XCTAssertTrue(relay.wait(timeout: shortTimeout) { ($0.writes[.downstream] ?? 0) >= bytes }, "one byte a write: \(relay.snapshot)")
    }

    func testFramedMessagesEchoOverTLS() throws {
        let server = NWProtocolTLS.Options()
        sec_protocol_options_set_local_identity(server.securityProtocolOptions, try serverIdentity())
        let listener = try framedEchoListener(NWParameters(tls: server))
        let client = NWProtocolTLS.Options()
        sec_protocol_options_set_verify_block(client.securityProtocolOptions, { _, _, complete in complete(true) }, queue)
        let connection = NWConnection(
            host: "127.0.0.1", port: listener.port!, using: framed(NWParameters(tls: client), LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        assertEchoed(exchange(connection, Self.sample))
    }

    func serverIdentity() throws -> sec_identity_t {
        var items: CFArray?
        let archive = try Data(contentsOf: URL(fileURLWithPath: try pki.serverPKCS12))
        let options = [kSecImportExportPassphrase as String: TestPKI.pkcs12Password] as CFDictionary
        XCTAssertEqual(SecPKCS12Import(archive as CFData, options, &items), errSecSuccess)
        let item = try XCTUnwrap((items as? [[String: Any]])?.first)
        return try XCTUnwrap(sec_identity_create(try XCTUnwrap(item[kSecImportItemIdentity as String] as? SecIdentity)))
    }

    func testReceiveTakesAFramedMessageInPartsWithinItsBounds() throws {
        let listener = try framedEchoListener(.tcp)
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        let body = Data((0..<10_000).map { UInt8($0 % 251) })
        let context = NWConnection.ContentContext(identifier: "big", metadata: [NWProtocolFramer.Message(frameType: 9)])
        connection.send(content: body, contentContext: context, isComplete: true, completion: .idempotent)
        let parts = Locked<[(Data?, Bool)]>([])
        let done = expectation(description: "message received in parts")
        @Sendable func next() {
            connection.receive(minimumIncompleteLength: 1, maximumLength: 3_000) { content, context, isComplete, error in
                XCTAssertNil(error)
                XCTAssertEqual(
                    (context?.protocolMetadata(definition: LengthPrefixedFramer.definition) as? NWProtocolFramer.Message)?.frameType, 9)
                parts.mutate { $0.append((content, isComplete)) }
                if isComplete { done.fulfill() } else { next() }
            }
        }
        next()
        wait(for: [done], timeout: shortTimeout * 4)
        XCTAssertEqual(parts.value.reduce(Data()) { $0 + ($1.0 ?? Data()) }, body)
        XCTAssertTrue(parts.value.allSatisfy { ($0.0?.count ?? 0) <= 3_000 })
        XCTAssertEqual(parts.value.map(\.1).filter { $0 }.count, 1, "only the last part completes the message")
    }

    /// A plain TCP listener whose connections send `greeting` and then echo.
    func plainListener(greeting: Data) throws -> NWListener {
        let listener = try NWListener(using: .tcp, on: .any)
        let serverQueue = DispatchQueue(label: "plain-peer")
        listener.newConnectionHandler = { connection in
            connection.send(content: greeting, completion: .idempotent)
            connection.startEchoing(on: serverQueue)
        }
        try startListener(listener)
        return listener
    }

    func testAFramerThatWillMarkReadyIsReadyAfterItsHandshakeAndThenPassesThrough() throws {
        let listener = try plainListener(greeting: Data("HELLO".utf8))
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, HelloFramer.definition))
        let states = start(connection)
        XCTAssertEqual(states, [.preparing, .ready])
        // The peer echoes our "HELLO" after its own; then what we send comes back as it is.
        let received = Locked(Data())
        let done = expectation(description: "echo")
        connection.send(content: Data("raw bytes".utf8), completion: .contentProcessed { XCTAssertNil($0) })
        @Sendable func next() {
            connection.receive(minimumIncompleteLength: 1, maximumLength: 100) { content, _, _, error in
                XCTAssertNil(error)
                received.mutate { $0 += content ?? Data() }
                if received.value.count >= 14 { done.fulfill() } else { next() }
            }
        }
        next()
        wait(for: [done], timeout: shortTimeout * 4)
        XCTAssertEqual(String(decoding: received.value, as: UTF8.self), "HELLOraw bytes")
    }

    func testMarkFailedFailsTheConnectionWithItsError() throws {
        let listener = try plainListener(greeting: Data("NOPE!".utf8))
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, HelloFramer.definition))
        let failed = expectation(description: "receive failed")
        connection.receive(minimumIncompleteLength: 1, maximumLength: 10) { _, _, _, error in
            XCTAssertEqual(error, .posix(.EPROTO))
            failed.fulfill()
        }
        let states = start(connection)
        XCTAssertEqual(states, [.preparing, .failed(.posix(.EPROTO))])
        wait(for: [failed], timeout: shortTimeout)
    }

    func testAFramedConnectionCancelledCompletesItsReceivesWithECANCELED() throws {
        let listener = try framedEchoListener(.tcp)
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        let done = expectation(description: "receive cancelled")
        connection.receiveMessage { _, _, _, error in
            XCTAssertEqual(error, .posix(.ECANCELED))
            done.fulfill()
        }
        connection.cancel()
        wait(for: [done], timeout: shortTimeout)
    }
}

/// A RESP-style framer (as Redis clients write one): each "+value\r\n" line becomes a metadata-only
/// message, its value in the message and no content (`deliverInputNoCopy(length: 0, …)`).
final class LineFramer: NWProtocolFramerImplementation {
    static let definition = NWProtocolFramer.Definition(implementation: LineFramer.self)
    static var label: String { "Lines" }

    init(framer: NWProtocolFramer.Instance) {}
    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult { .ready }
    func wakeup(framer: NWProtocolFramer.Instance) {}
    func stop(framer: NWProtocolFramer.Instance) -> Bool { true }
    func cleanup(framer: NWProtocolFramer.Instance) {}

    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {
        // The content, upper-cased through parseOutput, then the line's end.
        _ = framer.parseOutput(minimumIncompleteLength: messageLength, maximumLength: messageLength) { buffer, _ in
            guard let buffer else { return 0 }
            framer.writeOutput(data: Data(String(decoding: buffer, as: UTF8.self).uppercased().utf8))
            return buffer.count
        }
        framer.writeOutput(data: Data("\r\n".utf8))
        XCTAssertThrowsError(try framer.writeOutputNoCopy(length: 1), "the content was consumed")
    }

    func handleInput(framer: NWProtocolFramer.Instance) -> Int {
        while true {
            var line: String?
            let parsed = framer.parseInput(minimumIncompleteLength: 1, maximumLength: 64 * 1024) { buffer, _ in
                guard let buffer, let end = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return 0 }
                line = String(decoding: buffer[..<end], as: UTF8.self).trimmingCharacters(in: .newlines)
                return end + 1
            }
            guard parsed, let line else { return 0 }
            let message = NWProtocolFramer.Message(instance: framer)
            message["value"] = line
            _ = framer.deliverInputNoCopy(length: 0, message: message, isComplete: true)
        }
    }
}

/// A framer that marks ready from a wakeup and then from an `async` block on another thread, and whose
/// `stop` delays the close until it calls `markFailed`.
final class SlowStartFramer: NWProtocolFramerImplementation {
    static let definition = NWProtocolFramer.Definition(implementation: SlowStartFramer.self)
    static var label: String { "SlowStart" }
    static let events = Locked<[String]>([])

    init(framer: NWProtocolFramer.Instance) {}

    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult {
        Self.events.mutate { $0.append("start") }
        framer.scheduleWakeup(wakeupTime: .milliseconds(30))
        return .willMarkReady
    }

    func wakeup(framer: NWProtocolFramer.Instance) {
        Self.events.mutate { $0.append("wakeup") }
        DispatchQueue.global().async {
            framer.markReady()  // not from a callback: ignored
            framer.async {
                Self.events.mutate { $0.append("async") }
                framer.markReady()
            }
        }
    }

    func stop(framer: NWProtocolFramer.Instance) -> Bool {
        Self.events.mutate { $0.append("stop") }
        framer.async { framer.markFailed(error: nil) }
        return false
    }

    func cleanup(framer: NWProtocolFramer.Instance) { Self.events.mutate { $0.append("cleanup") } }
    func handleInput(framer: NWProtocolFramer.Instance) -> Int { 0 }
    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {}
}

extension FramerConnectionTests {
    func testMetadataOnlyMessagesArriveOneByteAtATime() throws {
        let lines = "+OK\r\n+PONG\r\n+\r\n" + String(repeating: "+x\r\n", count: 20)
        let listener = try plainListener(greeting: Data(lines.utf8))
        let relay = try startRelay(to: Int(listener.port!.rawValue), fault: .segment(maxSegment: 1, delay: 0.001))
        let port = NWEndpoint.Port(rawValue: UInt16(relay.port))!
        let connection = NWConnection(host: "127.0.0.1", port: port, using: framed(.tcp, LineFramer.definition))
        let values = Locked<[String]>([])
        let done = expectation(description: "lines")
        done.expectedFulfillmentCount = 23
        for _ in 0..<23 {
            connection.receiveMessage { content, context, isComplete, error in
                XCTAssertNil(error)
                XCTAssertNil(content, "metadata only")
                XCTAssertTrue(isComplete)
                let message = context?.protocolMetadata(definition: LineFramer.definition) as? NWProtocolFramer.Message
                values.mutate { $0.append(message?["value"] as? String ?? "?") }
                done.fulfill()
            }
        }
        XCTAssertEqual(start(connection).last, .ready)
        wait(for: [done], timeout: shortTimeout * 4)
        XCTAssertEqual(values.value, ["+OK", "+PONG", "+"] + Array(repeating: "+x", count: 20))
    }

    func testParseOutputReadsTheContentAndSendsHeldBeforeReadyGoOutInOrder() throws {
        let listener = try plainListener(greeting: Data())
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, LineFramer.definition))
        let sent = expectation(description: "sent")
        sent.expectedFulfillmentCount = 2
        connection.send(
            content: Data("+ping".utf8),
            completion: .contentProcessed {
                XCTAssertNil($0)
                sent.fulfill()
            })
        connection.send(
            content: Data("+pong".utf8),
            completion: .contentProcessed {
                XCTAssertNil($0)
                sent.fulfill()
            })
        let values = Locked<[String]>([])
        let done = expectation(description: "echoed lines")
        done.expectedFulfillmentCount = 2
        for _ in 0..<2 {
            connection.receiveMessage { _, context, _, _ in
                let message = context?.protocolMetadata(definition: LineFramer.definition) as? NWProtocolFramer.Message
                values.mutate { $0.append(message?["value"] as? String ?? "?") }
                done.fulfill()
            }
        }
        XCTAssertEqual(start(connection).last, .ready)
        wait(for: [sent, done], timeout: shortTimeout)
        XCTAssertEqual(values.value, ["+PING", "+PONG"])
    }

    func testAWakeupAndAnAsyncBlockRunAsCallbacksAndStopDelaysTheCloseUntilMarkFailed() throws {
        SlowStartFramer.events.value = []
        let listener = try plainListener(greeting: Data())
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, SlowStartFramer.definition))
        XCTAssertEqual(start(connection), [.preparing, .ready])
        XCTAssertEqual(SlowStartFramer.events.value, ["start", "wakeup", "async"])
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = { if $0 == .cancelled { cancelled.fulfill() } }
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertEqual(SlowStartFramer.events.value, ["start", "wakeup", "async", "stop", "cleanup"])
    }

    func testAStackWithTwoFramersOrAFramerBelowTLSIsRefused() throws {
        let two = framed(framed(.tcp, LineFramer.definition), LengthPrefixedFramer.definition)
        XCTAssertThrowsError(try NWListener(using: two, on: .any))
        let below = NWParameters.tls
        below.defaultProtocolStack.applicationProtocols.append(NWProtocolFramer.Options(definition: LineFramer.definition))
        let connection = NWConnection(host: "127.0.0.1", port: 9, using: below)
        XCTAssertEqual(start(connection).last, .failed(.posix(.EPROTONOSUPPORT)))
    }
}

/// STARTTLS as a framer does it: the client asks in plain text, the server answers "OK", and both put
/// TLS below the framer (`prependApplicationProtocol`) before they mark ready; then everything passes
/// through, over TLS. The TLS options come in the framer's options, under "tls".
final class StartTLSFramer: NWProtocolFramerImplementation {
    static let definition = NWProtocolFramer.Definition(implementation: StartTLSFramer.self)
    static var label: String { "StartTLS" }
    private let isServer: Bool

    init(framer: NWProtocolFramer.Instance) {
        isServer = framer.options["server"] as? Bool ?? false
    }

    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult {
        if !isServer { framer.writeOutput(data: Data("STARTTLS\n".utf8)) }
        return .willMarkReady
    }

    func handleInput(framer: NWProtocolFramer.Instance) -> Int {
        let expected = Data((isServer ? "STARTTLS\n" : "OK\n").utf8)
        var line: Data?
        let parsed = framer.parseInput(minimumIncompleteLength: expected.count, maximumLength: expected.count) { buffer, _ in
            guard let buffer, buffer.count == expected.count else { return 0 }
            line = Data(buffer)
            return buffer.count
        }
        guard parsed, let line else { return expected.count }
        guard line == expected, let tls = framer.options["tls"] as? NWProtocolTLS.Options else {
            framer.markFailed(error: .posix(.EPROTO))
            return 0
        }
        if isServer { framer.writeOutput(data: Data("OK\n".utf8)) }
        do {
            try framer.prependApplicationProtocol(options: tls)
        } catch {
            framer.markFailed(error: error as? NWError)
            return 0
        }
        XCTAssertThrowsError(try framer.prependApplicationProtocol(options: tls), "once")
        framer.passThroughInput()
        framer.passThroughOutput()
        framer.markReady()
        return 0
    }

    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool) {}
    func wakeup(framer: NWProtocolFramer.Instance) {}
    func stop(framer: NWProtocolFramer.Instance) -> Bool { true }
    func cleanup(framer: NWProtocolFramer.Instance) {}
}

extension FramerConnectionTests {
    func testAFramerPrependsTLSAfterAPlainTextStartTLSExchange() throws {
        let serverTLS = NWProtocolTLS.Options()
        sec_protocol_options_set_local_identity(serverTLS.securityProtocolOptions, try serverIdentity())
        let serverFramer = NWProtocolFramer.Options(definition: StartTLSFramer.definition)
        serverFramer["server"] = true
        serverFramer["tls"] = serverTLS
        let serverParameters = NWParameters.tcp
        serverParameters.defaultProtocolStack.applicationProtocols.insert(serverFramer, at: 0)
        let listener = try NWListener(using: serverParameters, on: .any)
        let serverQueue = DispatchQueue(label: "starttls-server")
        listener.newConnectionHandler = { $0.startEchoing(on: serverQueue) }
        try startListener(listener)

        let clientTLS = NWProtocolTLS.Options()
        sec_protocol_options_set_verify_block(clientTLS.securityProtocolOptions, { _, _, complete in complete(true) }, queue)
        let clientFramer = NWProtocolFramer.Options(definition: StartTLSFramer.definition)
        clientFramer["tls"] = clientTLS
        let parameters = NWParameters.tcp
        parameters.defaultProtocolStack.applicationProtocols.insert(clientFramer, at: 0)
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: parameters)
        XCTAssertEqual(start(connection), [.preparing, .ready])

        let echoed = expectation(description: "echo over TLS")
        connection.send(content: Data("secret".utf8), completion: .contentProcessed { XCTAssertNil($0) })
        connection.receive(minimumIncompleteLength: 6, maximumLength: 6) { content, _, _, error in
            XCTAssertNil(error)
            XCTAssertEqual(content.map { String(decoding: $0, as: UTF8.self) }, "secret")
            echoed.fulfill()
        }
        wait(for: [echoed], timeout: shortTimeout)
        XCTAssertNotNil(connection.metadata(definition: NWProtocolTLS.definition) as? NWProtocolTLS.Metadata, "TLS was negotiated")
    }
}

extension FramerConnectionTests {
    func testAPeerThatClosesDuringTheHandshakeFailsAnAcceptedConnection() throws {
        // The server's framer waits for "HELLO"; the client sends half of it and closes.
        let failed = expectation(description: "server side failed")
        let listener = try NWListener(using: framed(.tcp, HelloFramer.definition), on: .any)
        let serverQueue = DispatchQueue(label: "handshake-server")
        listener.newConnectionHandler = { connection in
            connection.stateUpdateHandler = { state in
                if case .failed(let error) = state {
                    XCTAssertEqual(error, .posix(.ECONNRESET))
                    failed.fulfill()
                    connection.cancel()
                }
            }
            connection.start(queue: serverQueue)
        }
        try startListener(listener)
        let client = NWConnection(host: "127.0.0.1", port: listener.port!, using: .tcp)
        XCTAssertEqual(start(client).last, .ready)
        client.send(content: Data("HEL".utf8), contentContext: .finalMessage, isComplete: true, completion: .idempotent)
        wait(for: [failed], timeout: shortTimeout)
    }
}

extension FramerConnectionTests {
    func testAFinalMessageWithoutContentHalfClosesWithoutAFrameAndThePeersEndArrives() throws {
        let listener = try framedEchoListener(.tcp)
        let connection = NWConnection(host: "127.0.0.1", port: listener.port!, using: framed(.tcp, LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        XCTAssertEqual(exchange(connection, [(7, Data("last".utf8))]).map(\.0), [7])
        let closed = expectation(description: "half-closed")
        connection.send(
            content: nil, contentContext: .finalMessage, isComplete: true,
            completion: .contentProcessed {
                XCTAssertNil($0)
                closed.fulfill()
            })
        let ended = expectation(description: "the peer's end")
        connection.receiveMessage { content, context, isComplete, error in
            XCTAssertNil(error)
            XCTAssertNil(content)
            XCTAssertTrue(isComplete)
            XCTAssertEqual(context?.isFinal, true, "the stream's end, in a final context")
            XCTAssertNil(context?.protocolMetadata(definition: LengthPrefixedFramer.definition), "no message: the end")
            ended.fulfill()
        }
        wait(for: [closed, ended], timeout: shortTimeout)
    }
}

extension FramerConnectionTests {
    /// socat echoes the bytes: the framer parses its own frames back, from a peer that is not this
    /// package.
    func testFramedMessagesEchoedBySocat() throws {
        let port = try XCTUnwrap(NWEndpoint.Port(rawValue: UInt16(try startSocatEcho())))
        let connection = NWConnection(host: "127.0.0.1", port: port, using: framed(.tcp, LengthPrefixedFramer.definition))
        XCTAssertEqual(start(connection).last, .ready)
        assertEchoed(exchange(connection, Self.sample))
    }
}

extension FramerConnectionTests {
    /// NetworkFramework.md's example, word for word between its set-up and checks.
    func testTheGuidesFramerExample() throws {
        let listener = try framedEchoListener(.tcp)
        let port = listener.port!
        let received = expectation(description: "reply")
        let replyType = Locked<UInt8?>(nil)

        let parameters = NWParameters.tcp  // or .tls: the framer goes above TLS
        let framer = NWProtocolFramer.Options(definition: LengthPrefixedFramer.definition)
        parameters.defaultProtocolStack.applicationProtocols.insert(framer, at: 0)
        let connection = NWConnection(host: "127.0.0.1", port: port, using: parameters)
        connection.start(queue: queue)

        let move = NWConnection.ContentContext(identifier: "move", metadata: [NWProtocolFramer.Message(frameType: 1)])
        connection.send(content: Data("e2e4".utf8), contentContext: move, isComplete: true, completion: .idempotent)
        connection.receiveMessage { content, context, isComplete, error in
            let message = context?.protocolMetadata(definition: LengthPrefixedFramer.definition) as? NWProtocolFramer.Message
            replyType.value = message?.frameType
            received.fulfill()
        }

        addCleanup { connection.cancel() }
        wait(for: [received], timeout: shortTimeout)
        XCTAssertEqual(replyType.value, 1)
    }
}
