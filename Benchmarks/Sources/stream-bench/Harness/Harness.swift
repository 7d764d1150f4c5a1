// The harness: starts one server process, runs every selected client on every selected workload
// (each measurement in its own `measure` child, runs alternating, the order rotated every run:
// A B C, B C A, C A B …, so that no client always follows the same one), then writes the
// Markdown table, the JSON figures and the SVG chart. Exits non-zero if any measurement failed.

import Foundation
import Glibc

struct Harness {
    let options: Options

    static func main(_ arguments: [String]) -> Int32 {
        let options: Options
        do {
            options = try Options.parse(arguments)
        } catch {
            Posix.printError("stream-bench: \(error)\n\n\(Options.usage)")
            return 2
        }
        if options.help {
            print(Options.usage)
            return 0
        }
        do {
            return try Harness(options: options).run()
        } catch {
            Posix.printError("stream-bench: \(error)")
            return 1
        }
    }

    func run() throws -> Int32 {
        Posix.raiseFileDescriptorLimit()
        let machine = MachineInfo.current()
        if options.cpus == .separate && machine.nproc < 2 {
            throw BenchError("--cpus separate needs at least 2 CPUs (nproc is \(machine.nproc))")
        }
        // The workloads some selected client runs whose reference client (baseline, or baseline-udp-batch) is not selected.
        let unreferenced = options.workloads.filter { workload in
            !options.clients.contains(workload.reference) && options.clients.contains { $0.supports(workload) }
        }
        for reference in Set(unreferenced.map(\.reference)).sorted(by: { $0.rawValue < $1.rawValue }) {
            let names = unreferenced.filter { $0.reference == reference }.map(\.rawValue).joined(separator: ", ")
            Posix.printError("stream-bench: note: \(reference.rawValue) not selected, so no ratios are computed for \(names)")
        }
        let executable = try ChildProcess.currentExecutable()
        // The TLS workloads' certificate: made now, trusted by every client, removed at the end.
        let certificateDirectory = NSTemporaryDirectory() + "stream-bench-\(getpid())"
        try FileManager.default.createDirectory(atPath: certificateDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: certificateDirectory) }
        let certificate = try BenchTLS.makeCertificate(in: certificateDirectory)
        let server = try ChildProcess.spawn(
            executable,
            [
                "server", "--cpu", "\(options.cpus.serverCPU)",
                "--tls-cert", certificate.certificate, "--tls-key", certificate.key,
            ],
            stdin: .pipe, stdout: .pipe, stderr: .inherit)
        defer {
            server.closeStdin()
            server.wait(timeout: 10)
        }
        let ports = try server.readLine(timeout: 30).split(separator: " ").compactMap { UInt16($0) }
        guard ports.count == 3 else { throw BenchError("server did not print its three ports") }
        let (port, tlsPort, socksPort) = (ports[0], ports[1], ports[2])
        Posix.printError(
            "stream-bench: server pid \(server.pid) on 127.0.0.1:\(port) (TLS \(tlsPort), SOCKS5 \(socksPort)); "
                + machine.summary)

        var failures: [String] = []
        var workloadResults: [WorkloadResult] = []
        // A UDP workload runs once per datagram size, each size a row of its own.
        let measurements = options.workloads.flatMap { workload in
            (options.datagramSizes(for: workload)?.map { Optional($0) } ?? [nil]).map { (workload: workload, size: $0) }
        }
        for (workload, size) in measurements {
            let clients = options.clients.filter { $0.supports(workload) }
            guard !clients.isEmpty else { continue }
            let name = workload.rawValue + (size.map { " \($0) B" } ?? "")
            var samples: [ClientKind: [Sample]] = [:]
            var errors: [ClientKind: String] = [:]
            let runs = options.runs(for: workload)
            for run in 1...runs {
                let first: Int = (run - 1) % clients.count
                let order: [ClientKind] = Array(clients[first...] + clients[..<first])
                for client in order where errors[client] == nil {
                    do {
                        var sample = try measure(
                            executable: executable, client: client, workload: workload,
                            port: workload.isTLS ? tlsPort : port,
                            caFile: workload.isTLS ? certificate.certificate : nil,
                            socksPort: workload.isSOCKS ? socksPort : nil, datagramSize: size)
                        sample.run = run
                        samples[client, default: []].append(sample)
                        let loss = sample.lossFraction.map { ", loss \(formatNumber($0 * 100, decimals: 1)) %" } ?? ""
                        Posix.printError(
                            "  \(name) run \(run)/\(runs) \(client.rawValue): " + formatValue(sample.value, unit: workload.unit) + loss)
                    } catch {
                        let message = "\(name) / \(client.rawValue) run \(run): \(error)"
                        errors[client] = "\(error)"
                        failures.append(message)
                        Posix.printError("  FAILED \(message)")
                    }
                    if let termination = server.poll() {
                        throw BenchError("the server process exited (\(termination)); aborting")
                    }
                }
            }
            workloadResults.append(
                WorkloadResult(
                    workload: workload, quick: options.quick, datagramSize: size, clients: clients,
                    samples: samples, errors: errors))
        }

        let report = BenchmarkReport(
            date: ISO8601DateFormatter().string(from: Date()),
            machine: machine,
            configuration: RunConfiguration(
                quick: options.quick, runs: options.workloads.map { options.runs(for: $0) }.max() ?? 1,
                runsByWorkload: Dictionary(uniqueKeysWithValues: options.workloads.map { ($0.rawValue, options.runs(for: $0)) }),
                cpus: options.cpus.rawValue,
                serverCPU: options.cpus.serverCPU, clientCPU: options.cpus.clientCPU,
                clients: options.clients.map(\.rawValue), workloads: options.workloads.map(\.rawValue),
                datagramSizes: options.datagramSizes),
            workloads: workloadResults,
            failures: failures)
        let directory = options.effectiveOutputDirectory
        let markdown = try ReportWriter.write(report, to: directory)
        print(markdown)
        Posix.printError("stream-bench: results in \(directory)\n")
        if !report.succeeded {
            Posix.printError("stream-bench: \(failures.count) measurement(s) FAILED:\n  " + failures.joined(separator: "\n  "))
            return 1
        }
        return 0
    }

    /// Runs one `measure` child and decodes its sample.
    private func measure(
        executable: String, client: ClientKind, workload: Workload, port: UInt16, caFile: String?,
        socksPort: UInt16?, datagramSize: Int?
    ) throws -> Sample {
        var arguments = [
            "measure", "--client", client.rawValue, "--workload", workload.rawValue,
            "--port", "\(port)", "--cpu", "\(options.cpus.clientCPU)",
        ]
        if let caFile { arguments += ["--tls-ca", caFile] }
        if let socksPort { arguments += ["--socks-port", "\(socksPort)"] }
        if let datagramSize { arguments += ["--datagram-size", "\(datagramSize)"] }
        if options.quick { arguments.append("--quick") }
        let child = try ChildProcess.spawn(executable, arguments, stdin: .devNull, stdout: .pipe, stderr: .pipe)
        let output = try child.collectOutput(timeout: options.effectiveTimeout)
        let detail = output.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        if output.timedOut {
            throw BenchError("timed out after \(options.effectiveTimeout) s and was killed" + (detail.isEmpty ? "" : ": \(detail)"))
        }
        guard output.termination == .exited(0) else {
            throw BenchError("\(output.termination)" + (detail.isEmpty ? "" : ": \(detail)"))
        }
        guard let line = output.stdout.split(separator: "\n").last,
            let sample = try? JSONDecoder().decode(Sample.self, from: Data(line.utf8)),
            sample.value.isFinite
        else {
            throw BenchError("unreadable result: \(output.stdout)")
        }
        return sample
    }
}
