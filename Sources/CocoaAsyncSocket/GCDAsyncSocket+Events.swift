// No section of GCDAsyncSocket.h: how the socket posts its delegate calls, maps the engine's errors,
// and handles the engine's events (what GCDAsyncSocket.m does behind the header).

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension GCDAsyncSocket {
    // MARK: delivering to the delegate

    /// Posts `call` to the delegate queue, with the delegate as it is now, unless the delegate's type
    /// leaves every one of `methods` (the ones `call` makes) to its default, which does nothing
    /// (GCDAsyncSocket's `respondsToSelector:` check; see `DelegateDefaults`). `engine` is the
    /// connection the call is about (the current one unless given: a connection just ended passes its
    /// own). Lock held.
    static func post(
        _ state: inout State, _ socket: GCDAsyncSocket, via engine: StreamOperations? = nil,
        unlessDefault methods: DelegateDefaults.Methods = [], _ call: @escaping (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void
    ) {
        guard let delegate = state.delegate, let queue = state.delegateQueue else { return }
        if !methods.isEmpty, DelegateDefaults.leaves(methods, to: delegate) { return }
        let engine = engine ?? state.link?.operations
        deliver(PostedCall(socket, delegate, engine, call), on: queue, engine: engine)
    }

    /// Delivers `call` on `queue`: in a turn of the engine's reactor when the engine works on that
    /// queue (the socket's work on its delegate's queue: no thread is woken, and the call still waits
    /// behind the blocks posted to the queue before it, `DelegateTurns`' rule), else as a block of its
    /// own (`dispatch_async`, as GCDAsyncSocket posts every call). Every call of one connection takes
    /// the same way, so they keep their order. Any thread; lock held or not.
    static func deliver(_ call: some TurnCall, on queue: DispatchQueue, engine: StreamOperations?) {
        if let engine, engine.worksOn(queue) { return engine.enqueueTurn(call) }
        queue.async { call.run() }
    }

    /// Posts `call` if `operations` is still the socket's connection (events of a connection that
    /// `disconnect()` ended are dropped: its `socketDidDisconnect` is already posted).
    private func post(
        from operations: StreamOperations, unlessDefault methods: DelegateDefaults.Methods,
        _ call: @escaping (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void
    ) {
        state.withLock { state in
            guard state.link?.operations === operations else { return }
            Self.post(&state, self, unlessDefault: methods, call)
        }
    }

    /// A system error before the socket connected, in the shape GCDAsyncSocket gives it
    /// (`errorWithErrno:reason:`): `NSPOSIXErrorDomain` and the errno as they were, `strerror` as the
    /// description and "Error in connect() function" as the failure reason (the stream's other
    /// userInfo kept). Any other error as it is.
    static func connectFailure(_ error: Error?) -> Error? {
        guard let error else { return nil }
        let failure = error as NSError
        guard failure.domain == NSPOSIXErrorDomain, let code = Int32(exactly: failure.code) else { return error }
        var info = failure.userInfo
        info[NSLocalizedDescriptionKey] = String(cString: strerror(code))
        info[NSLocalizedFailureReasonErrorKey] = "Error in connect() function"
        return NSError(domain: NSPOSIXErrorDomain, code: failure.code, userInfo: info)
    }

    /// Maps the engine's own failures to GCDAsyncSocket's; a TLS failure (the streams' SecureTransport
    /// status in `NSOSStatusErrorDomain`) to the domain GCDAsyncSocket's `sslError:` gives it,
    /// "kCFStreamErrorDomainSSL", with the same code; the streams' other errors pass through.
    static func map(_ error: Error?) -> Error? {
        guard let error else { return nil }
        guard let failure = error as? StreamOperationError else {
            let stream = error as NSError
            guard stream.domain == NSOSStatusErrorDomain else { return error }
            var info = stream.userInfo
            info[NSLocalizedRecoverySuggestionErrorKey] = "Error code definition can be found in Apple's SecureTransport.h"
            return NSError(domain: GCDAsyncSocketSSLErrorDomain, code: stream.code, userInfo: info)
        }
        switch failure.code {
        case .readTimedOut: return GCDAsyncSocketError(.readTimeoutError)
        case .writeTimedOut: return GCDAsyncSocketError(.writeTimeoutError)
        case .readMaxedOut: return GCDAsyncSocketError(.readMaxedOutError)
        case .closedByPeer, .closed: return GCDAsyncSocketError(.closedError)
        case .alreadyConnected: return GCDAsyncSocketError(.badConfigError, message: failure.errorDescription)
        // bytesBeforeTLS, tlsSettingsRefused, and any code added later: GCDAsyncSocket's catch-all.
        default: return GCDAsyncSocketError(.otherError, message: failure.errorDescription)
        }
    }
}

/// An event's delegate call carried to the delegate queue, in one object that the posted block or turn
/// holds (a closure around the call to bind the socket would be one more allocation a call, two a
/// ping-pong round trip; Guides/Performance.md). The delegate is used only there, where the
/// application said it may be called. It holds the connection's engine until it has run: an engine
/// holds a use of its queue's reactor, which is what keeps a turn waiting there from being dropped with
/// a reactor let go of (`ReactorRegistry`'s idle cache) after the connection ended.
// @unchecked Sendable: every field is a `let`; the delegate and the call are used only on the
// delegate queue.
final class PostedCall: TurnCall, @unchecked Sendable {
    let socket: GCDAsyncSocket
    let delegate: GCDAsyncSocketDelegate
    let engine: StreamOperations?
    let call: (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void

    init(
        _ socket: GCDAsyncSocket, _ delegate: GCDAsyncSocketDelegate, _ engine: StreamOperations?,
        _ call: @escaping (GCDAsyncSocket, GCDAsyncSocketDelegate) -> Void
    ) {
        self.socket = socket
        self.delegate = delegate
        self.engine = engine
        self.call = call
    }

    package func run() { call(socket, delegate) }
}

/// A delegate call carried to the delegate queue: the delegate is used only there, where the
/// application said it may be called. Holds the engine it is about, as `PostedCall` does.
// @unchecked Sendable: every field is a `let`; the delegate and the call are used only on the
// delegate queue.
final class DelegateCall: TurnCall, @unchecked Sendable {
    let delegate: GCDAsyncSocketDelegate
    let engine: StreamOperations?
    let call: (GCDAsyncSocketDelegate) -> Void

    init(_ delegate: GCDAsyncSocketDelegate, engine: StreamOperations? = nil, _ call: @escaping (GCDAsyncSocketDelegate) -> Void) {
        self.delegate = delegate
        self.engine = engine
        self.call = call
    }

    package func run() { call(delegate) }
}

// MARK: - the engine's events, on the socket queue (or the stream thread)

extension GCDAsyncSocket: StreamOperationsClient {
    package func operations(_ operations: StreamOperations, handle event: OperationEvent) {
        switch event {
        case .ready:
            let input = operations.streams?.input  // the engine's lock, not under the socket's
            state.withLock { state in
                guard var link = state.link, link.operations === operations else { return }
                let wasConnected = link.connected
                link.connected = true
                state.link = link
                Self.learnAddresses(&state, from: input)
                guard !link.accepted, !wasConnected else { return }
                if let url = state.linkURL {
                    Self.post(&state, self) { socket, delegate in delegate.socket(socket, didConnectTo: url) }
                } else {
                    let peer = state.peer
                    let host = peer.flatMap(SocketAddresses.host) ?? ""
                    let port = peer.map(SocketAddresses.port) ?? 0
                    Self.post(&state, self) { socket, delegate in
                        delegate.socket(socket, didConnectToHost: host, port: port)
                        delegate.socket(socket, didConnectToHost: host, port: Int(port))
                    }
                }
                if let held = state.heldTrust {
                    state.heldTrust = nil
                    Self.postTrust(&state, self, held)
                }
            }
        case .read(let bytes, let id):
            state.withLock { state in
                guard state.link?.operations === operations, let info = state.removeRead(id) else { return }
                let data: Data
                if let buffer = info.buffer {
                    if buffer.length < info.offset + bytes.count { buffer.length = info.offset + bytes.count }
                    bytes.withUnsafeBytes { source in
                        (buffer.mutableBytes + info.offset).copyMemory(from: source.baseAddress!, byteCount: source.count)
                    }
                    data = Data(bytes)
                } else {
                    data = Data(bytes)
                }
                Self.post(&state, self) { socket, delegate in
                    delegate.socket(socket, didRead: data, withTag: info.tag)
                    delegate.socket(socket, didRead: bytes, withTag: info.tag)
                }
            }
        case .readPartial(let count, let id):
            post(from: operations, unlessDefault: [.readPartial, .readPartialInt]) {
                [tag = state.withLock { $0.readInfo(id)?.tag ?? 0 }] socket, delegate in
                delegate.socket(socket, didReadPartialDataOfLength: UInt(count), tag: tag)
                delegate.socket(socket, didReadPartialDataOfLength: count, tag: tag)
            }
        case .readEnded(_, let id):
            let close = state.withLock { state -> Bool in
                guard state.link?.operations === operations else { return false }
                _ = state.removeRead(id)
                return state.autoDisconnectOnClosedReadStream
            }
            if close { operations.close(error: GCDAsyncSocketError(.closedError)) }
        case .ended(let pending):
            let close = state.withLock { state -> Bool in
                guard var link = state.link, link.operations === operations else { return false }
                if state.autoDisconnectOnClosedReadStream { return pending == 0 }
                if !link.readClosedReported {
                    link.readClosedReported = true
                    state.link = link
                    Self.post(&state, self) { socket, delegate in delegate.socketDidCloseReadStream(socket) }
                }
                return false
            }
            if close { operations.close(error: GCDAsyncSocketError(.closedError)) }
        case .wrote(let id):
            state.withLock { state in
                guard state.link?.operations === operations, let tag = state.removeWrite(id) else { return }
                Self.post(&state, self, unlessDefault: .didWrite) { socket, delegate in
                    delegate.socket(socket, didWriteDataWithTag: tag)
                }
            }
        case .wrotePartial(let count, let id):
            post(from: operations, unlessDefault: [.writePartial, .writePartialInt]) {
                [tag = state.withLock { $0.writeTag(id) ?? 0 }] socket, delegate in
                delegate.socket(socket, didWritePartialDataOfLength: UInt(count), tag: tag)
                delegate.socket(socket, didWritePartialDataOfLength: count, tag: tag)
            }
        case .outputShutDown:
            break  // GCDAsyncSocket never half-closes: nothing queues a shutdown here
        case .secured:
            state.withLock { state in
                guard state.link?.operations === operations else { return }
                state.isSecure = true
                Self.post(&state, self) { socket, delegate in delegate.socketDidSecure(socket) }
            }
        case .closed(let error):
            let mapped = Self.map(error)
            operations.dropClient(self)  // its last event
            state.withLock { state in
                guard state.link?.operations === operations else { return }
                let mapped = state.link?.connected == true ? mapped : Self.connectFailure(mapped)
                state.link = nil
                state.reset()
                Self.post(&state, self, via: operations) { socket, delegate in delegate.socketDidDisconnect(socket, withError: mapped) }
            }
        }
    }

    /// Never asked: the engine asks the question below, which waits for the delegate's answer.
    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double { 0 }

    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag id: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    ) {
        let posted = state.withLock { state -> Bool in
            guard state.link?.operations === operations, let delegate = state.delegate, let queue = state.delegateQueue else {
                return false
            }
            let read = direction == .read
            let tag = (read ? state.readInfo(id)?.tag : state.writeTag(id)) ?? 0
            let call = DelegateCall(delegate, engine: operations) { [self] delegate in
                let done = max(0, bytesDone)
                var extra =
                    read
                    ? delegate.socket(self, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: UInt(done))
                    : delegate.socket(self, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: UInt(done))
                if extra <= 0 {
                    // A delegate written with QueuedSocketDelegate's Int length.
                    extra =
                        read
                        ? delegate.socket(self, shouldTimeoutReadWithTag: tag, elapsed: elapsed, bytesDone: done)
                        : delegate.socket(self, shouldTimeoutWriteWithTag: tag, elapsed: elapsed, bytesDone: done)
                }
                answer(extra)
            }
            Self.deliver(call, on: queue, engine: operations)
            return true
        }
        if !posted { answer(0) }
    }
}
