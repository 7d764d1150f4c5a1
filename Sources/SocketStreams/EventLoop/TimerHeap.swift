// A reactor's timers: a binary min-heap of deadlines over a slab of payloads, so that arming,
// cancelling and firing cost O(log n) however many timers are armed. (A sorted array cost a search and a
// move of every later timer per arm, and a scan per cancel: with a read timeout on each of many thousand
// idle connections, every round trip paid for all of them; Benchmarks/results/scale-notes.md.)
//
// A cancelled timer's payload is released at once and its slot freed; its heap entry stays behind and
// is dropped at once if it is the top, else when it reaches the top, or when stale entries reach half
// the live ones and the heap is rebuilt without them (O(n), once per n/2 cancellations). So cancelling
// costs O(log n) at most, O(1) amortised for a timer that is not the earliest, and the heap holds at
// most about one and a half times the live timers. Every timer gets a stamp, part of its id, which its
// heap entry and its slot carry while it is live: a stale entry, or the id of a timer that has fired
// or been cancelled (callers may still cancel it), no longer matches its slot, even once the slot is
// in use again. Stamps also order equal deadlines first-in, first-out. Memory: 16 bytes an entry and
// 24 a slot (slots are never given back; the slab keeps its peak size).

/// Timers ordered by deadline, each with a payload; not thread-safe (the reactor's lock guards it).
struct TimerHeap<Payload> {
    private struct Entry {
        let deadline: UInt64
        let slot: UInt32
        /// The timer's stamp (see `nextStamp`): tells a live entry from a stale one, and keeps equal
        /// deadlines first-in, first-out.
        let stamp: UInt32

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : Int32(bitPattern: stamp &- other.stamp) < 0
        }
    }

    private struct Slot {
        var payload: Payload?
        /// The stamp of the timer in the slot; 0 while the slot is free.
        var stamp: UInt32 = 0
    }

    private var heap: [Entry] = []
    private var slots: [Slot] = []
    private var freeSlots: [UInt32] = []
    /// Stamps in arming order, never 0 (so no id is 0), wrapping after 2^32 timers: an id is unique
    /// among its reactor's last four billion timers, and equal deadlines are ordered right between
    /// timers armed fewer than two billion apart.
    private var nextStamp: UInt32 = 1
    /// Timers armed and neither fired nor cancelled.
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Heap entries, stale ones included (tests check that they stay near `count`).
    var storedEntries: Int { heap.count }

    /// Arms a timer; returns its id (never 0) for `cancel`.
    mutating func insert(deadline: UInt64, _ payload: Payload) -> UInt64 {
        let slot: UInt32
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = UInt32(slots.count)
            slots.append(Slot())
        }
        let stamp = nextStamp
        nextStamp = nextStamp &+ 1 == 0 ? 1 : nextStamp &+ 1
        slots[Int(slot)] = Slot(payload: payload, stamp: stamp)
        heap.append(Entry(deadline: deadline, slot: slot, stamp: stamp))
        count += 1
        siftUp(heap.count - 1)
        return UInt64(stamp) << 32 | UInt64(slot)
    }

    /// Cancels a timer that has neither fired nor been cancelled, and returns its payload; nil for any
    /// other id.
    @discardableResult
    mutating func cancel(_ id: UInt64) -> Payload? {
        let slot = Int(truncatingIfNeeded: id & 0xFFFF_FFFF)
        let stamp = UInt32(truncatingIfNeeded: id >> 32)
        guard stamp != 0, slot < slots.count, slots[slot].stamp == stamp, let payload = slots[slot].payload else { return nil }
        release(slot)
        // The earliest timer is the one most often cancelled (a per-operation timeout, shorter than
        // the idle ones): its entry goes at once. Others wait for the top or for a rebuild.
        dropStaleTop()
        if heap.count > count + count / 2 + 64 { rebuild() }
        return payload
    }

    /// The earliest deadline of a live timer.
    var nextDeadline: UInt64? {
        mutating get {
            dropStaleTop()
            return heap.first?.deadline
        }
    }

    /// Removes and returns the earliest timer if its deadline is at or before `now`.
    mutating func popFirst(dueBy now: UInt64) -> Payload? {
        dropStaleTop()
        guard let first = heap.first, first.deadline <= now else { return nil }
        removeTop()
        let payload = slots[Int(first.slot)].payload
        release(Int(first.slot))
        return payload
    }

    /// Whether the entry's timer is still armed.
    private func isLive(_ entry: Entry) -> Bool {
        slots[Int(entry.slot)].stamp == entry.stamp
    }

    /// Frees a live timer's slot: its payload goes now, its heap entry later.
    private mutating func release(_ slot: Int) {
        slots[slot] = Slot()
        freeSlots.append(UInt32(slot))
        count -= 1
    }

    private mutating func dropStaleTop() {
        while let first = heap.first, !isLive(first) { removeTop() }
    }

    private mutating func removeTop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        siftDown(0)
    }

    /// Drops every stale entry and restores the heap order (Floyd's bottom-up construction, O(n)).
    private mutating func rebuild() {
        let slots = self.slots
        heap.removeAll { entry in slots[Int(entry.slot)].stamp != entry.stamp }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        let entry = heap[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard entry.precedes(heap[parent]) else { break }
            heap[child] = heap[parent]
            child = parent
        }
        heap[child] = entry
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let entry = heap[parent]
        let count = heap.count
        while true {
            var child = 2 * parent + 1
            guard child < count else { break }
            if child + 1 < count, heap[child + 1].precedes(heap[child]) { child += 1 }
            guard heap[child].precedes(entry) else { break }
            heap[parent] = heap[child]
            parent = child
        }
        heap[parent] = entry
    }
}

// What the reactor's timers hold (moved out of Reactor.swift).

/// Something a reactor's timer calls without a closure of its own (see `Reactor.schedule(after:target:context:)`).
protocol TimerTarget: AnyObject, Sendable {
    /// The timer armed with `context` is due; on the reactor's thread.
    func timerFired(_ context: UInt64)
}

/// A timer target, held weakly (as a plain reference, 8 bytes, cast back when the timer fires).
struct WeakTimerTarget {
    weak var object: AnyObject?

    init(target: any TimerTarget) { object = target }

    var target: (any TimerTarget)? { object as? any TimerTarget }
}

/// What a timer does: a closure, or a call to a target. (An enum the heap, generic over its payload,
/// stores as it is: a bare function type would be stored through a reabstraction thunk, one more
/// allocation per timer.)
enum TimerAction {
    case closure(@Sendable () -> Void)
    case target(WeakTimerTarget, UInt64)

    func run() {
        switch self {
        case .closure(let fire): fire()
        case .target(let weak, let context): weak.target?.timerFired(context)
        }
    }
}
