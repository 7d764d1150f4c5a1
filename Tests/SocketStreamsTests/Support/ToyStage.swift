#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import SocketStreamsTestSupport
@testable import SocketStreams

/// A handshake stage for tests, shaped like a proxy handshake: it sends `HELLO\n`, then reads one
/// line. `OK` finishes the stage, and any bytes that came after the line stay readable through a
/// `PrefixedTransport`; any other line fails it with a protocol error; end of stream fails it with
/// ECONNRESET. It reads greedily, as a real stage must when replies and data share a segment.
final class ToyStage: HandshakeStage, @unchecked Sendable {
    static let greeting = Array("HELLO\n".utf8)
    static let errorDomain = "ToyStageErrorDomain"

    let name = "toy handshake"
    private var sent = 0
    private var reply: [UInt8] = []
    /// The thread of every `advance` call.
    let threads = Locked<[Thread]>([])

    func advance(over transport: any Transport) -> HandshakeStep {
        threads.mutate { $0.append(Thread.current) }
        while sent < Self.greeting.count {
            let result = Self.greeting.withUnsafeBytes { transport.write($0.baseAddress! + sent, Self.greeting.count - sent) }
            switch result {
            case .processed(let count): sent += count
            case .wouldBlock: return .wait(transport.writeInterest)
            case .end: return .failed(.posix(EPIPE, .handshake(name)))
            case .failed(let failure): return .failed(failure)
            }
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            if let newline = reply.firstIndex(of: 10) {
                let line = String(decoding: reply[..<newline], as: UTF8.self)
                let rest = Array(reply[(newline + 1)...])
                guard line == "OK" else {
                    let detail = ProtocolFailure(
                        domain: Self.errorDomain, code: 7, streamDomain: -1, streamCode: 7,
                        userInfo: ["ToyReply": line], message: "the peer said \(line)")
                    return .failed(StreamFailure(.protocolError(detail), .handshake(name)))
                }
                return .done(rest.isEmpty ? transport : PrefixedTransport(prefix: rest, over: transport))
            }
            switch transport.read(&buffer, buffer.count) {
            case .processed(let count): reply += buffer[..<count]
            case .wouldBlock: return .wait(transport.readInterest)
            case .end: return .failed(.posix(ECONNRESET, .handshake(name)))
            case .failed(let failure): return .failed(failure)
            }
        }
    }
}

extension RawConnection {
    /// The peer's side of `ToyStage`: expects `HELLO\n`, answers `reply` (one write). False if the
    /// greeting did not come.
    func answerToyHandshake(_ reply: String = "OK\n") -> Bool {
        guard let hello = try? readExactly(ToyStage.greeting.count), hello == Data(ToyStage.greeting) else { return false }
        return (try? write(reply)) != nil
    }

    /// Echoes until end of stream.
    func echoUntilEnd() {
        while let chunk = try? RawSocket.readSome(fd, timeout: 10), !chunk.isEmpty {
            guard (try? write(chunk)) != nil else { return }
        }
    }
}
