#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import TestPeers

/// Certificates and keys made at test time with the `openssl` command (no key material is
/// committed): a CA, and certificates it signs for the server (localhost, 127.0.0.1, ::1), a client,
/// a wrong name, an internationalised name, an expired and a not-yet-valid server, plus a self-signed server certificate and a
/// PKCS#12 copy of the server identity. Made once per test process, in a temporary directory.
package final class TestPKI: @unchecked Sendable {
    // @unchecked: every stored property is a `let` set in `init`; the files it names are written
    // once, before any test reads them.
    package struct Failure: Error, CustomStringConvertible {
        package let description: String
    }

    package let directory: URL
    package func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
    package func data(_ name: String) -> Data { FileManager.default.contents(atPath: path(name)) ?? Data() }

    package var caCertificate: String { path("ca.pem") }
    package var serverCertificate: String { path("server.pem") }
    package var serverKey: String { path("server.key") }
    package var serverChain: String { path("server-chain.pem") }
    package var clientCertificate: String { path("client.pem") }
    package var clientKey: String { path("client.key") }
    /// PKCS#12 of the server key, certificate and CA, password `p12secret`.
    package var serverPKCS12: String { path("server.p12") }
    package static let pkcs12Password = "p12secret"
    /// PKCS#12 of the client key, certificate and CA, password `p12secret`.
    package var clientPKCS12: String { path("client.p12") }

    /// Certificates for the server's key pair with other problems: (certificate, key) paths.
    package var wrongName: (String, String) { (path("wrong-name.pem"), path("wrong-name.key")) }
    package var expired: (String, String) { (path("expired.pem"), path("expired.key")) }
    package var notYetValid: (String, String) { (path("not-yet-valid.pem"), path("not-yet-valid.key")) }
    package var selfSigned: (String, String) { (path("self-signed.pem"), path("self-signed.key")) }
    /// A server certificate for an internationalised name, in A-labels only: `bücher.example` is
    /// `xn--bcher-kva.example` (certificate, key).
    package var internationalised: (String, String) { (path("idn.pem"), path("idn.key")) }
    package static let internationalisedALabel = "xn--bcher-kva.example"

    package static let shared: Result<TestPKI, Failure> = Result { () throws(Failure) -> TestPKI in try TestPKI() }

    private init() throws(Failure) {
        do {
            directory = try ProcessDirectory.make(prefix: "ssT-pki")
        } catch {
            throw Failure(description: "cannot create the PKI's directory: \(error)")
        }
        try make()
    }

    private func openssl(_ arguments: [String]) throws(Failure) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = directory
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        do {
            try process.run()
        } catch {
            throw Failure(description: "cannot run openssl (apt-get install openssl): \(error)")
        }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard ChildExit.waitOrEnd(process, timeout: 60) == .exited(0) else {
            throw Failure(description: "openssl \(arguments.joined(separator: " ")) failed:\n\(text)")
        }
    }

    private func write(_ name: String, _ text: String) throws(Failure) {
        do {
            try Data(text.utf8).write(to: directory.appendingPathComponent(name))
        } catch {
            throw Failure(description: "cannot write \(name): \(error)")
        }
    }

    private static let ecKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    /// A key and a CSR for `subject`.
    private func request(_ name: String, subject: String) throws(Failure) {
        try openssl(["req", "-new"] + Self.ecKey + ["-keyout", "\(name).key", "-out", "\(name).csr", "-subj", subject])
    }

    /// Signs `name`.csr with the CA, valid for a day unless dates are given. The certificate names
    /// its issuer's key (authorityKeyIdentifier), as RFC 5280 asks and the strict profile requires.
    private func sign(_ name: String, extensions: String, start: String? = nil, end: String? = nil) throws(Failure) {
        try write("\(name).ext", extensions + "authorityKeyIdentifier=keyid\n")
        var arguments = [
            "ca", "-batch", "-config", "ca.cnf", "-notext", "-in", "\(name).csr", "-out", "\(name).pem",
            "-extfile", "\(name).ext",
        ]
        if let start, let end {
            arguments += ["-startdate", start, "-enddate", end]
        } else {
            arguments += ["-days", "1"]
        }
        try openssl(arguments)
    }

    private func make() throws(Failure) {
        try write(
            "ca.cnf",
            """
            [ ca ]
            default_ca = test
            [ test ]
            dir = .
            database = index.txt
            new_certs_dir = .
            serial = serial
            certificate = ca.pem
            private_key = ca.key
            default_md = sha256
            policy = anything
            unique_subject = no
            [ anything ]
            commonName = supplied

            """)
        try write("index.txt", "")
        try write("serial", "1000\n")
        try openssl(
            ["req", "-x509"] + Self.ecKey + [
                "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=SocketStreams Test CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        let serverExtensions = "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n"
        try request("server", subject: "/CN=localhost")
        try sign("server", extensions: serverExtensions)
        try request("client", subject: "/CN=SocketStreams Test Client")
        try sign("client", extensions: "extendedKeyUsage=clientAuth\n")
        try request("wrong-name", subject: "/CN=wrong.example")
        try sign("wrong-name", extensions: "subjectAltName=DNS:wrong.example\nextendedKeyUsage=serverAuth\n")
        try request("idn", subject: "/CN=\(Self.internationalisedALabel)")
        try sign("idn", extensions: "subjectAltName=DNS:\(Self.internationalisedALabel)\nextendedKeyUsage=serverAuth\n")
        try request("expired", subject: "/CN=localhost")
        try sign("expired", extensions: serverExtensions, start: "20200101000000Z", end: "20200102000000Z")
        try request("not-yet-valid", subject: "/CN=localhost")
        try sign("not-yet-valid", extensions: serverExtensions, start: "20991231000000Z", end: "21000101000000Z")
        try openssl(
            ["req", "-x509"] + Self.ecKey + [
                "-keyout", "self-signed.key", "-out", "self-signed.pem", "-days", "1",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1",
            ])
        let chain = data("server.pem") + data("ca.pem")
        do {
            try chain.write(to: directory.appendingPathComponent("server-chain.pem"))
        } catch {
            throw Failure(description: "cannot write the chain: \(error)")
        }
        try openssl([
            "pkcs12", "-export", "-inkey", "server.key", "-in", "server.pem", "-certfile", "ca.pem",
            "-passout", "pass:\(Self.pkcs12Password)", "-out", "server.p12",
        ])
        try openssl([
            "pkcs12", "-export", "-inkey", "client.key", "-in", "client.pem", "-certfile", "ca.pem",
            "-passout", "pass:\(Self.pkcs12Password)", "-out", "client.p12",
        ])
    }
}
