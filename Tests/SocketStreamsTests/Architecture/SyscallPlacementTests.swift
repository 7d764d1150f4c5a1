import Foundation
import SocketStreamsTestSupport
import XCTest

/// `System/Posix.swift` is the one file of `Sources/SocketStreams` that makes a socket system call or
/// reads errno (its header's promise, which the layers rely on for EINTR, EAGAIN, EBADF and the error's
/// shape): any other file that calls one of the kernel's socket, epoll, eventfd or resolver functions
/// by its C name, or reads `errno`, fails this. Comments and strings do not count.
final class SyscallPlacementTests: XCTestCase {
    /// The C functions only Posix.swift may call, whose names nothing else in the package has.
    static let kernelCalls = [
        "socketpair", "accept4", "recvfrom", "recvmsg", "recvmmsg", "sendto", "sendmsg", "sendmmsg", "getsockopt", "setsockopt",
        "getsockname", "getpeername", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "eventfd", "timerfd_create",
        "timerfd_settime", "getaddrinfo", "fcntl", "ioctl",
    ]
    /// Those whose names Swift code also uses (an enum case, a method, a closure): a call counts only
    /// when it names the C library (`Glibc.send(…)`), which is how Swift code reaches them anyway where
    /// a member of the same name is in scope.
    static let qualifiedKernelCalls = ["socket", "connect", "accept", "bind", "listen", "shutdown", "recv", "send", "close"]

    /// Places in `code` (comments and strings already stripped) that call one of `kernelCalls` by its C
    /// name (not as a member, `x.send(…)`, nor where a Swift function of that name is declared), one of
    /// `qualifiedKernelCalls` as `Glibc.name(…)`, or read `errno`/`cssh_errno`.
    static func kernelCallSites(in code: String) -> [String] {
        let patterns = [
            #"(?<![.\w])(?<!func )(?:Glibc\.)?("# + kernelCalls.joined(separator: "|") + #")\s*\("#,
            #"(?<![.\w])Glibc\.("# + qualifiedKernelCalls.joined(separator: "|") + #")\s*\("#,
            #"(?<![.\w])(errno|cssh_errno)(?!\w)"#,
        ]
        var found: [String] = []
        for pattern in patterns {
            let expression = try! NSRegularExpression(pattern: pattern)
            let range = NSRange(code.startIndex..., in: code)
            for match in expression.matches(in: code, range: range) {
                if let name = Range(match.range(at: 1), in: code) { found.append(String(code[name])) }
            }
        }
        return found
    }

    func testOnlyPosixCallsTheKernel() throws {
        let sources = LayerOrderTests.sources
        let enumerator = try XCTUnwrap(FileManager.default.enumerator(atPath: sources.path))
        var violations: [String] = []
        for case let path as String in enumerator where path.hasSuffix(".swift") && path != "System/Posix.swift" {
            let text = try String(contentsOf: sources.appendingPathComponent(path), encoding: .utf8)
            for name in Self.kernelCallSites(in: LayerCheck.code(of: text)) { violations.append("\(path): \(name)") }
        }
        XCTAssertEqual(violations, [], "kernel calls outside System/Posix.swift:\n" + violations.joined(separator: "\n"))
    }

    /// The check finds a call and an errno read, and passes members, declarations, comments and strings.
    func testTheCheckFindsACallAndPassesWhatIsNotOne() {
        XCTAssertEqual(Self.kernelCallSites(in: LayerCheck.code(of: "let n = getsockopt(fd, 1, 2, &v, &l)\n")), ["getsockopt"])
        XCTAssertEqual(Self.kernelCallSites(in: LayerCheck.code(of: "let n = Glibc.send(fd, p, 1, 0)\n")), ["send"])
        XCTAssertEqual(Self.kernelCallSites(in: LayerCheck.code(of: "if errno == EINTR {}\n")), ["errno"])
        let clean = "try Posix.send(fd, p, 1)\nfunc connect(to: Int) {}\ncase shutdown(tag: Int)\n// getsockopt(fd)\nlet s = \"errno \"\n"
        XCTAssertEqual(Self.kernelCallSites(in: LayerCheck.code(of: clean)), [])
    }
}
