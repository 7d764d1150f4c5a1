import Foundation
import TestPeers

/// A scripted HTTP/1.1 server in python3 on 127.0.0.1 (an ephemeral port) for `stream-get`'s transfer tests. It keeps
/// connections alive, counts the connections it accepted, logs each request line (`REQUEST METHOD TARGET`), and
/// answers by path:
/// - `/text/NAME`: `NAME\n` with a Content-Length; `/chunked`: a chunked body (`one`, `two`);
/// - `/close`: `closed\n`, then `Connection: close` and the close; `/count`: the accepted connections so far;
/// - `/echo`: the request head as the body; `/status/N`: status N;
/// - `/redirect?status=N&to=LOCATION`: status N (302 by default) with that `Location`; `/loop`: a 302 to itself;
/// - `/cut`: a Content-Length of 100000 and 50000 bytes, then the close; `/empty`: the close without a byte;
/// - `/garbage`: a response that is not HTTP; a `CONNECT`: `200` and then the same service on the tunnel.
/// With a certificate it serves all of this over TLS.
package final class ScriptedHTTPPeer {
    /// The python program.
    package static let script = #"""
        import socket, sys, threading, urllib.parse
        accepts = 0
        lock = threading.Lock()

        def respond(conn, status, body=b"", headers=(), head_only=False, chunks=None, close=False):
            lines = ["HTTP/1.1 %d %s" % (status, {200: "OK", 404: "Not Found"}.get(status, "Status"))]
            lines += list(headers)
            if chunks is not None:
                lines.append("Transfer-Encoding: chunked")
            else:
                lines.append("Content-Length: %d" % len(body))
            if close:
                lines.append("Connection: close")
            data = ("\r\n".join(lines) + "\r\n\r\n").encode()
            if not head_only:
                if chunks is not None:
                    for chunk in chunks:
                        data += b"%x\r\n" % len(chunk) + chunk + b"\r\n"
                    data += b"0\r\n\r\n"
                else:
                    data += body
            conn.sendall(data)

        def serve(conn):
            reader = conn.makefile("rb")
            while True:
                lines = []
                while True:
                    line = reader.readline()
                    if not line:
                        return
                    lines.append(line)
                    if line in (b"\r\n", b"\n"):
                        break
                head = b"".join(lines)
                method, target = lines[0].decode("latin-1").split(" ")[:2]
                print("REQUEST", method, target, flush=True)
                if method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    continue
                path, _, query = target.partition("?")
                params = dict(urllib.parse.parse_qsl(query))
                head_only = method == "HEAD"
                if path.startswith("/text/"):
                    respond(conn, 200, path[6:].encode() + b"\n", head_only=head_only)
                elif path == "/chunked":
                    respond(conn, 200, chunks=[b"one", b"two"], head_only=head_only)
                elif path == "/close":
                    respond(conn, 200, b"closed\n", close=True, head_only=head_only)
                    return
                elif path == "/count":
                    with lock:
                        respond(conn, 200, b"%d\n" % accepts, head_only=head_only)
                elif path == "/echo":
                    respond(conn, 200, head, head_only=head_only)
                elif path.startswith("/status/"):
                    code = int(path[8:])
                    respond(conn, code, b"status %d\n" % code, head_only=head_only)
                elif path == "/redirect":
                    status = int(params.get("status", "302"))
                    respond(conn, status, b"moved\n", ["Location: " + params["to"]], head_only=head_only)
                elif path == "/loop":
                    respond(conn, 302, b"again\n", ["Location: /loop"], head_only=head_only)
                elif path == "/cut":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 50000)
                    return
                elif path == "/empty":
                    return
                elif path == "/garbage":
                    conn.sendall(b"this is not HTTP\r\n\r\n")
                    return
                else:
                    respond(conn, 404, b"no such path\n", head_only=head_only)

        def run(conn):
            try:
                serve(conn)
            except (ConnectionError, BrokenPipeError):
                pass
            finally:
                conn.close()

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        context = None
        if len(sys.argv) == 3:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(sys.argv[1], sys.argv[2])
        print("READY", listener.getsockname()[1], flush=True)
        while True:
            conn, _ = listener.accept()
            with lock:
                accepts += 1
            print("ACCEPT", accepts, flush=True)
            if context is not None:
                try:
                    conn = context.wrap_socket(conn, server_side=True)
                except (OSError, ValueError) as error:
                    print("TLS FAILED", error, flush=True)
                    conn.close()
                    continue
            threading.Thread(target=run, args=(conn,), daemon=True).start()
        """#

    /// The running peer.
    package let peer: Peer
    /// Its port.
    package let port: Int

    /// Writes the script into `directory` and starts it, waiting for its `READY port` line. With `tls` (certificate
    /// chain and key files) it serves HTTPS: python's `ssl` module (OpenSSL) terminates TLS on each connection.
    package init(directory: URL, tls: (chain: String, key: String)? = nil) throws {
        let file = directory.appendingPathComponent("scripted_http_peer.py")
        try Data(Self.script.utf8).write(to: file)
        let python = try Peer.locate("python3", hint: "needs Python 3")
        peer = Peer(
            name: "scripted HTTP peer" + (tls == nil ? "" : " (TLS)"), executable: python,
            arguments: ["-u", file.path] + (tls.map { [$0.chain, $0.key] } ?? []))
        guard let port = Int(try peer.start(readyPattern: #"^READY (\d+)$"#)) else {
            throw TestSetupError("the scripted peer printed no port: \(peer.printed)")
        }
        self.port = port
    }

    /// The request lines logged so far (`METHOD TARGET`), in order.
    package var requests: [String] {
        peer.printed.split(separator: "\n").filter { $0.hasPrefix("REQUEST ") }.map { String($0.dropFirst(8)) }
    }

    /// The connections accepted so far.
    package var accepts: Int { peer.printed.split(separator: "\n").filter { $0.hasPrefix("ACCEPT ") }.count }

    /// Whether it serves HTTPS.
    package var secure: Bool { peer.name.hasSuffix("(TLS)") }

    /// `http://127.0.0.1:PORT` + `path` (`https://localhost:PORT`, the certificate's name, over TLS).
    package func url(_ path: String) -> String { secure ? "https://localhost:\(port)\(path)" : "http://127.0.0.1:\(port)\(path)" }
}
