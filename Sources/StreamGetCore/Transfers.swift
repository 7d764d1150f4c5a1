import Foundation
import HTTPParsing
import SocketStreams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A sink that drops everything (stderr under `-s`).
final class DiscardingSink: OutputSink {
    func write(_ bytes: [UInt8]) {}
}

/// The URLs of one `stream-get` run, fetched in order as curl fetches them: each over a kept-alive connection to
/// its host and port (and proxy and TLS settings) when an earlier one left it open, following redirects with `-L`,
/// writing each body where `-o`/`-O` say, and `-w`'s line after each.
struct Transfers {
    /// A URL as given on the command line, or already parsed (the built-in page's).
    enum Target {
        case text(String)
        case parsed(HTTPURL)
    }

    let options: StreamGetOptions
    /// Where `*_proxy` and `NO_PROXY` come from; nil ignores the environment (the built-in page).
    let environment: [String: String]?
    let out: OutputSink
    let err: OutputSink
    /// The connections left open, by `connectionKey`.
    private var connections: [String: HTTPFetch] = [:]

    init(options: StreamGetOptions, environment: [String: String]?, out: OutputSink, err: OutputSink) {
        self.options = options
        self.environment = environment
        self.out = out
        self.err = err
    }

    /// Fetches every target in turn; returns 0 when all succeeded, else the exit code of the last that failed.
    mutating func run(_ targets: [Target]) -> Int32 {
        var status = CurlExitCode.ok
        for (index, target) in targets.enumerated() {
            let code = transfer(target, index: index, isLast: index == targets.count - 1)
            if code != CurlExitCode.ok { status = code }
        }
        for fetch in connections.values { fetch.close() }
        connections = [:]
        return status
    }

    /// Whether a status with a `Location` is a redirect `-L` follows. stream-get sends no request body, so
    /// each of them repeats the method (GET or HEAD); curl changes a POST to GET for 301, 302 and 303.
    static func isRedirect(_ status: Int) -> Bool { [301, 302, 303, 307, 308].contains(status) }

    /// Fetches one URL (and the redirects it leads to) and returns its exit code.
    private mutating func transfer(_ target: Target, index: Int, isLast: Bool) -> Int32 {
        let transferOptions = options.transfer
        let quiet = transferOptions.silent && !transferOptions.showError
        let fetchErr: OutputSink = transferOptions.silent && !options.verbose ? DiscardingSink() : err
        var report = TransferReport(start: FetchTimings.now(), effectiveURL: "")
        report.method = transferOptions.head ? "HEAD" : "GET"
        var download: FileDownload?
        var meter: ProgressMeter?
        func fail(_ message: String, _ code: Int32) -> Int32 {
            download?.discard()
            meter?.finish()
            if !quiet { err.write("stream-get: \(message)\n") }
            report.exitCode = code
            report.errorMessage = message
            writeOut(report)
            return code
        }

        let url: HTTPURL
        switch target {
        case .parsed(let parsed):
            url = parsed
        case .text(let text):
            do {
                url = try HTTPURL(parsing: text)
            } catch {
                report.effectiveURL = text
                if case .unsupportedScheme = error { return fail("\(error)", CurlExitCode.unsupportedProtocol) }
                return fail("\(error)", CurlExitCode.urlMalformed)
            }
        }
        report.effectiveURL = url.description
        if index < transferOptions.outputs.count {
            let path: String
            switch transferOptions.outputs[index] {
            case .file(let name): path = name
            case .remoteName: path = url.remoteFileName
            }
            if path.isEmpty { return fail("\(url): -O needs a file name at the end of the URL's path", CurlExitCode.writeError) }
            if path == "-" {
                download = nil
            } else {
                do {
                    download = try FileDownload(path: path, createDirectories: transferOptions.createDirectories)
                } catch {
                    return fail("\(error)", CurlExitCode.writeError)
                }
            }
        }
        let sink: OutputSink = download ?? out
        if !transferOptions.silent, !options.verbose, ProgressMeter.stderrIsTerminal(), download != nil || isatty(1) != 1 {
            meter = ProgressMeter(err: err, bar: transferOptions.progressBar)
        }

        let deadline = options.timeout.map { Date(timeIntervalSinceNow: $0) }
        let origin = url.origin
        var current = url
        while true {
            report.effectiveURL = current.description
            let route: StreamGetProxyRoute?
            do {
                route = try StreamGetProxyRoute.route(
                    for: current, proxy: options.proxy, proxyUser: options.proxyUser, noProxy: options.noProxy,
                    environment: environment)
            } catch {
                return fail("\(error)", CurlExitCode.couldNotResolveProxy)
            }
            var connectHost: String?
            var connectPort: Int?
            if route == nil, let target = options.connectOverrides.target(host: current.host, port: current.port) {
                (connectHost, connectPort) = (target.host, target.port)  // --resolve, --connect-to
            } else if let route, route.resolvesLocally {
                let family = route.configuration.kind == .socks4 ? AF_INET : AF_UNSPEC
                guard let address = StreamGetProxyRoute.resolveLocally(current.host, family: family) else {
                    return fail(
                        "\(current.endpointDescription): could not resolve host \(current.host)"
                            + (family == AF_INET ? " to an IPv4 address (SOCKS4)" : ""), CurlExitCode.couldNotResolveHost)
                }
                connectHost = address
            }

            // Credentials go to the host they were given for only (curl drops them on a redirect elsewhere).
            var headers = transferOptions.headers
            if current.origin == origin {
                if let user = transferOptions.user {
                    headers.insert("Authorization: Basic \(Data(user.utf8).base64EncodedString())", at: 0)
                }
            } else {
                headers.removeAll { header in
                    let name = String(header.prefix { $0 != ":" && $0 != ";" }).trimmingSpaces.lowercased()
                    return name == "authorization" || name == "cookie"
                }
            }
            let closesConnection = isLast && !transferOptions.followRedirects
            let request = HTTPRequest.make(
                method: report.method, url: current, headers: headers, userAgent: transferOptions.userAgent ?? HTTPRequest.userAgent,
                closesConnection: closesConnection)
            let key = Self.connectionKey(current, connectHost: connectHost, proxy: route?.configuration)
            let fetch: HTTPFetch
            if let open = connections.removeValue(forKey: key) {
                fetch = open
                fetch.prepare(url: current, request: request, isHead: transferOptions.head, out: sink)
            } else {
                fetch = HTTPFetch(
                    url: current, includeHeaders: options.includeHeaders, verbose: options.verbose, out: sink, err: fetchErr,
                    tls: current.secure ? (options.trustOverride ?? options.tls.settings) : nil, proxy: route?.configuration,
                    connectHost: connectHost, request: request, isHead: transferOptions.head, connectPort: connectPort)
            }
            fetch.keepsConnection = !closesConnection
            fetch.timesNameLookup = transferOptions.writeOut != nil
            let follows = transferOptions.followRedirects
            let failsOnError = transferOptions.failOnHTTPError
            fetch.bodyAction = { head in
                if follows, Self.isRedirect(head.statusCode), head.value(forName: "Location") != nil { return .discard }
                if failsOnError, head.statusCode >= 400 { return .stop }
                return .write
            }
            fetch.progress = meter.map { meter in { meter.update(received: $0, expected: $1) } }

            let connectionsBefore = fetch.connectionsOpened
            var outcome = fetch.run(timeout: deadline.map { max(0.001, $0.timeIntervalSinceNow) })
            if case .failed = outcome, fetch.reusedConnection, fetch.responseBytesRead == 0 {
                // The server closed the kept connection before this request reached it: a new one, as curl does.
                if options.verbose { fetchErr.write("* the kept connection was closed; retrying on a new one\n") }
                fetch.prepare(url: current, request: request, isHead: transferOptions.head, out: sink)
                outcome = fetch.run(timeout: deadline.map { max(0.001, $0.timeIntervalSinceNow) })
            }
            report.connectionsOpened += fetch.connectionsOpened - connectionsBefore
            if fetch.isConnected { connections[key] = fetch }
            report.timings = fetch.timings
            report.remoteEndpoint = fetch.remoteEndpoint
            report.statusCode = fetch.responseHead?.statusCode ?? 0
            report.contentType = fetch.responseHead?.value(forName: "Content-Type")
            report.bodyBytes = fetch.bodyBytesWritten
            if current.secure { report.sslVerifyResult = fetch.verifyResult }

            let status: Int
            switch outcome {
            case .timedOut:
                return fail(
                    "\(current.endpointDescription): timed out after \(StreamGetTool.seconds(options.timeout ?? 0))", CurlExitCode.timedOut)
            case .failed(let message, let code):
                return fail("\(current.endpointDescription): \(message)", code)
            case .completed(let statusCode):
                status = statusCode
            }
            let location = fetch.responseHead.flatMap { Self.isRedirect(status) ? $0.value(forName: "Location") : nil }
            if let location {
                let next: HTTPURL
                do {
                    next = try current.resolving(location)
                } catch {
                    if !follows {
                        report.redirectURL = location
                        break
                    }
                    if case .unsupportedScheme = error {
                        return fail("\(current): redirect to \"\(location)\": \(error)", CurlExitCode.unsupportedProtocol)
                    }
                    return fail("\(current): redirect to \"\(location)\": \(error)", CurlExitCode.urlMalformed)
                }
                guard follows else {
                    report.redirectURL = next.description
                    break
                }
                if transferOptions.maxRedirects >= 0, report.redirects >= transferOptions.maxRedirects {
                    return fail("\(url): Maximum (\(transferOptions.maxRedirects)) redirects followed", CurlExitCode.tooManyRedirects)
                }
                report.redirects += 1
                if options.verbose { fetchErr.write("* following the redirect (\(status)) to \(next)\n") }
                current = next
                continue
            }
            break
        }
        if transferOptions.failOnHTTPError, report.statusCode >= 400 {
            return fail("\(current): The requested URL returned error: \(report.statusCode)", CurlExitCode.httpReturnedError)
        }
        if let download {
            do {
                try download.commit()
            } catch {
                return fail("\(error)", CurlExitCode.writeError)
            }
        }
        meter?.finish()
        writeOut(report)
        return CurlExitCode.ok
    }

    /// Writes `-w`'s expansion for `report` to stdout, warning about unknown variables.
    private func writeOut(_ report: TransferReport) {
        guard var format = options.transfer.writeOut else { return }
        if format.hasPrefix("@") {
            guard let text = try? String(contentsOfFile: String(format.dropFirst()), encoding: .utf8) else {
                err.write("stream-get: cannot read the --write-out file \(format.dropFirst())\n")
                return
            }
            format = text
        }
        var unknown: [String] = []
        out.write(report.expand(format, unknown: &unknown))
        for name in unknown { err.write("stream-get: unknown --write-out variable: '\(name)'\n") }
    }

    /// The key of a reusable connection: scheme, the host the pair is made for, port and proxy.
    static func connectionKey(_ url: HTTPURL, connectHost: String?, proxy: ProxyConfiguration?) -> String {
        let via = proxy.map { "\($0.kind) \($0.host) \($0.port) \($0.username ?? "") \($0.password ?? "")" } ?? "direct"
        return "\(url.secure ? "https" : "http") \((connectHost ?? url.host).lowercased()) \(url.port) \(via)"
    }
}
