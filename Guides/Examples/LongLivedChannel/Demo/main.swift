// `swift run long-lived-channel`: a Channel (../Channel/Channel.swift) talking to the example's
// UppercaseServer, in two runs. In the first, the server drops the connection in the middle of a
// request, stops listening, and comes back on the same port after the client's second failed
// attempt (counted, not timed, so the output is the same every time). In the second, the server
// stops answering without closing anything, and the heartbeats notice.
// Guides/LongLivedChannel.md walks through it.
import Foundation
import LongLivedChannel

/// Runs this thread's run loop (where the channel and the server live) until `done()`.
func runUntil(_ done: () -> Bool) {
    while !done() { _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.1)) }
}

/// Sends `text` as a request, waits for the outcome, and prints it.
func ask(_ channel: Channel, _ text: String) {
    var sequence: UInt32 = 0
    var answered = false
    sequence = channel.request(Array(text.utf8)) { result in
        switch result {
        case .success(let body): print("  reply \(sequence): \(String(decoding: body, as: UTF8.self))")
        case .failure(let error): print("  request \(sequence) failed: \(error)")
        }
        answered = true
    }
    runUntil { answered }
}

/// Prints a connection event. The back-off delay itself is random, so the line shows its ceiling.
func report(_ event: ChannelEvent) {
    switch event {
    case .connected(let attempt): print("  connected (attempt \(attempt))")
    case .connectFailed(let attempt, let error): print("  attempt \(attempt) failed: \(error)")
    case .disconnected(let error): print("  connection lost: \(error)")
    case .willReconnect(let attempt, _):
        print("  attempt \(attempt) in at most \(Channel.Configuration.demo.backoff.ceiling(beforeAttempt: attempt)) s")
    }
}

extension Channel.Configuration {
    /// Short times, so that the example is quick: a heartbeat every 0.1 s, 3 may be missed, and
    /// back-off from 0.05 s up to 1 s.
    static var demo: Self {
        var configuration = Self()
        configuration.heartbeatInterval = 0.1
        configuration.missedHeartbeatLimit = 3
        configuration.backoff = Backoff(base: 0.05, cap: 1)
        return configuration
    }
}

func dropAndComeBack() throws {
    print("the server drops the connection, then comes back")
    var server = try UppercaseServer(behaviour: .init(requestsBeforeFault: 2, fault: .drop))
    let port = server.port
    let channel = Channel(host: "127.0.0.1", port: port, configuration: .demo)
    channel.onEvent = { event in
        report(event)
        switch event {
        case .disconnected:
            server.stop()
            print("  server stopped")
        case .connectFailed(attempt: 2, _):
            do {
                server = try UppercaseServer(port: port)  // the same port, answering everything now
                print("  server restarted on the same port")
            } catch {
                fatalError("could not listen on port \(port) again: \(error)")
            }
        default:
            break
        }
    }
    channel.start()
    ask(channel, "hello")
    ask(channel, "world")
    ask(channel, "three")  // the server drops the connection instead of answering
    ask(channel, "again")  // waits for the next connection
    channel.close()
    server.stop()
}

func goSilent() throws {
    print("the server stops answering")
    let server = try UppercaseServer(behaviour: .init(requestsBeforeFault: 1, fault: .silence))
    let channel = Channel(host: "127.0.0.1", port: server.port, configuration: .demo)
    var connections = 0
    channel.onEvent = { event in
        report(event)
        if case .connected = event { connections += 1 }
    }
    channel.start()
    ask(channel, "hello")
    ask(channel, "world")  // no answer: the heartbeats go unanswered too
    runUntil { connections == 2 }
    channel.close()
    server.stop()
}

try dropAndComeBack()
try goSilent()
