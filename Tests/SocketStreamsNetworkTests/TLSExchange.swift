import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

/// What a GET over TLS came to.
struct TLSExchangeOutcome {
    var error: NSError?
    /// The connection info at the first `hasSpaceAvailable` (the handshake done).
    var info: TLSConnectionInfo?
    var received: String
}

extension SocketStreamsTestCase {
    /// GET / against `openssl s_server -www` with `arguments`, from a client whose TLS options `configure`
    /// sets: the settings the options come to (`settings(role: .client, endpointHost: "localhost")`, what
    /// NWConnection asks for) on a plain stream pair.
    func tlsExchange(_ arguments: [String], _ configure: (sec_protocol_options_t) throws -> Void) throws -> TLSExchangeOutcome {
        let port = try startOpenSSLServer(["-www"] + arguments).port
        let options = NWProtocolTLS.Options()
        try configure(options.securityProtocolOptions)
        let settings = try options.settings(role: .client, endpointHost: "localhost")
        let pair = makePair(host: "localhost", port: port)
        XCTAssertTrue(pair.output.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n")
        var info: TLSConnectionInfo?
        recorder.onEvent = { stream, event in
            guard event == .hasSpaceAvailable, info == nil else { return }
            info = stream.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo
        }
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(
            runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input) },
            recorder.trace)
        return TLSExchangeOutcome(error: pair.input.streamError as NSError?, info: info, received: recorder.snapshot.receivedString)
    }

    /// The certificate in a PEM file, its DER made by `openssl x509` (not this package's parser).
    func secCertificate(_ path: String) throws -> SecCertificate {
        let der = try runCommand("openssl", ["x509", "-in", path, "-outform", "DER"]).stdout
        return try XCTUnwrap(SecCertificateCreateWithData(nil, der as CFData))
    }

    /// The identity of the test PKI's client PKCS#12, through `SecPKCS12Import`.
    func clientSecIdentity() throws -> SecIdentity {
        var items: CFArray?
        let archive = try Data(contentsOf: URL(fileURLWithPath: try pki.clientPKCS12))
        let options = [kSecImportExportPassphrase as String: TestPKI.pkcs12Password] as CFDictionary
        XCTAssertEqual(SecPKCS12Import(archive as CFData, options, &items), errSecSuccess)
        let item = try XCTUnwrap((items as? [[String: Any]])?.first)
        return try XCTUnwrap(item[kSecImportItemIdentity as String] as? SecIdentity)
    }
}
