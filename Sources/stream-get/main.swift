// `stream-get`: an HTTP/1.1 GET over SocketStreams socket streams. Everything lives in StreamGetCore
// (run `stream-get --help` for the usage).
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import StreamGetCore

exit(StreamGetTool.run(arguments: Array(CommandLine.arguments.dropFirst())))
