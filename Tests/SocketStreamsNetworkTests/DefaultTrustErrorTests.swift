// What an NWConnection reports when the default trust evaluation refuses the server's chain, against
// `openssl s_server` with the test PKI (its CA is not in the system store). Network.framework reports
// `.tls(-9807)` (errSSLXCertChainInvalid) there whatever the chain lacks: "default TLS Trust evaluation
// failed(-9807)" then "encountered error(3:-9807)" in public iOS logs for a private CA's leaf and root
// (starsite/SwiftFM#3), where SecureTransport's finer −9812/−9813 do not appear.

#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import Foundation
import SocketStreamsTestSupport
import XCTest

final class DefaultTrustErrorTests: SocketStreamsTestCase {
    private let queue = DispatchQueue(label: "DefaultTrustErrorTests")

    private func failure(against arguments: [String]) throws -> NWConnection.State? {
        let port = try startOpenSSLServer(["-www"] + arguments).port
        let connection = NWConnection(host: "localhost", port: NWEndpoint.Port(rawValue: UInt16(port))!, using: .tls)
        let states = Locked<[NWConnection.State]>([])
        let ended = expectation(description: "failed")
        connection.stateUpdateHandler = { state in
            states.mutate { $0.append(state) }
            if case .failed = state { ended.fulfill() }
        }
        connection.start(queue: queue)
        wait(for: [ended], timeout: shortTimeout)
        let cancelled = expectation(description: "cancelled")
        connection.stateUpdateHandler = { if $0 == .cancelled { cancelled.fulfill() } }
        connection.cancel()
        wait(for: [cancelled], timeout: shortTimeout)
        return states.value.last
    }

    func testAServerOfAnUnknownCAFailsWithChainInvalid() throws {
        let pki = try self.pki
        // The leaf alone (OpenSSL: unable to get the issuer locally).
        XCTAssertEqual(try failure(against: ["-cert", pki.serverCertificate, "-key", pki.serverKey]), .failed(.tls(-9807)))
        // The leaf and its (unknown) root (OpenSSL: self-signed certificate in the chain).
        let withRoot = ["-cert", pki.serverCertificate, "-key", pki.serverKey, "-cert_chain", pki.caCertificate]
        XCTAssertEqual(try failure(against: withRoot), .failed(.tls(-9807)))
        // A self-signed server.
        XCTAssertEqual(try failure(against: ["-cert", pki.selfSigned.0, "-key", pki.selfSigned.1]), .failed(.tls(-9807)))
    }
}
