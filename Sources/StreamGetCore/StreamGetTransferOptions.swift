/// Where one URL's body goes: `-o FILE` or `-O` (the URL's last path segment).
public enum StreamGetOutput: Sendable, Equatable {
    /// `-o FILE`.
    case file(String)
    /// `-O`: the name is the last segment of the URL's path.
    case remoteName
}

/// The transfer options of `stream-get`, in curl's spellings: output files, redirects, extra headers, `-w`.
public struct StreamGetTransferOptions: Sendable, Equatable {
    /// `-o FILE`/`-O`, one for each URL in order; URLs beyond them write to stdout.
    public var outputs: [StreamGetOutput] = []
    /// `--create-dirs`: create the output file's missing directories.
    public var createDirectories = false
    /// `-s`/`--silent`: no progress meter, no status line, no error messages (unless `-S`).
    public var silent = false
    /// `-S`/`--show-error`: error messages even with `-s`.
    public var showError = false
    /// `-#`/`--progress-bar`: curl's bar instead of the numbers.
    public var progressBar = false
    /// `-L`/`--location`: follow redirects.
    public var followRedirects = false
    /// `--max-redirs N`: the most redirects followed; -1 for no limit (curl's default is 50).
    public var maxRedirects = 50
    /// `-I`/`--head`: send HEAD and write the response head to stdout.
    public var head = false
    /// `-f`/`--fail`: a status of 400 or more fails with exit code 22 and writes no body.
    public var failOnHTTPError = false
    /// `-H`/`--header` values, in order.
    public var headers: [String] = []
    /// `-A`/`--user-agent`.
    public var userAgent: String?
    /// `-u`/`--user USER:PASSWORD`: HTTP Basic credentials, sent to the first URL's host only.
    public var user: String?
    /// `-w`/`--write-out FORMAT` (or `@FILE`).
    public var writeOut: String?

    /// curl's defaults: stdout, a meter on a terminal, no redirects followed (at most 50 with `-L`), GET.
    public init() {}

    /// Handles `flag` (`-o`, `--output`…) if it is a transfer option; `value` takes the next argument.
    /// - Returns: false when `flag` is not a transfer option.
    mutating func parse(
        _ flag: String, value: () throws(StreamGetUsageError) -> String
    ) throws(StreamGetUsageError) -> Bool {
        switch flag {
        case "-o", "--output": outputs.append(.file(try value()))
        case "-O", "--remote-name": outputs.append(.remoteName)
        case "--create-dirs": createDirectories = true
        case "-s", "--silent": silent = true
        case "-S", "--show-error": showError = true
        case "-#", "--progress-bar": progressBar = true
        case "-L", "--location": followRedirects = true
        case "--max-redirs":
            let text = try value()
            guard let count = Int(text), count >= -1 else {
                throw StreamGetUsageError("invalid --max-redirs \"\(text)\": expected a number (-1: no limit)")
            }
            maxRedirects = count
        case "-I", "--head": head = true
        case "-f", "--fail": failOnHTTPError = true
        case "-H", "--header":
            let header = try value()
            guard HTTPRequest.isValidHeader(header) else {
                throw StreamGetUsageError("invalid header \"\(header)\": expected \"Name: value\", \"Name:\" or \"Name;\"")
            }
            headers.append(header)
        case "-A", "--user-agent":
            let agent = try value()
            guard !agent.contains("\r"), !agent.contains("\n") else { throw StreamGetUsageError("invalid user agent: a line break") }
            userAgent = agent
        case "-u", "--user": user = try value()
        case "-w", "--write-out": writeOut = try value()
        default: return false
        }
        return true
    }

    /// The short flags that take a value (as the next argument, or at the end of a group: `-so FILE`).
    static let shortFlagsWithValue: Set<Character> = ["o", "H", "A", "u", "w"]
    /// The short flags without a value.
    static let shortFlags: Set<Character> = ["O", "s", "S", "#", "L", "I", "f"]
}
