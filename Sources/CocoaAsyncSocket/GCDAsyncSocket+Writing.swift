// GCDAsyncSocket.h's "Writing" section: the queued writes.

import Foundation
import SocketStreams

extension GCDAsyncSocket {
    // MARK: writing

    /// Writes `data`; `socket(_:didWriteDataWithTag:)` follows once the kernel accepted every byte
    /// (`writeData:withTimeout:tag:`). nil or empty is ignored; so is a write before connect or after
    /// a disconnect. As in GCDAsyncSocket, which retains the `NSData`, `data` is held until written,
    /// not copied.
    public func write(_ data: Data?, withTimeout timeout: TimeInterval, tag: Int) {
        guard let data, !data.isEmpty else { return }
        let bytes = WriteBytes(data)
        let queued = state.withLock { state -> (StreamOperations, Int)? in
            guard let link = state.link else { return nil }
            let id = takeID()
            state.appendWrite(id, tag: tag)
            return (link.operations, id)
        }
        guard let (operations, id) = queued else { return }
        submit(.write(bytes, timeout: Self.engineTimeout(timeout), id: id), to: operations)
    }
}
