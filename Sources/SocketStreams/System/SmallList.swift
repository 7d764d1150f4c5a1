/// An ordered list of references that keeps its first element inline: a half's reactors and a
/// connection's registrations are almost always one, and an array for one element is a heap
/// allocation of 48 bytes (three of them a scheduled pair). Only a second element allocates.
struct SmallList<Element: AnyObject>: Sequence, ExpressibleByArrayLiteral {
    private var head: Element?
    private var tail: [Element] = []

    init(arrayLiteral elements: Element...) {
        for element in elements { append(element) }
    }

    var isEmpty: Bool { head == nil }
    var count: Int { head == nil ? 0 : 1 + tail.count }
    var first: Element? { head }

    /// Whether an element matches (without making an iterator: this runs for every event).
    @inline(__always)
    func contains(where matches: (Element) -> Bool) -> Bool {
        guard let head else { return false }
        if matches(head) { return true }
        return !tail.isEmpty && tail.contains(where: matches)
    }

    mutating func append(_ element: Element) {
        if head == nil {
            head = element
        } else {
            tail.append(element)
        }
    }

    /// Removes and returns the first element that matches, if any; the order of the rest is kept.
    @discardableResult
    mutating func remove(where matches: (Element) -> Bool) -> Element? {
        guard let head else { return nil }
        if matches(head) {
            self.head = tail.isEmpty ? nil : tail.removeFirst()
            return head
        }
        guard let index = tail.firstIndex(where: matches) else { return nil }
        return tail.remove(at: index)
    }

    /// Removes every element that matches.
    mutating func removeAll(where matches: (Element) -> Bool) {
        let kept = filter { !matches($0) }
        self = []
        for element in kept { append(element) }
    }

    /// Calls `body` with each element in order, without an iterator: `for … in` copies the list into
    /// one, a retain and a release of each part, and this runs for every event
    /// (Benchmarks/results/syscalls.md).
    @inline(__always)
    func forEach(_ body: (Element) throws -> Void) rethrows {
        guard let head else { return }
        try body(head)
        if !tail.isEmpty { try tail.forEach(body) }
    }

    func makeIterator() -> Iterator { Iterator(list: self) }

    struct Iterator: IteratorProtocol {
        fileprivate let list: SmallList
        private var index = -1

        fileprivate init(list: SmallList) { self.list = list }

        mutating func next() -> Element? {
            index += 1
            if index == 0 { return list.head }
            return index - 1 < list.tail.count ? list.tail[index - 1] : nil
        }
    }
}
