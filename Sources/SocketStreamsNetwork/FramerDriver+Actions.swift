// The framer driver's side of `NWProtocolFramer.Instance`: the actions a framer calls from its callbacks
// (on the connection's owner; see NWConnection+Framing.swift for the driver and its ownership). Each
// records into the driver's state under its lock; what it wrote goes out when the callback returns.

import Foundation
import SocketStreams

#if canImport(Glibc)
    import Glibc
#endif

extension FramerDriver {

    func parseInput(minimum: Int, maximum: Int, _ parse: (UnsafeMutableRawBufferPointer?, Bool) -> Int) -> Bool {
        // The window is taken under the lock and parsed outside it: only the owner changes the input.
        let (window, isComplete) = state.withLock { ($0.input.window(minimum: minimum, maximum: maximum), $0.input.isComplete) }
        let consumed = parse(window, isComplete)
        return state.withLock { state in
            if window != nil || consumed > 0 { state.input.consume(consumed) }
            return window != nil || (minimum <= 0 && state.input.count >= minimum)
        }
    }

    func deliverInput(data: Data, message: Message, isComplete: Bool) {
        let data = data.startIndex == 0 ? data : Data(data)
        state.withLock { state in
            guard state.inCallback else { return }
            state.deliveries.append(data, message: message, isComplete: isComplete)
        }
    }

    func deliverInputNoCopy(length: Int, message: Message, isComplete: Bool) -> Bool {
        state.withLock { state in
            guard state.inCallback, length >= 0 else { return false }
            if length <= state.input.count {
                state.deliveries.append(state.input.take(length), message: message, isComplete: isComplete)
                return true
            }
            let part = state.input.take(state.input.count)
            if !part.isEmpty { state.deliveries.append(part, message: message, isComplete: false) }
            state.delivering = (length - part.count, message, isComplete)
            return false
        }
    }

    func writeOutput(_ data: Data) {
        guard !data.isEmpty else { return }
        state.withLock { state in
            guard state.inCallback else { return }
            state.writes.append(data)
        }
    }

    func writeOutputNoCopy(length: Int) throws {
        let written = state.withLock { state -> Bool in
            guard state.inCallback, let bytes = state.output?.take(length) else { return false }
            if !bytes.isEmpty { state.writes.append(bytes) }
            return true
        }
        if !written { throw NWError.posix(.EINVAL) }
    }

    func parseOutput(minimum: Int, maximum: Int, _ parse: (UnsafeMutableRawBufferPointer?, Bool) -> Int) -> Bool {
        // The window is a copy (the application's content is not the framer's to write into), parsed
        // outside the lock.
        guard let output = state.withLock({ $0.output }) else {
            _ = parse(nil, false)
            return false
        }
        let window = output.window(minimum: minimum, maximum: maximum)
        let consumed: Int
        if var window {
            consumed = window.withUnsafeMutableBytes { parse($0, output.isComplete) }
        } else {
            consumed = parse(nil, output.isComplete)
        }
        state.withLock { $0.output?.consume(consumed) }
        return window != nil || minimum <= 0
    }

    func passThroughInput() {
        state.withLock { state in
            guard state.inCallback else { return }
            state.passThroughInput = true
        }
    }

    func passThroughOutput() {
        state.withLock { state in
            guard state.inCallback else { return }
            state.passThroughOutput = true
        }
    }

    /// TLS below the framer, before it is ready: its handshake is queued behind what the framer wrote
    /// so far (and the read outstanding, if any: the peer must answer it first), and what comes after
    /// it waits for it.
    func prependApplicationProtocol(_ options: NWProtocolOptions) throws(NWError) {
        guard let tls = options as? NWProtocolTLS.Options else { throw NWError.posix(.EOPNOTSUPP) }
        guard let owner, inCallback else { throw NWError.posix(.EINVAL) }
        var host: String?
        switch owner.endpoint {
        case .hostPort(let name, _): host = ConnectionConfiguration.text(of: name)
        case .url(let url): host = url.host
        default: break
        }
        let settings = try tls.settings(role: owner.acceptedPair == nil ? .client : .server, endpointHost: host)
        let accepted = state.withLock { state -> Bool in
            guard state.phase == .starting, state.prepended == nil, !state.secured else { return false }
            state.prepended = (settings, state.writes.count)
            state.secured = true
            return true
        }
        if !accepted { throw NWError.posix(.EINVAL) }
    }

    func finishOutput() {
        state.withLock { state in
            guard state.inCallback else { return }
            state.outputFinished = true
        }
    }

    func markReady() {
        state.withLock { state in
            guard state.inCallback, state.phase == .starting else { return }
            state.readyToReport = true
        }
    }

    func markFailed(_ error: NWError) {
        let engine = state.withLock { state -> StreamOperations? in
            guard state.inCallback, state.phase != .closed, state.phase != .idle else { return nil }
            state.failure = error
            state.phase = .closed
            return state.engine
        }
        // After the callback: the writes made in it go first (the engine closes after its writes
        // are handed over; a close drops what is queued).
        // The attempt closes with `failure` (the engine's close reports none).
        guard let engine, let owner else { return }
        owner.onOwner { engine.close(afterWrites: true) }
    }

    func scheduleWakeup(_ time: NWProtocolFramer.Instance.WakeupTime) {
        let generation = state.withLock { state -> Int? in
            guard state.inCallback else { return nil }
            state.wakeupGeneration += 1
            return state.wakeupGeneration
        }
        guard let generation, case .milliseconds(let milliseconds) = time, let queue = owner?.queue else { return }
        let delay = DispatchTimeInterval.milliseconds(Int(clamping: milliseconds))
        queue.asyncAfter(deadline: .now() + delay) { [self] in
            let due = state.withLock { state -> Bool in
                guard state.wakeupGeneration == generation else { return false }
                state.wakeupDue = true
                return true
            }
            if due { schedule() }
        }
    }

    func async(_ block: @escaping () -> Void) {
        state.withLock { $0.blocks.append(block) }
        schedule()
    }
}
