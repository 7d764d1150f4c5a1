// `import CocoaAsyncSocket` brings in SocketStreams as well, as the CocoaAsyncSocket module on Apple
// platforms brings in Foundation's CFNetwork names: ported code keeps its import line.
@_exported import Foundation
@_exported import SocketStreams
