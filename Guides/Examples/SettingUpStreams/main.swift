// `swift run setting-up-streams`: every way to get a stream pair (to a host and port, Apple's
// `getStreamsToHost`, around a socket you already have, to a Unix-domain path), each used for one
// exchange with a line-echo server that runs on the package's stream thread.
// Guides/SettingUpStreams.md walks through it.
import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The server side of one connection: answers each line with "echo: " and the line, until the client
/// closes. Stream delegates are weak, so it keeps itself alive until then.
final class Echo: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var keepAlive: Echo?

    init(_ input: InputStream, _ output: OutputStream, on runLoop: RunLoop) {
        self.input = input
        self.output = output
        super.init()
        keepAlive = self
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 {
                let reply = Array("echo: ".utf8) + buffer[..<n]
                _ = output.write(reply, maxLength: reply.count)  // a short line: one write takes it
            }
        case .endEncountered, .errorOccurred:
            input.close()
            output.close()
            keepAlive = nil
        default:
            break
        }
    }
}

/// One exchange on an unscheduled pair: opens it, sends `line`, returns the answer, closes it.
/// (Polling keeps the example short; Guides/PollingOrRunLoop.md does the same with delegates.)
func ask(_ input: InputStream, _ output: OutputStream, _ line: String) -> String {
    input.open()
    output.open()
    defer {
        input.close()
        output.close()
    }
    let question = Array((line + "\n").utf8)
    var sent = 0
    while sent < question.count {
        let n = question[sent...].withUnsafeBufferPointer { output.write($0.baseAddress!, maxLength: $0.count) }
        guard n > 0 else { return "write failed: \(output.streamError.map { "\($0)" } ?? "?")" }
        sent += n
    }
    var answer: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 1024)
    while answer.last != UInt8(ascii: "\n") {
        let n = input.read(&buffer, maxLength: buffer.count)
        guard n > 0 else { return "read returned \(n): \(input.streamError.map { "\($0)" } ?? "end of stream")" }
        answer += buffer[..<n]
    }
    return String(decoding: answer.dropLast(), as: UTF8.self)
}

// The servers: a TCP listener and a Unix-domain listener, both on the stream thread, whose run loop
// always runs. Their accept closures run there too, so each Echo is scheduled on that thread.
let tcpListener = try StreamListener(host: "127.0.0.1", port: 0)
tcpListener.start(in: .socketStreams) { input, output in
    _ = Echo(input, output, on: .socketStreams)
}
let socketPath = FileManager.default.temporaryDirectory.appendingPathComponent("setting-up-\(getpid()).sock").path
let unixListener = try StreamListener(unixSocketPath: socketPath)
unixListener.start(in: .socketStreams) { input, output in
    _ = Echo(input, output, on: .socketStreams)
}
defer {
    tcpListener.close()
    unixListener.close()  // also removes the socket file
}

// 1. To a host and port: CFStreamCreatePairWithSocketToHost's counterpart. Options go on before open().
let (input, output) = createStreamPair(host: "127.0.0.1", port: tcpListener.port)
input.setProperty(5, forKey: .connectTimeoutKey)  // seconds, name lookup included; unset means no limit
output.setProperty(true, forKey: .tcpNoDelayKey)  // TCP_NODELAY: small writes go out at once
let remoteHost = input.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketRemoteHostName as String)) as? String
print("host and port:", ask(input, output, "host and port"), "(remote host \(remoteHost ?? "?"))")

// 2. Apple's spelling, unchanged.
var appleInput: InputStream?
var appleOutput: OutputStream?
Stream.getStreamsToHost(withName: "127.0.0.1", port: tcpListener.port, inputStream: &appleInput, outputStream: &appleOutput)
print("getStreamsToHost:", ask(appleInput!, appleOutput!, "getStreamsToHost"))

// 3. Around a socket you already have (CFStreamCreatePairWithSocket): here one end of a socketpair(2),
// whose other end the echo server gets the same way. By default the pair does not close the fd;
// setting kCFStreamPropertyShouldCloseNativeSocket hands it over.
var fds: [Int32] = [-1, -1]
guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { fatalError("socketpair: errno \(errno)") }
let shouldClose = Stream.PropertyKey(kCFStreamPropertyShouldCloseNativeSocket as String)
let server = createStreamPair(nativeSocket: fds[1])
server.input.setProperty(true, forKey: shouldClose)
_ = Echo(server.input, server.output, on: .socketStreams)
let (nativeInput, nativeOutput) = createStreamPair(nativeSocket: fds[0])
nativeInput.setProperty(true, forKey: shouldClose)
let handle = nativeInput.property(forKey: Stream.PropertyKey(kCFStreamPropertySocketNativeHandle as String)) as? Data
let sameFD = handle?.withUnsafeBytes { $0.loadUnaligned(as: Int32.self) } == fds[0]
print("native socket:", ask(nativeInput, nativeOutput, "native socket"), "(handle is the fd: \(sameFD))")

// 4. To a Unix-domain socket path.
let (unixInput, unixOutput) = createStreamPair(unixSocketPath: socketPath)
print("unix path:", ask(unixInput, unixOutput, "unix path"))
