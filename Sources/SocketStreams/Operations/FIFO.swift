/// A first-in, first-out list whose front removal costs O(1): an array and a start index. (An array's
/// `removeFirst` moves every element: queueing 16,384 writes of 64 KiB and completing them made
/// GCDAsyncSocket-style uploads quadratic.) A removed element is released at once.
struct FIFO<Element> {
    private var items: [Element?] = []
    private var start = 0

    var isEmpty: Bool { start == items.count }
    var count: Int { items.count - start }
    var first: Element? { isEmpty ? nil : items[start] }

    mutating func append(_ element: Element) { items.append(element) }

    /// Replaces the first element (which must exist).
    mutating func replaceFirst(_ element: Element) { items[start] = element }

    mutating func removeFirst() {
        items[start] = nil
        start += 1
        if start == items.count {
            items.removeAll(keepingCapacity: true)
            start = 0
        } else if start >= 1024, start * 2 >= items.count {
            items.removeFirst(start)
            start = 0
        }
    }

    mutating func removeAll() {
        items.removeAll()
        start = 0
    }
}
