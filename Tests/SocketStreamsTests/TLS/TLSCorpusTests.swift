#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest
import TestPeers

/// The certificate-verification corpus (Scripts/make-tls-corpus.py, made at test time with Python's
/// `cryptography`): every case is a real handshake against `openssl s_server` serving its chain,
/// first through a stream pair with the case's TLSSettings, then through `stream-get --cacert …
/// --resolve …`. Each rule has an accepting and a refusing case; the table of verdicts is printed.
final class TLSCorpusTests: SocketStreamsTestCase {
    struct Case: Decodable {
        var name: String
        var rule: String
        var host: String
        var expected: String
        var settings: [String: JSONValue]
        var hasChain: Bool
        var hasCRL: Bool
        var streamGet: Bool
        /// OpenSSL's defaults' verdict (`openssl verify`), for the table.
        var openssl: String
    }

    enum JSONValue: Decodable {
        case bool(Bool)
        case int(Int)
        case string(String)

        init(from decoder: Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let flag = try? container.decode(Bool.self) {
                self = .bool(flag)
            } else if let number = try? container.decode(Int.self) {
                self = .int(number)
            } else {
                self = .string(try container.decode(String.self))
            }
        }
    }

    struct Corpus {
        let directory: URL
        let cases: [Case]
        func path(_ test: Case, _ file: String) -> String { directory.appendingPathComponent(test.name).appendingPathComponent(file).path }
    }

    struct CorpusFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Made once per test process.
    static let shared: Result<Corpus, CorpusFailure> = Result { () throws(CorpusFailure) -> Corpus in
        let directory: URL
        do {
            directory = try ProcessDirectory.make(prefix: "ssT-corpus")
        } catch {
            throw CorpusFailure(description: "cannot create the corpus's directory: \(error)")
        }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Scripts/make-tls-corpus.py").path
        do {
            // Debian's python3, which has python3-cryptography (Scripts/test installs it), else the one in PATH.
            let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "python3"
            let result = try runCommand(python, [script, directory.path], timeout: 120)
            guard result.status == 0 else {
                throw CorpusFailure(
                    description: "\(script) failed (python3-cryptography installed? Scripts/test installs it): \(result.stderr)")
            }
            let data = try Data(contentsOf: directory.appendingPathComponent("cases.json"))
            return Corpus(directory: directory, cases: try JSONDecoder().decode([Case].self, from: data))
        } catch let failure as CorpusFailure {
            throw failure
        } catch {
            throw CorpusFailure(description: "cannot make the corpus with \(script): \(error)")
        }
    }

    private var corpus: Corpus {
        get throws { try Self.shared.get() }
    }

    /// s_server serving the case's leaf and intermediates; stopped by the caller.
    private func serve(_ test: Case, _ corpus: Corpus) throws -> (peer: Peer, port: Int) {
        var arguments = ["-www", "-cert", corpus.path(test, "leaf.pem"), "-key", corpus.path(test, "leaf.key")]
        if test.hasChain { arguments += ["-cert_chain", corpus.path(test, "chain.pem")] }
        let (peer, port) = try Peer.opensslServer(arguments)
        return (peer, port)
    }

    private static func isAddress(_ host: String) -> Bool { SocketAddress(numericHost: host, port: 0) != nil }

    private func settings(for test: Case, _ corpus: Corpus) -> TLSSettings {
        var settings = TLSSettings()
        settings.trustRoots = [.pemFile(corpus.path(test, "root.pem"))]
        if !Self.isAddress(test.host) { settings.peerName = .name(test.host) }
        for (key, value) in test.settings {
            switch (key, value) {
            case ("profile", .string("compatible")): settings.verificationProfile = .compatible
            case ("profile", .string("baselineRequirements")): settings.verificationProfile = .baselineRequirements
            case ("crl", .bool(true)): settings.revocationLists = [.pemFile(corpus.path(test, "crl.pem"))]
            case ("crlWholeChain", .bool(true)): settings.revocationCheck = .wholeChain
            case ("maximumDepth", .int(let depth)): settings.maximumChainDepth = depth
            case ("allowsExpired", .bool(true)): settings.allowsExpiredCertificates = true
            case ("allowsExpiredRoots", .bool(true)): settings.allowsExpiredRoots = true
            case ("time", .int(let time)): settings.verificationTime = Date(timeIntervalSince1970: TimeInterval(time))
            case ("anyRoot", .bool(true)):
                settings.allowsAnyRoot = true
                settings.trustRoots = []
            default: XCTFail("\(test.name): unknown setting \(key)")
            }
        }
        return settings
    }

    private func table(_ rows: [(Case, String)]) -> String {
        var lines = ["| rule | case | expected | ours | OpenSSL's defaults |", "|---|---|---|---|---|"]
        for (test, ours) in rows { lines.append("| \(test.rule) | \(test.name) | \(test.expected) | \(ours) | \(test.openssl) |") }
        let right = rows.filter { $0.1 == $0.0.expected }.count
        let openssl = rows.filter { $0.0.openssl == $0.0.expected }.count
        lines.append("\(rows.count) cases: ours as expected on \(right), OpenSSL's defaults on \(openssl)")
        return lines.joined(separator: "\n")
    }

    func testCorpusThroughStreamPairs() throws {
        let corpus = try self.corpus
        XCTAssertGreaterThanOrEqual(corpus.cases.count, 60)
        var rows: [(Case, String)] = []
        var errors: [String: NSError] = [:]
        for test in corpus.cases {
            let server = try serve(test, corpus)
            let error = verdict(port: server.port, settings(for: test, corpus))
            server.peer.stop()
            rows.append((test, error == nil ? "accept" : "reject"))
            if let error {
                errors[test.name] = error
                XCTAssertEqual(error.domain, "NSOSStatusErrorDomain", "\(test.name): \(error)")
            }
            XCTAssertEqual(
                error == nil ? "accept" : "reject", test.expected,
                "\(test.name) (\(test.rule)): \(error.map { "\($0.localizedDescription)" } ?? "accepted")")
        }
        print("TLS corpus through stream pairs:\n\(table(rows))")

        // The descriptions say which rule refused which certificate, with SecureTransport's codes.
        func assertRefusal(_ name: String, code: Int, _ fragments: [String], file: StaticString = #filePath, line: UInt = #line) {
            guard let error = errors[name] else { return XCTFail("\(name) was accepted", file: file, line: line) }
            XCTAssertEqual(error.code, code, "\(name): \(error)", file: file, line: line)
            for fragment in fragments {
                XCTAssertTrue(
                    error.localizedDescription.contains(fragment), "\(name): \(error.localizedDescription)", file: file, line: line)
            }
        }
        assertRefusal("cn-only", code: -9843, ["hostname mismatch", "subject CN is not checked", "the leaf"])
        assertRefusal(
            "wildcard-partial-prefix", code: -9843, ["hostname mismatch", "\"f*.example.com\" is a partial wildcard", "\"CN=partial\""])
        assertRefusal(
            "nc-excluded-wildcard-excluded-host", code: -9807,
            ["the name constraints exclude bar.example.com", "\"CN=NC excludes bar\", depth 1"])
        assertRefusal("nc-permitted-wildcard-outside-host", code: -9807, ["do not permit bar.example.com"])
        assertRefusal("nc-malformed-empty", code: -9807, ["neither permitted nor excluded"])
        assertRefusal("nc-malformed-empty-sequences", code: -9807, ["neither permitted nor excluded"])
        assertRefusal("malformed-aia", code: -9807, ["the Authority Information Access extension is malformed", "the leaf"])
        assertRefusal("dsa-signed-leaf", code: -9807, ["a DSA signature"])
        assertRefusal("strict-san-critical-with-subject", code: -9807, ["subjectAltName is critical"])
        assertRefusal("nc-malformed-leading-period", code: -9807, ["\".example.com\" starts with a period"])
        assertRefusal("nc-malformed-wildcard-base", code: -9807, ["\"*.example.com\" is not a domain name", "depth 1"])
        assertRefusal("nc-malformed-excluded-empty-label", code: -9807, ["\"bar..example.com\" is not a domain name"])
        assertRefusal("leaf-is-ca", code: -9807, ["a CA certificate", "www.example.com", "the leaf"])
        assertRefusal("leaf-with-name-constraints", code: -9807, ["may not carry name constraints"])
        assertRefusal("strict-leaf-without-aki", code: -9807, ["Missing Authority Key Identifier", "the leaf"])
        assertRefusal("crl-revoked", code: -9807, ["certificate revoked", "the leaf"])
        assertRefusal("crl-expired", code: -9807, ["CRL has expired"])
        assertRefusal("crl-without-number", code: -9848, ["has no CRL number", "CN=Corpus Root"])
        assertRefusal("crl-whole-chain-revoked-intermediate", code: -9807, ["certificate revoked", "Revoked Intermediate", "depth 1"])
        assertRefusal("depth-over-limit", code: -9807, ["certificate chain too long"])
        assertRefusal("expired-leaf", code: -9814, ["certificate has expired", "the leaf"])
        assertRefusal("expired-intermediate", code: -9814, ["certificate has expired", "depth 1"])
        assertRefusal("expired-self-signed-any-root", code: -9814, ["certificate has expired"])
        assertRefusal("untrusted-root", code: -9813, ["unable to get local issuer certificate"])
        assertRefusal(
            "path-cross-signed-excluded-only", code: -9807,
            ["the name constraints exclude www.example.com", "\"CN=NC excludes www\", depth 2"])
        // The copy a trusted root issued is tried first, so its reason is the one given.
        assertRefusal(
            "path-cross-signed-excluded-or-expired", code: -9814,
            [
                "certificate has expired",
                "\"CN=Cross-signed Intermediate\", depth 1; path CN=www.example.com → CN=Cross-signed Intermediate → CN=Second Root, the first of 2 tried",
            ])
        assertRefusal("validity-one-second-after-not-after", code: -9814, ["certificate has expired", "the leaf"])
        assertRefusal(
            "compatible-leaf-is-ca-key-cert-sign-only", code: -9807,
            ["unsuitable certificate purpose", "a CA certificate whose keyUsage has no digitalSignature", "the leaf"])
        assertRefusal(
            "baseline-leaf-wildcard-public-suffix", code: -9807,
            ["a wildcard over a public suffix (\"*.co.uk\": co.uk is a public suffix in /usr/share/publicsuffix", "the leaf"])
        assertRefusal("baseline-leaf-dns-empty-label", code: -9807, ["not a host name (\".example.com\"", "BR 7.1.2.7.12"])
        assertRefusal("baseline-leaf-dns-double-period-under-nc", code: -9807, ["not a host name (\"foo..example.com\""])
        XCTAssertEqual(intValue(errors["expired-intermediate"]?.userInfo["OpenSSLVerifyDepth"]), 1)
        XCTAssertEqual(errors["expired-intermediate"]?.userInfo["OpenSSLVerifySubject"] as? String, "CN=Expired Intermediate")
    }

    /// A mesh of eight CAs cross-signing one another (56 certificates, thousands of paths): the verdict
    /// comes within the path builder's budget of signature checks, refused without a trusted root and
    /// accepted when the leaf's issuer is also served signed by the root, after the whole mesh.
    func testPathBuildingIsBounded() throws {
        let corpus = try self.corpus
        for name in ["path-hostile-mesh", "path-hostile-mesh-with-root"] {
            let test = try XCTUnwrap(corpus.cases.first { $0.name == name })
            let server = try serve(test, corpus)
            let started = Date()
            let error = verdict(port: server.port, settings(for: test, corpus))
            server.peer.stop()
            let work = TLSPathBuilder.lastWork
            XCTAssertLessThanOrEqual(work.signatureChecks, TLSPathBuilder.signatureCheckBudget, "\(name): \(work)")
            XCTAssertLessThan(Date().timeIntervalSince(started), 10, name)
            if test.expected == "accept" {
                XCTAssertNil(error, "\(name): \(error.map { "\($0)" } ?? "")")
            } else {
                XCTAssertTrue(work.exhausted, "\(name): \(work)")
                XCTAssertTrue(
                    error?.localizedDescription.contains("path building gave up") == true, "\(name): \(error.map { "\($0)" } ?? "accepted")"
                )
            }
        }
    }

    func testCorpusThroughStreamGet() throws {
        let corpus = try self.corpus
        let executable = try streamGetExecutable().path
        // Under a sanitizer (Scripts/sanitize), every third case: each is a stream-get process of its own,
        // which the sanitizer slows tenfold (97 s for all of them under Thread Sanitizer), where the
        // stream-pair test above runs every case in this process; the plain run takes all of them.
        let sanitized = ProcessInfo.processInfo.environment["SOCKETSTREAMS_SANITIZER"] != nil
        let cases = corpus.cases.filter(\.streamGet).enumerated().filter { !sanitized || $0.offset % 3 == 0 }.map(\.element)
        XCTAssertGreaterThanOrEqual(cases.count, sanitized ? 13 : 40)
        var rows: [(Case, String)] = []
        for test in cases {
            let server = try serve(test, corpus)
            var arguments = ["--timeout", "30", "--cacert", corpus.path(test, "root.pem")]
            if test.hasCRL { arguments += ["--crlfile", corpus.path(test, "crl.pem")] }
            if Self.isAddress(test.host) {
                arguments.append("https://\(test.host):\(server.port)/")
            } else {
                arguments += ["--resolve", "\(test.host):\(server.port):127.0.0.1", "https://\(test.host):\(server.port)/"]
            }
            let result = try runCommand(executable, arguments, timeout: 60)
            server.peer.stop()
            let ours = result.status == 0 ? "accept" : "reject"
            rows.append((test, ours))
            XCTAssertEqual(
                ours, test.expected, "\(test.name) (\(test.rule)): stream-get \(arguments.joined(separator: " ")): \(result.stderr)")
            if result.status != 0 {
                XCTAssertEqual(result.status, 60, "\(test.name): curl's CURLE_PEER_FAILED_VERIFICATION: \(result.stderr)")
                XCTAssertTrue(result.stderr.contains("TLS") || result.stderr.contains("certificate"), "\(test.name): \(result.stderr)")
            } else {
                XCTAssertTrue(result.stdoutText.contains("s_server"), "\(test.name): \(result.stdoutText.prefix(200))")
            }
        }
        print("TLS corpus through stream-get:\n\(table(rows))")
    }
}

extension SocketStreamsTestCase {
    /// A GET over a stream pair to a TLS server on `port` (the corpus's and the x509-limbo suite's cases):
    /// nil when the response arrived, else the pair's error.
    func verdict(port: Int, _ settings: TLSSettings) -> NSError? {
        let pair = makePair(host: "127.0.0.1", port: port)
        defer {
            pair.input.close()
            pair.output.close()
        }
        XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
        let recorder = startRecorder(pair, recorder: DelegateRecorder(sending: "GET / HTTP/1.0\r\n\r\n"))
        let finished = runUntil(timeout: 20) {
            recorder.has(.endEncountered, on: .input) || recorder.has(.errorOccurred, on: .input)
        }
        if !finished {
            return NSError(domain: "TLSVerdict", code: 1, userInfo: [NSLocalizedDescriptionKey: "no verdict: \(recorder.trace)"])
        }
        if recorder.has(.errorOccurred, on: .input) { return pair.input.streamError as NSError? }
        guard recorder.snapshot.receivedString.hasPrefix("HTTP/1.0 200 ok") else {
            return NSError(domain: "TLSVerdict", code: 2, userInfo: [NSLocalizedDescriptionKey: "no response: \(recorder.trace)"])
        }
        return nil
    }
}
