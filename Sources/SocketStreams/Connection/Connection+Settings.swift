// The connection's side of its settings: a change by `PairSettings`' rules, carried out here, and the
// two kept on the connection itself for memory (no-delay, closing the native socket).

import CSocketStreamsShims
import Foundation
import Glibc

extension Connection {
    /// The pair's settings (the defaults when none was set). Lock held.
    var settings: PairSettings {
        options?.settings ?? PairSettings()
    }

    /// The TLS transport in use, once its handshake is done. Lock held.
    var activeTLS: TLSTransport? {
        transport?.tls
    }

    /// Changes a setting by `PairSettings`' rules and does what is left (STARTTLS; marking a connected
    /// socket's traffic). Lock held. Returns whether it was taken.
    func set(_ change: PairSettings.Change) -> Bool {
        lock.assertHeld()
        let moment: PairSettings.Moment
        switch lifecycle.state {
        case .idle: moment = .idle
        case .connecting: moment = .connecting
        case .live: moment = .live(tlsStarted: activeTLS != nil || opening.stages.contains { $0 is TLSHandshake })
        case .negotiating, .failed, .closed: moment = .settled
        }
        // Clearing what a pair with no options never set changes nothing: no options are made for it.
        var none = PairSettings()
        let effect =
            options == nil && change.clears
            ? none.apply(change, at: moment, target: target) : someOptions.settings.apply(change, at: moment, target: target)
        switch effect {
        case .refused: return false
        case .taken: return true
        case .markSocket:
            if let socket { (settings.trafficClass ?? .standard).apply(to: socket.fd) }
            return true
        case .startTLS:
            let tls = settings.tls!
            return queueStage(TLSHandshake(settings: tls, target: target, resume: resumer(for: tls)))
        }
    }

    /// `TCP_NODELAY`, now if the socket is up, else once it is; refused on Unix-domain pairs. Lock held.
    func setNoDelay(_ flag: Bool) -> Bool {
        lock.assertHeld()
        if case .unix = target { return false }
        noDelay = flag
        if let socket {
            try? Posix.setOption(socket.fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: flag ? 1 : 0)
        }
        return true
    }

    /// Whether the fd is closed with the pair; may change at any time. Lock held.
    func setClosesNativeSocket(_ flag: Bool) {
        lock.assertHeld()
        closesNativeSocketAsSet = flag
        socket?.closesOnRelease = flag
    }

    /// `getsockname(2)` (nil unless connected), under the lock so the fd is not closed and reused meanwhile.
    var localAddress: SocketAddress? {
        lock.withLock { socket.flatMap { try? Posix.localAddress($0.fd) } }
    }
}
