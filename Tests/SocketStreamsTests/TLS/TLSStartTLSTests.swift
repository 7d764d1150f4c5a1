#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams
import XCTest

/// STARTTLS: a plain exchange, then TLS set on the open pair upgrades it in place, on the client
/// (our client against our server, and against `openssl s_client -starttls smtp`'s peer role) and on
/// the server side.
final class TLSStartTLSTests: SocketStreamsTestCase {

    private func serverSettings() throws -> TLSSettings {
        let pki = try self.pki
        return TLSSettings.server(identity: TLSIdentity(certificateChainFile: pki.serverChain, privateKeyFile: pki.serverKey))
    }

    /// Reads one line (blocking) from `input`.
    private func readLine(_ input: InputStream) -> String? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while input.read(&byte, maxLength: 1) == 1 {
            if byte == 10 { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
        return nil
    }

    private func writeText(_ output: OutputStream, _ text: String) {
        _ = writeAll(output, Data(text.utf8))
    }

    /// Our client (delegate style) and our server (blocking style): "STARTTLS" / "GO" in plain text,
    /// both sides switch, and the echo after it is encrypted; hasSpaceAvailable comes back only after
    /// the handshake, and the server saw TLS (not plain) bytes after "GO".
    func testClientAndServerUpgradeInPlace() throws {
        let settings = try serverSettings()
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let serverSaw = Locked<String?>(nil)
        let host = ListenerHost(listener) { pair in
            pair.input.open()
            pair.output.open()
            guard self.readLine(pair.input) == "STARTTLS" else { return serverSaw.value = "no STARTTLS" }
            self.writeText(pair.output, "GO\n")
            XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey), "server-side STARTTLS refused")
            serverSaw.value = self.readLine(pair.input)  // decrypted by then
            self.writeText(pair.output, "echo: \(serverSaw.value ?? "")\n")
            pair.output.close()
            pair.input.close()
        }
        addCleanup { host.stop() }

        let pair = makePair(host: "localhost", port: listener.port)
        let recorder = DelegateRecorder(sending: "STARTTLS\n")
        var upgraded = false
        var clientSettings = TLSSettings()
        clientSettings.trustRoots = [.pemFile(try pki.caCertificate)]
        recorder.onEvent = { stream, event in
            guard !upgraded, event == .hasBytesAvailable, recorder.snapshot.receivedString == "GO\n" else { return }
            upgraded = true
            XCTAssertTrue(stream.setProperty(clientSettings, forKey: .tlsSettingsKey), "client-side STARTTLS refused")
            // What was set until the handshake is done (it may already be, on the stream thread), then what was negotiated.
            let level = stream.property(forKey: .socketSecurityLevelKey) as? String
            XCTAssertTrue(
                [(kCFStreamSocketSecurityLevelNegotiatedSSL as String), (kCFStreamSocketSecurityLevelTLSv1 as String)].contains(
                    level ?? ""), "\(String(describing: level))")
            recorder.send("secret\n")
        }
        _ = startRecorder(pair, recorder: recorder)
        XCTAssertTrue(runUntil(timeout: shortTimeout) { recorder.has(.endEncountered, on: .input) }, recorder.trace)
        XCTAssertEqual(serverSaw.value, "secret")
        XCTAssertEqual(recorder.snapshot.receivedString, "GO\necho: secret\n")
        XCTAssertEqual(pair.input.property(forKey: .socketSecurityLevelKey) as? String, (kCFStreamSocketSecurityLevelTLSv1 as String))
        XCTAssertNotNil(pair.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo)
        XCTAssertTrue(recorder.snapshot.errors.isEmpty, "\(recorder.snapshot.errors)")
        // TLS cannot be turned off again, nor its settings changed.
        XCTAssertFalse(pair.output.setProperty(StreamSocketSecurityLevel.none, forKey: .socketSecurityLevelKey))
    }

    /// TLS set after `open()` while TCP is still connecting (the name lookup held back here) must take
    /// effect: the handshake runs once TCP is up, before the first byte goes out. (It used to be
    /// accepted and then ignored: the stages were fixed at `open()`, and the client's bytes went out in
    /// plain text; found while writing Guides/SecuringStreamsWithTLS.md.) Every spelling of the setting goes
    /// through the same path; the typed one and Apple's level are checked.
    func testTLSSetWhileConnectingTakesEffect() throws {
        for spelling in ["typed", "level"] {
            let settings = try serverSettings()
            let listener = try StreamListener(host: "127.0.0.1", port: 0)
            let serverSaw = Locked<String?>(nil)
            let host = ListenerHost(listener) { pair in
                XCTAssertTrue(pair.input.setProperty(settings, forKey: .tlsSettingsKey))
                pair.input.open()
                pair.output.open()
                serverSaw.value = self.readLine(pair.input) ?? "error: \(String(describing: pair.input.streamError))"
                self.writeText(pair.output, "ok\n")
                pair.output.close()
                pair.input.close()
            }
            addCleanup { host.stop() }
            let port = listener.port
            let answer = DispatchSemaphore(value: 0)
            let pair = makePair(host: "localhost", port: port)
            pair.input.connection.someOptions.resolve = { _, _, family in
                answer.wait()
                answer.signal()
                return .success(family == AF_INET ? [SocketAddress(numericHost: "127.0.0.1", port: port)!] : [])
            }
            pair.input.open()
            pair.output.open()
            guard case .connecting = pair.input.connection.lock.withLock({ pair.input.connection.lifecycle.state }) else {
                return XCTFail("not connecting after open")
            }
            var client = TLSSettings()
            client.trustRoots = [.pemFile(try pki.caCertificate)]
            if spelling == "typed" {
                XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey))
            } else {
                XCTAssertTrue(pair.input.setProperty(client, forKey: .tlsSettingsKey))
                XCTAssertTrue(pair.output.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey))
            }
            answer.signal()
            writeText(pair.output, "hello\n")
            XCTAssertEqual(readLine(pair.input), "ok", spelling)
            XCTAssertEqual(serverSaw.value, "hello", spelling)
            XCTAssertNotNil(pair.input.property(forKey: .tlsConnectionInfoKey) as? TLSConnectionInfo, spelling)
            pair.input.close()
            pair.output.close()
        }
    }

    /// `openssl s_client -starttls smtp` (a real STARTTLS client) against our SMTP-like server, which
    /// upgrades on the server side after "220 go ahead".
    func testOpenSSLClientStartTLSAgainstOurServer() throws {
        let settings = try serverSettings()
        let listener = try StreamListener(host: "127.0.0.1", port: 0)
        let afterTLS = Locked<String?>(nil)
        let host = ListenerHost(listener) { pair in
            pair.input.open()
            pair.output.open()
            self.writeText(pair.output, "220 test ESMTP\r\n")
            guard let hello = self.readLine(pair.input), hello.uppercased().hasPrefix("EHLO") else { return }
            self.writeText(pair.output, "250-test\r\n250 STARTTLS\r\n")
            guard let command = self.readLine(pair.input), command.uppercased().hasPrefix("STARTTLS") else { return }
            self.writeText(pair.output, "220 go ahead\r\n")
            _ = pair.input.setProperty(settings, forKey: .tlsSettingsKey)
            afterTLS.value = self.readLine(pair.input)
            self.writeText(pair.output, "221 bye\r\n")
            pair.output.close()
            pair.input.close()
        }
        addCleanup { host.stop() }
        let result = try runCommand(
            "openssl",
            [
                "s_client", "-connect", "127.0.0.1:\(listener.port)", "-starttls", "smtp",
                "-CAfile", try pki.caCertificate, "-verify_return_error", "-quiet", "-ign_eof",
            ],
            input: Data("NOOP over TLS\r\n".utf8))
        XCTAssertEqual(afterTLS.value, "NOOP over TLS\r", result.stderr)
        XCTAssertTrue(result.stdoutText.contains("221 bye"), result.stdoutText + result.stderr)
    }
}
