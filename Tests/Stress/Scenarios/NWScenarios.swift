import Dispatch
import Foundation
import SocketStreams
import SocketStreamsNetwork

/// What an NWConnection reported: its states and every completion, each by the operation it belongs
/// to, for the run's end checks: every completion exactly once and before `.cancelled`, `.cancelled`
/// exactly once and last.
final class NWProbe: StressProbe {
    struct Log {
        var events: [String] = []
        var completions: [Int: Int] = [:]
        var cancelled = 0
        var afterCancelled: [String] = []
        var completedAtCancelled: Int?
    }

    private let log = Guarded(Log())
    let label: String
    /// How many sends and receives were made.
    let operations: Guarded<Int> = Guarded(0)
    let ready = StressFlag()
    let cancelled = StressFlag()
    let progress = StressCounter()

    init(label: String) { self.label = label }

    var events: [String] { log.withLock { $0.events } }

    func state(_ state: NWConnection.State) {
        log.withLock { log in
            if log.cancelled > 0 { log.afterCancelled.append("state \(state)") }
            log.events.append("state \(state)")
            if state == .cancelled {
                log.cancelled += 1
                log.completedAtCancelled = log.completions.count
            }
        }
        if state == .ready { ready.raise() }
        if state == .cancelled {
            cancelled.raise()
            progress.finish()
        }
    }

    func completed(_ operation: Int, _ what: String) {
        log.withLock { log in
            if log.cancelled > 0 { log.afterCancelled.append("\(what) \(operation)") }
            log.completions[operation, default: 0] += 1
            log.events.append("\(what) \(operation)")
        }
        progress.add()
    }

    func problems() -> [String] {
        let made = operations.withLock { $0 }
        return log.withLock { log in
            var problems: [String] = []
            if log.cancelled != 1 { problems.append("\(label): .cancelled came \(log.cancelled) times, not once") }
            // The echo peer never fails a connection (nor does the pinned TLS): a failure is a bug.
            let failures = log.events.filter { $0.hasPrefix("state failed") || $0.hasPrefix("state waiting") }
            if !failures.isEmpty { problems.append("\(label): \(failures)") }
            if !log.afterCancelled.isEmpty { problems.append("\(label): calls after .cancelled: \(log.afterCancelled)") }
            let twice = log.completions.filter { $0.value > 1 }.keys.sorted()
            if !twice.isEmpty { problems.append("\(label): operations completed more than once: \(twice)") }
            if log.completions.count != made || log.completedAtCancelled != made {
                problems.append(
                    "\(label): \(made) operations, \(log.completions.count) completed, \(log.completedAtCancelled ?? -1) before .cancelled")
            }
            return problems
        }
    }
}

extension StressScenario {
    /// `NWConnection.cancel()` (or `forceCancel()`, with `restart()` calls thrown in, which a connection
    /// that is not waiting ignores) from another thread or from the connection's queue, while sends
    /// and receives are outstanding against an echo peer, at any point from before `.ready` on: every
    /// send and receive completes exactly once, before `.cancelled`; `.cancelled` comes once, last; the
    /// connection is then freed (a started connection holds itself only until `.cancelled`).
    static let nwCancel = StressScenario(
        name: "nw-cancel",
        summary: "NWConnection.cancel() or forceCancel() from another thread or its queue with sends and receives outstanding",
        transports: [.plain, .tls], copies: 4
    ) { iteration in
        let environment = iteration.environment
        let (host, port) = environment.target(.echo, iteration.transport)
        let ownQueue = Bool.random(using: &iteration.random)
        let queue = ownQueue ? DispatchQueue(label: "socketstreams-stress.nw") : environment.delegateQueue
        let probe = NWProbe(label: "iteration \(iteration.index) copy \(iteration.copy) (\(ownQueue ? "own queue" : "shared queue"))")
        iteration.run.keep(probe)
        let freed: FreedNWConnection
        do {
            let parameters = iteration.transport == .tls ? pinnedTLS(environment.certificateDER) : .tcp
            let connection = NWConnection(host: NWEndpoint.Host(host), port: NWEndpoint.Port(rawValue: UInt16(port))!, using: parameters)
            freed = FreedNWConnection(connection)
            connection.stateUpdateHandler = { probe.state($0) }
            let beforeStart = Int.random(in: 0...2, using: &iteration.random)
            let count = Int.random(in: 1...8, using: &iteration.random)
            var operation = 0
            func issue(_ random: inout StressRandom) {
                let size = Int.random(in: 1...200_000, using: &random)
                let send = operation
                connection.send(content: Data(payload(size, &random)), completion: .contentProcessed { _ in probe.completed(send, "sent") })
                let receive = operation + 1
                connection.receive(minimumIncompleteLength: 1, maximumLength: size) { _, _, _, _ in probe.completed(receive, "received") }
                operation += 2
                probe.operations.withLock { $0 += 2 }
            }
            for _ in 0..<min(beforeStart, count) { issue(&iteration.random) }
            connection.start(queue: queue)
            if Bool.random(using: &iteration.random) { _ = await probe.ready.wait(timeout: 10) }
            for _ in min(beforeStart, count)..<count { issue(&iteration.random) }
            await probe.progress.wait(until: Int.random(in: 0...(2 * count), using: &iteration.random))
            let force = Int.random(in: 0...3, using: &iteration.random) == 0
            let onQueue = Int.random(in: 0...2, using: &iteration.random) == 0
            let restarts = Bool.random(using: &iteration.random)
            await atRandomPoint(&iteration.random) {
                let end: @Sendable () -> Void = {
                    if restarts { connection.restart() }
                    if force { connection.forceCancel() } else { connection.cancel() }
                    if restarts { connection.restart() }
                }
                if onQueue { queue.async(execute: end) } else { end() }
            }
        }
        guard await probe.cancelled.wait(timeout: 10) else {
            return iteration.fail("\(probe.label): .cancelled did not come within 10 s; calls: \(probe.events)")
        }
        let deadline = DispatchTime.now().uptimeNanoseconds + 10_000_000_000
        while !freed.isFreed && DispatchTime.now().uptimeNanoseconds < deadline {
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        if !freed.isFreed { iteration.fail("\(probe.label): a cancelled NWConnection was not freed within 10 s; calls: \(probe.events)") }
    }

    /// TLS whose verify block pins the peer server's self-signed certificate (its DER, compared with the
    /// leaf the server sent), as pinning code does on Apple platforms.
    private static func pinnedTLS(_ certificate: Data) -> NWParameters {
        let options = NWProtocolTLS.Options()
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { _, trust, complete in
                let chain = SecTrustCopyCertificateChain(sec_trust_copy_ref(trust).takeRetainedValue()) as? [SecCertificate]
                complete(chain?.first.map { SecCertificateCopyData($0) as Data } == certificate)
            }, DispatchQueue.global())
        return NWParameters(tls: options)
    }

    /// A weak reference to a connection, readable from any task.
    final class FreedNWConnection: Sendable {
        private let connection: Guarded<Weak>
        struct Weak { weak var value: NWConnection? }
        init(_ connection: NWConnection) { self.connection = Guarded(Weak(value: connection)) }
        var isFreed: Bool { connection.withLock { $0.value == nil } }
    }
}
