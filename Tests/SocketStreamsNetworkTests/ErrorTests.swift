#if canImport(Network)
    import Network
#else
    import SocketStreamsNetwork
#endif
import XCTest

/// NWError as client code matches, prints and bridges it (with Linux's errno values).
final class ErrorTests: XCTestCase {
    func testPOSIX() {
        let error = NWError.posix(.ECONNREFUSED)
        let code = POSIXErrorCode.ECONNREFUSED.rawValue
        XCTAssertEqual(error, .posix(.ECONNREFUSED))
        XCTAssertNotEqual(error, .posix(.ECONNRESET))
        XCTAssertEqual(error.errorCode, Int(code))
        XCTAssertEqual("\(error)", "POSIXErrorCode(rawValue: \(code)): Connection refused")
        XCTAssertEqual(error.debugDescription, "POSIXErrorCode(rawValue: \(code)): Connection refused")
        XCTAssertEqual(
            error.localizedDescription, "The operation couldn’t be completed. (Network.NWError error \(code) - Connection refused)")
        let bridged = error as NSError
        XCTAssertEqual(bridged.domain, "Network.NWError")
        XCTAssertEqual(bridged.code, Int(code))
        XCTAssertEqual(bridged.localizedDescription, error.localizedDescription)
    }

    func testDNSAndTLS() {
        XCTAssertEqual("\(NWError.dns(-65554))", "-65554: NoSuchRecord")
        XCTAssertEqual(NWError.dns(-65554).errorCode, -65554)
        XCTAssertEqual(
            NWError.dns(-65554).localizedDescription, "The operation couldn’t be completed. (Network.NWError error -65554 - NoSuchRecord)")
        XCTAssertEqual("\(NWError.tls(-9808))", "-9808: bad certificate format")
        XCTAssertEqual("\(NWError.tls(-9820))", "-9820: bad MAC")
        XCTAssertEqual(NWError.tls(-9808).errorCode, -9808)
        XCTAssertNotEqual(NWError.dns(0), NWError.tls(0))
        let anyError: Error = NWError.tls(-9807)
        XCTAssertEqual(anyError as? NWError, .tls(-9807))
    }

    func testDomains() {
        XCTAssertEqual(kNWErrorDomainPOSIX as String, NSPOSIXErrorDomain)
        XCTAssertEqual(kNWErrorDomainDNS as String, "kNWErrorDomainDNS")
        XCTAssertEqual(kNWErrorDomainTLS as String, "NSOSStatusErrorDomain")
    }

    func testAsStateValue() {
        // As NWConnection.State will carry it: matched in a switch with bound values.
        let errors: [NWError] = [.posix(.ETIMEDOUT), .dns(-65554), .tls(-9808)]
        let kinds = errors.map { error -> String in
            switch error {
            case .posix(let code) where code == .ETIMEDOUT: "timeout"
            case .dns(let code): "dns \(code)"
            case .tls(let status): "tls \(status)"
            default: "other"
            }
        }
        XCTAssertEqual(kinds, ["timeout", "dns -65554", "tls -9808"])
    }
}
