// SOCKS5 for the socks workloads: the handshake's bytes (RFC 1928, no authentication, CONNECT), the
// baseline client's exchange on a blocking socket, and the proxy the SocketStreams clients set on
// every pair. The server's SOCKS5 port answers the handshake itself and then serves the plain protocol
// on the same connection, as if it were the target (see BenchServer.advanceSOCKS).

import Foundation
import SocketStreams

enum BenchSOCKS {
    /// Set in a `measure` child for a SOCKS workload; SocketStreams clients apply it to every pair.
    nonisolated(unsafe) static var clientProxy: ProxyConfiguration?

    /// Sets `clientProxy` on a new pair (through either stream, before `open`). A refusal is a setup error.
    static func apply(to stream: Stream) throws {
        guard let clientProxy else { return }
        if !stream.setProperty(clientProxy, forKey: .proxyConfigurationKey) {
            throw BenchError("setProperty(\(clientProxy), forKey: .proxyConfigurationKey) returned false")
        }
    }

    /// The greeting: version 5, one method, "no authentication".
    static let greeting: [UInt8] = [5, 1, 0]
    /// The proxy's method choice: version 5, "no authentication".
    static let methodReply: [UInt8] = [5, 0]
    /// How a CONNECT request starts: version 5, CONNECT, reserved.
    static let requestPrefix: [UInt8] = [5, 1, 0]

    /// CONNECT 127.0.0.1:`port` (ATYP 1).
    static func connectRequest(port: UInt16) -> [UInt8] {
        [5, 1, 0, 1, 127, 0, 0, 1, UInt8(port >> 8), UInt8(port & 0xFF)]
    }

    /// The proxy's success reply, bound to 127.0.0.1:`port` (ATYP 1).
    static func reply(port: UInt16) -> [UInt8] {
        [5, 0, 0, 1, 127, 0, 0, 1, UInt8(port >> 8), UInt8(port & 0xFF)]
    }

    /// The length of the CONNECT request whose first bytes are `head`, as far as they tell: 4 until the
    /// address type has arrived, 5 until a name's length byte has, then the full length. nil for an
    /// unknown address type.
    static func requestLength(_ head: [UInt8]) -> Int? {
        guard head.count >= 4 else { return 4 }
        switch head[3] {
        case 1: return 4 + 4 + 2
        case 3: return head.count >= 5 ? 4 + 1 + Int(head[4]) + 2 : 5
        case 4: return 4 + 16 + 2
        default: return nil
        }
    }

    /// The baseline's proxied connection: a blocking socket to the proxy at 127.0.0.1:`proxyPort`
    /// (TCP_NODELAY set), the greeting, the 2-byte method reply, CONNECT 127.0.0.1:`targetPort` and the
    /// 10-byte reply. The socket is then the target's.
    static func connect(proxyPort: UInt16, targetPort: UInt16) throws -> Int32 {
        let fd = try Posix.connectToLoopback(port: proxyPort)
        do {
            try withUnsafeTemporaryAllocation(byteCount: 10, alignment: 1) { reply in
                try Posix.sendAll(fd, greeting)
                try Posix.readExactly(fd, into: UnsafeMutableRawBufferPointer(rebasing: reply[0..<2]))
                guard reply[0] == 5, reply[1] == 0 else {
                    throw BenchError("SOCKS5: method reply \(reply[0]) \(reply[1]), expected 5 0")
                }
                try Posix.sendAll(fd, connectRequest(port: targetPort))
                try Posix.readExactly(fd, into: reply)
                guard reply[0] == 5, reply[1] == 0, reply[3] == 1 else {
                    throw BenchError("SOCKS5: CONNECT reply \(Array(reply)), expected 5 0 0 1 …")
                }
            }
        } catch {
            Posix.close(fd)
            throw error
        }
        return fd
    }
}
