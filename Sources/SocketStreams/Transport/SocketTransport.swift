import Glibc

/// The plain socket: `recv(2)`/`send(2)` on the non-blocking fd, nothing buffered.
///
/// It does not own the fd: the connection's `SocketHandle` does, and closes it (or not, as
/// `kCFStreamPropertyShouldCloseNativeSocket` says) after every transport above has been closed.
/// The connection itself calls the plain socket through `ActiveTransport.socket`, which holds just
/// the fd; this class is what a layered transport wraps.
final class SocketTransport: Transport {
    let fd: Int32

    init(fd: Int32) {
        self.fd = fd
    }

    @inline(__always)
    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO {
        Self.read(fd, buffer, count)
    }

    @inline(__always)
    func write(_ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO {
        Self.write(fd, buffer, count)
    }

    @inline(__always)
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> TransportIO {
        do {
            switch try Posix.recv(fd, buffer, count) {
            case .processed(let count): return count > 0 ? .processed(count) : .end
            case .wouldBlock: return .wouldBlock
            }
        } catch {
            return .failed(.posix(error.code, .read))
        }
    }

    /// `read` on a socket that counts its input (`Posix.countInput`): `left` is what the kernel still
    /// holds after it (-1: not told).
    @inline(__always)
    static func read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int, left: inout Int32) -> TransportIO {
        do {
            switch try Posix.recv(fd, buffer, count, left: &left) {
            case .processed(let count): return count > 0 ? .processed(count) : .end
            case .wouldBlock: return .wouldBlock
            }
        } catch {
            return .failed(.posix(error.code, .read))
        }
    }

    @inline(__always)
    static func write(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> TransportIO {
        do {
            switch try Posix.send(fd, buffer, count) {
            case .processed(let count): return .processed(count)
            case .wouldBlock: return .wouldBlock
            }
        } catch {
            return .failed(.posix(error.code, .write))
        }
    }

    var hasBufferedInput: Bool { false }

    func shutdownOutput() -> TransportIO { Self.shutdownOutput(fd) }

    /// `shutdown(fd, SHUT_WR)`: FIN after the bytes already sent; later sends fail with EPIPE.
    static func shutdownOutput(_ fd: Int32) -> TransportIO {
        do {
            try Posix.shutdown(fd, Int32(SHUT_WR))
            return .processed(0)
        } catch {
            return .failed(.posix(error.code, .write))
        }
    }

    /// Nothing of its own to release; the fd is the handle's.
    func close() {}
}
