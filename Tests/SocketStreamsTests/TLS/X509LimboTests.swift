// Compiled only when asked for (`swift test -Xswiftc -DSOCKETSTREAMS_X509_LIMBO --filter X509LimboTests`,
// Scripts/x509-limbo.py): the suite is not part of the repository, and a test that skips in every run
// would be one that cannot fail.
#if SOCKETSTREAMS_X509_LIMBO
    import Foundation
    import SocketStreamsTestSupport
    @testable import SocketStreams
    import XCTest
    import TestPeers

    /// The x509-limbo path-validation suite (github.com/C2SP/x509-limbo) as real handshakes: each server
    /// case served by `openssl s_server` with its untrusted intermediates in the suite's order, and a stream
    /// pair trusting the case's roots, asking for its name, at its time. Runs only when
    /// `SOCKETSTREAMS_X509_LIMBO` names a directory Scripts/x509-limbo.py made (the suite is not part of the
    /// repository); prints the verdict counts beside `openssl verify`'s and writes `results.json` there.
    /// A report, not a gate: the corpus (TLSCorpusTests) holds the rules.
    final class X509LimboTests: SocketStreamsTestCase {
        struct Case: Decodable {
            var name: String
            var host: String?
            var isAddress: Bool
            var expected: String
            var time: Int?
            var maximumDepth: Int?
            var hasChain: Bool
            var hasCRL: Bool
            var features: [String]
            var openssl: String
        }

        struct Verdict: Encodable {
            var name: String
            var expected: String
            var ours: String
            var openssl: String
            var reason: String
        }

        func testSuiteThroughStreamPairs() throws {
            guard let directory = ProcessInfo.processInfo.environment["SOCKETSTREAMS_X509_LIMBO"] else {
                return XCTFail("SOCKETSTREAMS_X509_LIMBO names no directory made by Scripts/x509-limbo.py")
            }
            let root = URL(fileURLWithPath: directory)
            let cases = try JSONDecoder().decode([Case].self, from: Data(contentsOf: root.appendingPathComponent("cases.json")))
            let only = ProcessInfo.processInfo.environment["SOCKETSTREAMS_X509_LIMBO_ONLY"]
            // SOCKETSTREAMS_X509_LIMBO_PROFILE=baselineRequirements (or compatible) runs the suite under that profile.
            let profile: VerificationProfile
            switch ProcessInfo.processInfo.environment["SOCKETSTREAMS_X509_LIMBO_PROFILE"] {
            case "baselineRequirements": profile = .baselineRequirements
            case "compatible": profile = .compatible
            default: profile = .strict
            }
            var verdicts: [Verdict] = []
            for test in cases where only.map({ test.name.contains($0) }) ?? true {
                func path(_ file: String) -> String { root.appendingPathComponent(test.name).appendingPathComponent(file).path }
                var arguments = ["-www", "-cert", path("leaf.pem"), "-key", path("leaf.key"), "-cipher", "ALL:@SECLEVEL=0"]
                if test.hasChain { arguments += ["-cert_chain", path("chain.pem")] }
                var settings = TLSSettings()
                settings.trustRoots = [.pemFile(path("root.pem"))]
                settings.peerName = test.host.map { .name($0) } ?? .none
                settings.maximumChainDepth = test.maximumDepth
                settings.verificationProfile = profile
                if test.hasCRL {
                    settings.revocationLists = [.pemFile(path("crl.pem"))]
                    settings.revocationCheck = .wholeChain
                }
                settings.verificationTime = test.time.map { Date(timeIntervalSince1970: TimeInterval($0)) }
                let error: NSError?
                do {
                    let (peer, port) = try Peer.opensslServer(arguments)
                    error = verdict(port: port, settings)
                    peer.stop()
                } catch {
                    // s_server refuses some leaves (a key it cannot use): the chain is not accepted.
                    verdicts.append(
                        Verdict(name: test.name, expected: test.expected, ours: "reject", openssl: test.openssl, reason: "\(error)"))
                    continue
                }
                verdicts.append(
                    Verdict(
                        name: test.name, expected: test.expected, ours: error == nil ? "accept" : "reject", openssl: test.openssl,
                        reason: error?.localizedDescription ?? ""))
            }
            let output = try JSONEncoder().encode(verdicts)
            try output.write(to: root.appendingPathComponent("results.json"))
            let right = verdicts.filter { $0.ours == $0.expected }
            let openssl = verdicts.filter { $0.openssl == $0.expected }
            let summary = "\(verdicts.count) cases; ours right on \(right.count), openssl verify on \(openssl.count)"
            var report = ["x509-limbo (profile \(profile)): \(summary)"]
            for verdict in verdicts where verdict.ours != verdict.expected {
                report.append("  wrong: \(verdict.name): expected \(verdict.expected), \(verdict.ours) \(verdict.reason)")
            }
            print(report.joined(separator: "\n"))
        }
    }
#endif
