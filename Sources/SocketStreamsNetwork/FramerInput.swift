// A framer's input as plain values, tested at every byte boundary (`FramerInputTests`):
//
// - `FramerInput`: the received bytes the framer has not consumed, in the chunks they arrived in, with
//   the parse window (`parseInput`), skipping (a parse that consumes past what has arrived), and the
//   bytes of a `deliverInputNoCopy` taken without a copy (a message's bytes share the chunk they were
//   received in). A window that spans chunks is the one copy made: the chunks it covers are joined.
// - `FramerOutput`: the application's message `handleOutput` is writing, and how much of it the framer
//   has written (`writeOutputNoCopy`, slices of the application's `Data`, not copies) or parsed past.
// - `FramerDeliveries`: what the framer delivered and the application has not received yet, in order,
//   and what one `receive(minimumIncompleteLength:maximumLength:)` or `receiveMessage` takes from it.
//
// Memory: a chunk is one allocation of the bytes one read returned; it is let go of when its last byte
// is consumed and no delivered `Data` holds it. Both values are owned by one connection's framer
// driver, on its owner.

import Foundation

/// Received bytes a framer has not consumed (see the file's header).
struct FramerInput {
    /// One read's bytes, in memory of its own, which delivered `Data` values share.
    final class Chunk {
        let bytes: UnsafeMutableRawBufferPointer

        init<Bytes: Collection<UInt8>>(_ source: Bytes) {
            bytes = .allocate(byteCount: Swift.max(1, source.count), alignment: 16)
            _ = bytes.initializeMemory(as: UInt8.self, from: source)
        }

        deinit { bytes.deallocate() }

        var count: Int { bytes.count }
    }

    /// The chunks, each with the offset of its first unconsumed byte; the first is the cursor's.
    private var chunks: [(chunk: Chunk, start: Int, end: Int)] = []
    private var head = 0
    /// Bytes buffered after the cursor.
    private(set) var count = 0
    /// Bytes still to be dropped as they arrive: a parse consumed more than was buffered.
    private(set) var skipping = 0
    /// The input has ended (the peer closed its side).
    var isComplete = false

    /// Adds one read's bytes (dropping what a parse skipped past).
    mutating func append<Bytes: Collection<UInt8>>(_ bytes: Bytes) {
        var used = 0
        if skipping > 0 {
            used = Swift.min(skipping, bytes.count)
            skipping -= used
        }
        guard used < bytes.count else { return }
        let chunk = Chunk(bytes.dropFirst(used))
        chunks.append((chunk, 0, bytes.count - used))
        count += bytes.count - used
    }

    /// Consumes `length` bytes from the cursor; those not yet buffered are skipped as they arrive.
    mutating func consume(_ length: Int) {
        var left = Swift.max(0, length)
        while left > 0, head < chunks.count {
            let available = chunks[head].end - chunks[head].start
            let used = Swift.min(available, left)
            chunks[head].start += used
            left -= used
            count -= used
            if chunks[head].start == chunks[head].end { dropHead() }
        }
        skipping += left
    }

    private mutating func dropHead() {
        head += 1
        if head == chunks.count {
            chunks.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 16, head * 2 >= chunks.count {
            chunks.removeFirst(head)
            head = 0
        }
    }

    /// The next `length` bytes (at most what is buffered) as a `Data` and consumed: the bytes
    /// themselves when they are in one chunk, else joined once.
    mutating func take(_ length: Int) -> Data {
        let length = Swift.min(Swift.max(0, length), count)
        guard length > 0 else { return Data() }
        join(length)
        let (chunk, start, _) = chunks[head]
        let base = chunk.bytes.baseAddress! + start
        let data = Data(bytesNoCopy: base, count: length, deallocator: .custom { _, _ in withExtendedLifetime(chunk) {} })
        consume(length)
        return data
    }

    /// The parse window: calls `body` once with at most `maximum` contiguous bytes from the cursor, or
    /// with nil when fewer than `minimum` (or none) are buffered, then consumes what it returns.
    /// Returns whether the minimum was buffered.
    mutating func parse(minimum: Int, maximum: Int, _ body: (UnsafeMutableRawBufferPointer?, Bool) -> Int) -> Bool {
        let window = window(minimum: minimum, maximum: maximum)
        let consumed = body(window, isComplete)
        if window != nil || consumed > 0 { consume(consumed) }
        return window != nil || (count >= minimum && minimum <= 0)
    }

    /// The window `parse` passes (the chunks it covers joined into one first), or nil.
    mutating func window(minimum: Int, maximum: Int) -> UnsafeMutableRawBufferPointer? {
        let length = Swift.min(count, Swift.max(0, maximum))
        guard count > 0, count >= minimum, length > 0 else { return nil }
        join(length)
        let (chunk, start, _) = chunks[head]
        return UnsafeMutableRawBufferPointer(rebasing: chunk.bytes[start..<(start + length)])
    }

    /// Makes the first `length` buffered bytes contiguous: joins the chunks they span into one.
    private mutating func join(_ length: Int) {
        let first = chunks[head]
        guard first.end - first.start < length else { return }
        var joined: [UInt8] = []
        joined.reserveCapacity(length)
        var index = head
        while joined.count < length {
            let (chunk, start, end) = chunks[index]
            let used = Swift.min(end - start, length - joined.count)
            joined.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk.bytes[start..<(start + used)]))
            if start + used == end {
                index += 1
            } else {
                chunks[index].start += used
            }
        }
        chunks.replaceSubrange(head..<index, with: [(Chunk(joined), 0, length)])
    }
}

/// What a framer delivered and the application has not received, in order (see the file's header).
struct FramerDeliveries<Message: AnyObject> {
    struct Piece {
        var data: Data
        let message: Message
        let isComplete: Bool
    }

    /// What one receive gets: the bytes (nil for none), the message they belong to (nil at the end of
    /// the input), and whether they complete it (at the end: true).
    struct Received {
        let data: Data?
        let message: Message?
        let isComplete: Bool
    }

    private(set) var pieces: [Piece] = []
    /// Bytes delivered and not received.
    private(set) var byteCount = 0
    /// No more will be delivered (the input ended).
    var ended = false

    mutating func append(_ data: Data, message: Message, isComplete: Bool) {
        pieces.append(Piece(data: data, message: message, isComplete: isComplete))
        byteCount += data.count
    }

    /// What a receive of at least `minimum` and at most `maximum` bytes takes now, or nil if it must
    /// wait: the first message's bytes once `minimum` of them (at least one) are there or the message
    /// is complete; `receiveMessage` is `minimum == maximum == .max` (the whole message). Once the input
    /// has ended, a message left incomplete is complete, and then every receive gets the end.
    mutating func take(minimum: Int, maximum: Int) -> Received? {
        guard let first = pieces.first else { return ended ? Received(data: nil, message: nil, isComplete: true) : nil }
        var available = 0
        var complete = ended
        var piecesOfMessage = 0
        for piece in pieces {
            guard piece.message === first.message else {
                complete = true  // a new message began: the framer ended this one without saying so
                break
            }
            available += piece.data.count
            piecesOfMessage += 1
            if piece.isComplete {
                complete = true
                break
            }
        }
        let maximum = Swift.max(1, maximum)
        guard complete || available >= Swift.max(1, Swift.min(minimum, maximum)) else { return nil }
        let length = Swift.min(available, maximum)
        var parts: [Data] = []
        var used = 0
        while used < length || (piecesOfMessage > 0 && pieces[0].data.isEmpty) {
            let wanted = length - used
            if pieces[0].data.count <= wanted {
                let piece = pieces.removeFirst()
                piecesOfMessage -= 1
                used += piece.data.count
                if !piece.data.isEmpty { parts.append(piece.data) }
            } else {
                // The rest stays a slice of the same bytes (no copy); what is returned is rebased below.
                let part = pieces[0].data.prefix(wanted)
                pieces[0].data = pieces[0].data.dropFirst(wanted)
                used += part.count
                parts.append(part)
            }
        }
        // One piece is returned as it is (no copy); more are joined once, into one buffer.
        var data = parts.count == 1 ? parts[0] : Data(capacity: used)
        if parts.count > 1 { for part in parts { data.append(part) } }
        byteCount -= used
        if data.startIndex != 0 { data = data.withUnsafeBytes { Data($0) } }  // zero-based, as applications index it
        let isComplete = complete && piecesOfMessage == 0
        return Received(data: data.isEmpty ? nil : data, message: first.message, isComplete: isComplete)
    }
}

/// The application's message `handleOutput` is writing (see the file's header).
struct FramerOutput {
    let data: Data
    let isComplete: Bool
    /// How many of its bytes were written or parsed past.
    private(set) var cursor = 0

    init(_ data: Data, isComplete: Bool) {
        self.data = data
        self.isComplete = isComplete
    }

    var remaining: Int { data.count - cursor }

    /// The next `length` bytes, a slice of the content (no copy), and past them; nil (and nothing
    /// taken) when fewer are left or `length` is negative.
    mutating func take(_ length: Int) -> Data? {
        guard length >= 0, length <= remaining else { return nil }
        let start = data.startIndex + cursor
        cursor += length
        return data[start..<(start + length)]
    }

    /// At most `maximum` bytes from the cursor, a copy; nil when fewer than `minimum` (or none) are left.
    func window(minimum: Int, maximum: Int) -> [UInt8]? {
        let length = Swift.min(remaining, Swift.max(0, maximum))
        guard remaining >= minimum, length > 0 else { return nil }
        let start = data.startIndex + cursor
        return [UInt8](data[start..<(start + length)])
    }

    /// Moves the cursor past `length` bytes (at most to the end).
    mutating func consume(_ length: Int) {
        cursor = Swift.min(data.count, cursor + Swift.max(0, length))
    }
}
