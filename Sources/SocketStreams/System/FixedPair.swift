/// Two values in one heap allocation of exactly their size, addressed in place: a connection's two
/// halves. An `Array` of two costs a 32-byte header more, and every mutation through it checks that
/// the buffer is uniquely referenced (callgrind: ~10 instructions, several times an event).
struct FixedPair<Element>: ~Copyable {
    private let storage: UnsafeMutablePointer<Element>

    init(_ first: Element, _ second: Element) {
        storage = .allocate(capacity: 2)
        storage.initialize(to: first)
        (storage + 1).initialize(to: second)
    }

    deinit {
        storage.deinitialize(count: 2)
        storage.deallocate()
    }

    /// Element 0 or 1 (not checked: callers index with `Half.rawValue` or a slot derived from it).
    subscript(index: Int) -> Element {
        @inline(__always) unsafeAddress { UnsafePointer(storage + index) }
        @inline(__always) nonmutating unsafeMutableAddress { storage + index }
    }
}
