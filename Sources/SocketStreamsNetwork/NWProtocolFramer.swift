// `NWProtocolFramer` as Network.framework declares it: a protocol of the application's own, written as a
// class conforming to `NWProtocolFramerImplementation`, inserted into a connection's stack with
// `NWProtocolFramer.Options`, run between the application and TLS/TCP. The bookkeeping of its input and
// output is `FramerInput`/`FramerDeliveries` (plain values, tested byte by byte); its connection-side
// driver is `NWConnection.Framing` (NWConnection+Framing.swift).
//
// Threading, as on Apple platforms: every callback of the implementation runs on the connection's
// queue, in a turn of its reactor (the connection's owner), one at a time; the instance's actions are
// meant to be called from those callbacks or from a block given to `async(execute:)`. An action
// called from elsewhere is not a race here (the framer's state is under a lock), but it is ignored, as
// it would be out of order (see `Instance`).

import Foundation
import SocketStreams

/// A protocol of the application's own in a connection's stack: Network.framework's `NWProtocolFramer`.
// @unchecked Sendable: no stored state (as `NWProtocol`).
public class NWProtocolFramer: NWProtocol, @unchecked Sendable {
    /// A framer's identity, made once per implementation type and named by its `label`
    /// (`NWProtocolFramer.Definition`).
    // @unchecked Sendable: only `let`s.
    public class Definition: NWProtocolDefinition, @unchecked Sendable {
        /// The implementation each connection makes an instance of.
        let implementation: any NWProtocolFramerImplementation.Type

        /// The definition of the framer `implementation` implements
        /// (`NWProtocolFramer.Definition.init(implementation:)`); its name is the implementation's `label`.
        public init(implementation: any NWProtocolFramerImplementation.Type) {
            self.implementation = implementation
            super.init(name: implementation.label)
        }
    }

    /// A framer's options, for `parameters.defaultProtocolStack.applicationProtocols`
    /// (`NWProtocolFramer.Options`): `insert(options, at: 0)` puts the framer at the top of the stack,
    /// above TLS.
    // @unchecked Sendable: a `let` and values in a `Guarded` state.
    public class Options: NWProtocolOptions, @unchecked Sendable {
        /// The framer these options insert.
        let definition: Definition
        private let values: Guarded<[String: Any]>

        /// Options that insert the framer `definition` names (`NWProtocolFramer.Options.init(definition:)`).
        public init(definition: Definition) {
            self.definition = definition
            values = Guarded([:])
        }

        override func copied() -> NWProtocolOptions {
            let copy = Options(definition: definition)
            let values = self.values.withLock { $0 }
            copy.values.withLock { $0 = values }
            return copy
        }

        /// A value of the framer's own options, by key (`NWProtocolFramer.Options.subscript(_:)`).
        public subscript(key: String) -> Any? {
            get { values.withLock { $0[key] } }
            set { values.withLock { $0[key] = newValue } }
        }
    }

    /// What `start(framer:)` tells the connection (`NWProtocolFramer.StartResult`).
    public enum StartResult: Sendable {
        /// The framer is ready now: the connection becomes `.ready` (`.ready`).
        case ready
        /// The framer will call `markReady()` once its handshake is done; the connection stays
        /// `.preparing` until then (`.willMarkReady`).
        case willMarkReady
    }

    /// A framed message's metadata: what a framer delivers input with and what a send's context carries
    /// to its `handleOutput` (`NWProtocolFramer.Message`). Values are stored by key.
    ///
    /// Values of any type may be stored; reading and writing them is safe from any thread, but a value
    /// that is not itself `Sendable` is the application's to share safely, as on Apple platforms.
    // @unchecked Sendable: a `let` and values in a `Guarded` state (see above for the values themselves).
    public class Message: NWProtocolMetadata, @unchecked Sendable {
        /// The framer the message belongs to.
        let definition: Definition
        private let values = Guarded<[String: Any]>([:])

        /// A message for a send through the framer `definition` names
        /// (`NWProtocolFramer.Message.init(definition:)`).
        public init(definition: Definition) {
            self.definition = definition
        }

        /// A message made inside a framer, for its input (`NWProtocolFramer.Message.init(instance:)`).
        public convenience init(instance: Instance) {
            self.init(definition: instance.definition)
        }

        /// A value of the message, by key (`NWProtocolFramer.Message.subscript(_:)`).
        public subscript(key: String) -> Any? {
            get { values.withLock { $0[key] } }
            set { values.withLock { $0[key] = newValue } }
        }
    }

    /// One connection attempt's framer, as its implementation sees it (`NWProtocolFramer.Instance`):
    /// what it parses its input and output with, delivers messages and writes bytes with, and marks the
    /// connection ready or failed with.
    ///
    /// Call its actions from the implementation's callbacks (on the connection's queue) or from a block
    /// given to `async(execute:)`, as Apple documents. Called from anywhere else they do nothing (a parse
    /// returns false, `writeOutputNoCopy` throws), where Apple's behaviour is undefined.
    public final class Instance: CustomDebugStringConvertible, Sendable {
        let definition: Definition
        weak let driver: FramerDriver?

        init(definition: Definition, driver: FramerDriver) {
            self.definition = definition
            self.driver = driver
        }

        /// "framer <label>" (`NWProtocolFramer.Instance.debugDescription`).
        public var debugDescription: String { "framer \(definition.name)" }

        /// The framer's options, as the connection's stack holds them (`NWProtocolFramer.Instance.options`).
        public var options: Options { driver?.options ?? Options(definition: definition) }

        /// The parameters of the framer's connection (`NWProtocolFramer.Instance.parameters`).
        public var parameters: NWParameters? { driver?.connectionParameters }

        /// The connection's remote endpoint (`NWProtocolFramer.Instance.remote`).
        public var remote: NWEndpoint? { driver?.remoteEndpoint }

        /// The connection's local endpoint, once its transport is up (`NWProtocolFramer.Instance.local`).
        public var local: NWEndpoint? { driver?.localEndpoint }

        /// When `wakeup(framer:)` is to be called (`NWProtocolFramer.Instance.WakeupTime`).
        public enum WakeupTime: Sendable {
            /// This many milliseconds from now (`.milliseconds(_:)`).
            case milliseconds(UInt64)
            /// Never: cancels a wakeup scheduled before (`.forever`).
            case forever
        }

        /// Calls `parse` inline, exactly once, with the buffered input from the cursor: at most
        /// `maximumLength` contiguous bytes, or nil when fewer than `minimumIncompleteLength` (or none)
        /// are buffered, and whether the input has ended. `parse` returns how many bytes it consumed;
        /// more than the buffer skips bytes still to come. Returns whether the minimum was there
        /// (`NWProtocolFramer.Instance.parseInput(minimumIncompleteLength:maximumLength:parse:)`).
        ///
        /// The buffer holds the received bytes themselves (not a copy, unless the bytes wanted were
        /// received in more than one read): read them; writing into it is not supported.
        public func parseInput(
            minimumIncompleteLength: Int, maximumLength: Int, parse: (UnsafeMutableRawBufferPointer?, Bool) -> Int
        ) -> Bool {
            guard let driver, driver.inCallback else {
                _ = parse(nil, false)
                return false
            }
            return driver.parseInput(minimum: minimumIncompleteLength, maximum: maximumLength, parse)
        }

        /// Delivers `data` to the application as (part of) `message`, which ends with it if `isComplete`
        /// (`NWProtocolFramer.Instance.deliverInput(data:message:isComplete:)`).
        public func deliverInput(data: Data, message: Message, isComplete: Bool) {
            driver?.deliverInput(data: data, message: message, isComplete: isComplete)
        }

        /// Delivers the next `length` input bytes from the cursor to the application as (part of)
        /// `message`, without copying them; 0 delivers no bytes (a message of metadata only, or the end
        /// of one). Returns false when the bytes have not all arrived: they are delivered as they do,
        /// and `handleInput` is called again only after the last of them
        /// (`NWProtocolFramer.Instance.deliverInputNoCopy(length:message:isComplete:)`).
        public func deliverInputNoCopy(length: Int, message: Message, isComplete: Bool) -> Bool {
            driver?.deliverInputNoCopy(length: length, message: message, isComplete: isComplete) ?? false
        }

        /// Writes `data` to the protocol below (TLS or TCP), after what was written before
        /// (`NWProtocolFramer.Instance.writeOutput(data:)`).
        public func writeOutput(data: Data) {
            driver?.writeOutput(data)
        }

        /// Writes the bytes of `data`, any `DataProtocol` value (`NWProtocolFramer.Instance.writeOutput(data:)`).
        public func writeOutput<Output: DataProtocol>(data: Output) {
            driver?.writeOutput(Data(data))
        }

        /// Writes the next `length` bytes of the application's message being output, without copying
        /// them; only from `handleOutput`. Throws `NWError.posix(.EINVAL)` if the message has fewer
        /// left, or outside `handleOutput` (`NWProtocolFramer.Instance.writeOutputNoCopy(length:)`).
        public func writeOutputNoCopy(length: Int) throws {
            guard let driver else { throw NWError.posix(.EINVAL) }
            try driver.writeOutputNoCopy(length: length)
        }

        /// Calls `parse` inline, exactly once, with the application's message being output from its
        /// cursor, as `parseInput` does with the input; only from `handleOutput`
        /// (`NWProtocolFramer.Instance.parseOutput(minimumIncompleteLength:maximumLength:parse:)`).
        public func parseOutput(
            minimumIncompleteLength: Int, maximumLength: Int, parse: (UnsafeMutableRawBufferPointer?, Bool) -> Int
        ) -> Bool {
            guard let driver, driver.inCallback else {
                _ = parse(nil, false)
                return false
            }
            return driver.parseOutput(minimum: minimumIncompleteLength, maximum: maximumLength, parse)
        }

        /// Stops framing input: from here on the input goes to the application as it arrives, in
        /// messages of this framer, and `handleInput` is no longer called
        /// (`NWProtocolFramer.Instance.passThroughInput()`).
        public func passThroughInput() {
            driver?.passThroughInput()
        }

        /// Stops framing output: from here on what the application sends goes to the protocol below
        /// as it is, and `handleOutput` is no longer called (`NWProtocolFramer.Instance.passThroughOutput()`).
        public func passThroughOutput() {
            driver?.passThroughOutput()
        }

        /// Marks the framer ready, after `start` returned `.willMarkReady`: the connection becomes
        /// `.ready` (`NWProtocolFramer.Instance.markReady()`).
        public func markReady() {
            driver?.markReady()
        }

        /// Fails the connection with `error` (`.posix(.EPROTO)` if nil)
        /// (`NWProtocolFramer.Instance.markFailed(error:)`). Before ready, an error Network.framework
        /// waits on (`.posix(.ECONNRESET)`, `.posix(.ETIMEDOUT)`…) makes a connection `.waiting`, as a
        /// failed connect does.
        public func markFailed(error: NWError?) {
            driver?.markFailed(error ?? .posix(.EPROTO))
        }

        /// Has `wakeup(framer:)` called after `wakeupTime`, replacing a wakeup scheduled before
        /// (`NWProtocolFramer.Instance.scheduleWakeup(wakeupTime:)`).
        public func scheduleWakeup(wakeupTime: WakeupTime) {
            driver?.scheduleWakeup(wakeupTime)
        }

        /// Runs `block` on the connection's queue as a framer callback, from which the actions may be
        /// called (`NWProtocolFramer.Instance.async(execute:)`). Callable from any thread.
        public func async(execute block: @escaping () -> Void) {
            driver?.async(block)
        }

        /// Inserts a protocol below the framer, before it is ready: TLS after a STARTTLS-style exchange
        /// (`NWProtocolFramer.Instance.prependApplicationProtocol(options:)`). The handshake (a client's
        /// on a connection made, a server's on one a listener accepted, with `options`' settings) starts
        /// after what the framer wrote before the call, and what it writes and reads after goes through
        /// TLS. Throws `NWError.posix(.EOPNOTSUPP)` for a protocol other than TLS,
        /// `NWError.posix(.EINVAL)` once the framer is ready, a second time, or outside a callback, and
        /// TLS's error for options it refuses.
        public func prependApplicationProtocol(options: NWProtocolOptions) throws {
            guard let driver else { throw NWError.posix(.EINVAL) }
            try driver.prependApplicationProtocol(options)
        }

        /// Whether the connection is one a listener accepted (the server's side); for the package's
        /// own protocols (WebSocket).
        var isAcceptedConnection: Bool { driver?.isAccepted ?? false }

        /// Ends the sending side (TLS's close_notify, TCP's FIN) after what was written so far; from a
        /// callback, for the package's own protocols (WebSocket's close handshake).
        func finishOutput() {
            driver?.finishOutput()
        }
    }
}

/// A framer's code: Network.framework's `NWProtocolFramerImplementation`. A connection attempt makes an
/// instance with `init(framer:)` and calls the rest on the connection's queue.
public protocol NWProtocolFramerImplementation: AnyObject {
    /// The framer's name, its definition's (`NWProtocolFramerImplementation.label`).
    static var label: String { get }

    /// Made for one connection attempt (`NWProtocolFramerImplementation.init(framer:)`).
    init(framer: NWProtocolFramer.Instance)

    /// The protocol below is connected: returns `.ready`, or `.willMarkReady` to call `markReady()`
    /// after a handshake (`NWProtocolFramerImplementation.start(framer:)`).
    func start(framer: NWProtocolFramer.Instance) -> NWProtocolFramer.StartResult

    /// Input has arrived: parse messages in a loop, and return how many bytes should be buffered before
    /// the next call (0: as soon as any are) (`NWProtocolFramerImplementation.handleInput(framer:)`).
    func handleInput(framer: NWProtocolFramer.Instance) -> Int

    /// The application sent (part of) `message`, `messageLength` bytes: write its framing with
    /// `writeOutput(data:)` and its bytes with `writeOutputNoCopy(length:)` before returning; what is
    /// not written is discarded
    /// (`NWProtocolFramerImplementation.handleOutput(framer:message:messageLength:isComplete:)`).
    func handleOutput(framer: NWProtocolFramer.Instance, message: NWProtocolFramer.Message, messageLength: Int, isComplete: Bool)

    /// A wakeup scheduled with `scheduleWakeup(wakeupTime:)` is due (`NWProtocolFramerImplementation.wakeup(framer:)`).
    func wakeup(framer: NWProtocolFramer.Instance)

    /// The connection is closing: return true to let it close now, or false to call `markFailed(error:)`
    /// when done (`NWProtocolFramerImplementation.stop(framer:)`).
    func stop(framer: NWProtocolFramer.Instance) -> Bool

    /// The attempt is over: let go of its state (`NWProtocolFramerImplementation.cleanup(framer:)`).
    func cleanup(framer: NWProtocolFramer.Instance)
}
