import COpenSSL

/// OpenSSL's one-time set-up (`OPENSSL_init_ssl`), made before the package's first OpenSSL call.
///
/// Without `OPENSSL_INIT_NO_ATEXIT` OpenSSL registers `OPENSSL_cleanup` with `atexit` on first use, and
/// at exit it tears down its global state and deletes the thread-local keys whose destructors free each
/// thread's error queue and random generators, while the package's threads (the stream thread, a
/// queue's thread, dispatch workers running callouts) may still be running TLS. A thread that then uses
/// OpenSSL touches freed state; one that exits leaks its own (a C program whose thread exits after the
/// cleanup leaks its 904-byte error queue and two 40-byte DRBG contexts with what they hold, under
/// LeakSanitizer; with the flag, nothing). The process's exit gives everything back anyway. If the
/// program used OpenSSL before the package did, OpenSSL's own first set-up stands.
package enum OpenSSLLibrary {
    private static let prepared: Bool = OPENSSL_init_ssl(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1

    /// Makes the set-up if it has not been made yet (the package's own programs and test peers that call
    /// OpenSSL themselves call it first too).
    @inline(__always)
    package static func prepare() {
        _ = prepared
    }
}
