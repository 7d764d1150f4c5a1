#if canImport(Glibc)
    import Glibc
#endif
import COpenSSL
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// OpenSSL stays set up until the process is gone: the package's first OpenSSL call, whichever it is,
/// sets OpenSSL up without the `atexit` cleanup OpenSSL registers by default, which tears it down while
/// the package's threads may still run TLS (and leaks the per-thread state of every thread that exits
/// after it). Each scenario runs in a child process where OpenSSL has not been used yet.
final class OpenSSLLifetimeTests: SocketStreamsTestCase {
    /// A TLS context first (what any TLS pair, listener or `QueuedSocket` makes).
    func testATLSContextFirstLeavesOpenSSLSetUpAtExit() throws {
        guard Self.childScenario == "openssl-first-context" else {
            return try runInChild(
                "SocketStreamsTests.OpenSSLLifetimeTests/testATLSContextFirstLeavesOpenSSLSetUpAtExit", scenario: "openssl-first-context")
        }
        checkAtExitThatOpenSSLIsStillSetUp()
        _ = try TLSContext.shared(for: TLSSettings())
    }

    /// A certificate first (what a server's set-up or a pin computed in advance makes).
    func testACertificateFirstLeavesOpenSSLSetUpAtExit() throws {
        guard Self.childScenario == "openssl-first-certificate" else {
            return try runInChild(
                "SocketStreamsTests.OpenSSLLifetimeTests/testACertificateFirstLeavesOpenSSLSetUpAtExit",
                scenario: "openssl-first-certificate")
        }
        checkAtExitThatOpenSSLIsStillSetUp()
        let (certificatePEM, _) = try TLSIdentity.makeSelfSignedPEM()
        XCTAssertNotNil(TLSCertificate(pem: certificatePEM))
    }
}

/// Registered before the first OpenSSL call, so it runs after any `atexit` handler OpenSSL registers;
/// `OPENSSL_init_crypto` fails once `OPENSSL_cleanup` has run, and then the child exits with status 3.
private func checkAtExitThatOpenSSLIsStillSetUp() {
    atexit {
        guard OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) != 1 else { return }
        let message = "OpenSSL was torn down at exit (OPENSSL_cleanup ran)\n"
        _ = message.withCString { write(2, $0, strlen($0)) }
        _exit(3)
    }
}
