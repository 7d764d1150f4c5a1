import Foundation
import SocketStreamsTestSupport
import XCTest

@testable import SocketStreamsNetwork

/// The Security subset, written as Apple-platform code writes it: certificates, trust evaluation over the
/// package's verifier, keys for pinning, PKCS#12 identities.
final class SecurityTests: SocketStreamsTestCase {
    /// The DER of a PEM certificate file, through `openssl x509` (not this package's parser).
    private func der(_ path: String) throws -> Data {
        let result = try runCommand("openssl", ["x509", "-in", path, "-outform", "DER"])
        XCTAssertEqual(result.status, 0, result.stderr)
        return result.stdout
    }

    private func certificate(_ path: String) throws -> SecCertificate { try secCertificate(path) }

    /// A trust over the server's chain (leaf, CA) with the SSL policy for `host`.
    private func serverTrust(host: String = "localhost", leaf: String? = nil) throws -> SecTrust {
        let pki = try self.pki
        var trust: SecTrust?
        let chain = [try certificate(leaf ?? pki.serverCertificate), try certificate(pki.caCertificate)]
        XCTAssertEqual(SecTrustCreateWithCertificates(chain as CFArray, SecPolicyCreateSSL(true, host as CFString), &trust), errSecSuccess)
        return try XCTUnwrap(trust)
    }

    private func evaluate(_ trust: SecTrust) -> (Bool, CFError?) {
        var error: CFError?
        let trusted = SecTrustEvaluateWithError(trust, &error)
        return (trusted, error)
    }

    func testCertificatesFromDER() throws {
        let pki = try self.pki
        let data = try der(pki.serverCertificate)
        XCTAssertNil(SecCertificateCreateWithData(nil, Data("not a certificate".utf8) as CFData))
        XCTAssertNil(SecCertificateCreateWithData(nil, (data + Data([0])) as CFData))
        let certificate = try XCTUnwrap(SecCertificateCreateWithData(nil, data as CFData))
        XCTAssertEqual(SecCertificateCopyData(certificate) as Data, data)
        XCTAssertEqual(SecCertificateCopySubjectSummary(certificate) as String?, "localhost")
        XCTAssertEqual(SecCertificateCopySubjectSummary(try self.certificate(pki.caCertificate)) as String?, "SocketStreams Test CA")
        XCTAssertEqual(certificate, SecCertificateCreateWithData(nil, data as CFData))
    }

    func testEvaluationAgainstAnchorsAndTheSystemStore() throws {
        let pki = try self.pki
        let trust = try serverTrust()
        // The test CA is not in the system store.
        var (trusted, error) = evaluate(trust)
        XCTAssertFalse(trusted)
        XCTAssertEqual(error?.domain, NSOSStatusErrorDomain)
        XCTAssertEqual(error.map { CFErrorGetCode($0) }, CFIndex(errSecNotTrusted))
        let description = error?.localizedDescription ?? ""
        XCTAssertTrue(description.contains("“localhost” certificate is not trusted"), description)

        XCTAssertEqual(SecTrustSetAnchorCertificates(trust, [try certificate(pki.caCertificate)] as CFArray), errSecSuccess)
        (trusted, error) = evaluate(trust)
        XCTAssertTrue(trusted, "\(String(describing: error))")
        XCTAssertNil(error)
        var result = SecTrustResultType.invalid
        XCTAssertEqual(SecTrustGetTrustResult(trust, &result), errSecSuccess)
        XCTAssertEqual(result, .unspecified)
        // The anchors and the system store.
        XCTAssertEqual(SecTrustSetAnchorCertificatesOnly(trust, false), errSecSuccess)
        XCTAssertTrue(evaluate(trust).0)

        let chain = try XCTUnwrap(SecTrustCopyCertificateChain(trust) as? [SecCertificate])
        XCTAssertEqual(chain.map { SecCertificateCopySubjectSummary($0) as String? }, ["localhost", "SocketStreams Test CA"])
        XCTAssertEqual(SecTrustGetCertificateCount(trust), 2)
        XCTAssertEqual(SecTrustGetCertificateAtIndex(trust, 0), chain[0])
        XCTAssertNil(SecTrustGetCertificateAtIndex(trust, 2))
        XCTAssertEqual(SecTrustSetAnchorCertificates(trust, ["not a certificate"] as CFArray), errSecParam)
    }

    func testPoliciesNameAndExpiry() throws {
        let pki = try self.pki
        let anchors = [try certificate(pki.caCertificate)] as CFArray
        let wrongHost = try serverTrust(host: "other.example")
        _ = SecTrustSetAnchorCertificates(wrongHost, anchors)
        var (trusted, error) = evaluate(wrongHost)
        XCTAssertFalse(trusted)
        XCTAssertEqual(error?.code, Int(errSecHostNameMismatch))
        // The basic policy checks no name.
        XCTAssertEqual(SecTrustSetPolicies(wrongHost, SecPolicyCreateBasicX509()), errSecSuccess)
        XCTAssertTrue(evaluate(wrongHost).0)
        XCTAssertEqual(SecTrustSetPolicies(wrongHost, [SecPolicyCreateSSL(true, "localhost" as CFString)] as CFArray), errSecSuccess)
        XCTAssertTrue(evaluate(wrongHost).0)
        XCTAssertEqual(SecTrustSetPolicies(wrongHost, "a policy" as CFString), errSecParam)
        // A client certificate does not pass the server policy (extendedKeyUsage clientAuth).
        let client = try serverTrust(leaf: pki.clientCertificate)
        _ = SecTrustSetAnchorCertificates(client, anchors)
        XCTAssertFalse(evaluate(client).0)
        _ = SecTrustSetPolicies(client, SecPolicyCreateSSL(false, nil))
        XCTAssertTrue(evaluate(client).0)

        let expired = try serverTrust(leaf: pki.expired.0)
        _ = SecTrustSetAnchorCertificates(expired, anchors)
        (trusted, error) = evaluate(expired)
        XCTAssertFalse(trusted)
        XCTAssertEqual(error?.code, Int(errSecCertificateExpired))
        XCTAssertEqual(SecTrustSetOptions(expired, [.allowExpired]), errSecSuccess)
        XCTAssertTrue(evaluate(expired).0)
        let notYetValid = try serverTrust(leaf: pki.notYetValid.0)
        _ = SecTrustSetAnchorCertificates(notYetValid, anchors)
        XCTAssertEqual(evaluate(notYetValid).1?.code, Int(errSecCertificateNotValidYet))
    }

    func testImplicitAnchorsTrustASelfSignedCertificate() throws {
        var trust: SecTrust?
        let selfSigned = try certificate(try pki.selfSigned.0)
        XCTAssertEqual(SecTrustCreateWithCertificates(selfSigned, SecPolicyCreateSSL(true, "localhost" as CFString), &trust), errSecSuccess)
        let unwrapped = try XCTUnwrap(trust)
        XCTAssertFalse(evaluate(unwrapped).0)
        XCTAssertEqual(SecTrustSetOptions(unwrapped, [.implicitAnchors]), errSecSuccess)
        XCTAssertTrue(evaluate(unwrapped).0)
        XCTAssertEqual(SecTrustCreateWithCertificates([] as CFArray, nil, &trust), errSecParam)
    }

    func testAsynchronousEvaluationAnswersOnTheQueue() throws {
        let trust = try serverTrust()
        _ = SecTrustSetAnchorCertificates(trust, [try certificate(try pki.caCertificate)] as CFArray)
        let queue = DispatchQueue(label: "evaluation")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 7)
        let answered = expectation(description: "evaluated")
        let status = SecTrustEvaluateAsyncWithError(trust, queue) { evaluated, result, error in
            XCTAssertTrue(evaluated === trust)
            XCTAssertTrue(result)
            XCTAssertNil(error)
            XCTAssertEqual(DispatchQueue.getSpecific(key: key), 7)
            answered.fulfill()
        }
        XCTAssertEqual(status, errSecSuccess)
        wait(for: [answered], timeout: shortTimeout)
    }

    func testPKCS12Import() throws {
        let pki = try self.pki
        let archive = try Data(contentsOf: URL(fileURLWithPath: pki.clientPKCS12))
        var items: CFArray?
        let wrong = [kSecImportExportPassphrase as String: "wrong"] as CFDictionary
        XCTAssertEqual(SecPKCS12Import(archive as CFData, wrong, &items), errSecAuthFailed)
        XCTAssertEqual(SecPKCS12Import(Data("junk".utf8) as CFData, [:] as CFDictionary, &items), errSecDecode)
        XCTAssertNil(items)
        let options = [kSecImportExportPassphrase as String: TestPKI.pkcs12Password] as CFDictionary
        XCTAssertEqual(SecPKCS12Import(archive as CFData, options, &items), errSecSuccess)
        let imported = try XCTUnwrap(items as? [[String: Any]])
        XCTAssertEqual(imported.count, 1)
        let identity = try XCTUnwrap(imported[0][kSecImportItemIdentity as String] as? SecIdentity)
        let chain = try XCTUnwrap(imported[0][kSecImportItemCertChain as String] as? [SecCertificate])
        XCTAssertEqual(chain.count, 2)
        XCTAssertEqual(imported[0][kSecImportItemLabel as String] as? String, "SocketStreams Test Client")
        XCTAssertNotNil(imported[0][kSecImportItemTrust as String] as? SecTrust)
        var certificate: SecCertificate?
        XCTAssertEqual(SecIdentityCopyCertificate(identity, &certificate), errSecSuccess)
        XCTAssertEqual(certificate, chain[0])
        XCTAssertEqual(certificate.map { SecCertificateCopyData($0) as Data }, try der(pki.clientCertificate))
        XCTAssertNotNil(sec_identity_create_with_certificates(identity, [chain[0]] as CFArray))
        XCTAssertNil(sec_identity_create_with_certificates(identity, [] as CFArray))
        let wrapped = try XCTUnwrap(sec_identity_create(identity))
        XCTAssertTrue(sec_identity_copy_ref(wrapped)?.takeRetainedValue() === identity)
    }

    /// Pinning as Apple-platform code does it: SHA-256 over `SecKeyCopyExternalRepresentation`, which for EC
    /// is the X9.63 point (the SubjectPublicKeyInfo's BIT STRING) and for RSA the PKCS#1 RSAPublicKey.
    func testPublicKeyRepresentationsAreApples() throws {
        let pki = try self.pki
        let spki = try runCommand(
            "openssl", ["pkey", "-pubin", "-outform", "DER"],
            input: try runCommand("openssl", ["x509", "-in", pki.serverCertificate, "-pubkey", "-noout"]).stdout
        ).stdout
        let ecKey = try XCTUnwrap(SecCertificateCopyKey(try certificate(pki.serverCertificate)))
        let ecBytes = try XCTUnwrap(SecKeyCopyExternalRepresentation(ecKey, nil) as Data?)
        XCTAssertEqual(ecBytes.count, 65)
        XCTAssertEqual(ecBytes.first, 0x04)
        XCTAssertEqual(ecBytes, spki.suffix(65))

        let directory = try makeTemporaryDirectory()
        let certificatePath = directory.appendingPathComponent("rsa.pem").path
        let made = try runCommand(
            "openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", directory.appendingPathComponent("rsa.key").path, "-out",
                certificatePath, "-days", "1", "-subj", "/CN=rsa.example",
            ])
        XCTAssertEqual(made.status, 0, made.stderr)
        let publicKey = try runCommand("openssl", ["x509", "-in", certificatePath, "-pubkey", "-noout"]).stdout
        let pkcs1 = try runCommand("openssl", ["rsa", "-pubin", "-RSAPublicKey_out", "-outform", "DER"], input: publicKey).stdout
        XCTAssertGreaterThan(pkcs1.count, 256)
        let rsaCertificate = try certificate(certificatePath)
        let rsaKey = try XCTUnwrap(SecCertificateCopyKey(rsaCertificate))
        XCTAssertEqual(SecKeyCopyExternalRepresentation(rsaKey, nil) as Data?, pkcs1)
        XCTAssertEqual(SecKeyGetBlockSize(rsaKey), 256)
        var trust: SecTrust?
        _ = SecTrustCreateWithCertificates(rsaCertificate, nil, &trust)
        XCTAssertEqual(SecTrustCopyKey(try XCTUnwrap(trust)).flatMap { SecKeyCopyExternalRepresentation($0, nil) as Data? }, pkcs1)
    }
}
