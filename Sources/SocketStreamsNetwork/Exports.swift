// `import SocketStreamsNetwork` is the Linux side of
//
//     #if canImport(Network)
//     import Network
//     #else
//     import SocketStreamsNetwork
//     #endif
//
// On Apple platforms `import Network` brings Foundation and CoreFoundation's names with it (`CFString`,
// `CFError`, `CFArray`...), which the code around Network.framework calls keeps using; here they come from
// Foundation and SocketStreams, so the module re-exports both and the ported file needs no other import.
//
// The module is named `SocketStreamsNetwork`, never `Network`: `#if canImport(Network)` means "an Apple
// platform" in much of the ecosystem, and a Linux module of that name visible to a build would switch
// that code onto its Apple paths (Guides/Architecture.md).

@_exported import Foundation
@_exported import SocketStreams
