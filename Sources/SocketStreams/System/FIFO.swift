/// A first-in, first-out list whose front removal costs O(1): the first element inline, the rest in an
/// array with a start index. (An array's `removeFirst` moves every element: queueing an upload's
/// writes and completing them made GCDAsyncSocket-style uploads quadratic.) A removed element is released
/// at once. The usual one operation at a time (the read an idle connection keeps pending, a ping-pong's
/// write) allocates nothing, and an emptied list keeps no storage: an idle connection holds no array.
struct FIFO<Element> {
    private var head: Element?
    /// Where the rest starts in `rest` (32 bits: it fits in the head's padding).
    private var start: UInt32 = 0
    private var rest: [Element?] = []

    var isEmpty: Bool { head == nil }
    var count: Int { head == nil ? 0 : 1 + rest.count - Int(start) }
    var first: Element? { head }

    mutating func append(_ element: Element) {
        if head == nil { head = element } else { rest.append(element) }
    }

    /// Replaces the first element (which must exist).
    mutating func replaceFirst(_ element: Element) { head = element }

    mutating func removeFirst() {
        let index = Int(start)
        guard index < rest.count else {
            head = nil
            if !rest.isEmpty { rest = [] }
            start = 0
            return
        }
        head = rest[index].take()
        if index + 1 == rest.count {
            rest = []
            start = 0
        } else if index + 1 >= 1024, (index + 1) * 2 >= rest.count {
            rest.removeFirst(index + 1)
            start = 0
        } else {
            start += 1
        }
    }

    mutating func removeAll() {
        guard head != nil else { return }
        head = nil
        if !rest.isEmpty { rest = [] }
        start = 0
    }

    /// Calls `body` with each element, first to last.
    func forEach(_ body: (Element) -> Void) {
        guard let head else { return }
        body(head)
        for index in Int(start)..<rest.count {
            if let element = rest[index] { body(element) }
        }
    }

    /// The first `count` elements (fewer if there are fewer), first to last.
    func prefix(_ count: Int) -> [Element] {
        guard let head, count > 0 else { return [] }
        var elements = [head]
        elements.reserveCapacity(Swift.min(count, self.count))
        var index = Int(start)
        while elements.count < count, index < rest.count {
            if let element = rest[index] { elements.append(element) }
            index += 1
        }
        return elements
    }
}
