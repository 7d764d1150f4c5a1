// NWConnection and NWListener over TLS, as Apple-platform code sets them up: a verify block that pins
// the server's CA through SecTrust, a TLS listener whose identity comes from a PKCS#12 archive, a client
// certificate from `set_local_identity`, and what `metadata(definition:)` and `currentPath` report.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

final class ConnectionTLSTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "ConnectionTLSTests")

    /// An identity from a PKCS#12 archive of the test PKI (`SecPKCS12Import`), as `sec_identity_t`.
    private func identity(_ archivePath: String) throws -> sec_identity_t {
        var items: CFArray?
        let archive = try Data(contentsOf: URL(fileURLWithPath: archivePath))
        let options = [kSecImportExportPassphrase as String: TestPKI.pkcs12Password] as CFDictionary
        XCTAssertEqual(SecPKCS12Import(archive as CFData, options, &items), errSecSuccess)
        let item = try XCTUnwrap((items as? [[String: Any]])?.first)
        let secIdentity = try XCTUnwrap(item[kSecImportItemIdentity as String] as? SecIdentity)
        return try XCTUnwrap(sec_identity_create(secIdentity))
    }

    /// The CA certificate, as pinning code loads one (DER from the bundle).
    private func caCertificate() throws -> SecCertificate {
        let der = try runCommand("openssl", ["x509", "-in", try pki.caCertificate, "-outform", "DER"]).stdout
        return try XCTUnwrap(SecCertificateCreateWithData(nil, der as CFData))
    }

    /// TLS client options whose verify block trusts only `anchor` (pinning through SecTrust).
    private func pinnedOptions(_ anchor: SecCertificate, verdicts: Locked<[Bool]>) -> NWProtocolTLS.Options {
        let options = NWProtocolTLS.Options()
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { _, trust, complete in
                let secTrust = sec_trust_copy_ref(trust).takeRetainedValue()
                SecTrustSetAnchorCertificates(secTrust, [anchor] as CFArray)
                SecTrustSetAnchorCertificatesOnly(secTrust, true)
                var error: CFError?
                let trusted = SecTrustEvaluateWithError(secTrust, &error)
                verdicts.mutate { $0.append(trusted) }
                complete(trusted)
            }, queue)
        return options
    }

    /// A TLS echo listener whose identity is the test PKI's server PKCS#12; returns it once ready.
    private func tlsEchoListener(requireClientCertificate: Bool = false) throws -> NWListener {
        let options = NWProtocolTLS.Options()
        sec_protocol_options_set_local_identity(options.securityProtocolOptions, try identity(try pki.serverPKCS12))
        if requireClientCertificate {
            sec_protocol_options_set_peer_authentication_required(options.securityProtocolOptions, true)
        }
        let listener = try NWListener(using: NWParameters(tls: options), on: .any)
        let serverQueue = DispatchQueue(label: "tls-server")
        listener.newConnectionHandler = { incoming in
            incoming.startEchoing(on: serverQueue)
        }
        startAndAwaitReady(listener, on: queue)
        return listener
    }

    /// Starts `connection`, waits for `.ready` (or fails the test with the state it reached instead).
    private func start(_ connection: NWConnection) -> [NWConnection.State] {
        startAndSettle(connection, on: queue, timeout: shortTimeout)
    }

    private func echo(_ connection: NWConnection, _ text: String) -> String? {
        let done = expectation(description: "echo")
        let reply = Locked<String?>(nil)
        connection.send(content: Data(text.utf8), completion: .contentProcessed { XCTAssertNil($0) })
        connection.receive(minimumIncompleteLength: text.utf8.count, maximumLength: text.utf8.count) { data, _, _, _ in
            reply.value = data.map { String(decoding: $0, as: UTF8.self) }
            done.fulfill()
        }
        wait(for: [done], timeout: shortTimeout)
        return reply.value
    }

    func testPinnedCAVerifyBlockAgainstATLSListener() throws {
        let listener = try tlsEchoListener()
        let verdicts = Locked<[Bool]>([])
        let connection = NWConnection(
            host: "localhost", port: try XCTUnwrap(listener.port),
            using: NWParameters(tls: pinnedOptions(try caCertificate(), verdicts: verdicts)))
        XCTAssertEqual(start(connection).last, .ready)
        XCTAssertEqual(verdicts.value, [true])
        XCTAssertEqual(echo(connection, "over tls"), "over tls")
        let metadata = try XCTUnwrap(connection.metadata(definition: NWProtocolTLS.definition) as? NWProtocolTLS.Metadata)
        XCTAssertEqual(sec_protocol_metadata_get_negotiated_tls_protocol_version(metadata.securityProtocolMetadata), .TLSv13)
    }

    func testAVerifyBlockThatRefusesFailsTheConnectionWithATLSError() throws {
        let listener = try tlsEchoListener()
        let options = NWProtocolTLS.Options()
        sec_protocol_options_set_verify_block(options.securityProtocolOptions, { _, _, complete in complete(false) }, queue)
        let connection = NWConnection(host: "localhost", port: try XCTUnwrap(listener.port), using: NWParameters(tls: options))
        XCTAssertEqual(start(connection), [.preparing, .failed(.tls(-9808))])
    }

    func testTheSystemStoreRefusesTheTestCAWithATLSError() throws {
        let listener = try tlsEchoListener()
        let connection = NWConnection(host: "localhost", port: try XCTUnwrap(listener.port), using: .tls)
        let states = start(connection)
        guard case .failed(.tls(let status))? = states.last else { return XCTFail("\(states)") }
        XCTAssertTrue((-9850)...(-9800) ~= status, "\(status)")
    }

    /// A client certificate from `set_local_identity` (a PKCS#12 identity) reaches `openssl s_server`
    /// that requires one and verifies it against the test CA.
    func testAClientCertificateFromSetLocalIdentityReachesAServerThatRequiresOne() throws {
        let pki = try self.pki
        let (port, _) = try startOpenSSLServer([
            "-www", "-cert", pki.serverCertificate, "-key", pki.serverKey, "-CAfile", pki.caCertificate, "-Verify", "1",
            "-verify_return_error",
        ])
        let verdicts = Locked<[Bool]>([])
        let options = pinnedOptions(try caCertificate(), verdicts: verdicts)
        sec_protocol_options_set_local_identity(options.securityProtocolOptions, try identity(pki.clientPKCS12))
        let connection = NWConnection(
            host: "localhost", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: NWParameters(tls: options))
        XCTAssertEqual(start(connection).last, .ready)
        connection.send(content: Data("GET / HTTP/1.0\r\n\r\n".utf8), completion: .idempotent)
        let page = expectation(description: "page")
        let reply = Locked<String>("")
        connection.receiveMessage { data, _, _, _ in
            reply.value = String(decoding: data ?? Data(), as: UTF8.self)
            page.fulfill()
        }
        wait(for: [page], timeout: shortTimeout)
        // With -Verify 1 and -verify_return_error the server ends a handshake without a client
        // certificate it trusts: the page is the proof.
        XCTAssertTrue(reply.value.hasPrefix("HTTP/1.0 200 ok"), reply.value)
    }

    func testAListenerWithoutAnIdentityFails() throws {
        let listener = try NWListener(using: .tls, on: .any)
        let failed = expectation(description: "failed")
        listener.stateUpdateHandler = { state in if case .failed(.tls) = state { failed.fulfill() } }
        listener.start(queue: queue)
        addCleanup { listener.cancel() }
        wait(for: [failed], timeout: shortTimeout)
    }

    /// A ready connection's path: satisfied, over `lo`, with its two endpoints; nil after cancel.
    func testAReadyConnectionsPathNamesItsInterfaceAndEndpoints() throws {
        let port = try startSocatEcho()
        let connection = NWConnection(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .tcp)
        XCTAssertNil(connection.currentPath)
        let reported = Locked<[NWPath]>([])
        connection.pathUpdateHandler = { path in reported.mutate { $0.append(path) } }
        XCTAssertEqual(start(connection).last, .ready)
        let path = try XCTUnwrap(connection.currentPath)
        XCTAssertEqual(reported.value, [path])
        XCTAssertEqual(path.status, .satisfied)
        XCTAssertEqual(path.availableInterfaces.map(\.name), ["lo"])
        XCTAssertTrue(path.usesInterfaceType(.loopback))
        XCTAssertTrue(path.supportsIPv4)
        XCTAssertEqual(path.remoteEndpoint, .hostPort(host: "127.0.0.1", port: NWEndpoint.Port(rawValue: UInt16(port))!))
        guard case .hostPort(.ipv4(let local), let localPort)? = path.localEndpoint else {
            return XCTFail("\(String(describing: path.localEndpoint))")
        }
        XCTAssertTrue(local.isLoopback)
        XCTAssertNotEqual(localPort, .any)
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = { if $0 == .cancelled { cancelled.fulfill() } }
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        XCTAssertNil(connection.currentPath)
    }
}
