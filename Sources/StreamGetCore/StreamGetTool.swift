import Foundation
import SocketStreams

/// The `stream-get` command: parses the command line, fetches the URL (or the built-in page) and returns the exit
/// status. `main.swift` only calls `run(arguments:)`.
public enum StreamGetTool {
    /// Exit status for a complete response (any status code).
    public static let exitSuccess: Int32 = 0
    /// Exit status for a failed fetch: connection error, malformed or truncated response, timeout.
    public static let exitFailure: Int32 = 1
    /// Exit status for a bad command line or an unusable URL.
    public static let exitUsage: Int32 = 2

    /// Runs the command.
    /// - Parameters:
    ///   - arguments: the command line without the program name.
    ///   - out: where the body (and with `-i` the head) and `--help` go.
    ///   - err: where the status line, the `-v` trace and error messages go.
    /// - Returns: the exit status.
    public static func run(
        arguments: [String],
        out: OutputSink = FileDescriptorSink.standardOutput(),
        err: OutputSink = FileDescriptorSink.standardError()
    ) -> Int32 {
        let options: StreamGetOptions
        do {
            options = try StreamGetOptions(arguments: arguments)
        } catch {
            err.write("stream-get: \(error)\n\(StreamGetOptions.synopsis)\nRun 'stream-get --help' for details.\n")
            return exitUsage
        }
        if options.showHelp {
            out.write(StreamGetOptions.usage + "\n")
            return exitSuccess
        }
        guard let urlArgument = options.url else {
            return fetchBuiltInPage(options: options, out: out, err: err)
        }
        if options.selfTestTLS {
            err.write("stream-get: --self-test-tls fetches the built-in page and takes no URL\n")
            return exitUsage
        }
        let url: HTTPURL
        do {
            url = try HTTPURL(parsing: urlArgument)
        } catch {
            err.write("stream-get: \(error)\n")
            return exitUsage
        }
        return fetch(url, options: options, environment: ProcessInfo.processInfo.environment, out: out, err: err)
    }

    /// Starts the built-in page server on `RunLoop.socketStreams` and fetches its page. With `--self-test-tls`
    /// the server presents a certificate made at run time and the fetch trusts exactly that certificate.
    static func fetchBuiltInPage(options: StreamGetOptions, out: OutputSink, err: OutputSink) -> Int32 {
        var options = options
        let server: BuiltInPageServer
        do {
            if options.selfTestTLS {
                let (identity, certificate) = try TLSIdentity.makeSelfSigned(dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"])
                server = try BuiltInPageServer(tls: .server(identity: identity))
                var settings = options.tls.settings
                settings.trustRoots = [.pem(certificate)]
                options.trustOverride = settings
            } else {
                server = try BuiltInPageServer()
            }
        } catch {
            err.write("stream-get: cannot start the built-in page server: \((error as NSError).localizedDescription)\n")
            return exitFailure
        }
        server.start()
        defer { server.stop() }
        err.write("stream-get: no URL given; fetching the built-in page from \(server.url)\n")
        return fetch(server.url, options: options, environment: nil, out: out, err: err)
    }

    /// Fetches `url` (through the proxy the options or `environment` give) and reports a failure on `err`.
    static func fetch(
        _ url: HTTPURL, options: StreamGetOptions, environment: [String: String]?, out: OutputSink,
        err: OutputSink
    ) -> Int32 {
        let route: StreamGetProxyRoute?
        do {
            route = try StreamGetProxyRoute.route(
                for: url, proxy: options.proxy, proxyUser: options.proxyUser,
                noProxy: options.noProxy, environment: environment)
        } catch {
            err.write("stream-get: \(error)\n")
            return exitUsage
        }
        var connectHost: String?
        var connectPort: Int?
        if route == nil, let target = options.connectOverrides.target(host: url.host, port: url.port) {
            (connectHost, connectPort) = (target.host, target.port)  // --resolve, --connect-to
        } else if let route, route.resolvesLocally {
            let family = route.configuration.kind == .socks4 ? AF_INET : AF_UNSPEC
            guard let address = StreamGetProxyRoute.resolveLocally(url.host, family: family) else {
                err.write(
                    "stream-get: \(url.endpointDescription): could not resolve host \(url.host)"
                        + (family == AF_INET ? " to an IPv4 address (SOCKS4)" : "") + "\n")
                return exitFailure
            }
            connectHost = address
        }
        let fetch = HTTPFetch(
            url: url, includeHeaders: options.includeHeaders, verbose: options.verbose, out: out, err: err,
            tls: url.secure ? (options.trustOverride ?? options.tls.settings) : nil,
            proxy: route?.configuration, connectHost: connectHost, connectPort: connectPort)
        switch fetch.run(timeout: options.timeout) {
        case .completed:
            return exitSuccess
        case .failed(let message):
            err.write("stream-get: \(url.endpointDescription): \(message)\n")
            return exitFailure
        case .timedOut:
            err.write("stream-get: \(url.endpointDescription): timed out after \(seconds(options.timeout ?? 0))\n")
            return exitFailure
        }
    }

    /// `2 s`, `1.5 s`: a duration for messages.
    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? "\(Int(value)) s" : "\(value) s"
    }
}
