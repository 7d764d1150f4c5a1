import Dispatch
import Foundation
@testable import SocketStreams
import SocketStreamsTestSupport
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// The halves' readiness rules (PairHalves.swift) without a connection: what each half wants epoll to
/// report, what a report becomes, and how a read, a write, a schedule, a stage and an unconfirmed
/// event change the watching.
final class PairHalvesTests: XCTestCase {
    static let reading: UInt32 = 1
    static let writing: UInt32 = 4

    /// Two open halves, both scheduled on `here`.
    static func openHalves(on here: Reactor) -> FixedPair<HalfState> {
        var half = HalfState()
        let opened = half.events.open()
        XCTAssertTrue(opened)
        half.events.signal(.openCompleted, scheduled: true)
        _ = half.events.next()
        half.reactors = [here]
        return FixedPair(half, half)
    }

    func withReactors(_ body: (Reactor, Reactor) throws -> Void) throws {
        let here = try ReactorRegistry.shared.acquire(queue: DispatchQueue(label: "PairHalvesTests.here"))
        let elsewhere = try ReactorRegistry.shared.acquire(queue: DispatchQueue(label: "PairHalvesTests.elsewhere"))
        defer {
            ReactorRegistry.shared.release(here)
            ReactorRegistry.shared.release(elsewhere)
        }
        try body(here, elsewhere)
    }

    func wanted(_ halves: borrowing FixedPair<HalfState>, on reactor: Reactor) -> UInt32 {
        halves.wantedEvents(on: reactor, reading: Self.reading, writing: Self.writing)
    }

    /// The input watches while open and not waiting for its client; the output only while it watches
    /// for space; neither on a reactor it is not scheduled on, nor once closed.
    func testWhatEachHalfWantsWhere() throws {
        try withReactors { here, elsewhere in
            let halves = Self.openHalves(on: here)
            XCTAssertEqual(wanted(halves, on: here), Self.reading)
            XCTAssertEqual(wanted(halves, on: elsewhere), 0)
            halves[.output].watchingSpace = true
            XCTAssertEqual(wanted(halves, on: here), Self.reading | Self.writing)
            halves[.input].suppressed = true
            XCTAssertEqual(wanted(halves, on: here), Self.writing)
            XCTAssertTrue(halves[.output].events.close())
            XCTAssertEqual(wanted(halves, on: here), 0)
            XCTAssertTrue(halves.isScheduled(.input, on: here))
            XCTAssertFalse(halves.isScheduled(.input, on: elsewhere))
        }
    }

    /// Readable: signalled once; while the event awaits the client, a report only stops the watching
    /// (nothing spins), and the read that takes it resumes the watching.
    func testReadableIsSignalledOnceUntilTheClientReads() throws {
        try withReactors { here, elsewhere in
            let halves = Self.openHalves(on: here)
            XCTAssertFalse(halves.takeReadiness(.readable, from: elsewhere).bytes, "not scheduled there")
            XCTAssertTrue(halves.takeReadiness(.readable, from: here).bytes)
            halves[.input].events.signal(.hasBytesAvailable, scheduled: true)
            XCTAssertFalse(halves.takeReadiness(.readable, from: here).bytes)
            XCTAssertTrue(halves[.input].suppressed)
            XCTAssertEqual(wanted(halves, on: here), 0)
            XCTAssertTrue(halves.clientReads(), "the read must resume the watching")
            XCTAssertFalse(halves[.input].events.awaitingClient)
            XCTAssertEqual(wanted(halves, on: here), Self.reading)
            XCTAssertFalse(halves.clientReads(), "nothing to resume")
        }
    }

    /// Writable: only while watching; signalled, the output keeps watching; awaiting its client, it stops.
    func testWritableIsSignalledWhileWatchingAndStopsWhileAwaitingTheClient() throws {
        try withReactors { here, _ in
            let halves = Self.openHalves(on: here)
            XCTAssertFalse(halves.takeReadiness(.writable, from: here).space, "not watching")
            halves[.output].watchingSpace = true
            XCTAssertTrue(halves.takeReadiness(.writable, from: here).space)
            XCTAssertTrue(halves[.output].watchingSpace)
            halves[.output].events.signal(.hasSpaceAvailable, scheduled: true)
            XCTAssertFalse(halves.takeReadiness([.readable, .writable], from: here).space)
            XCTAssertFalse(halves[.output].watchingSpace)
            halves[.output].spaceConfirmed = true
            halves.clientWrites()
            XCTAssertFalse(halves[.output].events.awaitingClient)
            XCTAssertFalse(halves[.output].spaceConfirmed, "a write spends what was confirmed")
        }
    }

    /// An event the socket does not confirm is cleared, and the half watches again; one that was not
    /// awaiting the client changes nothing.
    func testAnUnconfirmedEventIsClearedAndTheHalfWatchesAgain() throws {
        try withReactors { here, _ in
            let halves = Self.openHalves(on: here)
            XCTAssertFalse(halves.unconfirmed(.input))
            XCTAssertFalse(halves.unconfirmed(.output))
            halves[.input].events.signal(.hasBytesAvailable, scheduled: true)
            halves[.input].suppressed = true
            XCTAssertTrue(halves.unconfirmed(.input))
            XCTAssertFalse(halves[.input].suppressed)
            XCTAssertFalse(halves[.input].events.hasPending)
            halves[.output].events.signal(.hasSpaceAvailable, scheduled: true)
            XCTAssertTrue(halves.unconfirmed(.output))
            XCTAssertTrue(halves[.output].watchingSpace)
            halves[.output].events.signal(.hasSpaceAvailable, scheduled: true)
            XCTAssertFalse(halves.unconfirmed(.output), "already watching: no change to epoll")
            halves[.output].reactors = []
            halves[.output].watchingSpace = false
            halves[.output].events.signal(.hasSpaceAvailable, scheduled: false)
            XCTAssertFalse(halves.unconfirmed(.output), "unscheduled: nothing to watch with")
            XCTAssertFalse(halves[.output].events.awaitingClient)
        }
    }

    /// A schedule derives readiness again; a stage withdraws has-events and stops all watching.
    func testScheduleAndStage() throws {
        try withReactors { here, _ in
            let halves = Self.openHalves(on: here)
            halves[.input].suppressed = true
            halves.rederive(.input)
            halves.rederive(.output)
            XCTAssertFalse(halves[.input].suppressed)
            XCTAssertTrue(halves[.output].watchingSpace)
            halves[.output].watchingSpace = false
            halves[.output].events.signal(.hasSpaceAvailable, scheduled: true)
            halves.rederive(.output)
            XCTAssertFalse(halves[.output].watchingSpace, "its event awaits the client")

            halves[.input].events.signal(.hasBytesAvailable, scheduled: true)
            halves[.output].watchingSpace = true
            halves[.output].spaceConfirmed = true
            halves.suspend()
            XCTAssertFalse(halves[.input].events.hasPending)
            XCTAssertFalse(halves[.output].events.hasPending)
            XCTAssertFalse(halves[.input].events.awaitingClient)
            XCTAssertFalse(halves[.output].watchingSpace)
            XCTAssertFalse(halves[.output].spaceConfirmed)
            XCTAssertEqual(wanted(halves, on: here), Self.reading, "the input watches again once the stage is done")
        }
    }
}

extension PairHalvesTests {
    /// After a write: a whole write to a socket that still takes bytes signals at once (and, alone,
    /// holds until the next write); a short one spends the bound and makes the output watch, once.
    func testAfterAWriteSignalAtOnceOrWatch() throws {
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        try withReactors { here, _ in
            let halves = Self.openHalves(on: here)
            let transport = ActiveTransport.socket(fd: fds[0])
            let target = Endpoint.unix(path: "/tmp/unused")
            var next = halves.wrote(64, of: 64, through: transport, madeFor: target, alone: true)
            XCTAssertTrue(next.signal, "an empty socket takes more")
            XCTAssertTrue(halves[.output].spaceConfirmed)
            XCTAssertEqual(halves[.output].sendSpace, .pollOnly, "a Unix-domain socket is polled, never bounded")
            halves[.output].spaceConfirmed = false
            next = halves.wrote(64, of: 64, through: transport, madeFor: target, alone: false)
            XCTAssertTrue(next.signal)
            XCTAssertFalse(halves[.output].spaceConfirmed, "another transfer in flight: nothing to hold")
            next = halves.wrote(10, of: 64, through: transport, madeFor: target, alone: true)
            XCTAssertFalse(next.signal)
            XCTAssertTrue(next.watch, "a short write: watch for space")
            XCTAssertTrue(halves[.output].watchingSpace)
            next = halves.wrote(10, of: 64, through: transport, madeFor: target, alone: true)
            XCTAssertFalse(next.signal)
            XCTAssertFalse(next.watch, "already watching: epoll's interest stays")
        }
    }
}
