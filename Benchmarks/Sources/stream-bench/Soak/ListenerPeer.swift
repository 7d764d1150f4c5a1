// The soak's in-process peer: `StreamListener`s (127.0.0.1, ::1, and 127.0.0.1 with TLS) whose
// accepted pairs serve the benchmark's wire protocol (Protocol/WireProtocol.swift) the way the epoll
// server does: 'C', 'E', 'D', 'U' and 'X' (the reset), the server closing first. So the same client
// sessions run against both peers, and the listener side of the library (accept, TLS server, close
// with SO_LINGER {1, 0}) is under the same load as the client side. Everything here runs on the
// listener thread's run loop: the accept handler, and the delegate callouts of the accepted pairs.

import Foundation
import Glibc
import SocketStreams

/// The listeners and the pairs they have accepted and not yet closed.
final class ListenerPeer: @unchecked Sendable {
    let plain: StreamListener
    let plain6: StreamListener
    let tls: StreamListener
    private let counters: SoakCounters
    private let lane: Int
    /// The accepted pairs in progress (their streams hold their delegates weakly). Listener thread only.
    private var sessions: Set<PeerSession> = []

    /// Binds the three listeners on ephemeral ports and starts them on `runLoop`.
    init(runLoop: RunLoop, identity: TLSIdentity, counters: SoakCounters) throws {
        plain = try StreamListener(host: "127.0.0.1", port: 0)
        plain6 = try StreamListener(host: "::1", port: 0)
        tls = try StreamListener(host: "127.0.0.1", port: 0)
        self.counters = counters
        lane = counters.register(SoakLane(kind: .served, style: "listener", peer: "clients"))
        let settings = TLSSettings.server(identity: identity)
        plain.start(in: runLoop) { [unowned self] input, output in accepted(input, output) }
        plain6.start(in: runLoop) { [unowned self] input, output in accepted(input, output) }
        tls.start(in: runLoop) { [unowned self] input, output in
            _ = input.setProperty(settings, forKey: .tlsSettingsKey)
            accepted(input, output)
        }
    }

    func close() {
        plain.close()
        plain6.close()
        tls.close()
    }

    private func accepted(_ input: InputStream, _ output: OutputStream) {
        let session = PeerSession(input: input, output: output, peer: self)
        sessions.insert(session)
        counters.began(lane)
        session.open(on: RunLoop.current)
    }

    fileprivate func ended(_ session: PeerSession, failure: (kind: String, message: String)?) {
        sessions.remove(session)
        if let failure {
            counters.failed(lane, kind: failure.kind, message: failure.message)
        } else {
            counters.completed(lane)
        }
    }
}

/// One accepted pair: reads a request header, serves it, closes (or resets).
private final class PeerSession: NSObject, StreamDelegate {
    private enum State {
        case header
        case echoing(remaining: UInt64)
        case receivingUpload(remaining: UInt64, total: UInt64)
        case sendingDownload(remaining: UInt64)
        case sendingBeforeReset(remaining: UInt64)
        case awaitingResetAck
        /// The last reply is queued: close once it is written.
        case closingAfterFlush
        case done
    }

    private let input: InputStream
    private let output: OutputStream
    private unowned let peer: ListenerPeer
    private var runLoop: RunLoop?
    private var state = State.header
    private var header: [UInt8] = []
    private var pending: [UInt8] = []
    private var pendingIndex = 0
    private var buffer = [UInt8](repeating: 0, count: Payload.chunkSize)
    private static let chunk = (0..<Payload.chunkSize).map { UInt8(truncatingIfNeeded: $0) }

    init(input: InputStream, output: OutputStream, peer: ListenerPeer) {
        self.input = input
        self.output = output
        self.peer = peer
    }

    func open(on runLoop: RunLoop) {
        self.runLoop = runLoop
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: runLoop, forMode: .default)
            stream.open()
        }
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        if case .done = state { return }
        switch eventCode {
        case .openCompleted:
            break
        case .hasBytesAvailable:
            bytesAvailable()
        case .hasSpaceAvailable:
            spaceAvailable()
        case .endEncountered:
            end(failure: ("end of stream", "end of stream while serving (\(state))"))
        case .errorOccurred:
            let kind = SoakErrorKind.of(input, output) ?? "unknown error"
            end(failure: (kind, "stream error while serving (\(state)): \(aStream.streamError.map { "\($0)" } ?? "none")"))
        default:
            end(failure: ("unexpected event", "unexpected event \(eventCode.rawValue)"))
        }
    }

    // MARK: Reading

    private func bytesAvailable() {
        switch state {
        case .header:
            let length = header.first.flatMap(Request.headerLength(opcode:)) ?? 1
            guard let n = read(count: length - header.count) else { return }
            header.append(contentsOf: buffer[0..<n])
            if header.count == 1 && Request.headerLength(opcode: header[0]) == nil {
                return end(failure: ("protocol", "unknown opcode \(header[0])"))
            }
            if let length = Request.headerLength(opcode: header[0]), header.count == length {
                guard let request = Request.decode(header[...]) else { return end(failure: ("protocol", "malformed header")) }
                start(request)
            }
        case .echoing(let remaining):
            guard let n = read(count: Int(min(UInt64(buffer.count), remaining))) else { return }
            pending.append(contentsOf: buffer[0..<n])
            state = remaining == UInt64(n) ? .closingAfterFlush : .echoing(remaining: remaining - UInt64(n))
            writePendingIfPossible()
        case .receivingUpload(let remaining, let total):
            guard let n = read(count: Int(min(UInt64(buffer.count), remaining))) else { return }
            if remaining == UInt64(n) {
                pending.appendBigEndian(total)
                state = .closingAfterFlush
                writePendingIfPossible()
            } else {
                state = .receivingUpload(remaining: remaining - UInt64(n), total: total)
            }
        case .awaitingResetAck:
            guard read(count: 1) != nil else { return }
            // The client has read everything: close with SO_LINGER {1, 0}, so the kernel sends RST.
            let key = Stream.PropertyKey(rawValue: "kCFStreamPropertySocketNativeHandle")
            guard let data = input.property(forKey: key) as? Data, data.count == MemoryLayout<Int32>.size else {
                return end(failure: ("no native handle", "the accepted pair has no native handle"))
            }
            Posix.setResetOnClose(data.withUnsafeBytes { $0.loadUnaligned(as: Int32.self) })
            end(failure: nil)
        case .sendingDownload, .sendingBeforeReset, .closingAfterFlush, .done:
            end(failure: ("protocol", "unexpected bytes from the client (\(state))"))
        }
    }

    /// One read of at most `count` bytes into `buffer`; nil (and the session ended) at end of stream or an error.
    private func read(count: Int) -> Int? {
        let n = buffer.withUnsafeMutableBufferPointer { input.read($0.baseAddress!, maxLength: count) }
        if n > 0 { return n }
        if n == 0 {
            end(failure: ("end of stream", "end of stream while serving (\(state))"))
        } else {
            end(
                failure: (
                    SoakErrorKind.of(input, output) ?? "read failed", "read failed: \(input.streamError.map { "\($0)" } ?? "no error")"
                ))
        }
        return nil
    }

    private func start(_ request: Request) {
        switch request {
        case .connect:
            pending.append(Request.connectReply)
            state = .closingAfterFlush
        case .echo(let bytes):
            state = bytes == 0 ? .closingAfterFlush : .echoing(remaining: bytes)
        case .download(let bytes):
            state = bytes == 0 ? .closingAfterFlush : .sendingDownload(remaining: bytes)
        case .upload(let bytes):
            if bytes == 0 {
                pending.appendBigEndian(UInt64(0))
                state = .closingAfterFlush
            } else {
                state = .receivingUpload(remaining: bytes, total: bytes)
            }
        case .reset(let bytes):
            state = bytes == 0 ? .awaitingResetAck : .sendingBeforeReset(remaining: bytes)
        case .groupEcho, .idle, .release, .heldEcho, .sink, .datagramEcho, .blast, .fanIn:
            return end(failure: ("protocol", "request \(request) is not served by the listener peer"))
        }
        writePendingIfPossible()
    }

    // MARK: Writing

    /// The output stream's `hasSpaceAvailable` is signalled once and then only after a write: when
    /// something new is to be sent and there is space, write at once.
    private func writePendingIfPossible() {
        if output.hasSpaceAvailable { spaceAvailable() }
    }

    /// One write per event: queued replies and echoes first, then download or pre-reset data; closes
    /// once the last reply has gone.
    private func spaceAvailable() {
        if pendingIndex < pending.count {
            let written = pending.withUnsafeBufferPointer {
                output.write($0.baseAddress! + pendingIndex, maxLength: $0.count - pendingIndex)
            }
            guard written > 0 else { return writeFailed(written) }
            pendingIndex += written
            guard pendingIndex == pending.count else { return }
            pending.removeAll(keepingCapacity: true)
            pendingIndex = 0
            if case .closingAfterFlush = state { end(failure: nil) }
            return
        }
        switch state {
        case .sendingDownload(let remaining), .sendingBeforeReset(let remaining):
            let written = output.write(Self.chunk, maxLength: Int(min(UInt64(Self.chunk.count), remaining)))
            guard written > 0 else { return writeFailed(written) }
            let left = remaining - UInt64(written)
            if case .sendingDownload = state {
                state = left == 0 ? .closingAfterFlush : .sendingDownload(remaining: left)
                if left == 0 { end(failure: nil) }
            } else {
                state = left == 0 ? .awaitingResetAck : .sendingBeforeReset(remaining: left)
            }
        case .closingAfterFlush:
            end(failure: nil)
        default:
            break
        }
    }

    private func writeFailed(_ result: Int) {
        end(
            failure: (
                SoakErrorKind.of(input, output) ?? "write returned \(result)",
                "write returned \(result): \(output.streamError.map { "\($0)" } ?? "no error")"
            ))
    }

    // MARK: Ending

    /// Closes and unschedules both streams (the server closes first: the client sees its FIN, or its
    /// RST after a reset) and reports the outcome.
    private func end(failure: (kind: String, message: String)?) {
        if case .done = state { return }
        state = .done
        for stream in [input, output] as [Stream] {
            stream.close()
            if let runLoop { stream.remove(from: runLoop, forMode: .default) }
            stream.delegate = nil
        }
        peer.ended(self, failure: failure)
    }
}
