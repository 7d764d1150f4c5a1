// What the operations engine takes and gives: read requests, the events it reports to its client
// (QueuedSocket, AsyncConnection) and that client's protocol. Its errors: StreamOperationError.swift.

import CSocketStreamsShims
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What a queued read waits for.
package enum ReadRequest: Sendable, Equatable {
    /// Exactly this many bytes.
    case length(Int)
    /// Up to and including the first occurrence of the delimiter; fails once `maxLength` (0: no limit)
    /// bytes have arrived without it.
    case delimiter([UInt8], maxLength: Int)
    /// Whatever has arrived, at least one byte and at most `maxLength` (0: no limit).
    case available(maxLength: Int)
    /// At least `minimum` bytes (1 if less) and at most `maximum` (Network.framework's
    /// `receive(minimumIncompleteLength:maximumLength:)`): completes once `minimum` have arrived, with as
    /// many as have, up to `maximum`; at the stream's end, `readEnded` with what there is.
    case range(minimum: Int, maximum: Int)
}

/// What a queued write sends, held as the caller gave it and never copied: an array, or a `Data` (in a
/// box, so that a write stays one reference wide in the engine's state). A `Data` was copied into an
/// array before, a second pass over every byte a GCDAsyncSocket-style `writeData:` sent.
package enum WriteBytes: Sendable {
    case array([UInt8])
    case data(DataBox)

    /// `data`, boxed.
    package init(_ data: Data) { self = .data(DataBox(data)) }

    package var count: Int {
        switch self {
        case .array(let bytes): return bytes.count
        case .data(let box): return box.data.count
        }
    }

    /// Calls `body` with the bytes from `offset` on.
    func withBytes<Result>(from offset: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        switch self {
        case .array(let bytes):
            return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        case .data(let box):
            return box.data.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        }
    }
}

/// A `Data` to write, by reference.
package final class DataBox: Sendable {
    package let data: Data
    init(_ data: Data) { self.data = data }
}

/// Which queue a timeout belongs to.
package enum OperationDirection: Sendable {
    case read
    case write
}

/// What the engine tells its client, in order, outside its lock.
package enum OperationEvent {
    /// The pair is ready: open, and any proxy or TLS handshake set before `open()` done.
    case ready
    /// A read completed.
    case read([UInt8], tag: Int)
    /// A read got this many more bytes but is not complete.
    case readPartial(Int, tag: Int)
    /// A read cannot complete: the stream is at its end. `unread` holds the bytes that had arrived.
    case readEnded(unread: [UInt8], tag: Int)
    /// The input stream reached its end (once). `pendingReads` is how many reads were then queued.
    case ended(pendingReads: Int)
    /// A write completed: every byte was accepted by the kernel.
    case wrote(tag: Int)
    /// A write moved this many bytes but is not complete.
    case wrotePartial(Int, tag: Int)
    /// A queued TLS handshake finished.
    case secured
    /// The half-close queued with `tag` is done: TLS's close_notify (over TLS) and the FIN went to the
    /// kernel; the input stays open.
    case outputShutDown(tag: Int)
    /// The pair is closed (once): nil after `close(error: nil)`, else the reason. Queued operations
    /// that had not completed are dropped.
    case closed(Error?)
}

/// The engine's client: `QueuedSocket`, `AsyncConnection` or (from CocoaAsyncSocket) `GCDAsyncSocket`.
package protocol StreamOperationsClient: AnyObject, Sendable {
    /// Handles one event (see `OperationEvent`).
    func operations(_ operations: StreamOperations, handle event: OperationEvent)
    /// A timeout passed for the operation with `tag` after `elapsed` seconds with `bytesDone` moved.
    /// Returns the extension in seconds, or 0 or less to fail the operation.
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int
    ) -> Double
    /// The same question answered later, from any thread: `answer` (called once) takes the extension.
    /// GCDAsyncSocket asks its delegate on the delegate queue and comes back. The default answers at
    /// once with the synchronous method.
    func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    )
}

extension StreamOperationsClient {
    package func operations(
        _ operations: StreamOperations, shouldTimeOut direction: OperationDirection, tag: Int, elapsed: Double, bytesDone: Int,
        answer: @escaping @Sendable (Double) -> Void
    ) {
        answer(self.operations(operations, shouldTimeOut: direction, tag: tag, elapsed: elapsed, bytesDone: bytesDone))
    }
}

/// The engine's reference to its client, which does not keep it alive (see
/// `StreamOperations.clientReference`), under `UnretainedReference`'s rule: a lock guards it, every
/// `retained()` is made with it held, and the client's deinit clears it with it held before anything
/// else. (Not an `UnretainedReference`: `Unmanaged` takes only a class, not a protocol's existential.)
/// Checked in debug builds as `UnretainedReference` is (UnretainedChecks.swift): each load against a
/// weak shadow, the engine's lock at `takeClient`, and the engine at the end of a client's deinit.
struct UnretainedClient: @unchecked Sendable {
    // `@unchecked Sendable`: a reference the holder's lock orders every use of (above).
    private unowned(unsafe) let client: any StreamOperationsClient
    #if DEBUG
        /// Debug builds only: the client, weakly (nil once its deinit has begun), to check each load by.
        private weak var shadow: AnyObject?
    #endif

    init(_ client: any StreamOperationsClient) {
        self.client = client
        #if DEBUG
            shadow = client
        #endif
        assert(address == Unmanaged.passUnretained(client as AnyObject).toOpaque(), "UnretainedClient: the client is not the first word")
    }

    /// The client's address, read from this reference's own bytes (the existential's first word): not
    /// `client as AnyObject`, which makes a strong copy and releases it, and in a debug build, where
    /// nothing takes that pair out, the release can be the client's last while the holder's lock is
    /// held (its deinit then waits for that lock on the same thread). `client` must stay this struct's
    /// first stored property.
    @inline(__always) private var address: UnsafeMutableRawPointer {
        withUnsafeBytes(of: self) { $0.load(as: UnsafeMutableRawPointer.self) }
    }

    /// Whether this refers to `candidate` (an identity comparison; nothing is retained).
    @inline(__always) func refers(to candidate: any StreamOperationsClient) -> Bool {
        address == Unmanaged.passUnretained(candidate as AnyObject).toOpaque()
    }

    /// The client, retained, unless its deinit has begun (`swift_tryRetain`, as a weak load checks).
    /// With the holder's lock held.
    @inline(__always) func retained() -> (any StreamOperationsClient)? {
        let pointer = address
        let alive = cssh_try_retain(pointer)
        #if DEBUG
            UnretainedChecks.check(loadProblem(at: pointer, retained: alive))
        #endif
        guard alive else { return nil }
        // The reference returned is the caller's; the try-retain's only proved the client alive, and
        // is let go after that copy is made.
        defer { Unmanaged<AnyObject>.fromOpaque(pointer).release() }
        return client
    }

    #if DEBUG
        /// Debug builds: what a load's check checks (`UnretainedChecks.loadProblem`): nil, or the rule broken.
        func loadProblem(at pointer: UnsafeMutableRawPointer, retained: Bool) -> String? {
            UnretainedChecks.loadProblem(of: "StreamOperationsClient", at: pointer, retained: retained, shadow: shadow)
        }

        /// Debug builds, at the end of `client`'s deinit: nil, or the rule broken if `reference` (what the
        /// engine holds now) still refers to it.
        static func deinitProblem(_ reference: UnretainedClient?, after client: any StreamOperationsClient) -> String? {
            UnretainedChecks.deinitProblem(of: "StreamOperationsClient", stillReferred: reference?.refers(to: client) == true)
        }
    #endif
}
