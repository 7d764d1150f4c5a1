import CocoaAsyncSocket
import TestPeers
import XCTest

/// startTLS as GCDAsyncSocket code does it: manual trust that pins the server's certificate, against
/// openssl s_server and GCDAsyncSocket's own listener.
final class GCDAsyncSocketTLSTests: XCTestCase {
    let queue = DispatchQueue(label: "tls delegate")

    func testManualTrustPinningTheServerCertificate() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try Peer.opensslReverse(certificate: certificate.certificate, key: certificate.key)
        defer { peer.stop() }
        let recorder = Recorder()
        recorder.trustDecision = { trust in trust.certificateChain.first == certificate.der }
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port, withTimeout: 5)
        client.startTLS([
            GCDAsyncSocketManuallyEvaluateTrust: NSNumber(value: true),
            kCFStreamSSLPeerName as String: NSString(string: "localhost"),
        ])
        client.write("hello\n".data(using: .utf8)!, withTimeout: 5, tag: 1)  // waits for the trust decision
        client.readData(to: GCDAsyncSocket.lfData(), withTimeout: 5, tag: 2)
        recorder.wait(for: "read 2")
        // Self-signed: OpenSSL's verdict is X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT (18); the pin decides.
        XCTAssertEqual(recorder.events, ["connect 127.0.0.1 \(port)", "trust 18 1", "secure", "wrote 1", "read 2 olleh\n"])
        XCTAssertTrue(client.isSecure)
        client.disconnect()
    }

    func testRejectedTrustDisconnectsBeforeAnythingIsSent() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try Peer.opensslReverse(certificate: certificate.certificate, key: certificate.key)
        defer { peer.stop() }
        let recorder = Recorder()
        recorder.trustDecision = { _ in false }
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        // CoreFoundation's objects in the [String: NSObject] dictionary, as Darwin code writes them.
        client.startTLS([GCDAsyncSocketManuallyEvaluateTrust: kCFBooleanTrue, kCFStreamSSLPeerName as String: kCFNull])
        client.write("secret\n".data(using: .utf8)!, withTimeout: 5, tag: 1)
        recorder.wait(for: "disconnect")
        XCTAssertEqual(recorder.events, ["connect 127.0.0.1 \(port)", "trust 18 1", "disconnect kCFStreamErrorDomainSSL -9825"])
        XCTAssertFalse(peer.printed.contains("terces"), "a held write went out before the delegate decided")
    }

    /// GCDAsyncSocket's `sslError:` shape: "kCFStreamErrorDomainSSL" and the SecureTransport status, so
    /// ported code that checks the domain (an MQTT client does) reads an untrusted certificate right.
    func testAnUntrustedServerDisconnectsInTheSSLDomain() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let (peer, port) = try Peer.opensslReverse(certificate: certificate.certificate, key: certificate.key)
        defer { peer.stop() }
        let recorder = Recorder()
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "127.0.0.1", onPort: port)
        client.startTLS([kCFStreamSSLPeerName as String: NSString(string: "localhost")])
        recorder.wait(for: "disconnect")
        // errSSLUnknownRootCert: the server's certificate is self-signed.
        XCTAssertEqual(recorder.events, ["connect 127.0.0.1 \(port)", "disconnect kCFStreamErrorDomainSSL -9812"])
        let error = try XCTUnwrap(recorder.errors.last.flatMap { $0 } as NSError?)
        XCTAssertEqual(error.domain, GCDAsyncSocketSSLErrorDomain)
        XCTAssertEqual(
            error.userInfo[NSLocalizedRecoverySuggestionErrorKey] as? String,
            "Error code definition can be found in Apple's SecureTransport.h")
    }

    func testServerWithPKCS12IdentityAndClientPinning() throws {
        let certificate = try TestCertificate()
        defer { certificate.remove() }
        let serverRecorder = Recorder()
        serverRecorder.onAccept = { socket in
            socket.startTLS([
                kCFStreamSSLIsServer as String: NSNumber(value: true),
                kCFStreamSSLCertificates as String: [certificate.pkcs12] as NSArray,
            ])
            socket.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, tag: 10)
        }
        serverRecorder.onRead = { socket, data, _ in socket.write(data, withTimeout: 5, tag: 10) }
        let server = GCDAsyncSocket(delegate: serverRecorder, delegateQueue: DispatchQueue(label: "tls server"))
        try server.accept(onInterface: "loopback", port: 0)

        let recorder = Recorder()
        recorder.trustDecision = { trust in trust.certificateChain.first == certificate.der }
        let client = GCDAsyncSocket(delegate: recorder, delegateQueue: queue)
        try client.connect(toHost: "localhost", onPort: server.localPort, withTimeout: 5)
        client.startTLS([GCDAsyncSocketManuallyEvaluateTrust: NSNumber(value: true), GCDAsyncSocketSSLPeerName: "localhost" as NSString])
        client.write("over TLS\r\n".data(using: .utf8)!, withTimeout: 5, tag: 1)
        client.readData(to: GCDAsyncSocket.crlfData(), withTimeout: 5, tag: 2)
        recorder.wait(for: "read 2")
        XCTAssertEqual(recorder.data(tag: 2), "over TLS\r\n".data(using: .utf8))
        serverRecorder.wait(for: "secure")
        client.disconnect()
        server.disconnect()
    }
}
