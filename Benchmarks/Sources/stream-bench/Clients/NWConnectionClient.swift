// nwconnection: Network.framework's `NWConnection` (SocketStreamsNetwork) as Apple-platform code uses
// it: a serial dispatch queue of its own, handlers and completions there, each workload's next send or
// receive issued from the completion of the last. The benchmark thread only starts each workload and
// waits.

import Foundation
import SocketStreamsNetwork

struct NWConnectionClient: BenchmarkClient {
    /// The connections' queue: one per measurement process, so the warm-up starts the machinery (the
    /// queue's reactor) that the measurement then uses.
    static let queue = DispatchQueue(label: "stream-bench.nwconnection")

    /// A workload's state, touched only on the queue (see `QueueDriver`).
    class Driver: QueueDriver, @unchecked Sendable {
        init() { super.init(queue: NWConnectionClient.queue, name: "NWConnection") }

        /// A connection to the server on 127.0.0.1, with `TCP_NODELAY` (and, `framed`, the length-prefix
        /// framer of `nwconnection-framer` on top), started on the queue; `ready` runs there once it is
        /// ready.
        func connect(port: UInt16, framed: Bool = false, ready: @escaping @Sendable (NWConnection) -> Void) -> NWConnection {
            let tcp = NWProtocolTCP.Options()
            tcp.noDelay = true
            let parameters = NWParameters(tls: NWConnectionClient.tls, tcp: tcp)
            if framed {
                parameters.defaultProtocolStack.applicationProtocols.insert(
                    NWProtocolFramer.Options(definition: BenchLengthFramer.definition), at: 0)
            }
            let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: port)!, using: parameters)
            connection.stateUpdateHandler = { [self] state in
                switch state {
                case .ready: ready(connection)
                case .waiting(let error), .failed(let error):
                    if !done, failure == nil { failure = "connection: \(error)" }
                default: break
                }
            }
            connection.start(queue: NWConnectionClient.queue)
            return connection
        }

        /// Records an error a completion got (the workload fails).
        func check(_ error: NWError?, _ what: String) -> Bool {
            guard let error else { return true }
            if !done, failure == nil { failure = "\(what): \(error)" }
            return false
        }
    }

    /// For the TLS workloads, TLS 1.3 whose verify block trusts exactly the server's certificate (as
    /// Apple-platform code pins a private CA: `SecTrustSetAnchorCertificates`, then the evaluation);
    /// nil for the plain ones. Set once, before the first connection.
    nonisolated(unsafe) static var tls: NWProtocolTLS.Options?

    /// Sets `tls` up from the CA file the TLS workloads give; session resumption (on by default, as on
    /// Apple platforms) only for `tls-reconnect`.
    static func useTLS(caFile: String, resumes: Bool) throws {
        let pem = try String(contentsOfFile: caFile, encoding: .utf8)
        let base64 = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        guard let der = Data(base64Encoded: base64), let anchor = SecCertificateCreateWithData(nil, der as CFData) else {
            throw BenchError("nwconnection: no certificate in \(caFile)")
        }
        let options = NWProtocolTLS.Options()
        sec_protocol_options_set_min_tls_protocol_version(options.securityProtocolOptions, .TLSv13)
        sec_protocol_options_set_tls_resumption_enabled(options.securityProtocolOptions, resumes)
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { _, trust, complete in
                let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
                SecTrustSetAnchorCertificates(secTrust, [anchor] as CFArray)
                SecTrustSetAnchorCertificatesOnly(secTrust, true)
                complete(SecTrustEvaluateWithError(secTrust, nil))
            }, queue)
        tls = options
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    final class Download: Driver, @unchecked Sendable {
        var received = 0

        func receive(_ connection: NWConnection) {
            connection.receive(minimumIncompleteLength: 1, maximumLength: Payload.chunkSize) { [self] data, _, isComplete, error in
                events += 1
                guard check(error, "download") else { return }
                received += data?.count ?? 0
                if isComplete {
                    done = true
                    connection.cancel()
                } else {
                    receive(connection)
                }
            }
        }
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        let driver = Download()
        let stopwatch = Stopwatch()
        let connection = driver.connect(port: port) { _ in }
        connection.send(content: Request.download(bytes: UInt64(totalBytes)).encoded, completion: .idempotent)
        driver.receive(connection)
        try driver.run()
        try verifyCount("download", received: driver.received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    final class Upload: Driver, @unchecked Sendable {
        var count: UInt64?
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        let chunk = Data((0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) })
        let driver = Upload()
        let stopwatch = Stopwatch()
        let connection = driver.connect(port: port) { _ in }
        connection.send(content: Request.upload(bytes: UInt64(totalBytes)).encoded, completion: .idempotent)
        var remaining = totalBytes
        while remaining > 0 {
            let count = min(chunk.count, remaining)
            connection.send(content: count == chunk.count ? chunk : chunk.prefix(count), completion: .idempotent)
            remaining -= count
        }
        connection.receive(minimumIncompleteLength: 8, maximumLength: 8) { data, _, _, error in
            driver.events += 1
            guard driver.check(error, "upload") else { return }
            driver.count = Payload.decodeCount(Array(data ?? Data()))
            driver.done = true
        }
        try driver.run()
        connection.cancel()
        try verifyCount("upload (server's count)", received: Int(driver.count ?? 0), expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    final class PingPong: Driver, @unchecked Sendable {
        var messages: [Data] = []
        /// The same messages as arrays, which the echo is compared with (as the other clients do).
        var bytes: [[UInt8]] = []
        var remaining = 0

        func round(_ connection: NWConnection, _ index: Int) {
            let message = messages[index & 1]
            connection.send(content: message, completion: .idempotent)
            connection.receive(minimumIncompleteLength: message.count, maximumLength: message.count) { [self] data, _, _, error in
                events += 1
                guard check(error, "ping-pong") else { return }
                guard let data, Payload.same(data, bytes[index & 1]) else {
                    failure = "ping-pong: echo \(index) differs from the message sent"
                    return
                }
                remaining -= 1
                if remaining == 0 {
                    done = true
                } else {
                    round(connection, index + 1)
                }
            }
        }
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let driver = PingPong()
        driver.bytes = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        driver.messages = driver.bytes.map { Data($0) }
        driver.remaining = roundTrips
        let stopwatch = Stopwatch()
        let connection = driver.connect(port: port) { _ in }
        connection.send(content: Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded, completion: .idempotent)
        driver.round(connection, 0)
        try driver.run()
        connection.cancel()
        return stopwatch.elapsedSeconds
    }

    final class Connect: Driver, @unchecked Sendable {
        var port: UInt16 = 0
        var remaining = 0

        func next() {
            _ = connect(port: port) { [self] connection in
                connection.send(content: Request.connect.encoded, completion: .idempotent)
                connection.receive(minimumIncompleteLength: 1, maximumLength: 1) { [self] data, _, _, error in
                    events += 1
                    guard check(error, "connect") else { return }
                    guard let byte = data?.first, byte == Request.connectReply else {
                        failure = "connect: unexpected reply \(String(describing: data))"
                        return
                    }
                    connection.cancel()
                    remaining -= 1
                    if remaining == 0 { done = true } else { next() }
                }
            }
        }
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let driver = Connect()
        driver.port = port
        driver.remaining = count
        let stopwatch = Stopwatch()
        Self.queue.async { driver.next() }
        try driver.run()
        return stopwatch.elapsedSeconds
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.nwConnection, .many1k)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.nwConnection, .idle)
    }
}
