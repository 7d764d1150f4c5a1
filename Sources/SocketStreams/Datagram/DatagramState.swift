// What a datagram socket's requests and its owner share (DatagramSocket.swift's header says who touches
// what), the datagrams waiting to be sent, and the destination look-up a face makes for one send.

import Foundation
import Glibc

/// A failed look-up of a datagram's destination: the `EAI_*` code (glibc's, negative) and its message.
package struct DatagramResolutionError: Error, Sendable {
    package let code: Int32
    package let message: String
}

extension DatagramSocket {
    /// The addresses of a numeric `host`, or of `localhost` and `loopback` (127.0.0.1, then ::1); nil
    /// for a name that needs a look-up.
    package static func addressesWithoutLookup(host: String, port: Int) -> [SocketAddress]? {
        if let numeric = SocketAddress(numericHost: host, port: port) { return [numeric] }
        guard host == "localhost" || host == "loopback", PortNumber.isValid(port) else { return nil }
        return [SocketAddress(numericHost: "127.0.0.1", port: port)!, SocketAddress(numericHost: "::1", port: port)!]
    }

    /// The addresses of `host` for datagrams to `port`, in the resolver's order: a numeric address
    /// without a look-up, `localhost` and `loopback` as 127.0.0.1 then ::1 (as GCDAsyncUdpSocket answers
    /// them), anything else with a blocking `getaddrinfo` (call it off any thread that delivers events).
    package static func resolve(host: String, port: Int) -> Result<[SocketAddress], DatagramResolutionError> {
        if let known = addressesWithoutLookup(host: host, port: port) { return .success(known) }
        switch Resolver.resolve(host: host, port: port, family: AF_UNSPEC) {
        case .success(let addresses): return .success(addresses)
        case .failure(let error): return .failure(DatagramResolutionError(code: error.code, message: error.message))
        }
    }
}

/// A datagram waiting to be sent.
struct OutgoingDatagram {
    let data: Data
    let destination: SocketAddress?
    let timeout: UInt64?
    let tag: Int
}

/// The datagrams of one `sendmmsg`: the queue's head alone (a ping-pong's: no array a datagram), or
/// several.
enum OutgoingBatch {
    case one(OutgoingDatagram)
    case many([OutgoingDatagram])

    var count: Int {
        switch self {
        case .one: 1
        case .many(let datagrams): datagrams.count
        }
    }

    subscript(index: Int) -> OutgoingDatagram {
        switch self {
        case .one(let datagram): datagram
        case .many(let datagrams): datagrams[index]
        }
    }
}

/// What a datagram socket's requests and its owner share, under the socket's lock.
struct DatagramState {
    /// Told of every outcome until the socket closes.
    var delegate: (any DatagramSocketDelegate)?
    var maximumDatagramSize: Int
    var sends = FIFO<OutgoingDatagram>()
    /// The head datagram's timeout timer, and the sequence number it was armed with.
    var timer: UInt64?
    var timerSequence: UInt64 = 0
    /// How many datagrams the next continuous receive asks for: a call prepares a message header per
    /// slot, so a socket that gets one datagram at a time (a ping-pong) asks for few, and one that fills
    /// its batches doubles up to `DatagramSocket.batch`.
    var receiveBatch = 8
    /// The events the fd is watched for.
    var interest: UInt32 = 0
    /// The connected peer: datagrams from any other sender are dropped.
    var peer: SocketAddress?
    // The one-byte fields together: Swift lays a struct out in the order written.
    var receiving = DatagramReceiveMode.paused
    /// A `sendmmsg` would have blocked: EPOLLOUT is watched.
    var waitingForSpace = false
    /// A pump is posted to the owner and has not run yet.
    var pumpRequested = false
    /// The owner is in `flush` (which a report may reach again).
    var flushing = false
    /// The owner is in `DatagramSocket.queueingSends`: a send only queues, and the pump comes after.
    var queueing = false
    /// `close` was asked for: nothing more is reported or accepted.
    var closing = false
    /// The close's last `flush`, which may send although `closing` is set.
    var finalFlush = false
    /// The fd is open (only the owner's teardown clears it, with the lock held).
    var fdOpen = true

    init(delegate: any DatagramSocketDelegate, maximumDatagramSize: Int) {
        self.delegate = delegate
        self.maximumDatagramSize = maximumDatagramSize
    }

    /// After a receive that asked for `count` and got `received`: a full batch doubles the next, one a
    /// quarter full or less halves it (between 8 and `DatagramSocket.batch`).
    mutating func adaptReceiveBatch(received: Int, of count: Int) {
        if received == count {
            receiveBatch = Swift.min(DatagramSocket.batch, count * 2)
        } else if received * 4 <= count {
            receiveBatch = Swift.max(8, count / 2)
        }
    }

    /// The next batch `flush` sends (at most `DatagramSocket.batch` from the queue's head); nil when
    /// waiting for buffer space, closing (but for the final flush) or empty, and then the flush is over.
    mutating func nextBatch() -> OutgoingBatch? {
        guard !(waitingForSpace || closing && !finalFlush), let head = sends.first else {
            flushing = false
            return nil
        }
        return sends.count == 1 ? .one(head) : .many(sends.prefix(DatagramSocket.batch))
    }

    /// Marks a pump requested: true when the caller must post one.
    mutating func requestPump() -> Bool {
        guard !pumpRequested else { return false }
        pumpRequested = true
        return true
    }
}
