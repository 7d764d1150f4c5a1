// GCDAsyncSocket.h's "Security" section: `startTLS` and the trust question it may ask the
// delegate (the settings' keys and their parsing are in GCDAsyncSocketTLS.swift).

import Foundation
import SocketStreams

extension GCDAsyncSocket {
    // MARK: TLS

    /// Secures the connection once every read and write queued before has completed (`startTLS:`),
    /// with GCDAsyncSocket's and CFNetwork's keys (see ``GCDAsyncSocketManuallyEvaluateTrust`` and its
    /// siblings, `kCFStreamSSLPeerName`, `kCFStreamSSLIsServer`, `kCFStreamSSLCertificates`).
    /// `socketDidSecure(_:)` follows; a failed handshake disconnects with the TLS error. A second call,
    /// or one before connect, is ignored. A key GCDAsyncSocket refuses (`kCFStreamSSLAllowsAnyRoot`
    /// and the other security options it removed) or a value of the wrong type disconnects with
    /// ``GCDAsyncSocketError/Code/otherError`` when the handshake's turn comes, as GCDAsyncSocket checks
    /// the settings then: the reads and writes queued before `startTLS` complete first.
    public func startTLS(_ tlsSettings: [String: NSObject]?) {
        var parsed = Result { try GCDAsyncSocketTLS.parse(tlsSettings ?? [:]) }
        let operations = state.withLock { state -> StreamOperations? in
            guard let link = state.link, !state.tlsQueued else { return nil }
            state.tlsQueued = true
            return link.operations
        }
        guard let operations else { return }
        if case .success(var settings) = parsed, settings.manualTrust {
            // The library's trust evaluation (the TLS stage waits for it, so nothing queued after
            // startTLS is read or written before the answer), asked through the delegate queue.
            settings.settings.trustEvaluation = TLSTrustEvaluation { [weak self, weak operations] trust, completion in
                // Weak: the evaluation lives in the pair's settings, which the operations hold.
                guard let self, let operations else { return }
                askDelegate(trust, completion, for: operations)
            }
            parsed = .success(settings)
        }
        switch parsed {
        case .success(let parsed): operations.enqueueTLS(parsed.settings)
        case .failure(let error): operations.enqueueTLSRefusal(error)
        }
    }

    /// Posts the trust question to the delegate (`socket:didReceiveTrust:completionHandler:`); with no
    /// delegate to ask, disconnects as for a delegate that does not implement it.
    private func askDelegate(_ trust: TLSPeerTrust, _ completion: @escaping @Sendable (Bool) -> Void, for operations: StreamOperations) {
        let asked = state.withLock { state -> Bool in
            guard let link = state.link, link.operations === operations else { return true }  // gone: the close answers
            guard state.delegate != nil, state.delegateQueue != nil else { return false }
            guard link.connected || link.accepted else {
                // The stage runs on the engine's thread and can ask before this socket has handled
                // `ready`: GCDAsyncSocket says the socket connected before it asks about trust.
                state.heldTrust = HeldTrust(trust: trust, completion: completion)
                return true
            }
            Self.postTrust(&state, self, HeldTrust(trust: trust, completion: completion))
            return true
        }
        if !asked { trustNotImplemented() }
    }

    static func postTrust(_ state: inout State, _ socket: GCDAsyncSocket, _ held: HeldTrust) {
        post(&state, socket) { socket, delegate in delegate.socket(socket, didReceive: held.trust, completionHandler: held.completion) }
    }

    /// Called by the default trust method: the delegate cannot decide, so the socket disconnects.
    func trustNotImplemented() {
        state.withLock { $0.link?.operations }?.close(
            error: GCDAsyncSocketError(
                .otherError,
                message:
                    "GCDAsyncSocketManuallyEvaluateTrust specified in tlsSettings, but delegate doesn't implement socket:shouldTrustPeer:"))
    }
}
