// TLS for the TLS workloads: a certificate made at run time, OpenSSL contexts for the server and
// the baseline client, and the settings the SocketStreams clients apply to every pair. The
// server and the baseline use OpenSSL directly (the limit a C program on the same library
// reaches); the SocketStreams clients use the library's TLS.

import COpenSSL
import Foundation
import Glibc
import SocketStreams

enum BenchTLS {
    /// Set in a `measure` child for a TLS workload; SocketStreams clients apply it to every pair.
    nonisolated(unsafe) static var clientSettings: TLSSettings?

    /// Applies `clientSettings` to a new pair (through either stream).
    static func apply(to stream: Stream) {
        if let clientSettings { _ = stream.setProperty(clientSettings, forKey: .tlsSettingsKey) }
    }

    /// The settings every SocketStreams client uses: TLS 1.3 only, trusting exactly the server's
    /// certificate, 127.0.0.1 checked against it; session resumption (on by default) only for
    /// `tls-reconnect`, so the other workloads' handshakes are full ones.
    static func settings(caFile: String, resumes: Bool) -> TLSSettings {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(caFile)]
        settings.minimumVersion = .v1_3
        settings.resumesSessions = resumes
        return settings
    }

    /// Writes a fresh self-signed certificate for 127.0.0.1 and its key into `directory`.
    static func makeCertificate(in directory: String) throws -> (certificate: String, key: String) {
        let (certificatePEM, keyPEM) = try TLSIdentity.makeSelfSignedPEM(
            commonName: "stream-bench", dnsNames: [],
            ipAddresses: ["127.0.0.1"])
        let certificate = directory + "/bench-certificate.pem"
        let key = directory + "/bench-key.pem"
        try certificatePEM.write(to: URL(fileURLWithPath: certificate))
        try keyPEM.write(to: URL(fileURLWithPath: key))
        return (certificate, key)
    }

    /// The server's context: TLS 1.3, the certificate and key, partial writes.
    static func serverContext(certificate: String, key: String) throws -> OpaquePointer {
        OpenSSLLibrary.prepare()
        guard let context = SSL_CTX_new(TLS_server_method()) else { throw opensslError("SSL_CTX_new") }
        guard cssl_ctx_set_min_proto_version(context, cssl_tls1_3_version()) == 1,
            SSL_CTX_use_certificate_chain_file(context, certificate) == 1,
            SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1
        else { throw opensslError("server context") }
        _ = cssl_ctx_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        return context
    }

    /// The baseline client's context: TLS 1.3, verifying the server against `caFile`; with `resumes`, the
    /// client keeps sessions (each connection hands its own to the next, `SSL_get1_session`).
    static func clientContext(caFile: String, resumes: Bool) throws -> OpaquePointer {
        OpenSSLLibrary.prepare()
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw opensslError("SSL_CTX_new") }
        guard cssl_ctx_set_min_proto_version(context, cssl_tls1_3_version()) == 1,
            SSL_CTX_load_verify_locations(context, caFile, nil) == 1
        else { throw opensslError("client context") }
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        _ = cssl_ctx_set_session_cache_mode(context, Int(resumes ? SSL_SESS_CACHE_CLIENT : SSL_SESS_CACHE_OFF))
        return context
    }

    static func opensslError(_ what: String) -> BenchError {
        var text = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(ERR_get_error(), &text, text.count)
        return BenchError("\(what): \(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
    }
}

/// A blocking socket with OpenSSL on it: the baseline TLS client's connection.
final class BlockingTLSConnection {
    let fd: Int32
    let ssl: OpaquePointer

    /// Connects and shakes hands, offering `session` (an earlier connection's) if given.
    init(port: UInt16, context: OpaquePointer, session: OpaquePointer? = nil) throws {
        fd = try Posix.connectToLoopback(port: port)
        guard let ssl = SSL_new(context) else {
            Posix.close(fd)
            throw BenchTLS.opensslError("SSL_new")
        }
        self.ssl = ssl
        _ = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1")
        SSL_set_fd(ssl, fd)
        if let session { SSL_set_session(ssl, session) }
        guard SSL_connect(ssl) == 1 else {
            SSL_free(ssl)
            Posix.close(fd)
            throw BenchTLS.opensslError("SSL_connect")
        }
    }

    func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            var written = 0
            guard SSL_write_ex(ssl, bytes.baseAddress! + offset, bytes.count - offset, &written) == 1 else {
                throw BenchTLS.opensslError("SSL_write_ex")
            }
            offset += written
        }
    }

    func writeAll(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try writeAll($0) }
    }

    /// Reads up to `count` bytes; 0 at the end (close_notify or EOF).
    func read(_ buffer: UnsafeMutableRawPointer, count: Int) throws -> Int {
        var done = 0
        if SSL_read_ex(ssl, buffer, count, &done) == 1 { return done }
        switch SSL_get_error(ssl, 0) {
        case SSL_ERROR_ZERO_RETURN: return 0
        case SSL_ERROR_SYSCALL where ERR_peek_error() == 0: return 0
        default: throw BenchTLS.opensslError("SSL_read_ex")
        }
    }

    func readExactly(_ buffer: UnsafeMutableRawBufferPointer) throws {
        var offset = 0
        while offset < buffer.count {
            let n = try read(buffer.baseAddress! + offset, count: buffer.count - offset)
            if n == 0 { throw BenchError("short read: got \(offset) of \(buffer.count) bytes before end of stream") }
            offset += n
        }
    }

    /// The connection's session (a reference the caller frees), or nil if it cannot be resumed.
    func resumableSession() -> OpaquePointer? {
        guard let session = SSL_get1_session(ssl) else { return nil }
        guard SSL_SESSION_is_resumable(session) == 1 else {
            SSL_SESSION_free(session)
            return nil
        }
        return session
    }

    var resumed: Bool { SSL_session_reused(ssl) == 1 }

    func close() {
        _ = SSL_shutdown(ssl)
        SSL_free(ssl)
        Posix.close(fd)
    }
}

/// The TLS baseline: OpenSSL's own calls on blocking sockets, the same workloads as `BaselineClient`.
final class BaselineTLSClient: BenchmarkClient {
    /// Owned: freed with the client, so a leak checker sees every OpenSSL allocation given back.
    let context: OpaquePointer
    /// tls-reconnect: each connection offers the session of the one before.
    let resumes: Bool

    init(context: OpaquePointer, resumes: Bool) {
        self.context = context
        self.resumes = resumes
    }

    deinit {
        SSL_CTX_free(context)
    }

    func many(port: UInt16, connections: Int, roundTrips: Int, messageSize: Int) throws -> Double {
        throw unsupported(.baseline, .many1k)
    }

    func idle(port: UInt16, pairs: Int) throws -> (none: MemorySnapshot, open: MemorySnapshot) {
        throw unsupported(.baseline, .idle)
    }

    func warmUp(port: UInt16) throws {
        _ = try connect(port: port, count: 1)
    }

    func download(port: UInt16, totalBytes: Int) throws -> Double {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Payload.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        let stopwatch = Stopwatch()
        let connection = try BlockingTLSConnection(port: port, context: context)
        defer { connection.close() }
        try connection.writeAll(Request.download(bytes: UInt64(totalBytes)).encoded)
        var received = 0
        while true {
            let n = try connection.read(buffer.baseAddress!, count: buffer.count)
            if n == 0 { break }
            received += n
        }
        try verifyCount("download", received: received, expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func upload(port: UInt16, totalBytes: Int) throws -> Double {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Payload.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        Payload.fillChunk(buffer)
        let stopwatch = Stopwatch()
        let connection = try BlockingTLSConnection(port: port, context: context)
        defer { connection.close() }
        try connection.writeAll(Request.upload(bytes: UInt64(totalBytes)).encoded)
        var remaining = totalBytes
        while remaining > 0 {
            let count = min(buffer.count, remaining)
            try connection.writeAll(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            remaining -= count
        }
        var reply = [UInt8](repeating: 0, count: 8)
        try reply.withUnsafeMutableBytes { try connection.readExactly($0) }
        try verifyCount("upload (server's count)", received: Int(Payload.decodeCount(reply)), expected: totalBytes)
        return stopwatch.elapsedSeconds
    }

    func pingPong(port: UInt16, roundTrips: Int, messageSize: Int) throws -> Double {
        let messages = (0..<2).map { Payload.message(roundTrip: $0, size: messageSize) }
        var echo = [UInt8](repeating: 0, count: messageSize)
        let stopwatch = Stopwatch()
        let connection = try BlockingTLSConnection(port: port, context: context)
        defer { connection.close() }
        try connection.writeAll(Request.echo(bytes: UInt64(roundTrips * messageSize)).encoded)
        for i in 0..<roundTrips {
            let message = messages[i & 1]
            try connection.writeAll(message)
            try echo.withUnsafeMutableBytes { try connection.readExactly($0) }
            if !Payload.same(echo, message) { throw BenchError("ping-pong: echo \(i) differs from the message sent") }
        }
        return stopwatch.elapsedSeconds
    }

    func connect(port: UInt16, count: Int) throws -> Double {
        let header = Request.connect.encoded
        var reply: UInt8 = 0
        var session: OpaquePointer?
        defer { if let session { SSL_SESSION_free(session) } }
        var resumed = 0
        let stopwatch = Stopwatch()
        for _ in 0..<count {
            let connection = try BlockingTLSConnection(port: port, context: context, session: session)
            defer { connection.close() }
            try connection.writeAll(header)
            try withUnsafeMutableBytes(of: &reply) { try connection.readExactly($0) }
            if reply != Request.connectReply { throw BenchError("connect: unexpected reply byte \(reply)") }
            if resumes {
                if connection.resumed { resumed += 1 }
                if let session { SSL_SESSION_free(session) }
                session = connection.resumableSession()  // the tickets came before the reply byte
            }
        }
        let seconds = stopwatch.elapsedSeconds
        if resumes, resumed < count - 1 { throw BenchError("tls-reconnect: \(resumed) of \(count - 1) reconnects resumed") }
        return seconds
    }
}
