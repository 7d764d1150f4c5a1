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
        // A hand-made scan, not NSRegularExpression: Foundation's regular expressions leak on Linux, and
        // the sanitizer run's leak checker fails the suite for it.
        let characters = Array(code)
        var found: [String] = []
        var previous = ""  // the identifier before this one
        var index = 0
        func isIdentifier(_ c: Character) -> Bool { c.isLetter || c.isNumber || c == "_" }
        while index < characters.count {
            guard isIdentifier(characters[index]), !characters[index].isNumber else {
                index += 1
                continue
            }
            let start = index
            while index < characters.count, isIdentifier(characters[index]) { index += 1 }
            let name = String(characters[start..<index])
            let afterDot = start > 0 && characters[start - 1] == "."
            let qualified = afterDot && previous == "Glibc" && start >= 6 && String(characters[(start - 6)..<start]) == "Glibc."
            var next = index
            while next < characters.count, characters[next] == " " { next += 1 }
            let called = next < characters.count && characters[next] == "("
            if name == "errno" || name == "cssh_errno" {
                if !afterDot { found.append(name) }
            } else if called, kernelCalls.contains(name), !afterDot || qualified, previous != "func", previous != "case" {
                found.append(name)
            } else if called, qualified, qualifiedKernelCalls.contains(name) {
                found.append(name)
            }
            previous = name
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
