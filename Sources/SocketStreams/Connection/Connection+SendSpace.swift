// The send-space bound (Transport/SendSpace.swift) as the connection uses it: after a write that took
// every byte, whether `hasSpaceAvailable` can be signalled at once, answered from the output half's
// bound on a plain TCP socket and by a zero-timeout poll on anything else.

extension Connection {
    /// After a send that took every byte of `count`: whether the socket surely takes more now, so
    /// `hasSpaceAvailable` can be signalled at once. A plain TCP socket answers from its bound (no
    /// system call while it lasts, one `getsockopt` when it runs out); anything else polls. Lock held.
    @inline(__always)
    func spaceRemains(afterSending count: Int, through transport: ActiveTransport) -> Bool {
        lock.assertHeld()
        guard case .socket(let fd) = transport else { return TransferGate.poll(for: transport.writeInterest, on: transport.fd, timeout: 0) }
        if halves[.output].sendSpace.take(count) { return true }
        return measureSendSpace(fd)
    }

    /// Measures the socket's send space after the bound ran out (or before its first use). Lock held.
    private func measureSendSpace(_ fd: Int32) -> Bool {
        var space = halves[.output].sendSpace
        if space == .unchecked {
            let modelled: Bool
            switch target {
            case .host: modelled = SendSpace.lowWaterMarkUnlimited
            case .unix: modelled = false
            case .native: modelled = SendSpace.lowWaterMarkUnlimited && SendSpace.models(fd)
            }
            space = modelled ? .exhausted : .pollOnly
            halves[.output].sendSpace = space
        }
        guard space.isBound, let measured = SendSpace.measure(fd) else {
            halves[.output].sendSpace = .pollOnly
            return TransferGate.poll(for: .writable, on: fd, timeout: 0)
        }
        halves[.output].sendSpace = measured.space
        return measured.writable
    }

    /// A send took fewer bytes than offered: whatever the bound said is spent. Lock held.
    @inline(__always)
    func sendSpaceRanOut() {
        lock.assertHeld()
        if halves[.output].sendSpace.isBound { halves[.output].sendSpace = .exhausted }
    }
}
