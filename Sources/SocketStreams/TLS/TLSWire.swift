// The BIO under a `TLSTransport`'s SSL: OpenSSL reads and writes the transport below through it
// directly (no memory-BIO copies), and it follows the record framing of what it reads, so that a TCP
// end can be told apart between records (an end of stream, unless close_notify is required) and
// inside one (bytes were lost). See TLSTransport.swift's header.

import COpenSSL
import Foundation

/// The BIO's target: the transport below, and the failure it reported if any (OpenSSL only sees
/// "the BIO failed"). Touched only under its `TLSTransport`'s lock (the BIO's callbacks run inside the
/// SSL calls made with it held), so without dynamic exclusivity checks.
final class TLSWire: @unchecked Sendable {
    let inner: any Transport
    @exclusivity(unchecked) var failure: StreamFailure?
    /// The transport below reported its end (for `BIO_CTRL_EOF`, which tells OpenSSL the end was
    /// unexpected rather than a would-block).
    @exclusivity(unchecked) var sawEnd = false
    /// Where the bytes read so far stand in TLS's record framing: how many bytes of the current
    /// record's 5-byte header have arrived (0 between records), the high byte of its length, and how
    /// many bytes of its body are still to come. A TCP end between records may be taken as the end of
    /// the stream (without `requiresCloseNotify`); one inside a record never is: bytes were lost.
    @exclusivity(unchecked) private var headerSeen = 0
    @exclusivity(unchecked) private var lengthHigh: UInt8 = 0
    @exclusivity(unchecked) private var bodyLeft = 0
    var atRecordBoundary: Bool { headerSeen == 0 && bodyLeft == 0 }
    /// Ciphertext of the last record the socket did not take (see TLSTransport: at most one record).
    @exclusivity(unchecked) var tail: [UInt8] = []
    /// Whether sends are counted in `sendCharge` (the transport below writes straight to the socket).
    let countsSends: Bool
    /// `SendSpace.charge` of every send to the socket since `takeSendCharge` last took it.
    @exclusivity(unchecked) var sendCharge = 0

    init(_ inner: any Transport, countsSends: Bool) {
        self.inner = inner
        self.countsSends = countsSends
    }

    /// Follows the record framing over `count` bytes just read (headers byte by byte, bodies skipped).
    @inline(__always)
    func track(_ bytes: UnsafeRawPointer, _ count: Int) {
        var index = 0
        while index < count {
            if bodyLeft > 0 {
                let skipped = min(bodyLeft, count - index)
                bodyLeft -= skipped
                index += skipped
                continue
            }
            let byte = bytes.load(fromByteOffset: index, as: UInt8.self)
            index += 1
            switch headerSeen {
            case 3: lengthHigh = byte
            case 4: bodyLeft = Int(lengthHigh) << 8 | Int(byte)
            default: break
            }
            headerSeen = headerSeen == 4 ? 0 : headerSeen + 1
        }
    }

    /// Writes to the transport below, counting what the socket took.
    @inline(__always)
    func send(_ data: UnsafeRawPointer, _ count: Int) -> TransportIO {
        let result = inner.write(data, count)
        if case .processed(let sent) = result { sendCharge &+= SendSpace.charge(sent) }
        return result
    }

    /// A source/sink BIO type whose callbacks call the transport directly.
    nonisolated(unsafe) static let method: OpaquePointer = {
        let method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "SocketStreams transport")!
        BIO_meth_set_read_ex(method) { bio, data, length, done in
            guard let bio, let data, let done else { return 0 }
            return TLSWire.with(bio) { wire in
                cssl_bio_clear_retry_flags(bio)
                switch wire.inner.read(data, length) {
                case .processed(let count):
                    wire.track(data, count)
                    done.pointee = count
                    return 1
                case .wouldBlock:
                    cssl_bio_set_retry_read(bio)
                    return 0
                case .end:
                    wire.sawEnd = true
                    return 0
                case .failed(let failure):
                    wire.failure = failure
                    return 0
                }
            }
        }
        BIO_meth_set_write_ex(method) { bio, data, length, done in
            guard let bio, let data, let done else { return 0 }
            return TLSWire.with(bio) { wire in
                cssl_bio_clear_retry_flags(bio)
                // A tail still waiting (a record written since it could not be sent): nothing may pass it.
                guard wire.tail.isEmpty else {
                    cssl_bio_set_retry_write(bio)
                    return 0
                }
                switch wire.send(data, length) {
                case .processed(let count):
                    if count < length { wire.tail = Array(UnsafeRawBufferPointer(start: data + count, count: length - count)) }
                    done.pointee = length
                    return 1
                case .wouldBlock:
                    wire.tail = Array(UnsafeRawBufferPointer(start: data, count: length))
                    done.pointee = length
                    return 1
                case .end:
                    return 0
                case .failed(let failure):
                    wire.failure = failure
                    return 0
                }
            }
        }
        BIO_meth_set_ctrl(method) { bio, command, _, _ in
            switch command {
            case BIO_CTRL_FLUSH: return 1
            case BIO_CTRL_EOF:
                guard let bio else { return 0 }
                return Int(TLSWire.with(bio) { $0.sawEnd ? 1 : 0 })
            default: return 0
            }
        }
        return method
    }()

    /// Runs `body` with the BIO's wire, borrowed: the `TLSTransport` holding the wire makes every SSL
    /// call, so the wire outlives each callback, and none needs a reference of its own.
    @inline(__always)
    private static func with(_ bio: OpaquePointer, _ body: (TLSWire) -> Int32) -> Int32 {
        guard let data = BIO_get_data(bio) else { return 0 }
        return Unmanaged<TLSWire>.fromOpaque(data)._withUnsafeGuaranteedRef(body)
    }
}
