// The reactor's table of registered fds' handlers (moved out of Reactor.swift).

/// The handlers of a reactor's fds, in an array indexed by their tokens: a lookup per event is an
/// index, not a hash, and the table costs 24 bytes a registration (a dictionary's buckets cost about
/// twice that, with every connection holding one). A token is a slot's index (from 16: the
/// reactor's own tokens are below) and its generation, which changes each time the slot is freed, so an
/// event fetched for an fd removed meanwhile finds nothing, even once the slot is in use again.
struct HandlerTable {
    private struct Slot {
        var handler: (any ReactorHandler)?
        var generation: UInt32 = 1
    }

    private static let firstIndex: UInt64 = 16
    private var slots: [Slot] = []
    private var free: [UInt32] = []

    /// Registers `handler`; returns its token.
    mutating func insert(_ handler: any ReactorHandler) -> UInt64 {
        let index: Int
        if let reused = free.popLast() {
            index = Int(reused)
        } else {
            index = slots.count
            slots.append(Slot())
        }
        slots[index].handler = handler
        return UInt64(slots[index].generation) << 32 | (UInt64(index) + Self.firstIndex)
    }

    /// The slot of a live token, or nil.
    private func index(of token: UInt64) -> Int? {
        let low = token & 0xFFFF_FFFF
        guard low >= Self.firstIndex else { return nil }
        let index = Int(low - Self.firstIndex)
        guard index < slots.count, slots[index].generation == UInt32(truncatingIfNeeded: token >> 32), slots[index].handler != nil
        else { return nil }
        return index
    }

    subscript(token: UInt64) -> (any ReactorHandler)? {
        index(of: token).flatMap { slots[$0].handler }
    }

    mutating func replace(_ token: UInt64, with handler: any ReactorHandler) {
        if let index = index(of: token) { slots[index].handler = handler }
    }

    mutating func remove(_ token: UInt64) {
        guard let index = index(of: token) else { return }
        slots[index].handler = nil
        slots[index].generation = slots[index].generation &+ 1 == 0 ? 1 : slots[index].generation &+ 1
        free.append(UInt32(index))
    }
}
