// `swift run polling-or-run-loop`: the same exchange (send a line, read the answer) three ways: polling
// (unscheduled streams, blocking calls) on a thread of its own, delegate events on this thread's run
// loop, and delegate events on the package's stream thread. Guides/PollingOrRunLoop.md compares them.
import Foundation
import SocketStreams

/// The server: answers each line with "echo: " and the line. Keeps itself alive until the client closes.
final class Echo: NSObject, StreamDelegate {
    private let input: InputStream
    private let output: OutputStream
    private var keepAlive: Echo?

    init(_ input: InputStream, _ output: OutputStream) {
        self.input = input
        self.output = output
        super.init()
        keepAlive = self
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .current, forMode: .default)
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

/// Polling: no run loop. `write` blocks until the pair is open and a byte fits; `read` until a byte comes.
func askPolling(port: Int, line: String) -> String {
    let (input, output) = createStreamPair(host: "127.0.0.1", port: port)
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
        guard n > 0 else { return "write failed" }
        sent += n
    }
    var answer: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 1024)
    while answer.last != UInt8(ascii: "\n") {
        let n = input.read(&buffer, maxLength: buffer.count)
        guard n > 0 else { return "read returned \(n)" }
        answer += buffer[..<n]
    }
    return String(decoding: answer.dropLast(), as: UTF8.self)
}

/// Run-loop scheduling: the same exchange driven by events on `runLoop`.
final class Asker: NSObject, StreamDelegate, @unchecked Sendable {
    private let input: InputStream
    private let output: OutputStream
    private var question: [UInt8]
    private var answer: [UInt8] = []
    private let done = DispatchSemaphore(value: 0)
    private var result = ""

    init(port: Int, line: String) {
        (input, output) = createStreamPair(host: "127.0.0.1", port: port)
        question = Array((line + "\n").utf8)
    }

    /// Schedules the pair on `runLoop` and opens it (from that run loop's thread, or before it runs).
    func start(on runLoop: RunLoop) {
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: .default)
            stream.open()
        }
    }

    func stream(_ stream: Stream, handle event: Stream.Event) {
        switch event {
        case .hasSpaceAvailable where !question.isEmpty:
            let n = output.write(question, maxLength: question.count)
            if n > 0 { question.removeFirst(n) }
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 1024)
            let n = input.read(&buffer, maxLength: buffer.count)
            if n > 0 { answer += buffer[..<n] }
            if answer.last == UInt8(ascii: "\n") { finish(String(decoding: answer.dropLast(), as: UTF8.self)) }
        case .errorOccurred, .endEncountered:
            finish("failed: \(String(describing: stream.streamError))")
        default:
            break
        }
    }

    private func finish(_ text: String) {
        guard result.isEmpty else { return }
        result = text
        input.close()
        output.close()
        done.signal()
    }

    /// Waits for the answer (from a thread other than the run loop's).
    func waitForAnswer() -> String {
        done.wait()
        return result
    }

    /// Runs the current run loop until the answer came (on the run loop's own thread).
    func runUntilAnswered() -> String {
        while result.isEmpty && RunLoop.current.run(mode: .default, before: .distantFuture) {}
        return result
    }
}

// The server runs on the package's stream thread, so this thread is free to block or to run its own loop.
let server = try StreamListener(host: "127.0.0.1")
server.start(in: .socketStreams) { input, output in _ = Echo(input, output) }

// 1. Polling, on a thread of its own: plain sequential code, and that thread is blocked meanwhile.
let polled = DispatchSemaphore(value: 0)
nonisolated(unsafe) var pollingAnswer = ""
Thread.detachNewThread {
    pollingAnswer = askPolling(port: server.port, line: "polling")
    polled.signal()
}
polled.wait()
print("polling:", pollingAnswer)

// 2. This thread's run loop: events arrive only while the run loop runs.
let onThisThread = Asker(port: server.port, line: "run loop")
onThisThread.start(on: .current)
print("run loop:", onThisThread.runUntilAnswered())

// 3. The package's stream thread: its run loop always runs, so this thread only waits for the answer.
let onStreamThread = Asker(port: server.port, line: "stream thread")
onStreamThread.start(on: .socketStreams)
print("stream thread:", onStreamThread.waitForAnswer())

server.close()
