// `swift run async-await`: async/await on SocketStreams. A server and a client, both
// `AsyncConnection`s, speak length-prefixed frames (a 4-byte big-endian length, then the payload)
// after a greeting line; then the client streams a download as chunks, and finally gives up on a
// request the server never answers, which cancels the read and closes the connection.
// Guides/AsyncAndQueuedOperations.md walks through it.
import Foundation
import SocketStreams

/// Writes one frame: the payload's length as 4 big-endian bytes, then the payload.
func send(_ text: String, on connection: AsyncConnection) async throws {
    let payload = Array(text.utf8)
    let length = UInt32(payload.count)
    let header = [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
    try await connection.write(header + payload)
}

/// Reads one frame, however the bytes arrive: the header, then exactly the length it announces.
func receive(on connection: AsyncConnection) async throws -> String {
    let header = try await connection.read(exactly: 4)
    let length = header.reduce(0) { $0 << 8 | Int($1) }
    let payload = try await connection.read(exactly: length)
    return String(decoding: payload, as: UTF8.self)
}

/// One client of the server: a greeting, then each frame answered in capitals. "download" is answered
/// with 100,000 bytes and the end of the stream; "silence" is never answered.
func serve(_ connection: AsyncConnection) async {
    do {
        try await connection.open()
        try await connection.write(Array("HELLO async\r\n".utf8))
        while true {
            let request = try await receive(on: connection)
            switch request {
            case "download":
                try await connection.write([UInt8](repeating: 0x2a, count: 100_000))
                connection.close()
                return
            case "silence":
                continue
            default:
                try await send(request.uppercased(), on: connection)
            }
        }
    } catch {
        connection.close()  // the client went away
    }
}

let listener = try StreamListener(host: "127.0.0.1", port: 0)
listener.start(in: .socketStreams) { input, output in
    let connection = AsyncConnection(input: input, output: output)
    Task { await serve(connection) }
}

/// The client: the same exchanges, a download as chunks, and a deadline. (In a function rather than
/// at the top level, so nothing it made is still held when the program exits.)
func runClient(of listener: StreamListener) async throws {
    let connection = AsyncConnection(host: "127.0.0.1", port: listener.port)
    try await connection.open()
    let greeting = try await connection.read(upTo: Array("\r\n".utf8), maxLength: 1024)
    print("greeting: \(String(decoding: greeting.dropLast(2), as: UTF8.self))")
    for word in ["hello", "async", "world"] {
        try await send(word, on: connection)
        print("reply: \(try await receive(on: connection))")
    }

    // A download, read as chunks: each is read only when the loop asks for it.
    let download = AsyncConnection(host: "127.0.0.1", port: listener.port)
    try await download.open()
    _ = try await download.read(upTo: Array("\r\n".utf8), maxLength: 1024)
    try await send("download", on: download)
    var total = 0
    for try await chunk in download.chunks() { total += chunk.count }
    print("downloaded \(total) bytes")

    // A deadline: the read races a timer, and the loser is cancelled. Cancelling the read closes the connection.
    try await send("silence", on: connection)
    do {
        let reply = try await withThrowingTaskGroup(of: String.self) { group in
            group.addTask { try await receive(on: connection) }
            group.addTask {
                try await Task.sleep(nanoseconds: 200_000_000)
                throw CancellationError()
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
        print("reply: \(reply)")
    } catch is CancellationError {
        print("no reply within 0.2 s: the read was cancelled")
    }
    do {
        try await send("hello", on: connection)
    } catch {
        print("afterwards: \(error)")
    }
}

try await runClient(of: listener)
listener.close()
