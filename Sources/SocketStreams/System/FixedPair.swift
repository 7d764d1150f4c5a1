/// Which stream of the pair.
enum Half: Int, Sendable {
    case input = 0
    case output = 1

    /// The half of a reactor's slot number (`ReadyItem.slot`, which is `rawValue`).
    @inline(__always)
    init(slot: Int) { self = slot == 0 ? .input : .output }
}

/// Two values in one heap allocation of exactly their size, addressed in place by `Half`: a
/// connection's two halves. An `Array` of two costs a 32-byte header more, and every mutation through it checks that
/// the buffer is uniquely referenced, several times an event.
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

    /// The input's or the output's.
    subscript(half: Half) -> Element {
        @inline(__always) unsafeAddress { UnsafePointer(storage + half.rawValue) }
        @inline(__always) nonmutating unsafeMutableAddress { storage + half.rawValue }
    }
}
