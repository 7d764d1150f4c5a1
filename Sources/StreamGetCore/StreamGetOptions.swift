/// A command line `stream-get` cannot run with.
public struct StreamGetUsageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, e.g. `unknown option "-x"`.
    public var message: String

    /// Creates an error with a message.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}

/// The parsed command line of `stream-get`.
public struct StreamGetOptions: Sendable, Equatable {
    /// The URL argument; nil fetches the built-in page from a local listener.
    public var url: String?
    /// `-i`/`--include`: write the response head to stdout before the body.
    public var includeHeaders = false
    /// `-v`/`--verbose`: trace stream events, bytes and the request/response heads on stderr.
    public var verbose = false
    /// `--timeout SECONDS`: the limit for the whole fetch; nil waits forever.
    public var timeout: Double?
    /// `-h`/`--help`: print the usage and exit.
    public var showHelp = false

    /// Creates options with the defaults (no URL, no flags, no timeout).
    public init(url: String? = nil, includeHeaders: Bool = false, verbose: Bool = false, timeout: Double? = nil) {
        self.url = url
        self.includeHeaders = includeHeaders
        self.verbose = verbose
        self.timeout = timeout
    }

    /// The one-line synopsis, printed after a usage error.
    public static let synopsis = "usage: stream-get [-i] [-v] [--timeout SECONDS] [URL]"

    /// The help text printed by `--help`.
    public static let usage = """
        \(synopsis)

        Fetches URL with an HTTP/1.1 GET over SocketStreams socket streams and writes the body to stdout.
        The status line goes to stderr (with -i, the whole response head goes to stdout before the body).

        URL is http://host[:port][/path], e.g. http://127.0.0.1:8080/index.html or http://[::1]:8080/
        (https:// is not supported yet). Without a URL, stream-get serves a small built-in HTML page from a
        listener on 127.0.0.1 (a free port) and fetches it, which needs no network.

        options:
          -i, --include          also write the response head (status line and headers) to stdout
          -v, --verbose          trace stream events and bytes read/written on stderr
              --timeout SECONDS  give up when the whole fetch takes longer than SECONDS
          -h, --help             show this help

        Exit status: 0 when a complete response arrived (whatever its status code), 1 when the fetch failed
        (connection error, malformed or truncated response, timeout), 2 for a usage error or an unusable
        URL (including https://).
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
        func setURL(_ value: String) throws(StreamGetUsageError) {
            guard url == nil else { throw StreamGetUsageError("more than one URL given") }
            url = value
        }
        func parseTimeout(_ text: String) throws(StreamGetUsageError) -> Double {
            guard let value = Double(text), value.isFinite, value > 0 else {
                throw StreamGetUsageError("invalid timeout \"\(text)\": expected a positive number of seconds")
            }
            return value
        }
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyOperands || !argument.hasPrefix("-") {
                try setURL(argument)
            } else if argument == "--" {
                onlyOperands = true
            } else if argument.hasPrefix("--") {
                switch argument {
                case "--include": includeHeaders = true
                case "--verbose": verbose = true
                case "--help": showHelp = true
                case "--timeout":
                    guard index < arguments.count else { throw StreamGetUsageError("--timeout needs a number of seconds") }
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
            } else {
                for flag in argument.dropFirst() {
                    switch flag {
                    case "i": includeHeaders = true
                    case "v": verbose = true
                    case "h": showHelp = true
                    default: throw StreamGetUsageError("unknown option \"-\(flag)\"")
                    }
                }
            }
        }
    }
}
