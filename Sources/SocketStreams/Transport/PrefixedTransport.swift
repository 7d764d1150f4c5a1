/// Bytes a handshake stage read past its reply (a proxy's response head followed by the target's
/// first bytes in one segment), served before anything else from the transport below. Without it
/// those bytes would be lost; with it they keep `hasBytesAvailable` true until read, though the fd
/// is not readable.
final class PrefixedTransport: Transport, @unchecked Sendable {
    let inner: any Transport
    /// The bytes not read yet. Reads may run on one thread while another asks `hasBufferedInput`.
    private let prefix: Guarded<ArraySlice<UInt8>>

    init(prefix: [UInt8], over inner: any Transport) {
        self.inner = inner
        self.prefix = Guarded(prefix[...])
    }

    var fd: Int32 { inner.fd }

    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO {
        let copied = prefix.withLock { bytes -> Int in
            let n = min(count, bytes.count)
            guard n > 0 else { return 0 }
            bytes.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: n) }
            bytes = bytes.dropFirst(n)
            return n
        }
        return copied > 0 ? .processed(copied) : inner.read(buffer, count)
    }

    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO { inner.write(buffer, count) }
    var readInterest: Interest { inner.readInterest }
    var writeInterest: Interest { inner.writeInterest }
    var hasBufferedInput: Bool { prefix.withLock { !$0.isEmpty } || inner.hasBufferedInput }
    var hasPendingOutput: Bool { inner.hasPendingOutput }
    func flush() -> TransportIO { inner.flush() }
    func shutdownOutput() -> TransportIO { inner.shutdownOutput() }
    func ready(_ events: Interest) -> Interest { inner.ready(events) }
    func close() { inner.close() }
}
