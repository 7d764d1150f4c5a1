import Foundation
import XCTest
@testable import SocketStreams

final class SmokeDelegate: NSObject, StreamDelegate {
    var log: [String] = []
    var body = Data()
    var done = false
    var request: Data
    init(request: String) { self.request = Data(request.utf8) }
    func stream(_ s: Stream, handle e: Stream.Event) {
        let name = s is InputStream ? "in" : "out"
        log.append("\(name):\(e.rawValue)")
        switch e {
        case .hasSpaceAvailable:
            if !request.isEmpty {
                let n = request.withUnsafeBytes { (s as! OutputStream).write($0.bindMemory(to: UInt8.self).baseAddress!, maxLength: request.count) }
                if n > 0 { request.removeFirst(n) }
            }
        case .hasBytesAvailable:
            var buf = [UInt8](repeating: 0, count: 1024)
            let n = (s as! InputStream).read(&buf, maxLength: 1024)
            if n > 0 { body.append(contentsOf: buf[0..<n]) }
        case .endEncountered, .errorOccurred:
            done = true
        default: break
        }
    }
}

final class SmokeTests: XCTestCase {
    func testGetAgainstListenerlessPython() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("smoke-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data(repeating: 65, count: 100_000).write(to: dir.appendingPathComponent("f.bin"))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", dir.path]
        let pipe = Pipe(); p.standardOutput = pipe
        try p.run()
        defer { p.terminate(); p.waitUntilExit() }
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) { line.append(pipe.fileHandleForReading.availableData) }
        let text = String(decoding: line, as: UTF8.self)
        let port = Int(text.split(separator: " ")[5])!
        let (i, o) = createStreamPair(host: "127.0.0.1", port: port)
        let d = SmokeDelegate(request: "GET /f.bin HTTP/1.0\r\n\r\n")
        i.delegate = d; o.delegate = d
        i.schedule(in: .current, forMode: .default); o.schedule(in: .current, forMode: .default)
        i.open(); o.open()
        let deadline = Date().addingTimeInterval(5)
        while !d.done && Date() < deadline { _ = RunLoop.current.run(mode: .default, before: Date().addingTimeInterval(0.1)) }
        print(d.log.prefix(12), d.log.count, d.body.count)
        XCTAssertTrue(d.done)
        XCTAssertGreaterThan(d.body.count, 100_000)
        XCTAssertEqual(i.streamStatus, .atEnd)
        i.close(); o.close()
    }
}

final class EchoServerDelegate: NSObject, StreamDelegate, @unchecked Sendable {
    var pairs: [(SocketInputStream, SocketOutputStream)] = []
    func stream(_ s: Stream, handle e: Stream.Event) {
        guard e == .hasBytesAvailable, let i = s as? SocketInputStream, let p = pairs.first(where: { $0.0 === i }) else {
            if e == .endEncountered { s.close() }
            return
        }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = i.read(&buf, maxLength: 4096)
        if n > 0 { _ = p.1.write(buf, maxLength: n) }
    }
}

extension SmokeTests {
    func testListenerEchoPolling() throws {
        let listener = try StreamListener(host: "127.0.0.1")
        let server = EchoServerDelegate()
        let t = Thread {
            listener.start(in: .current) { i, o in
                server.pairs.append((i, o)); i.delegate = server
                i.schedule(in: .current, forMode: .default); i.open(); o.open()
            }
            while true { _ = RunLoop.current.run(mode: .default, before: .distantFuture) }
        }
        t.start()
        let (i, o) = createStreamPair(host: "127.0.0.1", port: listener.port)
        i.open(); o.open()
        let msg = Array("hello".utf8)
        XCTAssertEqual(o.write(msg, maxLength: msg.count), 5)
        var buf = [UInt8](repeating: 0, count: 16)
        var got = 0
        while got < 5 {
            let n = buf.withUnsafeMutableBufferPointer { i.read($0.baseAddress! + got, maxLength: 16 - got) }
            XCTAssertGreaterThan(n, 0); if n <= 0 { break }; got += n
        }
        XCTAssertEqual(Array(buf[0..<5]), msg)
        XCTAssertEqual(i.streamStatus, .open)
        i.close(); o.close()
        listener.close()
    }
}
