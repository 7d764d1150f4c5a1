#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import TestPeers

/// Proxy servers for the proxy tests, each a real third-party program run as a child process:
/// danted (SOCKS4, SOCKS5), microsocks (SOCKS5 with or without username/password), `ssh -D` against
/// a private sshd (SOCKS4, SOCKS4a, SOCKS5) and tinyproxy (HTTP CONNECT).
///
/// Every one listens on loopback only and is kept to loopback targets by rules of its own (see each
/// launcher), on top of the loopback-only network namespace `Scripts/test` runs the suite in, so a
/// buggy client (a SOCKS4a request read as the address 0.0.0.1, say) cannot reach another host.
/// Where a proxy can choose the address its outgoing connections come from, that is 127.0.0.2
/// (`proxyEgressAddress`): a target sees that the connection came through the proxy, and the
/// kernel refuses to route a 127/8 source address anywhere but loopback (EINVAL).
///
/// They work both for root and for a user who is not root, whose network namespace lies inside a user
/// namespace in which only uid 0 is mapped: no daemon here switches to another user (sshd runs in a
/// nested user namespace instead, see `sshSOCKS`), and none needs /etc/shadow. Files (configurations,
/// keys) go into the test's temporary `directory`, logs go to stdout or stderr (`printed`), and every
/// daemon runs in the foreground, so `stop()` ends it.
extension Peer {
    /// The source address of the outgoing connections of danted, microsocks and tinyproxy (IPv4 targets).
    package static let proxyEgressAddress = "127.0.0.2"

    // MARK: danted

    /// danted (Dante 1.4) without authentication: SOCKS4 and SOCKS5 on 127.0.0.1 and ::1, the same port.
    ///
    /// Confinement: its `socks pass` rules admit CONNECT to 127.0.0.0/8 and ::1/128 only, `socks block`
    /// refuses everything else (SOCKS5 reply 2, "connection not allowed by ruleset"; SOCKS4 reply 91;
    /// logged as `block(…)`). Outgoing connections come from 127.0.0.2 (IPv4 targets) and ::1 (IPv6).
    /// No SOCKS4a: danted reads a 4a request as the address 0.0.0.1, which its rules block.
    ///
    /// `user.privileged` and `user.unprivileged` are root: in the user namespace of a user who is not
    /// root, uid 0 is the only uid there is (danted warns about it, harmlessly). It cannot report an
    /// ephemeral port, so it gets a port free in both families; readiness is its "running" line.
    package static func dante(directory: URL) throws -> (peer: Peer, port: Int) {
        let danted = try locateDaemon("danted", hint: "apt-get install -y --no-install-recommends dante-server")
        return try withUnusedPort(bothFamilies: true) { port in
            let configuration = directory.appendingPathComponent("danted.conf")
            try Data(
                """
                logoutput: stderr
                internal: 127.0.0.1 port = \(port)
                internal: ::1 port = \(port)
                external: \(proxyEgressAddress)
                external: ::1
                socksmethod: none
                clientmethod: none
                user.privileged: root
                user.unprivileged: root
                client pass {
                  from: 127.0.0.0/8 to: 0/0
                  log: error
                }
                client pass {
                  from: ::1/128 to: 0/0
                  log: error
                }
                socks pass {
                  from: 0/0 to: 127.0.0.0/8
                  command: connect
                  log: connect error
                }
                socks pass {
                  from: 0/0 to: ::1/128
                  command: connect
                  log: connect error
                }
                socks block {
                  from: 0/0 to: 0/0
                  log: connect error
                }

                """.utf8
            ).write(to: configuration)
            let peer = try supervised(
                name: "danted", executable: danted,
                arguments: ["-f", configuration.path, "-p", directory.appendingPathComponent("danted.pid").path])
            // e.g. "danted[123]: info: Dante/server[1/1] v1.4.2 running"
            _ = try peer.start(readyPattern: #"(Dante/server\[\d+/\d+\] v\S+ running)"#)
            try waitUntilAccepting(peer, port: port, family: .v4)  // the line alone does not promise listen(2)
            return (peer, port)
        }
    }

    // MARK: microsocks

    /// microsocks: SOCKS5 on the family's loopback address, with username/password authentication
    /// (RFC 1929) when `user` and `password` are given, none otherwise. Never `-1` (auth-once mode, which
    /// would let later connections from the same address in without credentials). No SOCKS4.
    ///
    /// Confinement: microsocks has no rules of its own. `-b 127.0.0.2` binds the outgoing socket of
    /// every IPv4 target to 127.0.0.2, and the kernel refuses to route that source anywhere but
    /// loopback (connect fails with EINVAL, reply 1; checked with a route to a veth: without `-b` the
    /// same request left through it). IPv6 targets (microsocks binds only sockets of the bind address's
    /// family) are kept in by the loopback-only network namespace alone.
    ///
    /// It neither reports an ephemeral port nor prints anything when it is ready, so it gets a free
    /// port and readiness is a connect() to that port (polled, with a deadline) while it is running.
    package static func microsocks(
        user: String? = nil, password: String? = nil,
        family: IPFamily = .v4
    ) throws -> (peer: Peer, port: Int) {
        precondition((user == nil) == (password == nil), "microsocks takes a username and a password, or neither")
        let microsocks = try locate("microsocks", hint: "apt-get install -y --no-install-recommends microsocks")
        return try withUnusedPort(bothFamilies: false, family: family) { port in
            var arguments = ["-i", family.loopback, "-p", String(port), "-b", proxyEgressAddress]
            if let user, let password { arguments += ["-u", user, "-P", password] }
            let peer = try startQuiet(
                name: "microsocks[\(family.loopback)]", executable: microsocks,
                arguments: arguments, port: port, family: family)
            return (peer, port)
        }
    }

    // MARK: ssh -D

    /// `ssh -N -D 127.0.0.1:PORT` through a private sshd: SOCKS4, SOCKS4a and SOCKS5 (host names and
    /// IPv6 targets too), without SOCKS authentication. The peer is the ssh client; sshd runs as its
    /// ProxyCommand in inetd mode (`sshd -i`, talking over ssh's pipe: no listening port), so `stop()`
    /// ends both. Host and client keys (ed25519) are made with ssh-keygen in `directory`; public-key
    /// authentication only, the host key checked against a known_hosts file written there too.
    ///
    /// Confinement: sshd's `PermitOpen 127.0.0.1:* [::1]:* localhost:*` (anything else: "but the
    /// request was denied" in sshd's log, and ssh closes the SOCKS connection without a reply);
    /// `AllowTcpForwarding local`, no agent, X11, tunnel or stream-local forwarding, no tty.
    /// Targets see connections from 127.0.0.1 or ::1 (sshd has no option for the source address).
    ///
    /// sshd as uid 0 insists on privilege separation: a chroot into /run/sshd and a switch to the
    /// `sshd` user, neither of which exists inside the user namespace of a user who is not root. So it
    /// runs, for root and non-root alike, in a nested user namespace (`unshare --user --map-user`) as the
    /// uid of the `daemon` account, where sshd, not being root, skips privilege separation, and can only
    /// let in the account it runs as. Not `nobody`: with /etc/shadow unreadable, glibc's nss-systemd
    /// answers for nobody (and root) with a locked password ("!*"), which sshd (UsePAM no) refuses.
    ///
    /// ssh cannot forward an ephemeral port (`-D 0` is rejected), so it gets a free port; readiness is
    /// its "Local forwarding listening on 127.0.0.1 port N" line (`-v`), and `ExitOnForwardFailure`
    /// makes it exit, not linger, if the port was taken in between.
    package static func sshSOCKS(directory: URL) throws -> (peer: Peer, port: Int) {
        let ssh = try locate("ssh", hint: "apt-get install -y --no-install-recommends openssh-client")
        let keygen = try locate("ssh-keygen", hint: "apt-get install -y --no-install-recommends openssh-client")
        let sshd = try locateDaemon("sshd", hint: "apt-get install -y --no-install-recommends openssh-server")
        let unshare = try locate("unshare", hint: "apt-get install -y --no-install-recommends util-linux")
        guard let account = getpwnam("daemon") else {
            throw PeerError.notInstalled("the account 'daemon'", hint: "sshd serves it in a nested user namespace")
        }
        let (user, uid, gid) = (String(cString: account.pointee.pw_name), account.pointee.pw_uid, account.pointee.pw_gid)

        let hostKey = directory.appendingPathComponent("ssh_host_ed25519_key")
        let clientKey = directory.appendingPathComponent("ssh_client_ed25519_key")
        for key in [hostKey, clientKey] {
            let made = try runCommand(keygen, ["-q", "-t", "ed25519", "-N", "", "-C", key.lastPathComponent, "-f", key.path])
            guard made.status == 0 else {
                throw PeerError.exitedEarly("ssh-keygen", status: made.status, output: made.stderr)
            }
        }
        let hostPublicKey = try String(contentsOf: hostKey.appendingPathExtension("pub"), encoding: .utf8)
        let clientPublicKey = try String(contentsOf: clientKey.appendingPathExtension("pub"), encoding: .utf8)
        let hostAlias = "socketstreams-test-sshd"
        let knownHosts = directory.appendingPathComponent("known_hosts")
        try Data("\(hostAlias) \(hostPublicKey)".utf8).write(to: knownHosts)
        let authorizedKeys = directory.appendingPathComponent("authorized_keys")
        try Data("restrict,port-forwarding \(clientPublicKey)".utf8).write(to: authorizedKeys)
        let configuration = directory.appendingPathComponent("sshd_config")
        try Data(
            """
            HostKey \(hostKey.path)
            PidFile none
            AuthorizedKeysFile \(authorizedKeys.path)
            AllowUsers \(user)
            AuthenticationMethods publickey
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            HostbasedAuthentication no
            PermitRootLogin no
            StrictModes no
            UsePAM no
            UseDNS no
            PrintMotd no
            PermitTTY no
            PermitUserRC no
            X11Forwarding no
            AllowAgentForwarding no
            AllowStreamLocalForwarding no
            PermitTunnel no
            GatewayPorts no
            PermitListen none
            AllowTcpForwarding local
            PermitOpen 127.0.0.1:* [::1]:* localhost:*
            LogLevel VERBOSE

            """.utf8
        ).write(to: configuration)
        // ssh runs it with `$SHELL -c "exec COMMAND"` after expanding %-tokens.
        let proxyCommand = [
            unshare, "--user", "--map-user=\(uid)", "--map-group=\(gid)", "--",
            sshd, "-i", "-e", "-f", configuration.path,
        ]
        .map(shellQuoted).joined(separator: " ").replacingOccurrences(of: "%", with: "%%")

        return try withUnusedPort(bothFamilies: false) { port in
            let peer = try supervised(
                name: "ssh -D", executable: ssh,
                arguments: [
                    "-v", "-N", "-F", "/dev/null",
                    "-D", "127.0.0.1:\(port)",
                    "-o", "ProxyCommand=\(proxyCommand)",
                    "-o", "ExitOnForwardFailure=yes",
                    "-o", "BatchMode=yes",
                    "-o", "IdentitiesOnly=yes",
                    "-o", "IdentityAgent=none",
                    "-o", "IdentityFile=\(clientKey.path)",
                    "-o", "HostKeyAlias=\(hostAlias)",
                    "-o", "UserKnownHostsFile=\(knownHosts.path)",
                    "-o", "GlobalKnownHostsFile=/dev/null",
                    "-o", "StrictHostKeyChecking=yes",
                    "-o", "UpdateHostKeys=no",
                    "-o", "CheckHostIP=no",
                    "-o", "ControlMaster=no",
                    "-o", "ControlPath=none",
                    "-l", user, "localhost",
                ])
            let reported = try peer.start(readyPattern: #"Local forwarding listening on 127\.0\.0\.1 port (\d+)\."#)
            guard Int(reported) == port else {
                throw PeerError.notReady(peer.name, output: peer.printed)
            }
            // ssh logs that line before its listen(2) (seen under load: a connect right after it was
            // refused), so the port itself says when it is ready.
            try waitUntilAccepting(peer, port: port, family: .v4)
            return (peer, port)
        }
    }

    // MARK: tinyproxy

    /// tinyproxy (1.11) as an HTTP proxy on 127.0.0.1 and ::1 (the same port): CONNECT tunnels (and
    /// plain absolute-URI requests), with Basic authentication (`BasicAuth`) when `user` and `password`
    /// are given: 407 without credentials, 401 with wrong ones.
    ///
    /// `connectPorts`: the target ports CONNECT may reach (`ConnectPort` lines; another port: 403 "Access
    /// violation"). Empty, the default, allows every port: tinyproxy restricts CONNECT only when the
    /// configuration has a ConnectPort line (Debian's stock file lists 443 and 563, this one none), and
    /// the targets of the tests listen on ephemeral ports.
    ///
    /// Confinement: a `Filter` file with `FilterDefaultDeny Yes` admits the host names `127.0.0.1`,
    /// `localhost` and `::1` only (anything else: 403, "Proxying refused on filtered domain" in its
    /// log). Outgoing connections come from 127.0.0.2 (IPv4 targets) and ::1 (IPv6) (`Bind`).
    ///
    /// No `Allow` lines (it listens on loopback only): tinyproxy 1.11.1 misreads the address of a
    /// client on ::1 (logs it as e.g. "::403f:f3b7:e755:0"), so `Allow ::1` would turn it away. No `User`:
    /// it stays the current user (and warns). It cannot report an ephemeral port, so it gets a port
    /// free in both families; readiness is its "Starting main loop" line.
    package static func tinyproxy(
        directory: URL, user: String? = nil, password: String? = nil,
        connectPorts: [Int] = []
    ) throws -> (peer: Peer, port: Int) {
        precondition((user == nil) == (password == nil), "tinyproxy takes a username and a password, or neither")
        let tinyproxy = try locate("tinyproxy", hint: "apt-get install -y --no-install-recommends tinyproxy-bin")
        let filter = directory.appendingPathComponent("tinyproxy.filter")
        try Data(
            #"""
            ^127\.0\.0\.1$
            ^localhost$
            ^::1$

            """#.utf8
        ).write(to: filter)
        return try withUnusedPort(bothFamilies: true) { port in
            var lines = [
                "Port \(port)",
                "Listen 127.0.0.1",
                "Listen ::1",
                "Bind \(proxyEgressAddress)",
                "Bind ::1",
                "LogLevel Info",
                "MaxClients 100",
                "Filter \"\(filter.path)\"",
                "FilterDefaultDeny Yes",
                "FilterURLs No",
                "DisableViaHeader Yes",
            ]
            if let user, let password { lines.append("BasicAuth \(user) \(password)") }
            lines += connectPorts.map { "ConnectPort \($0)" }
            let configuration = directory.appendingPathComponent("tinyproxy.conf")
            try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: configuration)
            // -d: the foreground; without a LogFile it logs to stdout.
            let peer = Peer(name: "tinyproxy", executable: tinyproxy, arguments: ["-d", "-c", configuration.path])
            _ = try peer.start(readyPattern: #"(Starting main loop)"#)
            try waitUntilAccepting(peer, port: port, family: .v4)  // the line alone does not promise listen(2)
            return (peer, port)
        }
    }

    // MARK: helpers

    /// `locate`, then the sbin directories, where daemons live and which a user's PATH may lack.
    package static func locateDaemon(_ tool: String, hint: String) throws -> String {
        if let found = try? locate(tool, hint: hint) { return found }
        for directory in ["/usr/local/sbin", "/usr/sbin", "/sbin"] {
            let candidate = directory + "/" + tool
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw PeerError.notInstalled(tool, hint: hint)
    }

    /// A peer running `executable` under coreutils' `timeout 0` (no time limit), a supervisor that passes
    /// SIGTERM on and exits when the program does. For programs that close the descriptors they
    /// inherit (danted, ssh): Foundation's Process learns that a child ended when the child's end of a
    /// socket pair closes, and then blocks in waitpid(2) for it; for a program that closed it at
    /// startup, that wait lasts until the program exits, and meanwhile no other child's exit is seen
    /// (`runCommand` hangs). The supervisor keeps that socket open for as long as the program runs.
    private static func supervised(name: String, executable: String, arguments: [String]) throws -> Peer {
        let timeout = try locate("timeout", hint: "apt-get install -y coreutils")
        return Peer(name: name, executable: timeout, arguments: ["0", executable] + arguments)
    }

    /// Calls `launch` with a port that was free a moment ago (in both families when `bothFamilies`, for
    /// a program that listens on 127.0.0.1 and ::1). Should another process take it in between, the
    /// program exits saying so, and `launch` runs again with another port (at most `attempts` times).
    private static func withUnusedPort<Result>(
        bothFamilies: Bool, family: IPFamily = .v4, attempts: Int = 3,
        _ launch: (Int) throws -> Result
    ) throws -> Result {
        var attempt = 1
        while true {
            let port = bothFamilies ? try unusedPortInBothFamilies() : try RawSocket.unusedPort(family: family)
            do {
                return try launch(port)
            } catch let PeerError.exitedEarly(_, _, output)
                where attempt < attempts
                && (output.contains("already in use")
                    || output.contains("Could not create listening sockets"))
            {
                attempt += 1
            }
        }
    }

    /// A port on which nothing listens right now on either 127.0.0.1 or ::1.
    private static func unusedPortInBothFamilies() throws -> Int {
        for _ in 0..<20 {
            let port = try RawSocket.unusedPort(family: .v4)
            if let fd = try? RawSocket.listener(family: .v6, port: port, backlog: 1) {
                close(fd)
                return port
            }
        }
        throw SystemCallError(call: "bind (no port free in both families)", code: EADDRINUSE)
    }

    /// Starts a program that prints nothing when it is ready: a shell prints its pid and execs the
    /// program (same process, so `stop()` ends the program). Then connect() to `port` is polled until
    /// it succeeds (ready) or the process is gone (exitedEarly, with status -1: the status is not known
    /// here) or `timeout` passes (notReady).
    private static func startQuiet(
        name: String, executable: String, arguments: [String],
        port: Int, family: IPFamily, timeout: TimeInterval = 10
    ) throws -> Peer {
        let peer = Peer(
            name: name, executable: "/bin/sh",
            arguments: ["-c", #"echo "started as pid $$"; exec "$0" "$@""#, executable] + arguments)
        guard let pid = Int32(try peer.start(readyPattern: #"^started as pid (\d+)$"#)) else {
            throw PeerError.notReady(name, output: peer.printed)
        }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            if let fd = try? RawSocket.connectTo(family: family, port: port) {
                close(fd)
                if isRunning(pid) { return peer }
            }
            if !isRunning(pid) {
                throw PeerError.exitedEarly(name, status: -1, output: peer.printed)
            }
            if Date() > deadline {
                throw PeerError.notReady(name, output: peer.printed)
            }
            usleep(10_000)
        }
    }

    /// Polls connect() to `port` until it succeeds; throws notReady after `timeout`.
    private static func waitUntilAccepting(_ peer: Peer, port: Int, family: IPFamily, timeout: TimeInterval = 10) throws {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            if let fd = try? RawSocket.connectTo(family: family, port: port) {
                close(fd)
                return
            }
            if Date() > deadline { throw PeerError.notReady(peer.name, output: peer.printed) }
            usleep(5_000)
        }
    }

    /// Whether process `pid` exists and has not exited (a zombie has; /proc/PID/stat's third field is Z).
    private static func isRunning(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let afterName = stat.range(of: ") ", options: .backwards)
        else { return false }
        return !stat[afterName.upperBound...].hasPrefix("Z")
    }

    /// `text` in single quotes for /bin/sh.
    private static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }
}
