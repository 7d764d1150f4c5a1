// stream-bench: SocketStreams against raw sockets on loopback. See Benchmarks/README.md.
//
//   stream-bench [options]     the harness (see --help)
//   stream-bench server        internal: the epoll peer, started by the harness
//   stream-bench measure …     internal: one measurement, started by the harness
//   stream-bench render F.json  rewrite the MD/JSON/SVG from a saved latest.json
//   stream-bench soak …         a long mixed load, sampling fds and RSS (see --help)
//   stream-bench scale …        cost per connection as N grows, every face (see --help)
//   stream-bench scale-measure … internal: one face at one N, started by `scale`

import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
let status: Int32
switch arguments.first {
case "server": status = ServerCommand.run(Array(arguments.dropFirst()))
case "measure": status = MeasureCommand.run(Array(arguments.dropFirst()))
case "render": status = RenderCommand.run(Array(arguments.dropFirst()))
case "soak": status = SoakCommand.run(Array(arguments.dropFirst()))
case "scale": status = ScaleCommand.run(Array(arguments.dropFirst()))
case "scale-measure": status = ScaleMeasureCommand.run(Array(arguments.dropFirst()))
default: status = Harness.main(arguments)
}
exit(status)
