// The write side's re-signal without a poll(2) per write. CFNetwork signals `hasSpaceAvailable` again
// after a write while the socket still takes bytes; asking the kernel after every write (a
// zero-timeout poll) cost one system call a ping-pong round trip and one per 64 KiB of upload
// (Benchmarks/results/syscalls.md). For a plain TCP socket the output half keeps instead a lower
// bound of how far the socket's send queue can grow before a send fails with EAGAIN (`SendSpace`):
// measured exactly by one `getsockopt(SO_MEMINFO)`, lowered after each write by the most that write
// can have cost, and measured again only once it runs out. While it lasts, the next send takes bytes.
//
// What a send needs (net/ipv4/tcp.c, `tcp_sendmsg_locked`, `__sk_stream_memory_free`): bytes go into
// the queue's last unsent skb while it has room, and a new skb is started while `sk_wmem_queued <
// sk_sndbuf`; otherwise a non-blocking send fails with EAGAIN. So a socket with free space,
// `sk_sndbuf - sk_wmem_queued` above zero, takes at least one byte, and the bound is that free space
// (with the larger of `sk_wmem_queued` and `sk_wmem_alloc` as queued). It is not `tcp_poll`'s POLLOUT
// (include/net/sock.h, `__sk_stream_is_writeable`: free space at least half the queued memory), which
// turns off while a third of the buffer is still free: the bound lets the writer fill the buffer, as a
// blocking send does, and only a full one (a send that took fewer bytes than offered, or a
// measurement with nothing free) arms EPOLLOUT, which comes back once a third of the buffer has
// drained, as a blocking send wakes (`sk_stream_write_space`). Answering with POLLOUT's rule instead
// woke an uploading writer many times as often as a blocking C sender sleeps
// (Benchmarks/results/syscalls.md).
//
// What one send can add: its bytes, plus each new skb's head (its `truesize`, which depends on the
// kernel and the architecture; bounded here by `headTruesize`, 2 KiB, with room above what a head was
// measured to add). Heads per send: the skbs it starts (one per `size_goal` of bytes, at least one
// MSS, normally up to 64 KiB with GSO, and one more for the first) and those the stack splits off
// later while sending (TSO autosizing keeps at least two MSS an skb; SACK processing). The charge is
// two heads a send plus two bytes a byte: sound while every skb carries at least 1 KiB, that is every
// path with an MSS of 536 or more and a peer window of at least two MSS (`SendSpaceTests` checks it
// against the kernel with a 4 KiB peer window too). Bytes leaving the queue (acknowledged) only widen
// the true space.
//
// What it cannot see, named: the kernel shrinking `sk_sndbuf` or refusing memory under global TCP
// memory pressure (`tcp_mem`; `sk_stream_moderate_sndbuf`, `sk_wmem_schedule`), where a send may
// fail with EAGAIN though the bound (or a poll, which does not check that either) says writable; and a
// client lowering SO_SNDBUF or setting TCP_NOTSENT_LOWAT on an adopted socket's fd after the pair
// first measured it. Either way the write blocks in poll(2) until the socket takes bytes, as a write
// always could; nothing is lost.
//
// A layered transport straight over the socket (TLS over the bare socket or over bytes a proxy left
// behind) uses the same bound: it writes records, not the client's bytes, and may send between the
// client's writes (a record's tail, a TLS 1.3 KeyUpdate answered while reading), so it adds up the
// charge of every send it makes to the socket (`Transport.takeSendCharge`) and the connection takes
// that sum off the bound, not the client's count.
//
// Not modelled, so answered by today's poll: other layered transports, Unix-domain sockets (they
// count `sk_wmem_alloc`, and their skbs' page rounding makes the head bound differ), sockets that
// are not TCP, and a `tcp_notsent_lowat` sysctl set below its default (unlimited).

import CSocketStreamsShims
import Glibc
import Synchronization

/// A lower bound of how many KiB a TCP socket's send queue can grow before a send fails with EAGAIN,
/// or why the socket has none. Two bytes, so a half's state stays 32 bytes.
struct SendSpace: Equatable {
    private(set) var kib: UInt16

    /// Not known to be above zero: measure before trusting.
    static let exhausted = SendSpace(kib: 0)
    /// What kind of socket this is has not been looked at yet (every pair starts here).
    static let unchecked = SendSpace(kib: 0xFFFE)
    /// Not a socket the bound models: ask the kernel with poll(2) after each write.
    static let pollOnly = SendSpace(kib: 0xFFFF)
    /// The largest bound kept (64 MiB less 3 KiB; `tcp_wmem`'s maximum is 4 MiB by default).
    static let maximumKiB = 0xFFFD

    /// The most one skb head adds to `sk_wmem_queued` (a bound above what one was measured to add; see
    /// the file's header).
    static let headTruesize = 2048

    /// Whether this is a bound (possibly zero) rather than a mark.
    var isBound: Bool { kib <= Self.maximumKiB }

    /// The most a send of `count` bytes can add to the socket's queued memory: the bytes, two skb
    /// heads, and two bytes a byte for the heads of the skbs it fills and those split off later.
    @inline(__always)
    static func charge(_ count: Int) -> Int { 3 &* count &+ 2 &* headTruesize }

    /// Takes a send of `count` bytes off the bound: the most it can have added to the queue. True if
    /// the socket surely takes more (≥ 1 KiB left); if not, the bound drops to zero, and the socket
    /// must be measured. A mark stays as it is (false).
    @inline(__always)
    mutating func take(_ count: Int) -> Bool {
        take(charge: Self.charge(count))
    }

    /// Takes sends whose charges (`charge(_:)` of each) add up to `charge` off the bound: as `take`,
    /// for a layered transport's sends. A charge of 0 (nothing sent) leaves the bound as it is.
    @inline(__always)
    mutating func take(charge: Int) -> Bool {
        guard kib <= Self.maximumKiB else { return false }
        guard charge > 0 else { return kib > 0 }
        let left = Int(kib) &- ((charge &+ 1023) >> 10)
        guard left > 0 else {
            kib = 0
            return false
        }
        kib = UInt16(truncatingIfNeeded: left)
        return true
    }

    /// The bound from one `getsockopt(SO_MEMINFO)`: `sk_sndbuf` less what is queued (the larger of
    /// `sk_wmem_queued` and `sk_wmem_alloc`), and whether a send takes bytes now (some space is free).
    /// Nil if the call fails.
    static func measure(_ fd: Int32) -> (space: SendSpace, writable: Bool)? {
        guard let memory = Posix.sendMemory(fd) else { return nil }
        let free = memory.buffer - memory.queued
        guard free > 0 else { return (.exhausted, false) }
        return (SendSpace(kib: UInt16(min(free >> 10, maximumKiB))), true)
    }

    /// Whether an adopted socket is one the bound models: TCP (`SO_PROTOCOL`), with no
    /// `TCP_NOTSENT_LOWAT` of its own. Two system calls, once a pair.
    static func models(_ fd: Int32) -> Bool {
        guard Posix.option(fd, level: SOL_SOCKET, name: SO_PROTOCOL) == Int32(IPPROTO_TCP) else { return false }
        return Posix.option(fd, level: Int32(IPPROTO_TCP), name: TCP_NOTSENT_LOWAT) == 0
    }

    /// Whether `net.ipv4.tcp_notsent_lowat` is at its default, unlimited (UINT32_MAX), in this
    /// process's network namespace: read once. Otherwise unsent bytes can stop a send before the
    /// buffer is full, which the bound does not model, and every pair polls.
    static let lowWaterMarkUnlimited: Bool = {
        guard let value = sysctlNumbers("/proc/sys/net/ipv4/tcp_notsent_lowat").first else { return false }
        return value >= UInt64(UInt32.max)
    }()

    /// The bound of a TCP socket this process connected itself, before anything was written to it:
    /// nothing queued, and at least the send buffer every TCP socket starts with (`tcp_init_sock`
    /// gives it `net.ipv4.tcp_wmem`'s middle value; the handshake's `tcp_sndbuf_expand` only raises
    /// it). So the first write needs no `getsockopt` (one system call less per connection). Read
    /// once; nil where the sysctl cannot be read or the bound is not used: then the first write measures.
    static let freshlyConnected: SendSpace? = {
        let numbers = sysctlNumbers("/proc/sys/net/ipv4/tcp_wmem")
        guard lowWaterMarkUnlimited, numbers.count == 3, numbers[1] >= 1024 else { return nil }
        return SendSpace(kib: UInt16(min(Int(numbers[1] >> 10), maximumKiB)))
    }()

    /// The decimal numbers in a `/proc/sys` file (at most 64 bytes of it, each at most 19 digits).
    /// By hand, not through Foundation: this runs in every process that writes.
    private static func sysctlNumbers(_ path: String) -> [UInt64] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        var bytes: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
        let count = withUnsafeMutableBytes(of: &bytes) { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return [] }
        var numbers: [UInt64] = []
        var value: UInt64 = 0
        var digits = 0
        withUnsafeBytes(of: bytes) { text in
            for byte in text.prefix(count) {
                if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 19 {
                    value = value * 10 + UInt64(byte - UInt8(ascii: "0"))
                    digits += 1
                } else if digits > 0 {
                    numbers.append(value)
                    value = 0
                    digits = 0
                }
            }
        }
        if digits > 0 { numbers.append(value) }
        return numbers
    }

    #if DEBUG
        /// Sends by `write` that found the socket full (EAGAIN), in debug builds: `SendSpaceTests`
        /// writes only on `hasSpaceAvailable` and requires it to stay put over thousands of writes.
        static let sendsRefused = Atomic<Int>(0)
    #endif
}

// MARK: the bound as an output half keeps it

extension SendSpace {
    /// After a send to the plain socket `fd` that took every byte of `count`: whether the socket surely
    /// takes more now, so `hasSpaceAvailable` can be signalled at once. Answered from the bound (no
    /// system call while it lasts, one `getsockopt` when it runs out). `target`: what the pair was made
    /// for (which sockets the bound models).
    @inline(__always)
    mutating func remains(afterSending count: Int, through fd: Int32, madeFor target: Endpoint) -> Bool {
        if take(count) { return true }
        return remeasure(fd, madeFor: target)
    }

    /// After a write through a layered transport that took every byte and holds none back: whether
    /// the socket surely takes more. One that counts its sends (TLS straight over the socket; `charge`,
    /// taken with `ActiveTransport.takeSendState`) answers from the bound, as the plain socket does;
    /// anything else (a nil charge) polls.
    /// `fd`: the socket; `writeInterest`: what the transport's next write waits for (polled for).
    @inline(__always)
    mutating func remains(
        afterCharge charge: Int?, fd: Int32, writeInterest: @autoclosure () -> Interest, madeFor target: Endpoint
    ) -> Bool {
        guard let charge, self != .pollOnly else {
            return writeInterest().poll(fd, timeout: 0)
        }
        if take(charge: charge) { return true }
        return remeasure(fd, madeFor: target)
    }

    /// Whether an earlier "the socket takes bytes" still holds through a layered transport: nothing
    /// waits to go out first, and whatever it sent since (a record's tail, a KeyUpdate answered while
    /// reading) leaves the bound above zero. No system call: false sends the caller to poll.
    /// (The charge comes off even while output is pending: nothing else would take it off, and the
    /// bound must never say more than is there.)
    /// `sent`: what the transport still holds, and the charge of its sends since the last look.
    @inline(__always)
    mutating func stillConfirmed(after sent: (pending: Bool, charge: Int?)) -> Bool {
        guard let charge = sent.charge else { return false }
        return take(charge: charge) && !sent.pending
    }

    /// Takes what a write sent off the bound where no one is told of space (an unscheduled stream),
    /// so the bound stays a bound for a later schedule: `charge` is the plain socket's `charge(_:)` of
    /// the client's count, or a layered transport's own count of its sends; nil (a transport that
    /// cannot tell) spends the bound.
    mutating func spend(charge: Int?) {
        if let charge {
            _ = take(charge: charge)
        } else {
            ranOut()
        }
    }

    /// Measures the socket's send space after the bound ran out (or, first, whether the bound models
    /// this socket at all: a TCP socket the pair made, or an adopted one that `models` says is TCP
    /// with no low-water mark of its own; never a Unix-domain one). Also where an output goes live with
    /// no bound yet (after a TLS handshake). True if a send takes bytes now.
    mutating func remeasure(_ fd: Int32, madeFor target: Endpoint) -> Bool {
        if self == .unchecked {
            let modelled: Bool
            switch target {
            case .host: modelled = Self.lowWaterMarkUnlimited
            case .unix: modelled = false
            case .native: modelled = Self.lowWaterMarkUnlimited && Self.models(fd)
            }
            self = modelled ? .exhausted : .pollOnly
        }
        guard isBound, let measured = Self.measure(fd) else {
            self = .pollOnly
            return Interest.writable.poll(fd, timeout: 0)
        }
        self = measured.space
        return measured.writable
    }

    /// A send took fewer bytes than offered (or left a tail): whatever the bound said is spent.
    @inline(__always)
    mutating func ranOut() {
        if isBound { self = .exhausted }
    }
}
