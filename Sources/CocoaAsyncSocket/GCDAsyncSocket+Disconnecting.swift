// GCDAsyncSocket.h's "Disconnecting" section: closing now, or once the queued reads and writes
// have completed.

import SocketStreams

extension GCDAsyncSocket {
    // MARK: disconnecting

    /// Closes now (`disconnect`): queued reads and writes are dropped, except that what the kernel
    /// accepts at once of the queued writes is still sent; `socketDidDisconnect(_:withError:)` with nil
    /// is posted before this returns (behind delegate calls posted earlier). Does nothing on a socket
    /// that is not connecting, connected or accepting.
    public func disconnect() {
        let (link, listener) = state.withLock { state -> (Link?, StreamListener?) in
            let link = state.link
            let listener = state.listener
            guard link != nil || listener != nil else { return (nil, nil) }
            state.link = nil
            state.listener = nil
            state.listenerURL = nil
            state.reset()
            Self.post(&state, self, via: link?.operations) { socket, delegate in delegate.socketDidDisconnect(socket, withError: nil) }
            return (link, listener)
        }
        listener?.close()
        // Let go of the engine before it closes: it may outlive this socket, and has nothing more to
        // tell it (its events are only for the socket's current connection).
        link?.operations.dropClient(self)
        link?.operations.close()
    }

    /// Closes once every queued read has completed; new reads and writes are ignored (`disconnectAfterReading`).
    public func disconnectAfterReading() {
        state.withLock { $0.link?.operations }?.close(afterReads: true)
    }

    /// Closes once every queued write has completed (`disconnectAfterWriting`).
    public func disconnectAfterWriting() {
        state.withLock { $0.link?.operations }?.close(afterWrites: true)
    }

    /// Closes once every queued read and write has completed (`disconnectAfterReadingAndWriting`).
    public func disconnectAfterReadingAndWriting() {
        state.withLock { $0.link?.operations }?.close(afterReads: true, afterWrites: true)
    }
}
