// GCDAsyncSocket.h's "Reading" section: the queued reads, and the queueing on the engine that
// writing shares.

import Foundation
import SocketStreams
import Synchronization

extension GCDAsyncSocket {
    // MARK: reading

    /// Reads whatever has arrived, at least one byte (`readDataWithTimeout:tag:`). A negative timeout
    /// means none; 0 times out at once unless bytes are waiting.
    public func readData(withTimeout timeout: TimeInterval, tag: Int) {
        read(.available(maxLength: 0), timeout: timeout, tag: tag, buffer: nil, offset: 0)
    }

    /// The same into `buffer` from `offset` (`readDataWithTimeout:buffer:bufferOffset:tag:`).
    public func readData(withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, tag: Int) {
        readData(withTimeout: timeout, buffer: buffer, bufferOffset: offset, maxLength: 0, tag: tag)
    }

    /// The same, at most `length` bytes (0: no limit) (`readDataWithTimeout:buffer:bufferOffset:maxLength:tag:`).
    public func readData(
        withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, maxLength length: UInt, tag: Int
    ) {
        guard Self.validOffset(offset, in: buffer) else { return }
        read(.available(maxLength: Int(clamping: length)), timeout: timeout, tag: tag, buffer: buffer, offset: Int(offset))
    }

    /// Reads exactly `length` bytes (`readDataToLength:withTimeout:tag:`); 0 is ignored.
    public func readData(toLength length: UInt, withTimeout timeout: TimeInterval, tag: Int) {
        readData(toLength: length, withTimeout: timeout, buffer: nil, bufferOffset: 0, tag: tag)
    }

    /// The same into `buffer` from `offset` (`readDataToLength:withTimeout:buffer:bufferOffset:tag:`).
    public func readData(
        toLength length: UInt, withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, tag: Int
    ) {
        guard length > 0, Self.validOffset(offset, in: buffer) else { return }
        read(.length(Int(clamping: length)), timeout: timeout, tag: tag, buffer: buffer, offset: Int(offset))
    }

    /// Reads up to and including `data` (`readDataToData:withTimeout:tag:`); nil or empty is ignored.
    public func readData(to data: Data?, withTimeout timeout: TimeInterval, tag: Int) {
        guard let data else { return }
        readData(to: data, withTimeout: timeout, buffer: nil, bufferOffset: 0, maxLength: 0, tag: tag)
    }

    /// The same into `buffer` from `offset` (`readDataToData:withTimeout:buffer:bufferOffset:tag:`).
    public func readData(to data: Data, withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, tag: Int) {
        readData(to: data, withTimeout: timeout, buffer: buffer, bufferOffset: offset, maxLength: 0, tag: tag)
    }

    /// The same, disconnecting with ``GCDAsyncSocketError/Code/readMaxedOutError`` once `length` bytes
    /// (0: no limit) arrived without `data` (`readDataToData:withTimeout:maxLength:tag:`).
    public func readData(to data: Data, withTimeout timeout: TimeInterval, maxLength length: UInt, tag: Int) {
        readData(to: data, withTimeout: timeout, buffer: nil, bufferOffset: 0, maxLength: length, tag: tag)
    }

    /// The same into `buffer` from `offset` (`readDataToData:withTimeout:buffer:bufferOffset:maxLength:tag:`).
    public func readData(
        to data: Data, withTimeout timeout: TimeInterval, buffer: NSMutableData?, bufferOffset offset: UInt, maxLength length: UInt,
        tag: Int
    ) {
        guard !data.isEmpty, length == 0 || length >= UInt(data.count), Self.validOffset(offset, in: buffer) else { return }
        read(.delimiter([UInt8](data), maxLength: Int(clamping: length)), timeout: timeout, tag: tag, buffer: buffer, offset: Int(offset))
    }

    private static func validOffset(_ offset: UInt, in buffer: NSMutableData?) -> Bool {
        guard let buffer else { return true }  // the socket's own buffer: the offset does not apply
        return offset <= UInt(buffer.length)
    }

    /// Queues a read on the current connection; none (not started, or disconnected): ignored, as
    /// GCDAsyncSocket drops it.
    private func read(_ request: ReadRequest, timeout: TimeInterval, tag: Int, buffer: NSMutableData?, offset: Int) {
        let queued = state.withLock { state -> (StreamOperations, Int)? in
            guard let link = state.link else { return nil }
            let id = takeID()
            state.appendRead(id, ReadInfo(tag: tag, buffer: buffer, offset: offset))
            return (link.operations, id)
        }
        guard let (operations, id) = queued else { return }
        submit(.read(request, timeout: Self.engineTimeout(timeout), id: id), to: operations)
    }

    /// Queues a read or write on the engine; one it refuses (closed meanwhile) is forgotten.
    func submit(_ operation: EngineOperation, to operations: StreamOperations) {
        switch operation {
        case .read(let request, let timeout, let id):
            if operations.enqueueRead(request, timeout: timeout, tag: id) != nil {
                state.withLock { _ = $0.removeRead(id) }
            }
        case .write(let bytes, let timeout, let id):
            if operations.enqueueWrite(bytes, timeout: timeout, tag: id) != nil {
                state.withLock { _ = $0.removeWrite(id) }
            }
        }
    }

    /// An id for the engine, unique among the reads (and among the writes) queued: 1 to `UInt32.max`,
    /// wrapping (4 billion operations in one direction cannot be queued at once). Taken under the
    /// state's lock, so ids are queued in the order taken.
    func takeID() -> Int {
        while true {
            let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
            if id != 0 { return Int(id) }
        }
    }

    /// GCDAsyncSocket's timeouts: negative for none, 0 fires at once; the engine's: 0 or less for none.
    static func engineTimeout(_ timeout: TimeInterval) -> Double {
        if timeout < 0 || timeout.isNaN { return -1 }
        return max(timeout, 1e-6)
    }
}
