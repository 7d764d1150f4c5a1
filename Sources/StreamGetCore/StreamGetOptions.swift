import Foundation
import SocketStreams

/// A command line `stream-get` cannot run with.
public struct StreamGetUsageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, e.g. `unknown option "-x"`.
    public var message: String

    /// Creates an error with a message.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}

/// The TLS options of `stream-get`, in curl's spellings.
public struct StreamGetTLSOptions: Sendable, Equatable {
    /// `--cacert FILE`: trust only the certificates in FILE (PEM).
    public var caCertificateFile: String?
    /// `--capath DIR`: trust only the certificates in a hashed directory.
    public var caPath: String?
    /// `-k`/`--insecure`: accept any certificate for any name.
    public var insecure = false
    /// `--cert FILE` and `--key FILE`: a client certificate (PEM; the key may be in the same file).
    public var certificateFile: String?
    public var keyFile: String?
    /// `--tlsv1.2`/`--tlsv1.3`: the oldest version allowed; `--tls-max`: the newest.
    public var minimumVersion: TLSVersion?
    public var maximumVersion: TLSVersion?
    /// `--alpn LIST` (comma-separated), `--no-alpn`: the ALPN protocols offered (default `http/1.1`).
    public var alpn: [String] = ["http/1.1"]
    /// `--pinnedpubkey sha256//BASE64[;sha256//BASE64…]`: the public keys accepted.
    public var pins: [Data] = []
    /// `--crlfile FILE`: PEM CRLs; as curl does, every certificate below the root must then have a
    /// current CRL from its issuer in FILE (`X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL`).
    public var crlFile: String?

    public init() {}

    /// The settings these options describe.
    public var settings: TLSSettings {
        var settings = TLSSettings()
        if let caCertificateFile { settings.trustRoots = [.pemFile(caCertificateFile)] }
        if let caPath { settings.trustRoots = (caCertificateFile == nil ? [] : settings.trustRoots) + [.directory(caPath)] }
        if insecure {
            settings.validatesCertificateChain = false
            settings.peerName = .none
        }
        if let certificateFile {
            settings.identity = TLSIdentity(certificateChainFile: certificateFile, privateKeyFile: keyFile ?? certificateFile)
        }
        if let minimumVersion { settings.minimumVersion = minimumVersion }
        settings.maximumVersion = maximumVersion
        settings.alpnProtocols = alpn
        settings.pinnedPublicKeySHA256 = pins
        if let crlFile {
            settings.revocationLists = [.pemFile(crlFile)]
            settings.revocationCheck = .wholeChain
        }
        return settings
    }
}

/// Where `--resolve` and `--connect-to` send a connection instead of the URL's host and port (curl's
/// options: test a certificate for any name against a local server without editing /etc/hosts).
public struct StreamGetConnectOverrides: Sendable, Equatable {
    /// One `--connect-to HOST1:PORT1:HOST2:PORT2`: an empty part matches any host or port (1) or keeps
    /// the URL's (2).
    public struct Route: Sendable, Equatable {
        /// HOST1, lowercased: the URL host this route is for; nil for any.
        public var host: String?
        /// PORT1: the URL port this route is for; nil for any.
        public var port: Int?
        /// HOST2: where to connect instead; nil keeps the URL's host.
        public var toHost: String?
        /// PORT2: the port to connect to instead; nil keeps the URL's port.
        public var toPort: Int?
    }

    /// `--resolve HOST:PORT:ADDRESS`: the address for "host:port" (host lowercased).
    public var addresses: [String: String] = [:]
    /// `--connect-to` routes, first match wins.
    public var routes: [Route] = []

    /// No overrides: connections go to the URL's host and port.
    public init() {}

    /// Parses `--resolve`'s `[+]HOST:PORT:ADDRESS[,ADDRESS…]` (the first address is used; `[::1]` or `::1`).
    mutating func addResolve(_ text: String) throws(StreamGetUsageError) {
        let entry = text.hasPrefix("+") ? text.dropFirst() : Substring(text)
        let parts = entry.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port),
            var address = parts[2].split(separator: ",").first.map(String.init), !address.isEmpty
        else {
            throw StreamGetUsageError("invalid --resolve \"\(text)\": expected HOST:PORT:ADDRESS, e.g. example.com:443:127.0.0.1")
        }
        if address.hasPrefix("["), address.hasSuffix("]") { address = String(address.dropFirst().dropLast()) }
        addresses["\(parts[0].lowercased()):\(port)"] = address
    }

    /// Parses `--connect-to`'s `HOST1:PORT1:HOST2:PORT2` (an IPv6 HOST2 in brackets).
    mutating func addConnectTo(_ text: String) throws(StreamGetUsageError) {
        func failure() -> StreamGetUsageError {
            StreamGetUsageError(
                "invalid --connect-to \"\(text)\": expected HOST1:PORT1:HOST2:PORT2 (empty parts match any / keep the URL's)")
        }
        let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw failure() }
        let target = String(parts[2])
        let toHost: Substring
        let toPortText: Substring
        if target.hasPrefix("[") {
            guard let close = target.firstIndex(of: "]"), target[target.index(after: close)...].hasPrefix(":") else { throw failure() }
            toHost = target[target.index(after: target.startIndex)..<close]
            toPortText = target[target.index(close, offsetBy: 2)...]
        } else {
            guard let colon = target.lastIndex(of: ":") else { throw failure() }
            toHost = target[..<colon]
            toPortText = target[target.index(after: colon)...]
        }
        func port(_ text: Substring) throws(StreamGetUsageError) -> Int? {
            if text.isEmpty { return nil }
            guard let number = Int(text), (1...65535).contains(number) else { throw failure() }
            return number
        }
        routes.append(
            Route(
                host: parts[0].isEmpty ? nil : parts[0].lowercased(), port: try port(parts[1]),
                toHost: toHost.isEmpty ? nil : String(toHost), toPort: try port(toPortText)))
    }

    /// Where to connect for `host`:`port`: nil when no option applies. `--connect-to` first, then
    /// `--resolve` for the host and port it gives, as curl does.
    public func target(host: String, port: Int) -> (host: String, port: Int)? {
        var connectHost = host
        var connectPort = port
        var changed = false
        if let route = routes.first(where: { ($0.host == nil || $0.host == host.lowercased()) && ($0.port == nil || $0.port == port) }) {
            connectHost = route.toHost ?? host
            connectPort = route.toPort ?? port
            changed = true
        }
        if let address = addresses["\(connectHost.lowercased()):\(connectPort)"] {
            connectHost = address
            changed = true
        }
        return changed ? (connectHost, connectPort) : nil
    }
}

/// The parsed command line of `stream-get`.
public struct StreamGetOptions: Sendable, Equatable {
    /// The URL arguments, fetched in turn; none fetches the built-in page from a local listener.
    public var urls: [String] = []
    /// The first URL argument; nil fetches the built-in page from a local listener.
    public var url: String? {
        get { urls.first }
        set { urls = newValue.map { [$0] } ?? [] }
    }
    /// `-i`/`--include`: write the response head to stdout before the body.
    public var includeHeaders = false
    /// `-v`/`--verbose`: trace stream events, bytes and the request/response heads on stderr.
    public var verbose = false
    /// `--timeout SECONDS`: the limit for the whole fetch; nil waits forever.
    public var timeout: Double?
    /// `-h`/`--help`: print the usage and exit.
    public var showHelp = false
    /// TLS options for https:// URLs.
    public var tls = StreamGetTLSOptions()
    /// `--self-test-tls`: serve the built-in page over TLS (a certificate made at run time) and fetch it.
    public var selfTestTLS = false
    /// The settings the self-test fetch uses instead of `tls` (trusting the certificate it made).
    var trustOverride: TLSSettings?
    /// `-x/--proxy [scheme://][user[:password]@]host[:port]`, or `--socks4`/`--socks4a`/`--socks5`/
    /// `--socks5-hostname HOST[:PORT]` (kept as `scheme://HOST[:PORT]`); the last one given wins.
    public var proxy: String?
    /// `-U/--proxy-user user[:password]`.
    public var proxyUser: String?
    /// `--noproxy LIST`: hosts reached directly (overrides NO_PROXY).
    public var noProxy: String?
    /// `--resolve` and `--connect-to`: where a direct connection goes instead of the URL's host and port.
    public var connectOverrides = StreamGetConnectOverrides()
    /// Output files, redirects, headers, `-w`.
    public var transfer = StreamGetTransferOptions()

    /// Creates options with the defaults (no URL, no flags, no timeout).
    public init(url: String? = nil, includeHeaders: Bool = false, verbose: Bool = false, timeout: Double? = nil) {
        self.url = url
        self.includeHeaders = includeHeaders
        self.verbose = verbose
        self.timeout = timeout
    }

    /// The one-line synopsis, printed after a usage error.
    public static let synopsis =
        "usage: stream-get [-i] [-v] [-k] [--timeout SECONDS] [transfer options] [TLS options] [proxy options] [--self-test-tls] [URL...]"

    /// The help text printed by `--help`.
    public static let usage = """
        \(synopsis)

        Fetches each URL in turn with an HTTP/1.1 GET over SocketStreams socket streams and writes the body to
        stdout. The status line goes to stderr (with -i, the whole response head goes to stdout before the body).
        URLs on the same host and port share one connection when the server keeps it alive.

        URL is http[s]://host[:port][/path], e.g. http://127.0.0.1:8080/index.html, http://[::1]:8080/ or
        https://localhost:8443/. Without a URL, stream-get serves a small built-in HTML page from a listener on
        127.0.0.1 (a free port) and fetches it, which needs no network; with --self-test-tls it serves and
        fetches it over TLS, with a certificate made at run time and verified.

        options:
          -i, --include          also write the response head (status line and headers) to stdout
          -v, --verbose          trace stream events, bytes read/written and the TLS session on stderr
              --timeout SECONDS  give up on a URL whose transfer takes longer than SECONDS
          -m, --max-time SECONDS the same, in curl's spelling
              --self-test-tls    fetch the built-in page over TLS (no URL)
          -h, --help             show this help

        Transfer options (curl's spellings):
          -o, --output FILE      write the next URL's body to FILE (a temporary name until it is complete)
          -O, --remote-name      write the next URL's body to a file named after its last path segment
              --create-dirs      create the missing directories of -o's FILE
          -s, --silent           no progress meter, status line or error message
          -S, --show-error       error messages even with -s
          -#, --progress-bar     draw the progress meter as a bar (it is drawn when stderr is a terminal)
          -L, --location         follow 301, 302, 303, 307 and 308 redirects
              --max-redirs N     follow at most N redirects (default 50; -1: no limit)
          -I, --head             send HEAD and write the response head to stdout
          -f, --fail             fail (exit 22) on a status of 400 or more, writing no body
          -H, --header "NAME: VALUE"
                                 add a request header, or replace a default one ("NAME:" removes it)
          -A, --user-agent TEXT  the User-Agent header
          -u, --user USER:PASSWORD
                                 HTTP Basic credentials, sent to the first URL's host only
          -w, --write-out FORMAT after each URL, write FORMAT to stdout with curl's %{variables}: time_namelookup,
                                 time_connect, time_appconnect, time_pretransfer, time_starttransfer, time_total,
                                 time_redirect, speed_download, size_download, http_code, num_connects,
                                 num_redirects, url_effective, redirect_url, remote_ip, remote_port,
                                 ssl_verify_result, content_type, exitcode, errormsg (@FILE reads FORMAT)

        TLS options (https:// URLs; curl's spellings):
              --cacert FILE      trust only the CA certificates in FILE (PEM) instead of the system store
              --capath DIR       trust only the certificates in DIR (a hashed directory)
          -k, --insecure         accept any server certificate, for any name
              --cert FILE        present the client certificate in FILE (PEM)
              --key FILE         its private key (PEM; default: the --cert file)
              --tlsv1.2          allow TLS 1.2 and newer (the default)
              --tlsv1.3          allow TLS 1.3 only
              --tls-max VERSION  allow nothing newer than VERSION (1.2 or 1.3)
              --alpn LIST        offer these ALPN protocols, comma-separated (default: http/1.1)
              --no-alpn          offer no ALPN protocol
              --pinnedpubkey sha256//BASE64[;sha256//BASE64…]
                                 accept only these public keys (SHA-256 of the SubjectPublicKeyInfo)
              --crlfile FILE     check the chain against the CRLs in FILE (PEM): every certificate
                                 below the root needs a current CRL from its issuer there

        Connection options (curl's spellings, for direct connections; TLS still verifies, and Host still
        names, the URL's host):
              --resolve HOST:PORT:ADDRESS
                                 connect to ADDRESS for HOST:PORT instead of resolving HOST
              --connect-to HOST1:PORT1:HOST2:PORT2
                                 connect to HOST2:PORT2 for HOST1:PORT1 (an empty part: any / the URL's)

        Proxy options (curl's spellings; the proxy is asked for the URL's host and port):
          -x, --proxy [SCHEME://][USER[:PASSWORD]@]HOST[:PORT]
                                 go through this proxy. SCHEME is http (the default: an HTTP CONNECT
                                 tunnel, as curl's -p), socks4, socks4a, socks5 or socks5h; PORT is 1080
                                 unless given
              --socks4 HOST[:PORT]
                                 a SOCKS4 proxy; the URL's host is resolved here
              --socks4a HOST[:PORT]
                                 a SOCKS4a proxy, which resolves the URL's host
              --socks5 HOST[:PORT]
                                 a SOCKS5 proxy; the URL's host is resolved here
              --socks5-hostname HOST[:PORT]
                                 a SOCKS5 proxy, which resolves the URL's host
          -U, --proxy-user USER[:PASSWORD]
                                 the proxy's user name and password (SOCKS5, HTTP Basic; SOCKS4 USERID)
              --noproxy LIST     reach these hosts directly (comma-separated; * for all)
          -p, --proxytunnel      accepted for curl compatibility (an http:// proxy always tunnels)
        Without -x or --socks*, the environment's proxy applies as in curl: http_proxy for http:// URLs,
        https_proxy or HTTPS_PROXY for https://, then all_proxy or ALL_PROXY; no_proxy or NO_PROXY (or
        --noproxy) excludes hosts. The built-in page ignores the environment.

        Exit status, as curl's (with several URLs, the last failing one's):
          0  every response arrived complete (whatever its status code, unless -f)
          1  unsupported scheme           2  usage error                    3  malformed URL or port
          5  unusable proxy               6  host name did not resolve      7  connection refused/unreachable
          8  not an HTTP response         18 body cut short                 22 -f and a status >= 400
          23 output file not written      28 timeout                        35 TLS handshake failed
          47 too many redirects           52 empty reply                    55/56 send/receive failed
          58 client certificate unusable  60 server certificate untrusted   90 pinned key mismatch
          97 SOCKS proxy refused
        """

    /// Parses the arguments after the program name.
    ///
    /// Short flags may be combined (`-iv`); `--timeout` takes `SECONDS` as the next argument or as `--timeout=SECONDS`;
    /// `--` ends the options.
    /// - Throws: `StreamGetUsageError` for an unknown option, a bad timeout or more than one URL.
    public init(arguments: [String]) throws(StreamGetUsageError) {
        self.init()
        var index = 0
        var onlyOperands = false
        func setURL(_ value: String) {
            urls.append(value)
        }
        func parseTimeout(_ text: String) throws(StreamGetUsageError) -> Double {
            guard let value = Double(text), value.isFinite, value > 0 else {
                throw StreamGetUsageError("invalid timeout \"\(text)\": expected a positive number of seconds")
            }
            return value
        }
        func value(_ flag: String) throws(StreamGetUsageError) -> String {
            guard index < arguments.count else { throw StreamGetUsageError("\(flag) needs a value") }
            index += 1
            return arguments[index - 1]
        }
        func parseVersion(_ text: String) throws(StreamGetUsageError) -> TLSVersion {
            switch text {
            case "1.2": return .v1_2
            case "1.3": return .v1_3
            default: throw StreamGetUsageError("invalid TLS version \"\(text)\": expected 1.2 or 1.3")
            }
        }
        func parsePins(_ text: String) throws(StreamGetUsageError) -> [Data] {
            var pins: [Data] = []
            for item in text.split(separator: ";") {
                guard item.hasPrefix("sha256//"), let digest = Data(base64Encoded: String(item.dropFirst(8))), digest.count == 32 else {
                    throw StreamGetUsageError("invalid --pinnedpubkey \"\(item)\": expected sha256//BASE64 of a 32-byte digest")
                }
                pins.append(digest)
            }
            return pins
        }
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyOperands || !argument.hasPrefix("-") {
                setURL(argument)
            } else if argument == "--" {
                onlyOperands = true
            } else if try transfer.parse(argument, value: { () throws(StreamGetUsageError) in try value(argument) }) {
                continue
            } else if argument.hasPrefix("--") {
                switch argument {
                case "--include": includeHeaders = true
                case "--verbose": verbose = true
                case "--help": showHelp = true
                case "--insecure": tls.insecure = true
                case "--cacert": tls.caCertificateFile = try value(argument)
                case "--capath": tls.caPath = try value(argument)
                case "--cert": tls.certificateFile = try value(argument)
                case "--key": tls.keyFile = try value(argument)
                case "--tlsv1.2": tls.minimumVersion = .v1_2
                case "--tlsv1.3": tls.minimumVersion = .v1_3
                case "--tls-max": tls.maximumVersion = try parseVersion(try value(argument))
                case "--alpn": tls.alpn = try value(argument).split(separator: ",").map(String.init)
                case "--no-alpn": tls.alpn = []
                case "--pinnedpubkey": tls.pins = try parsePins(try value(argument))
                case "--crlfile": tls.crlFile = try value(argument)
                case "--resolve": try connectOverrides.addResolve(try value(argument))
                case "--connect-to": try connectOverrides.addConnectTo(try value(argument))
                case "--self-test-tls": selfTestTLS = true
                case "--proxy": proxy = try value(argument)
                case "--socks4": proxy = "socks4://" + (try value(argument))
                case "--socks4a": proxy = "socks4a://" + (try value(argument))
                case "--socks5": proxy = "socks5://" + (try value(argument))
                case "--socks5-hostname": proxy = "socks5h://" + (try value(argument))
                case "--proxy-user": proxyUser = try value(argument)
                case "--noproxy": noProxy = try value(argument)
                case "--proxytunnel": break
                case "--timeout", "--max-time":
                    guard index < arguments.count else { throw StreamGetUsageError("\(argument) needs a number of seconds") }
                    timeout = try parseTimeout(arguments[index])
                    index += 1
                default:
                    if argument.hasPrefix("--timeout=") {
                        timeout = try parseTimeout(String(argument.dropFirst("--timeout=".count)))
                    } else {
                        throw StreamGetUsageError("unknown option \"\(argument)\"")
                    }
                }
            } else if argument == "-" {
                throw StreamGetUsageError("unknown option \"-\"")
            } else if argument == "-x" {
                proxy = try value(argument)
            } else if argument == "-U" {
                proxyUser = try value(argument)
            } else if argument == "-m" {
                timeout = try parseTimeout(try value(argument))
            } else {
                for (offset, flag) in argument.dropFirst().enumerated() {
                    let isLast = offset == argument.count - 2
                    if StreamGetTransferOptions.shortFlags.contains(flag)
                        || (isLast && StreamGetTransferOptions.shortFlagsWithValue.contains(flag))
                    {
                        _ = try transfer.parse("-\(flag)", value: { () throws(StreamGetUsageError) in try value("-\(flag)") })
                        continue
                    }
                    switch flag {
                    case "i": includeHeaders = true
                    case "v": verbose = true
                    case "h": showHelp = true
                    case "k": tls.insecure = true
                    case "p": break  // --proxytunnel
                    case "x", "U", "m", "o", "H", "A", "u", "w":
                        throw StreamGetUsageError("-\(flag) takes a value: give it as a separate argument")
                    default: throw StreamGetUsageError("unknown option \"-\(flag)\"")
                    }
                }
            }
        }
    }
}
