// The round's decisions on writes and reads: functions of the engine's state (under its lock), which
// append the completions they decide on to the round's events.

import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension StreamOperations {
    func writes(_ state: inout State, _ events: inout FIFO<OperationEvent>) {
        while state.closing == nil, let first = state.writes.first {
            if let error = state.outputError {
                state.closing = .some(error)
                return
            }
            guard case .write(var operation) = first else {
                guard case .shutdown(let tag) = first else { return }  // TLS: started by `step`
                // Only after a has-space event: the half-close sends TLS's last record and close_notify,
                // and must not wait for room.
                guard let output = state.output, Self.useEvent(&state.canWrite) else { return }
                guard output.setProperty(true as NSNumber, forKey: .shutdownOutputKey) else {
                    state.closing = .some(output.streamError ?? StreamOperationError.closed)
                    return
                }
                state.removeFirstWrite()
                events.append(.outputShutDown(tag: tag))
                continue
            }
            if operation.offset < operation.bytes.count {
                guard let output = state.output, Self.useEvent(&state.canWrite) else { return }
                let moved = operation.bytes.withBytes(from: operation.offset) { bytes in
                    output.write(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), maxLength: bytes.count)
                }
                guard moved >= 0 else {
                    state.closing = .some(output.streamError ?? StreamOperationError.closed)
                    return
                }
                operation.offset += moved
                if operation.offset < operation.bytes.count {
                    state.writes.replaceFirst(.write(operation))
                    if moved > 0 { events.append(.wrotePartial(moved, tag: operation.tag)) }
                    continue
                }
            }
            state.removeFirstWrite()
            events.append(.wrote(tag: operation.tag))
        }
    }

    /// An orderly close (`disconnect()`, `close()`) first sends what the kernel accepts at once of the
    /// writes queued before it, in order, as GCDAsyncSocket's `disconnect` does: a write issued just
    /// before it, from any thread, is not lost to the close having reached the owner first. Writes (or
    /// the rest of one) that would block are dropped; a completed one reports `wrote` before `closed`.
    /// Nothing is sent before the pair is ready or while a TLS handshake runs.
    func flush(_ state: inout State, _ events: inout FIFO<OperationEvent>) {
        guard state.attached, state.ready, state.securing == nil, state.outputError == nil, let output = state.output else { return }
        while case .write(var operation)? = state.writes.first {
            // `hasSpaceAvailable` polls the socket: a write it allows does not block.
            while operation.offset < operation.bytes.count, output.hasSpaceAvailable {
                let moved = operation.bytes.withBytes(from: operation.offset) { bytes in
                    output.write(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), maxLength: bytes.count)
                }
                guard moved > 0 else { return }
                operation.offset += moved
            }
            guard operation.offset == operation.bytes.count else { return }
            state.removeFirstWrite()
            events.append(.wrote(tag: operation.tag))
        }
    }

    func reads(_ state: inout State, _ events: inout FIFO<OperationEvent>) {
        while state.closing == nil, case .read(var operation)? = state.reads.first {
            if let bytes = Self.complete(&state, &operation) {
                state.removeFirstRead()
                events.append(.read(bytes, tag: operation.tag))
                continue
            }
            if case .delimiter(_, let maxLength) = operation.request, maxLength > 0, state.bufferCount >= maxLength {
                state.closing = .some(StreamOperationError.readMaxedOut(maxLength: maxLength, tag: operation.tag))
                return
            }
            state.reads.replaceFirst(.read(operation))
            if state.ended {
                state.removeFirstRead()
                events.append(.readEnded(unread: Self.take(&state, count: state.bufferCount), tag: operation.tag))
                continue
            }
            guard let input = state.input, let reactor, Self.useEvent(&state.canRead) else { return }
            // The owner's read buffer, lent for this call: one per reactor, none per connection, so
            // an idle connection holds no read buffer at all (each is `readSize`, 64 KiB).
            var scratch = reactor.lendReadBuffer(size: Self.readSize)
            let count = input.read(&scratch, maxLength: scratch.count)
            if count > 0, state.bufferCount == 0, count >= Self.handOver {
                // A large read into an empty buffer becomes the buffer: no copy, and a read that
                // takes it all hands the same array to the client. The owner makes a new one.
                scratch.removeSubrange(count...)  // unique: shortens in place
                state.buffer = scratch
                state.bufferStart = 0
            } else {
                if count > 0 { state.buffer.append(contentsOf: scratch[..<count]) }
                reactor.takeBackReadBuffer(scratch)
            }
            if count > 0 {
                state.totalRead += count
                if Self.satisfiable(&state, operation) == false { events.append(.readPartial(count, tag: operation.tag)) }
            } else if count == 0 {
                state.ended = true
            } else if input.streamStatus == .atEnd {
                state.ended = true
            } else {
                state.closing = .some(input.streamError ?? StreamOperationError.closed)
                return
            }
        }
    }

    /// Whether one read (or write) may be made now, using up the event that allowed it. The event is
    /// exact: only the owner reads and writes, so no other read can have used the bytes (space) it
    /// announced, and the read (write) cannot block.
    static func useEvent(_ signalled: inout Bool) -> Bool {
        defer { signalled = false }
        return signalled
    }

    /// Whether the buffer now completes `operation` (checked without consuming; `inout` only so that
    /// the state is not copied).
    static func satisfiable(_ state: inout State, _ operation: ReadOperation) -> Bool {
        completion(state.buffer, start: state.bufferStart, operation).count != nil
    }

    /// Takes the bytes that complete `operation` from the buffer, or returns nil if it cannot complete yet.
    static func complete(_ state: inout State, _ operation: inout ReadOperation) -> [UInt8]? {
        let (count, searched) = completion(state.buffer, start: state.bufferStart, operation)
        operation.searched = searched
        return count.map { take(&state, count: $0) }
    }

    /// How many of the bytes buffered from `start` complete `operation` (nil: not enough yet), and how
    /// far a delimiter read has searched (so each byte is searched once). Given the buffer, not the
    /// state: a `State` argument was copied whole, twice a read.
    static func completion(_ buffer: [UInt8], start: Int, _ operation: ReadOperation) -> (count: Int?, searched: Int) {
        let bufferCount = buffer.count - start
        switch operation.request {
        case .length(let count):
            return (bufferCount >= count ? count : nil, operation.searched)
        case .available(let maxLength):
            guard bufferCount > 0 else { return (nil, operation.searched) }
            return (maxLength > 0 ? min(maxLength, bufferCount) : bufferCount, operation.searched)
        case .range(let minimum, let maximum):
            guard bufferCount >= max(1, min(minimum, maximum)) else { return (nil, operation.searched) }
            return (min(maximum, bufferCount), operation.searched)
        case .delimiter(let delimiter, let maxLength):
            guard !delimiter.isEmpty else { return (0, operation.searched) }
            let limit = maxLength > 0 ? min(maxLength, bufferCount) : bufferCount
            var index = max(0, operation.searched - delimiter.count + 1)
            while index + delimiter.count <= limit {
                if buffer[start + index] == delimiter[0],
                    buffer[(start + index)..<(start + index + delimiter.count)].elementsEqual(delimiter)
                {
                    return (index + delimiter.count, operation.searched)
                }
                index += 1
            }
            return (nil, limit)
        }
    }

    static func take(_ state: inout State, count: Int) -> [UInt8] {
        if state.bufferStart == 0, count == state.buffer.count {
            defer { state.buffer = [] }
            return state.buffer
        }
        let bytes = Array(state.buffer[state.bufferStart..<(state.bufferStart + count)])
        state.bufferStart += count
        if state.bufferStart == state.buffer.count {
            state.buffer = []  // nothing in flight: an idle connection keeps no buffer
            state.bufferStart = 0
        } else if state.bufferStart >= 64 * 1024, state.bufferStart * 2 >= state.buffer.count {
            state.buffer.removeFirst(state.bufferStart)
            state.bufferStart = 0
        }
        return bytes
    }
}
