import Foundation

/// A UDP socket for Swift concurrency: `try await` to send, and the datagrams that arrive as an
/// `AsyncSequence`, over the package's datagram socket.
///
/// ```swift
/// let socket = try AsyncDatagramSocket(host: "127.0.0.1", port: 0)
/// try await socket.send(Array("ping".utf8), to: DatagramEndpoint(host: "127.0.0.1", port: 9000))
/// for try await datagram in socket.datagrams { print(datagram.sender, datagram.bytes.count) }
/// ```
///
/// - **Back-pressure.** Nothing is read while no one iterates ``datagrams`` and `bufferLimit`
///   datagrams wait unread: the socket stops reading, and the kernel's buffer fills (beyond it the
///   kernel drops datagrams, as UDP does). ``send(_:to:)`` returns once the kernel has taken the
///   datagram, and suspends while the kernel's buffer is full.
/// - **Errors.** A datagram that cannot be sent (too large, no route, a broadcast not allowed) fails
///   that one send with ``DatagramSocketError``; the socket stays open. An error the kernel reports
///   for a connected socket (ECONNREFUSED after an ICMP port unreachable) ends the current iteration
///   of ``datagrams`` with it, and reading goes on for the next.
/// - **Threads.** Safe from any task or thread; nothing blocks a thread. The socket is owned by the
///   package's stream thread, as ``AsyncConnection`` is: a task on ``AsyncConnection/executor`` sends
///   without a thread hop.
/// - **Closing.** ``close()`` from anywhere: waiting sends and the iteration end with
///   ``DatagramSocketError/Code/closed``. Releasing the last reference closes it too.
public final class AsyncDatagramSocket: Sendable {
    private let core: AsyncDatagramCore

    /// A socket bound to `host` (a numeric address: "0.0.0.0" for every IPv4 interface, "::" for every
    /// interface of both families, "127.0.0.1", "::1") and `port` (0: the kernel picks one).
    public init(host: String = "0.0.0.0", port: Int = 0, bufferLimit: Int = 256) throws {
        guard let address = SocketAddress(numericHost: host, port: port) else {
            throw DatagramSocketError(
                .invalidAddress, message: "not a numeric IPv4 or IPv6 address with a port in 0...65535: \(host) \(port)")
        }
        core = try AsyncDatagramCore(family: address.family, bufferLimit: max(1, bufferLimit))
        do {
            try core.socket.bind(to: address)
        } catch {
            core.socket.close()
            throw DatagramSocketError(error)
        }
    }

    /// A socket connected to `host` (a name is looked up) and `port`: it sends there alone, and hears
    /// only from there.
    public init(connectingTo host: String, port: Int, bufferLimit: Int = 256) async throws {
        let address = try await Self.resolve(DatagramEndpoint(host: host, port: port))
        core = try AsyncDatagramCore(family: address.family, bufferLimit: max(1, bufferLimit))
        do {
            try core.socket.connect(to: address)
        } catch {
            core.socket.close()
            throw DatagramSocketError(error)
        }
    }

    deinit { core.close() }

    /// The local port (0 once closed).
    public var localPort: Int { core.socket.localAddress?.port ?? 0 }

    /// The local address.
    public var localEndpoint: DatagramEndpoint? { core.socket.localAddress.map(DatagramEndpoint.init) }

    /// Sends one datagram to `destination` (a name is looked up for this send); returns once the kernel
    /// has taken it, suspending while its buffer is full.
    nonisolated(nonsending) public func send(_ bytes: [UInt8], to destination: DatagramEndpoint) async throws {
        try await core.send(Data(bytes), to: try await Self.resolve(destination))
    }

    /// Sends one datagram to the connected peer.
    nonisolated(nonsending) public func send(_ bytes: [UInt8]) async throws {
        try await core.send(Data(bytes), to: nil)
    }

    /// Allows sending to broadcast addresses (`SO_BROADCAST`).
    public func enableBroadcast(_ enabled: Bool = true) throws {
        do {
            try core.socket.setOption(level: SOL_SOCKET, name: SO_BROADCAST, value: enabled ? 1 : 0)
        } catch {
            throw DatagramSocketError(error)
        }
    }

    /// The datagrams as they arrive; one iteration at a time.
    public var datagrams: Datagrams { Datagrams(core: core) }

    /// Closes the socket (see the type's documentation).
    public func close() { core.close() }

    /// The received datagrams (``AsyncDatagramSocket/datagrams``).
    public struct Datagrams: AsyncSequence, Sendable {
        /// One received datagram.
        public typealias Element = Datagram
        fileprivate let core: AsyncDatagramCore

        /// Takes the datagrams one at a time.
        public struct AsyncIterator: AsyncIteratorProtocol {
            fileprivate let core: AsyncDatagramCore

            /// The next datagram, nil once the socket is closed.
            nonisolated(nonsending) public mutating func next() async throws -> Datagram? {
                try await core.next()
            }
        }

        /// An iterator over the datagrams from now on.
        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(core: core) }
    }

    private static func resolve(_ endpoint: DatagramEndpoint) async throws -> SocketAddress {
        if let known = DatagramSocket.addressesWithoutLookup(host: endpoint.host, port: endpoint.port)?.first { return known }
        return try await withUnsafeThrowingContinuation { continuation in
            LookupQueue.run {
                switch DatagramSocket.resolve(host: endpoint.host, port: endpoint.port) {
                case .success(let addresses): continuation.resume(returning: addresses[0])
                case .failure(let error):
                    continuation.resume(throwing: DatagramSocketError(.resolution, code: error.code, message: error.message))
                }
            }
        }
    }
}

/// A host and port a datagram comes from or goes to.
public struct DatagramEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// A numeric address ("127.0.0.1", "::1") or a name.
    public let host: String
    /// The port, 0...65535.
    public let port: Int

    /// The endpoint `host`:`port`.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    init(_ address: SocketAddress) {
        self.init(host: address.host, port: address.port)
    }

    /// "host:port", "[v6]:port" for an IPv6 address.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// One received datagram.
public struct Datagram: Sendable {
    /// Its bytes (a zero-length datagram is one too).
    public let bytes: [UInt8]
    /// Who sent it.
    public let sender: DatagramEndpoint
    /// It was larger than 65,535 bytes and cut to them.
    public let truncated: Bool
}

/// Why an ``AsyncDatagramSocket`` call failed.
public struct DatagramSocketError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: Sendable, Equatable {
        /// A system call failed: ``errorNumber`` says why (EMSGSIZE, EACCES, ENETUNREACH, ECONNREFUSED, …).
        case system
        /// The destination's name was not found (``errorNumber`` holds the resolver's `EAI_*` code).
        case resolution
        /// The address given is not a numeric IPv4 or IPv6 address with a valid port.
        case invalidAddress
        /// The socket was closed.
        case closed
    }

    /// What kind of failure.
    public let code: Code
    /// The errno (or the `EAI_*` code for ``Code/resolution``), 0 when there is none.
    public let errorNumber: Int32
    /// What failed, in words.
    public let message: String

    init(_ code: Code, code errorNumber: Int32 = 0, message: String) {
        self.code = code
        self.errorNumber = errorNumber
        self.message = message
    }

    init(_ error: DatagramSendError) {
        switch error {
        case .system(let code, let function): self.init(.system, code: code, message: "\(function): \(Posix.errorString(code))")
        case .timedOut: self.init(.system, code: ETIMEDOUT, message: "the send timed out")
        }
    }

    /// The message.
    public var description: String { message }
}

/// What an ``AsyncDatagramSocket`` shares with its datagram socket's reports, under its lock.
private final class AsyncDatagramCore: DatagramSocketDelegate {
    struct State {
        var sends: [Int: UnsafeContinuation<Void, Error>] = [:]
        var nextTag = 0
        var received = FIFO<Result<Datagram, DatagramSocketError>>()
        var reader: UnsafeContinuation<Datagram?, Error>?
        /// Reading is paused because `bufferLimit` datagrams wait.
        var full = false
        var closed = false
    }

    let bufferLimit: Int
    private let state = Guarded(State())
    /// Set once, in `init`, before the core is shared with any other thread (the datagram socket needs
    /// the core as its delegate to be made); read-only after. The datagram socket holds the core until
    /// it is closed.
    private(set) nonisolated(unsafe) var socket: DatagramSocket!

    init(family: Int32, bufferLimit: Int) throws {
        self.bufferLimit = bufferLimit
        do {
            socket = try DatagramSocket(family: family, owner: .streamThread, delegate: self)
        } catch {
            throw DatagramSocketError(error)
        }
        socket.setReceiveMode(.continuous)
    }

    func send(_ data: Data, to destination: SocketAddress?) async throws {
        try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, Error>) in
            let tag = state.withLock { state -> Int? in
                guard !state.closed else { return nil }
                state.nextTag &+= 1
                state.sends[state.nextTag] = continuation
                return state.nextTag
            }
            guard let tag else { return continuation.resume(throwing: DatagramSocketError(.closed, message: "the socket is closed")) }
            socket.send(data, to: destination, timeout: nil, tag: tag)
        }
    }

    func next() async throws -> Datagram? {
        let ready = state.withLock { state -> Result<Datagram?, DatagramSocketError>? in
            if let first = state.received.first {
                state.received.removeFirst()
                return first.map { Optional($0) }
            }
            return state.closed ? .success(nil) : nil
        }
        resumeIfDrained()
        if let ready { return try ready.get() }  // typed: DatagramSocketError
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Datagram?, Error>) in
                let now = state.withLock { state -> Result<Datagram?, DatagramSocketError>? in
                    if let first = state.received.first {
                        state.received.removeFirst()
                        return first.map { Optional($0) }
                    }
                    if state.closed { return .success(nil) }
                    state.reader = continuation
                    return nil
                }
                if let now { continuation.resume(with: now.mapError { $0 as Error }) }
            }
        } onCancel: {
            let reader = state.withLock { state in
                defer { state.reader = nil }
                return state.reader
            }
            reader?.resume(throwing: CancellationError())
        }
    }

    /// Reading resumes once half the buffer is free.
    private func resumeIfDrained() {
        let resume = state.withLock { state -> Bool in
            guard state.full, state.received.count <= bufferLimit / 2 else { return false }
            state.full = false
            return true
        }
        if resume { socket.setReceiveMode(.continuous) }
    }

    func close() {
        let (sends, reader) = state.withLock { state -> ([UnsafeContinuation<Void, Error>], UnsafeContinuation<Datagram?, Error>?) in
            guard !state.closed else { return ([], nil) }
            state.closed = true
            defer {
                state.sends = [:]
                state.reader = nil
            }
            return (Array(state.sends.values), state.reader)
        }
        socket?.close()
        let closed = DatagramSocketError(.closed, message: "the socket is closed")
        for send in sends { send.resume(throwing: closed) }
        reader?.resume(returning: nil)
    }

    // MARK: the datagram socket's reports, on the stream thread

    func datagramSocket(_ socket: DatagramSocket, received datagrams: UnsafeBufferPointer<ReceivedDatagram>) {
        let copies = datagrams.map { Datagram(bytes: Array($0.bytes), sender: DatagramEndpoint($0.sender), truncated: $0.truncated) }
        deliver(copies.map { .success($0) })
    }

    func datagramSocket(_ socket: DatagramSocket, sent outcomes: UnsafeBufferPointer<DatagramOutcome>) {
        for outcome in outcomes {
            let waiter = state.withLock { $0.sends.removeValue(forKey: outcome.tag) }
            if let error = outcome.error { waiter?.resume(throwing: DatagramSocketError(error)) } else { waiter?.resume() }
        }
    }

    func datagramSocket(_ socket: DatagramSocket, receiveFailed error: DatagramSendError) {
        deliver([.failure(DatagramSocketError(error))])
    }

    private func deliver(_ items: [Result<Datagram, DatagramSocketError>]) {
        let (reader, first, pause) = state.withLock {
            state -> (UnsafeContinuation<Datagram?, Error>?, Result<Datagram, DatagramSocketError>?, Bool) in
            guard !state.closed else { return (nil, nil, false) }
            var items = items[...]
            var handed: Result<Datagram, DatagramSocketError>?
            let reader = state.reader
            if reader != nil, let first = items.first {
                handed = first
                items = items.dropFirst()
                state.reader = nil
            }
            for item in items { state.received.append(item) }
            let pause = !state.full && state.received.count >= bufferLimit
            if pause { state.full = true }
            return (handed == nil ? nil : reader, handed, pause)
        }
        if pause { socket.setReceiveMode(.paused) }
        if let reader, let first { reader.resume(with: first.map { Optional($0) }.mapError { $0 as Error }) }
    }
}
