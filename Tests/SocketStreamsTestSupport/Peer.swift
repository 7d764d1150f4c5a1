#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import TestPeers

/// The peers this suite uses.
extension Peer {

    /// `python3 -u -m http.server 0 --bind ADDR --directory DIR`; returns the peer and its port.
    package static func httpServer(family: IPFamily, directory: URL) throws -> (peer: Peer, port: Int) {
        let python = try locate("python3", hint: "needs Python 3 for http.server")
        let peer = Peer(
            name: "http.server[\(family.loopback)]", executable: python,
            arguments: [
                "-u", "-m", "http.server", "0", "--bind", family.loopback,
                "--directory", directory.path,
            ])
        let port = try peer.start(readyPattern: #"Serving HTTP on \S+ port (\d+)"#)
        return (peer, try parsePort(port, peer: peer))
    }

    /// `socat -d -d TCP4-LISTEN:0,bind=127.0.0.1,reuseaddr,fork PIPE` (or TCP6 on [::1]): an echo server.
    package static func socatEcho(family: IPFamily) throws -> (peer: Peer, port: Int) {
        let socat = try locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let address =
            family == .v4
            ? "TCP4-LISTEN:0,bind=127.0.0.1,reuseaddr,fork"
            : "TCP6-LISTEN:0,bind=[::1],reuseaddr,fork"
        let peer = Peer(
            name: "socat echo[\(family.loopback)]", executable: socat,
            arguments: ["-d", "-d", address, "PIPE"])
        // socat -d -d logs e.g. "N listening on AF=2 127.0.0.1:37645" or "AF=10 [0000:...:0001]:36957".
        let port = try peer.start(readyPattern: #"listening on AF=(?:2|10) .*:(\d+)\s*$"#)
        return (peer, try parsePort(port, peer: peer))
    }

    /// `socat -d -d UNIX-LISTEN:PATH,fork PIPE`: a Unix-domain echo server.
    package static func socatUnixEcho(path: String) throws -> Peer {
        let socat = try locate("socat", hint: "apt-get install -y --no-install-recommends socat")
        let peer = Peer(
            name: "socat unix echo", executable: socat,
            arguments: ["-d", "-d", "UNIX-LISTEN:\(path),fork", "PIPE"])
        _ = try peer.start(readyPattern: #"(listening on AF=1)"#)
        return peer
    }

    /// `openssl s_server -accept 127.0.0.1:0 ARGUMENTS` (e.g. `-www`, `-cert`, `-key`, `-tls1_3`):
    /// a TLS server from OpenSSL itself; returns the peer and its port.
    package static func opensslServer(_ arguments: [String], family: IPFamily = .v4) throws -> (peer: Peer, port: Int) {
        let openssl = try locate("openssl", hint: "apt-get install -y --no-install-recommends openssl")
        let accept = family == .v4 ? "127.0.0.1:0" : "[::1]:0"
        let peer = Peer(name: "openssl s_server", executable: openssl, arguments: ["s_server", "-accept", accept] + arguments)
        let port = try peer.start(readyPattern: #"^ACCEPT .*:(\d+)\s*$"#)
        return (peer, try parsePort(port, peer: peer))
    }

    /// stunnel4 in the foreground, terminating TLS on 127.0.0.1:`port` with `certificate`/`key` and
    /// forwarding the plaintext to 127.0.0.1:`target` (and nowhere else). stunnel cannot report an
    /// ephemeral port, so the caller picks a free one; readiness is its "Configuration successful" line.
    package static func stunnel(port: Int, target: Int, certificate: String, key: String, directory: URL) throws -> Peer {
        let stunnel = try locate("stunnel4", hint: "apt-get install -y --no-install-recommends stunnel4")
        let configuration = directory.appendingPathComponent("stunnel.conf")
        try Data(
            """
            foreground = yes
            pid =
            debug = 5
            [tls]
            accept = 127.0.0.1:\(port)
            connect = 127.0.0.1:\(target)
            cert = \(certificate)
            key = \(key)

            """.utf8
        ).write(to: configuration)
        let peer = Peer(name: "stunnel4", executable: stunnel, arguments: [configuration.path])
        _ = try peer.start(readyPattern: #"(Configuration successful)"#)
        return peer
    }

    private static func parsePort(_ text: String, peer: Peer) throws -> Int {
        guard let port = Int(text), port > 0, port < 65536 else {
            throw PeerError.notReady(peer.name, output: peer.printed)
        }
        return port
    }
}
