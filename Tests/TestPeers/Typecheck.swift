import Foundation

/// `swiftc -typecheck` of a snippet in the Swift 6 language mode against the modules the running test
/// bundle was built with (SocketStreams, CocoaAsyncSocket, the C shims): for tests that show what
/// compiles, what is refused and what warns, as a user's code would meet it.
public enum Typecheck {
    /// Type-checks `source`; returns swiftc's exit status and its output (diagnostics). With
    /// `warningsAsErrors`, a warning fails it too.
    public static func run(_ source: String, warningsAsErrors: Bool = false) throws -> (status: Int32, output: String) {
        let build = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let bundle = build.pathExtension == "xctest" ? build.deletingLastPathComponent() : build
        // Tests/TestPeers/Typecheck.swift -> the package's root.
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("typecheck-\(UUID().uuidString).swift")
        try source.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let swiftc =
            ProcessInfo.processInfo.environment["PATH", default: ""].split(separator: ":")
            .map { "\($0)/swiftc" }.first { FileManager.default.isExecutableFile(atPath: $0) } ?? "/opt/swift/usr/bin/swiftc"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: swiftc)
        process.arguments =
            [
                "-typecheck", "-swift-version", "6", "-I", bundle.appendingPathComponent("Modules").path,
                "-Xcc", "-fmodule-map-file=\(package.path)/Sources/COpenSSL/module.modulemap",
                "-Xcc", "-fmodule-map-file=\(package.path)/Sources/CZlib/module.modulemap",
                "-Xcc", "-fmodule-map-file=\(bundle.path)/CSocketStreamsShims.build/module.modulemap", file.path,
            ] + (warningsAsErrors ? ["-warnings-as-errors"] : [])
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        guard let exit = ChildExit.waitOrEnd(process, timeout: 600) else {
            return (-1, "swiftc -typecheck did not finish in 600 s:\n" + String(decoding: output, as: UTF8.self))
        }
        return (exit.status, String(decoding: output, as: UTF8.self))
    }
}
