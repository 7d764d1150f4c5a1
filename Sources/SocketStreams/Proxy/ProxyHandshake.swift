// A proxy handshake as a connection stage: the pure `ProxyClientHandshake` driven over the transport
// with non-blocking I/O. It runs first (the connection dialled the proxy, `firstHop`); when the proxy
// has connected the target, TLS (if any) runs through the tunnel.

import Foundation
import Glibc

final class ProxyHandshake: HandshakeStage, @unchecked Sendable {
    private let configuration: ProxyConfiguration
    private let target: ProxyTarget
    // Only touched by `advance`, which the connection calls with its lock held.
    private var machine: ProxyClientHandshake
    private var pending: [UInt8] = []
    private var sent = 0

    init(configuration: ProxyConfiguration, target: ProxyTarget) {
        self.configuration = configuration
        self.target = target
        machine = ProxyClientHandshake(configuration: configuration, target: target)
    }

    /// "SOCKS5 handshake via proxy 127.0.0.1 port 1080" (built only for a message).
    var name: String {
        "\(configuration.kindName) handshake via proxy \(Endpoint.host(configuration.host, port: configuration.port).label)"
    }

    func advance(over transport: any Transport) -> HandshakeStep {
        while true {
            if sent == pending.count {
                pending = machine.takeOutput()
                sent = 0
            }
            while sent < pending.count {
                let io = pending.withUnsafeBytes { transport.write($0.baseAddress! + sent, pending.count - sent) }
                switch io {
                case .processed(let count): sent += count
                case .wouldBlock: return .wait(transport.writeInterest)
                case .end: return .failed(failure(machine.endOfStream()))
                case .failed(let failure): return .failed(StreamFailure(failure.reason, .handshake(name)))
                }
            }
            if case .established = machine.state {
                let leftover = machine.leftover
                return .done(leftover.isEmpty ? transport : PrefixedTransport(prefix: leftover, over: transport))
            }
            // Exactly what the reply still lacks (SOCKS), so the target's bytes stay in the socket.
            var refused: ProxyError?
            let io = withUnsafeTemporaryAllocation(byteCount: min(machine.wanted, 4096), alignment: 1) { buffer -> TransportIO in
                let io = transport.read(buffer.baseAddress!, buffer.count)
                if case .processed(let count) = io {
                    do throws(ProxyError) {
                        try machine.receive(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
                    } catch {
                        refused = error
                    }
                }
                return io
            }
            if let refused { return .failed(failure(refused)) }
            switch io {
            case .processed:
                continue
            case .wouldBlock: return .wait(transport.readInterest)
            case .end: return .failed(failure(machine.endOfStream()))
            case .failed(let failure): return .failed(StreamFailure(failure.reason, .handshake(name)))
            }
        }
    }

    /// The proxy's failure in CFNetwork's terms (reference §5.2, §5.3).
    private func failure(_ error: ProxyError) -> StreamFailure {
        ProxyErrors.failure(error, configuration: configuration, target: target)
    }
}
