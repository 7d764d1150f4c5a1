// Work posted to a reactor's thread (`Reactor.post`), run in the order posted.

/// A closure, or a Swift concurrency job with the executor to run it on (`AsyncConnectionExecutor`'s
/// jobs): a job is posted as it is, two words, where wrapping it in a closure cost two allocations a
/// post (the closure's context and its reabstraction), one post for every task resumed on the stream
/// thread.
enum PostedWork: Sendable {
    case closure(@Sendable () -> Void)
    case job(UnownedJob, UnownedTaskExecutor)

    /// Runs it, on the reactor's thread.
    @inline(__always)
    func run() {
        switch self {
        case .closure(let work): work()
        case .job(let job, let executor): job.runSynchronously(on: executor)
        }
    }
}
