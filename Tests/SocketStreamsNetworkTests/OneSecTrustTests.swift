import CocoaAsyncSocket
import Foundation
import SocketStreamsNetwork
import XCTest

/// Code that imports CocoaAsyncSocket and SocketStreamsNetwork together sees one `SecTrust`: the trust a
/// GCDAsyncSocket delegate gets is the one the Security calls take.
final class OneSecTrustTests: XCTestCase {
    /// A GCDAsyncSocket delegate's trust handed to Security's evaluation, as ported code does.
    private func evaluate(_ trust: SecTrust) -> Bool {
        _ = SecTrustSetPolicies(trust, SecPolicyCreateBasicX509())
        return SecTrustEvaluateWithError(trust, nil)
    }

    func testOneTypeForBothModules() {
        let trust: GCDAsyncSocketTrust = SecTrust(certificateChain: [], verifyResult: 0, verifyResultDescription: "ok")
        let viaNetwork: sec_trust_t? = sec_trust_create(trust)
        XCTAssertTrue(sec_trust_copy_ref(viaNetwork!).takeRetainedValue() === trust)
        XCTAssertFalse(evaluate(trust), "an empty chain is not trusted")
        XCTAssertEqual(SecTrustGetCertificateCount(trust), 0)
    }
}
