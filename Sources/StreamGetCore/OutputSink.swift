#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Somewhere `stream-get` writes bytes: stdout, stderr, or a buffer in tests.
public protocol OutputSink: AnyObject {
    /// Writes all of `bytes`.
    func write(_ bytes: [UInt8])
}

extension OutputSink {
    /// Writes `text` as UTF-8.
    public func write(_ text: String) {
        write(Array(text.utf8))
    }
}

/// An unbuffered sink writing to a file descriptor with `write(2)`, retrying short writes and `EINTR`.
public final class FileDescriptorSink: OutputSink {
    /// The descriptor written to (not owned: never closed).
    public let fileDescriptor: Int32

    /// Creates a sink for a descriptor the caller keeps open.
    public init(fileDescriptor: Int32) {
        self.fileDescriptor = fileDescriptor
    }

    /// A sink for standard output (descriptor 1).
    public static func standardOutput() -> FileDescriptorSink { FileDescriptorSink(fileDescriptor: 1) }

    /// A sink for standard error (descriptor 2).
    public static func standardError() -> FileDescriptorSink { FileDescriptorSink(fileDescriptor: 2) }

    /// Writes all of `bytes`; gives up silently when the descriptor fails (e.g. a closed pipe with SIGPIPE ignored).
    public func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                #if canImport(Glibc)
                    let count = Glibc.write(fileDescriptor, buffer.baseAddress! + offset, buffer.count - offset)
                #else
                    let count = Darwin.write(fileDescriptor, buffer.baseAddress! + offset, buffer.count - offset)
                #endif
                if count < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += count
            }
        }
    }
}
