// Starting this same binary again as the server or as one measurement, with posix_spawn.
// Pipes are created O_CLOEXEC, so a child only inherits the ends dup2'd onto its 0/1/2; in
// particular no measurement child holds the server's stdin pipe, whose EOF stops the server.

import Foundation
import Glibc

final class ChildProcess {
    enum Redirect {
        case inherit
        case pipe
        case devNull
    }

    enum Termination: Equatable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)

        var description: String {
            switch self {
            case .exited(let code): return "exit status \(code)"
            case .signaled(let signal): return "killed by signal \(signal)"
            }
        }
    }

    let pid: pid_t
    private(set) var stdinFD: Int32?
    private(set) var stdoutFD: Int32?
    private(set) var stderrFD: Int32?
    private var termination: Termination?

    private init(pid: pid_t, stdinFD: Int32?, stdoutFD: Int32?, stderrFD: Int32?) {
        self.pid = pid
        self.stdinFD = stdinFD
        self.stdoutFD = stdoutFD
        self.stderrFD = stderrFD
    }

    deinit {
        [stdinFD, stdoutFD, stderrFD].compactMap { $0 }.forEach(Posix.close)
    }

    /// The path of the running executable (/proc/self/exe).
    static func currentExecutable() throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        if n <= 0 { throw BenchError.syscall("readlink(/proc/self/exe)", errno: errno) }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func spawn(
        _ path: String, _ arguments: [String], stdin: Redirect, stdout: Redirect,
        stderr: Redirect
    ) throws -> ChildProcess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }

        var parentEnds: [Int32?] = [nil, nil, nil]
        var childEnds: [Int32] = []
        defer { childEnds.forEach(Posix.close) }
        for (target, redirect) in [stdin, stdout, stderr].enumerated() {
            switch redirect {
            case .inherit:
                break
            case .devNull:
                posix_spawn_file_actions_addopen(&actions, Int32(target), "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .pipe:
                var fds: [Int32] = [-1, -1]
                // pipe + FD_CLOEXEC (pipe2 is a GNU extension Swift cannot see); the harness
                // spawns from one thread only, so no other spawn can inherit them in between.
                if pipe(&fds) != 0 {
                    let code = errno
                    parentEnds.compactMap { $0 }.forEach(Posix.close)
                    throw BenchError.syscall("pipe", errno: code)
                }
                _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
                _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
                let (childEnd, parentEnd) = target == 0 ? (fds[0], fds[1]) : (fds[1], fds[0])
                childEnds.append(childEnd)
                parentEnds[target] = parentEnd
                posix_spawn_file_actions_adddup2(&actions, childEnd, Int32(target))
            }
        }

        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] =
            ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid = pid_t()
        let result = posix_spawn(&pid, path, &actions, nil, argv, envp)
        if result != 0 {
            parentEnds.compactMap { $0 }.forEach(Posix.close)
            throw BenchError.syscall("posix_spawn(\(path))", errno: result)
        }
        return ChildProcess(pid: pid, stdinFD: parentEnds[0], stdoutFD: parentEnds[1], stderrFD: parentEnds[2])
    }

    /// Reads stdout up to the first newline (the server's readiness line).
    func readLine(timeout: Double) throws -> String {
        guard let fd = stdoutFD else { throw BenchError("stdout is not a pipe") }
        let deadline = Posix.monotonicNanoseconds() + UInt64(timeout * 1e9)
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            guard try waitReadable([fd], until: deadline) != nil else {
                throw BenchError("no line from child \(pid) within \(timeout) s")
            }
            switch try Posix.read(fd, into: &byte, count: 1) {
            case .processed:
                if byte == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
                line.append(byte)
            case .endOfFile:
                throw BenchError("child \(pid) closed stdout before writing a line (\(wait()))")
            case .wouldBlock:
                continue
            }
        }
    }

    /// Reads stdout and stderr to EOF, then reaps the child. Past `timeout` the child is killed.
    func collectOutput(timeout: Double) throws -> (stdout: String, stderr: String, termination: Termination, timedOut: Bool) {
        let deadline = Posix.monotonicNanoseconds() + UInt64(timeout * 1e9)
        var open = [stdoutFD, stderrFD].compactMap { $0 }
        var collected: [Int32: [UInt8]] = [:]
        var timedOut = false
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 1)
        defer { buffer.deallocate() }
        while !open.isEmpty {
            guard let fd = try waitReadable(open, until: timedOut ? UInt64.max : deadline) else {
                timedOut = true
                kill(SIGKILL)
                continue
            }
            switch try Posix.read(fd, into: buffer.baseAddress!, count: buffer.count) {
            case .processed(let n):
                collected[fd, default: []].append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            case .endOfFile:
                open.removeAll { $0 == fd }
            case .wouldBlock:
                break
            }
        }
        let termination = wait()
        let text = { (fd: Int32?) in fd.map { String(decoding: collected[$0] ?? [], as: UTF8.self) } ?? "" }
        return (text(stdoutFD), text(stderrFD), termination, timedOut)
    }

    /// Closes the child's stdin (the server takes that as "shut down").
    func closeStdin() {
        if let fd = stdinFD {
            Posix.close(fd)
            stdinFD = nil
        }
    }

    func kill(_ signal: Int32) {
        if termination == nil { _ = Glibc.kill(pid, signal) }
    }

    /// Reaps the child (blocking).
    @discardableResult
    func wait() -> Termination {
        if let termination { return termination }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let result = Self.decode(status)
        termination = result
        return result
    }

    /// Reaps the child if it has exited; nil while it is still running.
    func poll() -> Termination? {
        if let termination { return termination }
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return nil }
        let result = Self.decode(status)
        termination = result
        return result
    }

    /// Waits up to `timeout` seconds for the child to exit, then kills it.
    @discardableResult
    func wait(timeout: Double) -> Termination {
        let deadline = Posix.monotonicNanoseconds() + UInt64(timeout * 1e9)
        while Posix.monotonicNanoseconds() < deadline {
            if let termination = poll() { return termination }
            usleep(10_000)
        }
        kill(SIGKILL)
        return wait()
    }

    /// WIFEXITED/WEXITSTATUS/WTERMSIG by hand (the C macros are not imported).
    private static func decode(_ status: Int32) -> Termination {
        let signal = status & 0x7f
        return signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal)
    }

    /// poll(2) for the first readable fd; nil once `deadline` passes.
    private func waitReadable(_ fds: [Int32], until deadline: UInt64) throws -> Int32? {
        var pollFDs = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            let now = Posix.monotonicNanoseconds()
            if now >= deadline { return nil }
            let milliseconds = deadline == UInt64.max ? -1 : Int32(min((deadline - now) / 1_000_000 + 1, 60_000))
            let n = Glibc.poll(&pollFDs, nfds_t(pollFDs.count), milliseconds)
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchError.syscall("poll", errno: errno)
            }
            if let ready = pollFDs.first(where: { $0.revents != 0 }) { return ready.fd }
        }
    }
}
