#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import TestPeers

/// What a finished command printed.
package struct CommandResult {
    package var status: Int32
    package var stdout: Data
    package var stderr: String
    package var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
}

/// Runs `tool` (a path, or a name found in PATH) with `arguments`, writing `input` to its stdin and then closing it,
/// and waits at most `timeout` seconds (then kills it and throws). `environment` replaces the test's environment.
package func runCommand(
    _ tool: String, _ arguments: [String], input: Data = Data(), timeout: TimeInterval = 30,
    environment: [String: String]? = nil
) throws -> CommandResult {
    struct TimedOut: Error, CustomStringConvertible {
        package let description: String
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool.contains("/") ? tool : try Peer.locate(tool, hint: "apt-get install \(tool)"))
    process.arguments = arguments
    if let environment { process.environment = environment }
    let stdin = Pipe()
    let stdout = Pipe()
    let stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    let output = Locked(Data())
    let errors = Locked(Data())
    let drained = DispatchGroup()
    for (pipe, sink) in [(stdout, output), (stderr, errors)] {
        drained.enter()
        Thread.detachNewThread {
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            sink.value = data
            drained.leave()
        }
    }
    try process.run()
    try? stdin.fileHandleForWriting.write(contentsOf: input)
    try? stdin.fileHandleForWriting.close()
    guard let exit = ChildExit.waitOrEnd(process, timeout: timeout) else {
        _ = drained.wait(timeout: .now() + 5)
        throw TimedOut(
            description: "\(tool) \(arguments.joined(separator: " ")) did not finish in \(timeout) s; stderr:\n"
                + String(decoding: errors.value, as: UTF8.self))
    }
    _ = drained.wait(timeout: .now() + 5)
    return CommandResult(status: exit.status, stdout: output.value, stderr: String(decoding: errors.value, as: UTF8.self))
}

/// The package's root directory (from this file's location).
package let packageRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// An executable of this package built next to the tests (the test target depends on every one it
/// runs): in the products directory that holds the test bundle, else `<package>/.build/debug`.
/// Throws, naming the places looked at, when it is missing.
package func builtExecutable(_ name: String) throws -> String {
    var directories: [URL] = []
    for bundle in Bundle.allBundles where bundle.bundleURL.pathExtension == "xctest" {
        directories.append(bundle.bundleURL.deletingLastPathComponent())
    }
    if let executable = Bundle.main.executableURL { directories.append(executable.deletingLastPathComponent()) }
    directories.append(packageRoot.appendingPathComponent(".build/debug", isDirectory: true))
    let candidates = directories.map { $0.appendingPathComponent(name).path }
    guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
        throw TestSetupError("\(name) was not built next to the tests; looked at \(candidates)")
    }
    return found
}

/// The built `stream-get` (throws, failing the test, when it is missing).
package func streamGetExecutable() throws -> URL {
    URL(fileURLWithPath: try builtExecutable("stream-get"))
}

/// A setup problem that fails the test with a message.
package struct TestSetupError: Error, CustomStringConvertible {
    /// What went wrong.
    package var description: String

    /// Creates an error with a message.
    package init(_ description: String) { self.description = description }
}

/// A new empty directory under the temporary directory.
package func makeTemporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("stream-get-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}
