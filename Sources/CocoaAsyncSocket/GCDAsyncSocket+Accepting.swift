// GCDAsyncSocket.h's "Accepting" section: listening on a port, an interface or a Unix-domain
// socket, and handing each connection to the delegate.

import Foundation
import SocketStreams

extension GCDAsyncSocket {
    // MARK: accepting

    /// Listens on every interface (`acceptOnPort:error:`); 0 picks a free port (see ``localPort``).
    public func accept(onPort port: UInt16) throws {
        try accept(onInterface: nil, port: port)
    }

    /// Listens on `interface`: nil for all, `"localhost"`/`"loopback"`, an interface name (`lo`,
    /// `eth0`) or a numeric address (`acceptOnInterface:port:error:`). Each connection arrives in
    /// `socket(_:didAcceptNewSocket:)` as a connected socket with this delegate and delegate queue, on
    /// the queue `newSocketQueueForConnection(fromAddress:on:)` gives.
    ///
    /// - Throws: ``GCDAsyncSocketError`` (bad configuration, unknown interface) or the `bind`/`listen`
    ///   error in `NSPOSIXErrorDomain` (EADDRINUSE).
    public func accept(onInterface interface: String?, port: UInt16) throws {
        try checkCanStart("accept")
        var host: String?
        if let interface, !interface.isEmpty {
            var name = interface
            if let colon = name.lastIndex(of: ":"), !name.contains("::"), name.filter({ $0 == ":" }).count == 1 {
                name = String(name[..<colon])  // GCDAsyncSocket's "interface:port": the port argument wins
            }
            guard name.isEmpty || SocketAddresses.interfaceAddress(name) != nil else {
                throw GCDAsyncSocketError(
                    .badParamError, message: "Unknown interface. Specify valid interface by name (e.g. \"lo\") or IP address.")
            }
            host = name.isEmpty ? nil : SocketAddresses.interfaceAddress(name)
        }
        try listen(try StreamListener(host: host, port: Int(port)), url: nil)
    }

    /// Listens on a Unix-domain socket, removing a file left at the path (`acceptOnUrl:error:`).
    public func accept(on url: URL) throws {
        guard url.isFileURL, !url.path.isEmpty else {
            throw GCDAsyncSocketError(
                .badParamError,
                message: "Invalid unix domain url. Specify a valid file url that does not exist (e.g. \"file:///tmp/socket\")")
        }
        try checkCanStart("accept")
        if FileManager.default.fileExists(atPath: url.path) {
            do {
                try FileManager.default.removeItem(atPath: url.path)
            } catch {
                throw GCDAsyncSocketError(.otherError, message: "Could not remove previous unix domain socket at given url.")
            }
        }
        try listen(try StreamListener(unixSocketPath: url.path), url: url)
    }

    /// ``accept(on:)`` under the Objective-C selector's words (`acceptOnUrl:error:`).
    public func accept(onUrl url: URL) throws { try accept(on: url) }

    private func listen(_ listener: StreamListener, url: URL?) throws {
        do {
            try state.withLock { state in
                try Self.check(state, "accept")
                state.listener = listener
                state.listenerURL = url
            }
        } catch {
            listener.close()
            throw error
        }
        listener.start(in: .socketStreams) { [weak self] input, output in
            guard let self else {
                input.close()
                output.close()
                return
            }
            self.accepted(input: input, output: output, from: listener)
        }
    }

    /// A connection arrived (on the stream thread): on the delegate queue, asks for its queue, makes
    /// its socket and hands it over, as GCDAsyncSocket does in one block.
    private func accepted(input: SocketInputStream, output: SocketOutputStream, from listener: StreamListener) {
        let target = state.withLock { state -> (GCDAsyncSocketDelegate, DispatchQueue)? in
            guard state.listener === listener, let delegate = state.delegate, let queue = state.delegateQueue else { return nil }
            return (delegate, queue)
        }
        guard let (delegate, queue) = target else {
            input.close()
            output.close()
            return
        }
        let peer = input.socketDescriptor.flatMap(SocketAddresses.peer(of:))
        let call = DelegateCall(delegate) { [self] delegate in
            let newQueue = delegate.newSocketQueueForConnection(fromAddress: peer ?? Data(), on: self)
            let socket = GCDAsyncSocket(delegate: delegate, delegateQueue: queue, socketQueue: newQueue)
            try? socket.start(input: input, output: output, url: nil, accepted: true, timeout: -1, verb: "accept")
            delegate.socket(self, didAcceptNewSocket: socket)
        }
        queue.async { call.run() }
    }
}
