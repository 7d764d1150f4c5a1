// libFuzzer target for the proxy reply codecs and the HTTP head parser (the fuzzer plays the proxy), and
// for stream-get's URL and proxy-URL parsers (the fuzzer plays the user).
//
//   swift build --scratch-path .build/fuzz --product proxy-fuzz -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING
//   .build/fuzz/debug/proxy-fuzz -max_total_time=30
//
// Input: byte 0 picks the protocol and the target, byte 1 the largest read; the rest is what the proxy
// sends. Checked on every input: no trap, never more read than the codec allowed (its precondition),
// an end (established or an error) once the bytes or the connection end, and no byte of the target's
// data lost (what an HTTP head was followed by is handed on whole). A URL that parses has a host with no
// control byte, a port in 1...65535 and a path from "/", and parses again from its own description to
// the same URL; a proxy that parses has a host with no control byte and a port in 1...65535.
// Without -DFUZZING the same
// function runs over arguments given as files, or over pseudo-random inputs: `proxy-fuzz --random N`.

import HTTPParsing
import SocketStreams
import StreamGetCore

private let configurations: [ProxyConfiguration] = [
    .socks4(host: "proxy", userID: "id"),
    .socks5(host: "proxy"),
    .socks5(host: "proxy", username: "user", password: "secret"),
    .httpConnect(host: "proxy", port: 3128, username: "user", password: "secret"),
]

private let targets: [ProxyTarget] = [
    ProxyTarget(address: .name("example.com"), port: 443, host: "example.com"),
    ProxyTarget(address: .ipv4([127, 0, 0, 1]), port: 80, host: "127.0.0.1"),
    ProxyTarget(address: .ipv6(Array(repeating: 0, count: 15) + [1]), port: 8080, host: "::1"),
]

/// Runs one input; returns normally or traps on a broken invariant.
func fuzzOne(_ input: [UInt8]) {
    guard input.count >= 2 else { return }
    let selector = Int(input[0])
    let maxRead = Int(input[1] % 16) + 1
    var reply = input[2...]
    if selector % 7 >= 5 {
        return fuzzParsing(String(decoding: reply, as: UTF8.self), proxy: selector % 7 == 6)
    }
    if selector % 7 == 4 {
        // The HTTP response parser in GET mode, fed in pieces.
        var parser = HTTPResponseParser(maxHeadSize: 4096)
        while !reply.isEmpty {
            let piece = Array(reply.prefix(maxRead))
            reply = reply.dropFirst(piece.count)
            guard (try? parser.feed(piece)) != nil else { return }
        }
        _ = try? parser.finish()
        return
    }
    let configuration = configurations[selector % 7]
    var target = targets[(selector / 7) % targets.count]
    if configuration.kind == .socks4, case .ipv6 = target.address { target = targets[0] }
    var machine = ProxyClientHandshake(configuration: configuration, target: target)
    let total = reply.count
    while true {
        _ = machine.takeOutput()
        if case .established = machine.state {
            // Not a byte after the reply may be lost: the leftover (HTTP) plus what was not read is the rest.
            precondition(machine.leftover.count <= total)
            return
        }
        let wanted = machine.wanted
        precondition(wanted > 0, "waiting for nothing")
        if reply.isEmpty {
            precondition(machine.endOfStream() == .closed)
            return
        }
        let piece = reply.prefix(min(wanted, maxRead))
        reply = reply.dropFirst(piece.count)
        do {
            try machine.receive(piece)
        } catch {
            return
        }
    }
}

/// Whether `text` holds a C0 control byte or DEL.
private func hasControlByte(_ text: String) -> Bool {
    text.utf8.contains { $0 < 0x20 || $0 == 0x7F }
}

/// stream-get's URL parser or its proxy parser on `text`.
private func fuzzParsing(_ text: String, proxy: Bool) {
    if proxy {
        guard let route = try? StreamGetProxyRoute.parse(text) else { return }
        precondition(!hasControlByte(route.configuration.host), "control byte in a proxy host: \(text.debugDescription)")
        precondition((0...65_535).contains(route.configuration.port), "proxy port \(route.configuration.port)")
        return
    }
    guard let url = try? HTTPURL(parsing: text) else { return }
    precondition(!url.host.isEmpty && !hasControlByte(url.host), "bad host from \(text.debugDescription)")
    // Port 0 parses, as in curl, and fails at connect.
    precondition((0...65_535).contains(url.port), "port \(url.port) from \(text.debugDescription)")
    precondition(url.path.hasPrefix("/"), "path \(url.path.debugDescription)")
    let again = try? HTTPURL(parsing: url.description)
    precondition(again == url, "\(text.debugDescription) -> \(url) -> \(again.map { "\($0)" } ?? "an error")")
}

@_cdecl("LLVMFuzzerTestOneInput")
public func proxyFuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    fuzzOne(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

import Foundation

#if FUZZING
    /// libFuzzer's driver (`-sanitize=fuzzer`), entered from our own `main`: SwiftPM names an executable's
    /// entry point itself, so libFuzzer's `main` cannot be the one that runs.
    @_silgen_name("LLVMFuzzerRunDriver")
    private func LLVMFuzzerRunDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt
#endif

/// With libFuzzer: its driver, with libFuzzer's arguments. Without: replays the files given, or
/// `--random N` pseudo-random inputs.
@main
struct ProxyFuzzMain {
    static func main() throws {
        #if FUZZING
            var argc = CommandLine.argc
            var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
            exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in proxyFuzzTestOneInput(data, size) })
        #else
            var arguments = CommandLine.arguments.dropFirst()
            if arguments.first == "--random" {
                let count = arguments.dropFirst().first.flatMap { Int($0) } ?? 100_000
                var state: UInt64 = 0x9E37_79B9_7F4A_7C15
                func next() -> UInt64 {
                    state ^= state << 13
                    state ^= state >> 7
                    state ^= state << 17
                    return state
                }
                for _ in 0..<count {
                    fuzzOne((0..<Int(next() % 300)).map { _ in UInt8(truncatingIfNeeded: next()) })
                }
                print("proxy-fuzz: \(count) random inputs, no failure")
                return
            }
            while let path = arguments.popFirst() {
                fuzzOne([UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
            }
        #endif
    }
}
