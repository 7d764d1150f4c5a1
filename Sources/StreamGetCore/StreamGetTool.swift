import Foundation
import SocketStreams

/// The `stream-get` command: parses the command line, fetches the URL (or the built-in page) and returns the exit
/// status. `main.swift` only calls `run(arguments:)`.
public enum StreamGetTool {
    /// Exit status for a complete response (any status code, unless `-f`).
    public static let exitSuccess: Int32 = CurlExitCode.ok
    /// Exit status for a bad command line (curl's 2).
    public static let exitUsage: Int32 = CurlExitCode.usage

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
        guard !options.urls.isEmpty else {
            return fetchBuiltInPage(options: options, out: out, err: err)
        }
        if options.selfTestTLS {
            err.write("stream-get: --self-test-tls fetches the built-in page and takes no URL\n")
            return exitUsage
        }
        var transfers = Transfers(options: options, environment: ProcessInfo.processInfo.environment, out: out, err: err)
        return transfers.run(options.urls.map { .text($0) })
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
            return CurlExitCode.couldNotConnect
        }
        server.start()
        defer { server.stop() }
        err.write("stream-get: no URL given; fetching the built-in page from \(server.url)\n")
        var transfers = Transfers(options: options, environment: nil, out: out, err: err)
        return transfers.run([.parsed(server.url)])
    }

    /// `2 s`, `1.5 s`: a duration for messages.
    static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? "\(Int(value)) s" : "\(value) s"
    }
}
