// The send-space bound (Transport/SendSpace.swift) as the connection uses it: after a write that took
// every byte, whether `hasSpaceAvailable` can be signalled at once, answered from the output half's
// bound on a plain TCP socket and under a TLS layer straight over one (charged with the ciphertext
// the layer sent, `Transport.takeSendCharge`), and by a zero-timeout poll on anything else.

extension Connection {
    /// After a send that took every byte of `count`: whether the socket surely takes more now, so
    /// `hasSpaceAvailable` can be signalled at once. A plain TCP socket answers from its bound (no
    /// system call while it lasts, one `getsockopt` when it runs out), and so does a layered
    /// transport that counts its sends to one; anything else polls. Lock held.
    @inline(__always)
    func spaceRemains(afterSending count: Int, through transport: ActiveTransport) -> Bool {
        lock.assertHeld()
        guard case .socket(let fd) = transport else { return layeredSpaceRemains(transport) }
        if halves[.output].sendSpace.take(count) { return true }
        return measureSendSpace(fd)
    }

    /// `spaceRemains` through a layered transport: its sends since the last look (`takeSendCharge`)
    /// come off the bound. Lock held.
    private func layeredSpaceRemains(_ transport: ActiveTransport) -> Bool {
        let fd = transport.fd
        guard let charge = transport.takeSendCharge(), halves[.output].sendSpace != .pollOnly else {
            return TransferGate.poll(for: transport.writeInterest, on: fd, timeout: 0)
        }
        if halves[.output].sendSpace.take(charge: charge) { return true }
        return measureSendSpace(fd)
    }

    /// Whether a `spaceConfirmed` still holds through a layered transport: nothing waits to go out
    /// first, and whatever it sent since (a record's tail, a KeyUpdate answered while reading) leaves
    /// the bound above zero. No system call: false sends the caller to poll. Lock held.
    func layeredSpaceStillConfirmed(_ transport: ActiveTransport) -> Bool {
        lock.assertHeld()
        guard !transport.hasPendingOutput, let charge = transport.takeSendCharge() else { return false }
        return halves[.output].sendSpace.take(charge: charge)
    }

    /// Takes what a write sent off the bound where no one is told of space (an unscheduled stream):
    /// the client's count on a plain socket, a layered transport's own count of its sends. Lock held.
    func chargeUnsignalledWrite(_ count: Int, through transport: ActiveTransport) {
        lock.assertHeld()
        guard case .layered = transport else {
            _ = halves[.output].sendSpace.take(count)
            return
        }
        if let charge = transport.takeSendCharge() {
            _ = halves[.output].sendSpace.take(charge: charge)
        } else {
            sendSpaceRanOut()
        }
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
